//! The exactly-once sink's checkpoint: where the sink stands in the event stream (the
//! sequence number of the last event its transaction carried) and the watch position that
//! corresponds to, written as one record keyed by the sink in the same transaction as the
//! events, to a compacted topic. After a crash, [`read_latest`] gives the last committed one:
//! what a `read_committed` consumer has seen ends exactly there. With it, [`read_known`]
//! reads the objects' states from the compacted state topic written in the same
//! transactions (uid -> the state the pipeline encoded, a tombstone on delete). Entry points:
//! [`Checkpoint`], [`read_latest`], [`read_known`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
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
    #[error("the record at offset {offset} of `{topic}` partition {partition} is damaged: {reason}")]
    Corrupt {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },
    #[error("the checkpoint topic `{topic}` was not read to its end within {limit:?}")]
    Timeout { topic: String, limit: Duration },
    /// Kafka refused the read: without it the committed state is unknown, never empty.
    #[error(transparent)]
    Refused(#[from] super::refusal::Refusal),
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
    let mut latest = None;
    let mut corrupt = None;
    read_from(config, topic, &mut HashMap::new(), limit, |m| {
        if corrupt.is_none()
            && let Err(e) = apply_checkpoint(m, topic, key, &mut latest)
        {
            corrupt = Some(e);
        }
    })?;
    match corrupt {
        Some(e) => Err(e),
        None => Ok(latest),
    }
}

/// Applies one record of the checkpoint topic: the checkpoint of `key`, or its removal.
pub(super) fn apply_checkpoint(
    m: &BorrowedMessage<'_>,
    topic: &str,
    key: &str,
    latest: &mut Option<Checkpoint>,
) -> Result<(), CheckpointError> {
    if m.key() != Some(key.as_bytes()) {
        return Ok(());
    }
    *latest = match m.payload() {
        // A tombstone: the sink's checkpoint was removed.
        None => None,
        Some(bytes) => Some(serde_json::from_slice(bytes).map_err(|e| CheckpointError::Corrupt {
            topic: topic.to_string(),
            partition: m.partition(),
            offset: m.offset(),
            reason: e.to_string(),
        })?),
    };
    Ok(())
}

/// The object states kept in a compacted state topic: each object's key (its uid) and its
/// state as the pipeline encoded it (the value); a tombstone (a delete) removes it. Read with
/// `read_committed` to the end of every partition.
pub fn read_known(
    config: &ClientConfig,
    topic: &str,
    limit: Duration,
) -> Result<Vec<(String, Vec<u8>)>, CheckpointError> {
    let mut known: HashMap<String, Vec<u8>> = HashMap::new();
    let mut corrupt = None;
    read_from(config, topic, &mut HashMap::new(), limit, |m| {
        if corrupt.is_none()
            && let Err(e) = apply_state(m, topic, &mut known)
        {
            corrupt = Some(e);
        }
    })?;
    match corrupt {
        Some(e) => Err(e),
        None => Ok(known.into_iter().collect()),
    }
}

/// Applies one record of the state topic: an object's state, or (a tombstone) its removal.
/// A key that is not UTF-8 is no object's and is an error naming its place.
pub(super) fn apply_state(
    m: &BorrowedMessage<'_>,
    topic: &str,
    known: &mut HashMap<String, Vec<u8>>,
) -> Result<(), CheckpointError> {
    let Some(key) = m.key() else {
        return Ok(());
    };
    let Ok(uid) = std::str::from_utf8(key) else {
        return Err(CheckpointError::Corrupt {
            topic: topic.to_string(),
            partition: m.partition(),
            offset: m.offset(),
            reason: "the key is not UTF-8".to_string(),
        });
    };
    match m.payload() {
        None => {
            known.remove(uid);
        }
        Some(state) => {
            known.insert(uid.to_string(), state.to_vec());
        }
    }
    Ok(())
}

/// The reader's client context: partition ends are how it knows it is done, not errors.
struct Reader;

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!(error = %error, reason, "reading a compacted topic: Kafka unavailable, retrying");
        }
    }
}

impl ConsumerContext for Reader {}

/// Whether a librdkafka property says how to connect (brokers, TLS, SASL) rather than how
/// to produce.
pub fn is_connection_property(key: &str) -> bool {
    ["bootstrap.servers", "security.protocol", "client.id"].contains(&key)
        || ["ssl.", "sasl.", "socket.", "broker."]
            .iter()
            .any(|p| key.starts_with(p))
}

/// The settings of `config` that say how to connect, without the producer's own. The values
/// come from `get`: `config_map` hands back `sasl.password` and the other secrets as a
/// placeholder, with which no login succeeds.
pub(super) fn connection_only(config: &ClientConfig) -> ClientConfig {
    let mut out = ClientConfig::new();
    for k in config.config_map().keys() {
        if is_connection_property(k)
            && let Some(v) = config.get(k)
        {
            out.set(*k, v);
        }
    }
    out
}

/// Calls `each` with every committed record of `topic` from `next` (per partition, the
/// offset to read from; the beginning for a partition not in it) to every partition's end,
/// in offset order per partition, and moves `next` past what it read; nothing when the topic
/// does not exist.
pub(super) fn read_from(
    config: &ClientConfig,
    topic: &str,
    next: &mut HashMap<i32, i64>,
    limit: Duration,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), CheckpointError> {
    let kafka = |source| CheckpointError::Kafka {
        topic: topic.to_string(),
        source,
    };
    // librdkafka's consumer needs a group even with assigned partitions; no offsets are
    // committed in it. An exactly-once sink names its own (`kubecast-reader-{transactional
    // id}`, which `kubecast kafka-acls` grants Read on).
    let group = config
        .get("group.id")
        .map_or_else(|| format!("kubecast-reader-{}", std::process::id()), str::to_string);
    let mut config = connection_only(config);
    let consumer: BaseConsumer<Reader> = config
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        // A fetch at a partition's end returns after this long rather than the default
        // 500 ms: the reader is done once every partition reported its end.
        .set("fetch.wait.max.ms", "10")
        .create_with_context(Reader)
        .map_err(kafka)?;
    let refused = |code| {
        super::refusal::Refusal::new(super::refusal::Operation::Read, super::refusal::Resource::Topic, topic, code)
    };
    let metadata = consumer.fetch_metadata(Some(topic), limit).map_err(kafka)?;
    let Some(t) = metadata.topics().first() else {
        return Ok(());
    };
    if let Some(code) = t.error().map(RDKafkaErrorCode::from).filter(|c| super::refusal::refused(*c)) {
        return Err(refused(code).into());
    }
    if t.error().is_some() || t.partitions().is_empty() {
        // Unknown topic: nothing was ever committed.
        return Ok(());
    }
    let mut partitions = TopicPartitionList::new();
    for p in t.partitions() {
        let from = next
            .get(&p.id())
            .map_or(Offset::Beginning, |o| Offset::Offset(*o));
        partitions
            .add_partition_offset(topic, p.id(), from)
            .map_err(kafka)?;
    }
    consumer.assign(&partitions).map_err(kafka)?;
    let count = t.partitions().len();
    let mut ended = HashSet::new();
    let started = Instant::now();
    while ended.len() < count {
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
            Some(Err(e))
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) =>
            {
                return Ok(());
            }
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::GroupAuthorizationFailed) => {
                return Err(super::refusal::Refusal::new(
                    super::refusal::Operation::Read,
                    super::refusal::Resource::Group,
                    &group,
                    RDKafkaErrorCode::GroupAuthorizationFailed,
                )
                .into());
            }
            Some(Err(e)) if e.rdkafka_error_code().is_some_and(super::refusal::refused) => {
                return Err(refused(e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::TopicAuthorizationFailed)).into());
            }
            Some(Err(e)) => return Err(kafka(e)),
            Some(Ok(m)) => {
                next.insert(m.partition(), m.offset() + 1);
                each(&m);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readers_connection_keeps_the_real_password_and_drops_the_producers_settings() {
        let mut producer = ClientConfig::new();
        producer
            .set("bootstrap.servers", "127.0.0.1:9092")
            .set("sasl.username", "kubecast")
            .set("sasl.password", "hunter2")
            .set("acks", "all");
        let reader = connection_only(&producer);
        assert_eq!(reader.get("sasl.password"), Some("hunter2"));
        assert_eq!(reader.get("sasl.username"), Some("kubecast"));
        assert_eq!(reader.get("acks"), None);
    }
}
