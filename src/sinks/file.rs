//! The file sink: structured CloudEvents as JSON lines appended to a file. An event counts
//! as delivered once written (and, with `fsync: true`, synced to disk). Entry point: [`run`].

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::runner::{Acks, SinkError};
use crate::event::Event;

/// `type: file`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// File to append to; created if missing. Required.
    pub path: PathBuf,
    /// Sync each batch of lines to disk before reporting it delivered. Default: false.
    #[serde(default)]
    pub fsync: bool,
    /// Events the sink's queue holds before the pipeline waits. Default: 1024.
    #[serde(default = "crate::sinks::kafka::default_queue")]
    pub queue_events: usize,
}

/// Appends events until the queue closes.
pub async fn run(
    c: FileConfig,
    mut rx: mpsc::Receiver<Arc<Event>>,
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
