//! The stdout sink: one structured CloudEvent (JSON) per line. An event counts as delivered
//! once its line was written and flushed. Entry point: [`StdoutConfig`].

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::contract::{Acks, Sink, SinkError, SinkSpec};
use super::queue::QueueRx;
use super::Common;
use crate::vocab::Issue;

/// `type: stdout`. It has no settings of its own.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {}

impl SinkSpec for StdoutConfig {
    fn validate(&self, _: &str, _: &Common, _: &str) -> Result<Box<dyn Sink>, Vec<Issue>> {
        Ok(Box::new(Stdout))
    }
}

/// The running stdout sink.
#[derive(Debug)]
struct Stdout;

/// Standard output could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing to standard output")]
struct WriteError(#[source] std::io::Error);

impl Sink for Stdout {
    fn run(self: Box<Self>, mut rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        Box::pin(async move {
            let mut out = tokio::io::stdout();
            acks.connected(true);
            while let Some(event) = rx.recv().await {
                let mut line = event.structured_json();
                line.push(b'\n');
                out.write_all(&line)
                    .await
                    .and(out.flush().await)
                    .map_err(|e| acks.failed(WriteError(e)))?;
                acks.delivered(event.seq);
            }
            Ok(())
        })
    }
}
