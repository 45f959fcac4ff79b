//! The dead-letter file: one JSON line per event a sink can never deliver, with the sink's
//! name and the reason. Without a file, a dead letter is logged at ERROR with its id.

use std::path::PathBuf;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use crate::event::Event;

/// A dead-letter file, or none.
#[derive(Debug, Default)]
pub struct DeadLetter {
    file: Option<(PathBuf, Mutex<Option<tokio::fs::File>>)>,
}

impl DeadLetter {
    /// Dead letters go to `path` (created on first use), or only to the log when `None`.
    pub fn new(path: Option<PathBuf>) -> DeadLetter {
        DeadLetter {
            file: path.map(|p| (p, Mutex::new(None))),
        }
    }

    /// The JSON line of a dead letter: who, why, and the whole event in structured form.
    pub fn line(sink: &str, event: &Event, reason: &str, with_data: bool) -> Vec<u8> {
        let event_json: serde_json::Value = if with_data {
            serde_json::from_slice(&event.structured_json()).unwrap_or_default()
        } else {
            let attrs: serde_json::Map<String, serde_json::Value> = event
                .attributes()
                .into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            serde_json::Value::Object(attrs)
        };
        let mut line = json!({
            "sink": sink,
            "reason": reason,
            "time": jiff::Timestamp::now().to_string(),
            "event": event_json,
        })
        .to_string()
        .into_bytes();
        line.push(b'\n');
        line
    }

    /// Writes one dead letter (and always logs it at ERROR: the sink lost this event).
    pub async fn write(&self, sink: &str, event: &Event, reason: &str) -> std::io::Result<()> {
        let Some((path, file)) = &self.file else {
            tracing::error!(sink, id = %event.id, subject = %event.subject(), reason,
                "event cannot be delivered and no dead-letter destination is configured");
            return Ok(());
        };
        tracing::error!(sink, id = %event.id, reason, file = %path.display(), "event dead-lettered");
        let mut guard = file.lock().await;
        if guard.is_none() {
            let f = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .await?;
            *guard = Some(f);
        }
        if let Some(f) = guard.as_mut() {
            f.write_all(&Self::line(sink, event, reason, true)).await?;
            f.flush().await?;
            f.sync_data().await?;
        }
        Ok(())
    }
}
