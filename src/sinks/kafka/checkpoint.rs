//! The exactly-once sink's checkpoint: where the sink stands in the event stream (the
//! sequence number of the last event its transaction carried) and the watch position that
//! corresponds to, written as one record keyed by the sink in the same transaction as the
//! events, to a compacted topic. After a crash, [`read_latest`] gives the last committed one:
//! what a `read_committed` consumer has seen ends exactly there. With it, [`read_known`]
//! rebuilds the known state from the compacted state topic written in the same transactions
//! (uid -> last delivered resourceVersion, a tombstone on delete). Entry points:
//! [`Checkpoint`], [`read_latest`], [`read_known`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::alert::episode::Episode;
use crate::route::engine::{Mark, ObjectState as RoutingState};
use crate::model::{KnownObject, ObjectRef, legacy};

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

/// The value of an object's record in the state topic (its key is the object's uid).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateRecord {
    /// The object's resource key (`deployments.apps`); records written before other kinds
    /// were watched have none and hold Pods, and Pods' records still leave it out.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
    /// The resourceVersion of the pod's last event committed.
    pub rv: String,
    /// With routes or alert rules: the label of the watch scope the object came from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
    /// With routes: each route's mark for the object (its chain link, predicate
    /// fingerprint and match).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
    /// With alert rules: the object's open episodes (pending with their deadlines, firing)
    /// and the memories of closed ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub episodes: Vec<Episode>,
}

impl StateRecord {
    /// The record's value.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings, numbers and maps of them always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The record of an object's routing state (the key is its uid).
    pub fn of_routing(state: &RoutingState) -> StateRecord {
        StateRecord {
            resource: legacy::stored_resource(state.resource_key()).to_string(),
            namespace: state.namespace.clone(),
            name: state.name.clone(),
            rv: state.rv.clone(),
            scope: state.scope.clone(),
            marks: state.marks.clone(),
            episodes: state.episodes.clone(),
        }
    }
}

/// The known state kept in a compacted state topic: each pod's uid (the key) and its
/// [`StateRecord`] (the value); a tombstone (a delete) removes it. Read with `read_committed`
/// to the end of every partition. A record that is not a [`StateRecord`] is an error naming
/// its place.
pub fn read_known(
    config: &ClientConfig,
    topic: &str,
    limit: Duration,
) -> Result<Vec<KnownObject>, CheckpointError> {
    let mut known: HashMap<String, StateRecord> = HashMap::new();
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
        None => Ok(known_pods(&known)),
    }
}

/// Applies one record of the state topic: a pod's state, or (a tombstone) its removal.
pub(super) fn apply_state(
    m: &BorrowedMessage<'_>,
    topic: &str,
    known: &mut HashMap<String, StateRecord>,
) -> Result<(), CheckpointError> {
    let Some(uid) = m.key().and_then(|k| std::str::from_utf8(k).ok()) else {
        return Ok(());
    };
    match m.payload().map(serde_json::from_slice::<StateRecord>) {
        None => {
            known.remove(uid);
        }
        Some(Ok(state)) => {
            known.insert(uid.to_string(), state);
        }
        Some(Err(e)) => {
            return Err(CheckpointError::Corrupt {
                topic: topic.to_string(),
                partition: m.partition(),
                offset: m.offset(),
                reason: format!("not a pod's state: {e}"),
            });
        }
    }
    Ok(())
}

/// The known pods of a state read.
pub(super) fn known_pods(known: &HashMap<String, StateRecord>) -> Vec<KnownObject> {
    known
        .iter()
        .map(|(uid, s)| KnownObject {
            object: ObjectRef {
                uid: uid.clone(),
                resource: legacy::resource_of(&s.resource).to_string(),
                namespace: s.namespace.clone(),
                name: s.name.clone(),
            },
            rv: s.rv.clone(),
        })
        .collect()
}

/// The routing states of a state read: the objects with route marks or alert episodes.
pub(super) fn routing_states(known: &HashMap<String, StateRecord>) -> Vec<RoutingState> {
    known
        .iter()
        .filter(|(_, s)| !s.marks.is_empty() || !s.episodes.is_empty())
        .map(|(uid, s)| RoutingState {
            uid: uid.clone(),
            resource: s.resource.clone(),
            scope: s.scope.clone(),
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            rv: s.rv.clone(),
            gone: false,
            marks: s.marks.clone(),
            episodes: s.episodes.clone(),
        })
        .collect()
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

/// The settings of `config` that say how to connect, without the producer's own.
fn connection_only(config: &ClientConfig) -> ClientConfig {
    let mut out = ClientConfig::new();
    for (k, v) in config.config_map() {
        if is_connection_property(k) {
            out.set(k, v);
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
    let mut config = connection_only(config);
    let consumer: BaseConsumer<Reader> = config
        // No group offsets are committed; the id only satisfies the client.
        .set("group.id", format!("kubecast-reader-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        // A fetch at a partition's end returns after this long rather than the default
        // 500 ms: the reader is done once every partition reported its end.
        .set("fetch.wait.max.ms", "10")
        .create_with_context(Reader)
        .map_err(kafka)?;
    let metadata = consumer.fetch_metadata(Some(topic), limit).map_err(kafka)?;
    let Some(t) = metadata.topics().first() else {
        return Ok(());
    };
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
    fn a_state_record_of_the_pod_only_version_reads_as_a_pod_and_pods_keep_that_form() {
        let old: StateRecord =
            serde_json::from_str(r#"{"namespace":"ns","name":"p","rv":"7"}"#).expect("a state");
        let known = known_pods(&HashMap::from([("u".to_string(), old.clone())]));
        assert_eq!(known[0].object.resource, "pods");
        assert_eq!(
            String::from_utf8(old.to_bytes()).expect("UTF-8"),
            r#"{"namespace":"ns","name":"p","rv":"7"}"#,
            "a Pod's record is written as before"
        );
        let node = StateRecord {
            resource: "nodes".into(),
            namespace: String::new(),
            name: "n".into(),
            rv: "8".into(),
            ..StateRecord::default()
        };
        let back: StateRecord = serde_json::from_slice(&node.to_bytes()).expect("a state");
        assert_eq!(known_pods(&HashMap::from([("n".to_string(), back)]))[0].object.resource, "nodes");
    }

    #[test]
    fn a_routing_state_round_trips_through_its_record_with_marks_and_episodes() {
        let state = RoutingState {
            uid: "u1".into(),
            resource: "deployments.apps".into(),
            scope: "deployments.apps/*".into(),
            namespace: "ns".into(),
            name: "web".into(),
            rv: "42".into(),
            gone: false,
            marks: vec![Mark {
                fp: 7,
                last: "41".into(),
                matched: true,
            }],
            episodes: serde_json::from_str(
                r#"[{"rule":"rollout_stuck","uid":"u1","namespace":"ns","name":"web","began_rv":"40","began_at":1000,"deadline":601000,"fired":false,"rv":"42","container":null,"facts":{},"message":"m"}]"#,
            )
            .expect("an episode"),
        };
        let record = StateRecord::of_routing(&state).to_bytes();
        let back: StateRecord = serde_json::from_slice(&record).expect("a state");
        let known = HashMap::from([("u1".to_string(), back)]);
        assert_eq!(routing_states(&known), vec![state]);
        assert_eq!(known_pods(&known)[0].rv, "42", "the known state reads it too");
        let plain = HashMap::from([(
            "u2".to_string(),
            StateRecord {
                namespace: "ns".into(),
                name: "p".into(),
                rv: "1".into(),
                ..StateRecord::default()
            },
        )]);
        assert!(
            routing_states(&plain).is_empty(),
            "a record without routes or alerts restores no routing state"
        );
    }
}
