//! Running a sink: its bounded queue, its task, and the reports it sends back for every
//! event (delivered on the destination's ack, or dead-lettered with a reason).
//!
//! Entry point: [`start`].

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::dead_letter::DeadLetter;
use super::validate::{SinkKind, ValidSink};
use super::{file, kafka, mqtt, stdout};
use crate::event::Event;

/// What a sink says about an event, in the order of its acks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The destination acknowledged the event.
    Delivered { sink: Arc<str>, seq: u64 },
    /// The event can never be delivered to this sink; it went to the dead-letter
    /// destination (or, without one, was logged as an error) with `reason`.
    DeadLettered {
        sink: Arc<str>,
        seq: u64,
        reason: String,
    },
}

impl Report {
    /// The sink and the sequence number this report settles (with everything before it).
    pub fn settles(&self) -> (&str, u64) {
        match self {
            Report::Delivered { sink, seq } | Report::DeadLettered { sink, seq, .. } => {
                (sink, *seq)
            }
        }
    }
}

/// Why a sink stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// An error retrying cannot fix: rejected credentials, a broken TLS setup, an
    /// unwritable file.
    #[error("sink `{sink}` failed: {reason}")]
    Fatal { sink: Arc<str>, reason: String },
}

/// What a sink task reports through. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Acks {
    pub sink: Arc<str>,
    reports: mpsc::UnboundedSender<Report>,
    dead_letter: Arc<DeadLetter>,
}

impl Acks {
    /// The destination acknowledged `seq`.
    pub fn delivered(&self, seq: u64) {
        // The receiver lives as long as the pipeline; after it is gone nobody counts.
        let _ = self.reports.send(Report::Delivered {
            sink: self.sink.clone(),
            seq,
        });
    }

    /// `event` can never be delivered here: write it to the dead-letter file (the Kafka sink
    /// handles a dead-letter topic itself) and report it.
    pub async fn dead_letter(&self, event: &Event, reason: String) -> Result<(), SinkError> {
        self.dead_letter
            .write(&self.sink, event, &reason)
            .await
            .map_err(|e| {
                self.fatal(format!(
                    "writing the dead letter of event {}: {e}",
                    event.id
                ))
            })?;
        self.reported_dead(event.seq, reason);
        Ok(())
    }

    /// Reports `seq` as dead-lettered (after the sink stored it somewhere itself).
    pub fn reported_dead(&self, seq: u64, reason: String) {
        let _ = self.reports.send(Report::DeadLettered {
            sink: self.sink.clone(),
            seq,
            reason,
        });
    }

    /// A fatal error of this sink.
    pub fn fatal(&self, reason: String) -> SinkError {
        SinkError::Fatal {
            sink: self.sink.clone(),
            reason,
        }
    }
}

/// A running sink: the sender side of its queue and its task.
#[derive(Debug)]
pub struct SinkHandle {
    pub name: Arc<str>,
    pub queue: super::queue::QueueTx,
    pub task: JoinHandle<Result<(), SinkError>>,
}

/// Spawns the sink `name`. Its queue is bounded as `valid.queue` says; a full queue
/// makes the pipeline wait (backpressure into the watch).
pub fn start(name: &str, valid: ValidSink, reports: mpsc::UnboundedSender<Report>) -> SinkHandle {
    let name: Arc<str> = name.into();
    let (queue, rx) = super::queue::queue(valid.queue);
    let acks = Acks {
        sink: name.clone(),
        reports,
        dead_letter: Arc::new(valid.dead_letter_file),
    };
    let task = match valid.kind {
        SinkKind::Kafka(s) => tokio::spawn(kafka::run(s, rx, acks)),
        SinkKind::Mqtt(s) => tokio::spawn(mqtt::run(s, rx, acks)),
        SinkKind::Stdout(s) => tokio::spawn(stdout::run(s, rx, acks)),
        SinkKind::File(s) => tokio::spawn(file::run(s, rx, acks)),
    };
    SinkHandle { name, queue, task }
}
