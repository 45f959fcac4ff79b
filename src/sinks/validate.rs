//! Validating one sink's config into the form its task runs on.

use super::QueueConfig;
use super::dead_letter::DeadLetter;
use super::file::FileConfig;
use super::kafka::KafkaSettings;
use super::mqtt::MqttSettings;
use super::stdout::StdoutConfig;
use super::{DeadLetterConfig, SinkConfig};
use crate::config::Issue;

/// A sink that passed validation.
#[derive(Debug)]
pub struct ValidSink {
    pub queue: QueueConfig,
    pub dead_letter_file: DeadLetter,
    pub kind: SinkKind,
}

/// The validated settings per sink type.
#[derive(Debug)]
pub enum SinkKind {
    Kafka(KafkaSettings),
    Mqtt(MqttSettings),
    Stdout(StdoutConfig),
    File(FileConfig),
}

impl SinkConfig {
    /// Checks this sink's values; `name` is its key under `sinks`.
    pub fn validate(&self, name: &str, cluster: &str) -> Result<ValidSink, Vec<Issue>> {
        let at = format!("sinks.{name}");
        let (queue, dead_letter, kind) = match self {
            SinkConfig::Kafka(k) => (
                k.queue.clone(),
                k.dead_letter.as_ref(),
                SinkKind::Kafka(k.validate(&at, cluster)?),
            ),
            SinkConfig::Mqtt(m) => (
                m.queue.clone(),
                m.dead_letter.as_ref(),
                SinkKind::Mqtt(m.validate(&at, cluster)?),
            ),
            SinkConfig::Stdout(c) => (c.queue.clone(), None, SinkKind::Stdout(c.clone())),
            SinkConfig::File(c) => {
                if c.path.as_os_str().is_empty() {
                    return Err(vec![Issue::new(format!("{at}.path"), "must not be empty")]);
                }
                (c.queue.clone(), None, SinkKind::File(c.clone()))
            }
        };
        let mut issues = Vec::new();
        Issue::at_least(
            &mut issues,
            format!("{at}.queue.events"),
            queue.events as u64,
            1,
        );
        Issue::at_least(
            &mut issues,
            format!("{at}.queue.bytes"),
            queue.bytes as u64,
            1024,
        );
        if !issues.is_empty() {
            return Err(issues);
        }
        let file = dead_letter.and_then(|d: &DeadLetterConfig| d.file.clone());
        Ok(ValidSink {
            queue,
            dead_letter_file: DeadLetter::new(file),
            kind,
        })
    }
}
