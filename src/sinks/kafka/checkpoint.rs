//! The exactly-once sink's checkpoint: where the sink stands in the event stream (the
//! sequence number of the last event its transaction carried) and the watch position that
//! corresponds to, written as one record keyed by the sink in the same transaction as the
//! events, to a compacted topic. After a crash, [`read_latest`] gives the last committed one:
//! what a `read_committed` consumer has seen ends exactly there. Entry points: [`Checkpoint`],
//! [`read_latest`].

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

/// One sink's position, as committed with its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Sequence number of the last event the transaction carried.
    pub seq: u64,
    /// The watch position that event corresponds to, per scope (a namespace, or `*` for
    /// all): the resourceVersion to resume the watch from.
    pub positions: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The record's value.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A number and a map of strings always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Reading the checkpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("reading the checkpoint topic `{topic}`")]
    Kafka {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("the checkpoint at offset {offset} of `{topic}` partition {partition} is not one: {reason}")]
    Corrupt {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
    #[error("the checkpoint topic `{topic}` was not read to its end within {limit:?}")]
    Timeout { topic: String, limit: Duration },
}

/// The last committed checkpoint of `key` in `topic` (`None` when there is none, or the
/// topic does not exist), read with `read_committed` from the beginning of every partition
/// to its end. `config` holds the connection settings (bootstrap servers, TLS, SASL). Blocks
/// its caller for up to `limit`.
pub fn read_latest(
    config: &ClientConfig,
    topic: &str,
    key: &str,
    limit: Duration,
) -> Result<Option<Checkpoint>, CheckpointError> {
    let kafka = |source| CheckpointError::Kafka {
        topic: topic.to_string(),
        source,
    };
    let mut config = config.clone();
    let consumer: BaseConsumer = config
        // No group offsets are committed; the id only satisfies the client.
        .set("group.id", format!("kubecast-checkpoint-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), limit)
        .map_err(kafka)?;
    let Some(t) = metadata.topics().first() else {
        return Ok(None);
    };
    if t.error().is_some() || t.partitions().is_empty() {
        // Unknown topic: nothing was ever committed.
        return Ok(None);
    }
    let mut partitions = TopicPartitionList::new();
    for p in t.partitions() {
        partitions
            .add_partition_offset(topic, p.id(), Offset::Beginning)
            .map_err(kafka)?;
    }
    consumer.assign(&partitions).map_err(kafka)?;
    let partitions_count = t.partitions().len();
    let mut ended = HashSet::new();
    let mut latest = None;
    let started = Instant::now();
    while ended.len() < partitions_count {
        if started.elapsed() >= limit {
            return Err(CheckpointError::Timeout {
                topic: topic.to_string(),
                limit,
            });
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                return Ok(None);
            }
            Some(Err(e)) => return Err(kafka(e)),
            Some(Ok(m)) if m.key() == Some(key.as_bytes()) => {
                latest = match m.payload() {
                    // A tombstone: the sink's checkpoint was removed.
                    None => None,
                    Some(bytes) => Some(serde_json::from_slice(bytes).map_err(|e| {
                        CheckpointError::Corrupt {
                            topic: topic.to_string(),
                            partition: m.partition(),
                            offset: m.offset(),
                            reason: e.to_string(),
                        }
                    })?),
                };
            }
            Some(Ok(_)) => {}
        }
    }
    Ok(latest)
}
