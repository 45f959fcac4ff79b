//! The sink's topics: each is looked up before the first record goes to it, created when the
//! sink says so (`create_topics`, also again after it was deleted), and otherwise a topic
//! that does not exist is an error naming the topic and the setting, instead of records
//! waiting on it forever (the sink stops on it at the start and holds on it later). Entry
//! points: [`CreateTopicsConfig`] (the setting), [`TopicGuard`] (the lookups, remembered per
//! topic), [`gone`] (whether a topic was deleted, asked beside the sink's loop).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use serde::{Deserialize, Serialize};

use super::producer::Producer;
use super::refusal::{Operation, Refusal, Resource, missing, refused};
use crate::vocab::Issue;

/// `create_topics`: kubecast creates the topics it writes that do not exist yet (the event
/// topics, the dead-letter topic, and an exactly-once sink's checkpoint and state topics,
/// those compacted with one partition), also one deleted while kubecast runs. Without it a
/// topic missing at the start stops kubecast, naming the topic. The principal then needs
/// `Create` on them (`kubecast kafka-acls`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTopicsConfig {
    /// Partitions of a created event or dead-letter topic. Default: the cluster's
    /// `num.partitions`.
    #[serde(default)]
    pub partitions: Option<u32>,
    /// Replicas of every created topic. Default: the cluster's `default.replication.factor`.
    #[serde(default)]
    pub replication_factor: Option<u16>,
    /// Topic configs of created event and dead-letter topics (`retention.ms: "604800000"`).
    /// Default: none (the cluster's defaults).
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// The validated `create_topics`.
#[derive(Debug, Clone)]
pub struct CreateTopics {
    /// -1: the cluster's default.
    partitions: i32,
    /// -1: the cluster's default.
    replication: i32,
    configs: Vec<(String, String)>,
}

impl CreateTopicsConfig {
    pub fn settings(&self, at: &str, issues: &mut Vec<Issue>) -> CreateTopics {
        let at = format!("{at}.create_topics");
        if self.partitions == Some(0) {
            issues.push(Issue::new(format!("{at}.partitions"), "must be at least 1"));
        }
        if self.replication_factor == Some(0) {
            issues.push(Issue::new(
                format!("{at}.replication_factor"),
                "must be at least 1",
            ));
        }
        for key in self.configs.keys() {
            if key == "cleanup.policy" {
                issues.push(Issue::new(
                    format!("{at}.configs.{key}"),
                    "event topics are not compacted by kubecast's choice (a compacted topic keeps only the last change of each object)",
                ));
            }
        }
        CreateTopics {
            partitions: self
                .partitions
                .map_or(-1, |p| p.min(i32::MAX as u32) as i32),
            replication: self.replication_factor.map_or(-1, i32::from),
            configs: self.configs.clone().into_iter().collect(),
        }
    }
}

/// What a topic holds, which decides how it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Events or dead letters: `create_topics`' partitions and configs.
    Events,
    /// A checkpoint or state topic: compacted, one partition.
    Compacted,
}

/// Why a topic cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error(
        "topic `{topic}` does not exist and Kafka does not create it: create it, or set `{at}.create_topics` for kubecast to create it"
    )]
    Missing { topic: String, at: String },
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Kafka did not answer; the lookup may be made again.
    #[error("Kafka did not answer the lookup of topic `{topic}`")]
    Unanswered {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("Kafka did not create topic `{topic}`: {code}")]
    Create {
        topic: String,
        code: RDKafkaErrorCode,
    },
}

/// How long one lookup or creation may take.
const CALL: Duration = Duration::from_secs(5);
/// How long a created topic may take to show in the metadata.
const PROPAGATION: Duration = Duration::from_secs(30);

/// The sink's topics seen to exist, and how to create the others.
pub struct TopicGuard {
    /// The sink's field path, `sinks.NAME`.
    at: String,
    create: Option<CreateTopics>,
    known: HashSet<String>,
    /// Every topic seen to exist since the sink started, also those forgotten since: one of
    /// them missing was deleted under the sink.
    seen: HashSet<String>,
    /// The connection of the admin clients made for lookups that must not create anything,
    /// and for creating topics.
    config: ClientConfig,
    /// Whether the brokers create a topic on its first record (`auto.create.topics.enable`),
    /// once asked.
    auto_create: Option<bool>,
}

impl TopicGuard {
    /// A guard for the sink at `at` connecting with `config` (bootstrap servers, TLS, SASL).
    pub fn new(at: &str, create: Option<CreateTopics>, config: &ClientConfig) -> TopicGuard {
        let mut config = config.clone();
        // A lookup must not create the topic as a side effect (with the broker's defaults,
        // not compacted) where the broker would auto-create it.
        config.set("allow.auto.create.topics", "false");
        TopicGuard {
            at: at.to_string(),
            create,
            known: HashSet::new(),
            seen: HashSet::new(),
            config,
            auto_create: None,
        }
    }

    /// An admin client for one lookup or creation.
    fn admin(&self) -> Result<Admin, KafkaError> {
        Ok(Admin(Some(self.config.create()?)))
    }

    /// Whether `topic` was seen to exist.
    pub fn knows(&self, topic: &str) -> bool {
        self.known.contains(topic)
    }

    /// Whether `topic` was seen to exist since the sink started (it may be gone since).
    pub fn seen(&self, topic: &str) -> bool {
        self.seen.contains(topic)
    }

    /// Forgets `topic` (it was deleted under the sink): the next record looks it up again.
    pub fn forget(&mut self, topic: &str) {
        self.known.remove(topic);
    }

    /// Makes sure `topic` exists before a record goes to it. `via`: the sink's producer,
    /// whose lookup lets a broker that auto-creates topics create an event topic as it
    /// always did; `None` looks up without that.
    pub async fn ensure(
        &mut self,
        topic: &str,
        kind: Kind,
        via: Option<&Producer>,
    ) -> Result<(), TopicError> {
        if self.known.contains(topic) {
            return Ok(());
        }
        match self.look_up(topic, via).await? {
            None => {}
            Some(code) if missing(code) => match self.create.clone() {
                Some(create) => {
                    if self.seen.contains(topic) {
                        tracing::warn!(sink = %self.at, topic, "the topic was deleted while kubecast wrote to it (what Kafka held in it went with it); creating it again, the records not acknowledged yet go to it");
                    }
                    self.create(topic, kind, &create).await?
                }
                // A broker that creates topics itself does so on the first record (a lookup
                // never creates one); kubecast's compacted topics are never left to it.
                None if kind == Kind::Events && self.broker_creates(topic).await? => {}
                None => {
                    return Err(TopicError::Missing {
                        topic: topic.to_string(),
                        at: self.at.clone(),
                    });
                }
            },
            Some(code) if refused(code) => {
                // Write (or Read) implies Describe: the lookup is refused when the
                // permission kubecast needs is missing.
                return Err(Refusal::new(Operation::Write, Resource::Topic, topic, code).into());
            }
            Some(code) => {
                return Err(TopicError::Unanswered {
                    topic: topic.to_string(),
                    source: KafkaError::MetadataFetch(code),
                });
            }
        }
        self.known.insert(topic.to_string());
        self.seen.insert(topic.to_string());
        Ok(())
    }

    /// Whether the brokers create topics on first use, asked once (DescribeConfigs of a
    /// broker). Not allowed to ask (no DescribeConfigs on the cluster, as on clusters with
    /// ACLs, which do not auto-create topics either) counts as no.
    async fn broker_creates(&mut self, topic: &str) -> Result<bool, TopicError> {
        if let Some(known) = self.auto_create {
            return Ok(known);
        }
        let unanswered = |source| TopicError::Unanswered {
            topic: topic.to_string(),
            source,
        };
        let admin = Arc::new(self.admin().map_err(unanswered)?);
        let (lookup, name) = (admin.clone(), topic.to_string());
        let broker = tokio::task::spawn_blocking(move || {
            let admin = lookup;
            let metadata = admin.inner().fetch_metadata(Some(&name), CALL)?;
            Ok::<_, KafkaError>(metadata.brokers().first().map(|b| b.id()))
        })
        .await
        .map_err(|_| KafkaError::Canceled)
        .and_then(|r| r)
        .map_err(unanswered)?
        .ok_or_else(|| {
            unanswered(KafkaError::MetadataFetch(
                RDKafkaErrorCode::BrokerNotAvailable,
            ))
        })?;
        let options = AdminOptions::new().request_timeout(Some(CALL));
        let answer = admin
            .describe_configs([&ResourceSpecifier::Broker(broker)], &options)
            .await
            .map_err(unanswered)?;
        let creates = match answer.first() {
            Some(Ok(config)) => config
                .get("auto.create.topics.enable")
                .and_then(|e| e.value.as_deref())
                .is_some_and(|v| v == "true"),
            Some(Err(code)) if refused(*code) => false,
            Some(Err(code)) => return Err(unanswered(KafkaError::AdminOp(*code))),
            None => false,
        };
        self.auto_create = Some(creates);
        Ok(creates)
    }

    /// The topic's error in a metadata answer (`None`: it exists).
    async fn look_up(
        &self,
        topic: &str,
        via: Option<&Producer>,
    ) -> Result<Option<RDKafkaErrorCode>, TopicError> {
        let admin = match via {
            Some(_) => None,
            None => Some(self.admin().map_err(|source| TopicError::Unanswered {
                topic: topic.to_string(),
                source,
            })?),
        };
        let (name, via) = (topic.to_string(), via.cloned());
        let answer = tokio::task::spawn_blocking(move || {
            let metadata = match (&via, &admin) {
                (Some(p), _) => p.client().fetch_metadata(Some(&name), CALL),
                (None, Some(a)) => a.inner().fetch_metadata(Some(&name), CALL),
                (None, None) => Err(KafkaError::Canceled),
            }?;
            Ok::<_, KafkaError>(error_of(&metadata))
        })
        .await
        .map_err(|_| KafkaError::Canceled)
        .and_then(|r| r);
        match answer {
            Ok(code) => Ok(code),
            Err(source) => Err(TopicError::Unanswered {
                topic: topic.to_string(),
                source,
            }),
        }
    }

    /// Creates `topic` and waits until the metadata shows it.
    async fn create(
        &self,
        topic: &str,
        kind: Kind,
        create: &CreateTopics,
    ) -> Result<(), TopicError> {
        let replication = TopicReplication::Fixed(create.replication);
        let mut new = match kind {
            Kind::Events => NewTopic::new(topic, create.partitions, replication),
            Kind::Compacted => {
                NewTopic::new(topic, 1, replication).set("cleanup.policy", "compact")
            }
        };
        if kind == Kind::Events {
            for (k, v) in &create.configs {
                new = new.set(k, v);
            }
        }
        let options = AdminOptions::new()
            .operation_timeout(Some(CALL))
            .request_timeout(Some(CALL));
        let admin = self.admin().map_err(|source| TopicError::Unanswered {
            topic: topic.to_string(),
            source,
        })?;
        let results = admin
            .create_topics([&new], &options)
            .await
            .map_err(|source| TopicError::Unanswered {
                topic: topic.to_string(),
                source,
            })?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) if refused(code) => {
                    return Err(
                        Refusal::new(Operation::Create, Resource::Topic, topic, code).into(),
                    );
                }
                Err((_, code)) => {
                    return Err(TopicError::Create {
                        topic: topic.to_string(),
                        code,
                    });
                }
            }
        }
        tracing::info!(sink = %self.at, topic, "created the topic");
        let started = Instant::now();
        while started.elapsed() < PROPAGATION {
            if self.look_up(topic, None).await.ok().flatten().is_none() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(TopicError::Unanswered {
            topic: topic.to_string(),
            source: KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition),
        })
    }
}

/// The topic's error in a metadata answer for it (`None`: it exists).
fn error_of(metadata: &Metadata) -> Option<RDKafkaErrorCode> {
    let Some(t) = metadata.topics().first() else {
        return Some(RDKafkaErrorCode::UnknownTopicOrPartition);
    };
    match t.error() {
        Some(e) => Some(RDKafkaErrorCode::from(e)),
        // A topic whose partitions are not known yet is not usable yet.
        None if t.partitions().is_empty() => Some(RDKafkaErrorCode::UnknownTopicOrPartition),
        None => None,
    }
}

/// `topic` when Kafka says it does not exist, asked now through the sink's producer `via`;
/// `None` when it exists or Kafka did not answer. Owns what it uses, so that it can run
/// beside the sink's loop: a broker that does not answer holds it up to the lookup's timeout.
pub async fn gone(via: Producer, topic: String) -> Option<String> {
    let answer = tokio::task::spawn_blocking(move || {
        let metadata = via.client().fetch_metadata(Some(&topic), CALL);
        metadata.map(|m| (error_of(&m), topic))
    })
    .await;
    match answer {
        Ok(Ok((Some(code), topic))) if missing(code) => Some(topic),
        _ => None,
    }
}

/// An admin client made for one lookup or creation and let go after it: kept for the sink's
/// life, its polling thread would wake several times a second for nothing.
struct Admin(Option<AdminClient<DefaultClientContext>>);

impl std::ops::Deref for Admin {
    type Target = AdminClient<DefaultClientContext>;

    fn deref(&self) -> &Self::Target {
        // Only `drop` takes the client out.
        self.0
            .as_ref()
            .expect("the admin client lives until dropped")
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        // Its drop joins its polling thread: off the runtime's workers when there is one.
        if let Some(admin) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(admin))),
                Err(_) => drop(admin),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_topics_refuses_zero_and_a_compacted_event_topic_naming_the_field() {
        let c: CreateTopicsConfig = serde_saphyr::from_str(
            "partitions: 0\nreplication_factor: 0\nconfigs: {cleanup.policy: compact}\n",
        )
        .unwrap();
        let mut issues = Vec::new();
        c.settings("sinks.k", &mut issues);
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "sinks.k.create_topics.partitions",
                "sinks.k.create_topics.replication_factor",
                "sinks.k.create_topics.configs.cleanup.policy"
            ]
        );
    }

    #[test]
    fn unset_counts_and_factors_are_the_clusters_defaults() {
        let c: CreateTopicsConfig = serde_saphyr::from_str("{}").unwrap();
        let mut issues = Vec::new();
        let s = c.settings("sinks.k", &mut issues);
        assert!(issues.is_empty());
        assert_eq!((s.partitions, s.replication), (-1, -1));
    }
}
