//! The file sink: structured CloudEvents as JSON lines appended to a file. An event counts
//! as delivered once written (and, with `fsync: true`, synced to disk). Entry point: [`run`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::runner::{Acks, SinkError};

/// `type: file`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// File to append to; created if missing. Required.
    pub path: PathBuf,
    /// Sync each batch of lines to disk before reporting it delivered. Default: false.
    #[serde(default)]
    pub fsync: bool,
    /// The sink's queue: its limits and what happens when it is full.
    #[serde(default)]
    pub queue: crate::sinks::QueueConfig,
}

/// Appends events until the queue closes.
pub async fn run(
    c: FileConfig,
    mut rx: crate::sinks::queue::QueueRx,
    acks: Acks,
) -> Result<(), SinkError> {
    let io =
        |what: &str, e: std::io::Error| acks.fatal(format!("{what} {}: {e}", c.path.display()));
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&c.path)
        .await
        .map_err(|e| io("opening", e))?;
    let mut batch = Vec::with_capacity(64);
    while rx.recv_many(&mut batch, 256).await > 0 {
        let mut buf = Vec::new();
        for event in &batch {
            buf.extend_from_slice(&event.structured_json());
            buf.push(b'\n');
        }
        file.write_all(&buf).await.map_err(|e| io("writing", e))?;
        file.flush().await.map_err(|e| io("writing", e))?;
        if c.fsync {
            file.sync_data().await.map_err(|e| io("syncing", e))?;
        }
        for event in batch.drain(..) {
            acks.delivered(event.seq);
        }
    }
    Ok(())
}
