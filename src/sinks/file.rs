//! The file sink: structured CloudEvents as JSON lines appended to a file. An event counts
//! as delivered once written (and, with `fsync: true`, synced to disk). Entry point:
//! [`FileConfig`].

use std::path::PathBuf;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::Common;
use super::contract::{Acks, Sink, SinkError, SinkSpec};
use super::queue::QueueRx;
use crate::vocab::Issue;

/// `type: file`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// File to append to; created if missing. Required.
    pub path: PathBuf,
    /// Sync each batch of lines to disk before reporting it delivered. Default: false.
    #[serde(default)]
    pub fsync: bool,
}

impl SinkSpec for FileConfig {
    fn validate(&self, at: &str, _: &Common, _: &str) -> Result<Box<dyn Sink>, Vec<Issue>> {
        if self.path.as_os_str().is_empty() {
            return Err(vec![Issue::new(format!("{at}.path"), "must not be empty")]);
        }
        Ok(Box::new(FileSink(self.clone())))
    }
}

/// The running file sink.
#[derive(Debug)]
struct FileSink(FileConfig);

/// The file could not be opened, written or synced.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}", path.display())]
struct FileError {
    op: &'static str,
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

impl Sink for FileSink {
    fn run(self: Box<Self>, mut rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        let c = self.0;
        Box::pin(async move {
            let io = |op: &'static str| {
                let (acks, path) = (&acks, &c.path);
                move |source| acks.failed(FileError { op, path: path.clone(), source })
            };
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&c.path)
                .await
                .map_err(io("opening"))?;
            acks.connected(true);
            let mut batch = Vec::with_capacity(64);
            while rx.recv_many(&mut batch, 256).await > 0 {
                let mut buf = Vec::new();
                for event in &batch {
                    buf.extend_from_slice(&event.structured_json());
                    buf.push(b'\n');
                }
                file.write_all(&buf).await.map_err(io("writing"))?;
                file.flush().await.map_err(io("writing"))?;
                if c.fsync {
                    file.sync_data().await.map_err(io("syncing"))?;
                }
                for event in batch.drain(..) {
                    acks.delivered(event.seq);
                }
            }
            Ok(())
        })
    }
}
