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

    /// The JSON line of a dead letter: who, why, and the whole event in structured form
    /// (its structured JSON as the sink would send it, written in place, not parsed again).
    pub fn line(sink: &str, event: &Event, reason: &str, with_data: bool) -> Vec<u8> {
        let data = with_data.then(|| event.structured_json());
        let mut line = Vec::with_capacity(data.as_ref().map_or(0, Vec::len) + 256);
        // The keys in the order serde_json's maps write them (alphabetical).
        line.extend_from_slice(br#"{"event":"#);
        match data {
            Some(json) => line.extend_from_slice(&json),
            None => {
                let attrs: serde_json::Map<String, serde_json::Value> = event
                    .attributes()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                push_json(&mut line, &attrs);
            }
        }
        line.extend_from_slice(br#","reason":"#);
        push_json(&mut line, reason);
        line.extend_from_slice(br#","sink":"#);
        push_json(&mut line, sink);
        line.extend_from_slice(br#","time":"#);
        push_json(&mut line, &jiff::Timestamp::now().to_string());
        line.extend_from_slice(b"}\n");
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

/// Appends `value`'s JSON to `out`.
fn push_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    // Strings and maps with string keys always serialise, and a Vec takes every write.
    serde_json::to_writer(out, value).expect("a string or a string-keyed map serialises");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;
    use crate::store::record_tests_event as event;

    #[test]
    fn a_dead_letter_line_is_one_json_object_holding_the_structured_event() {
        let e = event(7, "u-1", "42", ChangeKind::Modified);
        let line = DeadLetter::line("out", &e, "too \"large\"", true);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&line).expect("one JSON object");
        let structured: serde_json::Value =
            serde_json::from_slice(&e.structured_json()).expect("structured JSON");
        assert_eq!(v["event"], structured);
        assert_eq!(v["sink"], "out");
        assert_eq!(v["reason"], "too \"large\"");
        assert!(
            v["time"]
                .as_str()
                .is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok())
        );
    }

    #[test]
    fn a_dead_letter_line_without_data_holds_the_attributes_only() {
        let e = event(7, "u-1", "42", ChangeKind::Modified);
        let line = DeadLetter::line("out", &e, "why", false);
        let v: serde_json::Value = serde_json::from_slice(&line).expect("one JSON object");
        assert_eq!(v["event"]["id"], e.id.as_str());
        assert!(v["event"].get("data").is_none());
    }
}
