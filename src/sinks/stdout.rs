//! The stdout sink: one structured CloudEvent (JSON) per line. An event counts as delivered
//! once its line was written and flushed. Entry point: [`run`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::runner::{Acks, SinkError};
use crate::event::Event;

/// `type: stdout`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// Events the sink's queue holds before the pipeline waits. Default: 1024.
    #[serde(default = "crate::sinks::kafka::default_queue")]
    pub queue_events: usize,
}

/// Writes events to standard output until the queue closes.
pub async fn run(
    _: StdoutConfig,
    mut rx: mpsc::Receiver<Arc<Event>>,
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
