//! The stdout sink: one structured CloudEvent (JSON) per line. An event counts as delivered
//! once its line was written and flushed. Entry point: [`run`].

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::runner::{Acks, SinkError};

/// `type: stdout`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// The sink's queue: its limits and what happens when it is full.
    #[serde(default)]
    pub queue: crate::sinks::QueueConfig,
}

/// Writes events to standard output until the queue closes.
pub async fn run(
    _: StdoutConfig,
    mut rx: crate::sinks::queue::QueueRx,
    acks: Acks,
) -> Result<(), SinkError> {
    let mut out = tokio::io::stdout();
    while let Some(event) = rx.recv().await {
        let mut line = event.structured_json();
        line.push(b'\n');
        out.write_all(&line)
            .await
            .and(out.flush().await)
            .map_err(|e| acks.fatal(format!("writing to standard output: {e}")))?;
        acks.delivered(event.seq);
    }
    Ok(())
}
