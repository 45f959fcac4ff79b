//! The settings of an exactly-once Kafka sink (`exactly_once: true` and its `transactions`
//! block), and their validated form [`TxnSettings`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::state_reader::StateReader;
use super::txn::Ready;
use crate::vocab::Issue;

/// `transactions:` of a Kafka sink with `exactly_once: true`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransactionsConfig {
    /// The `transactional.id` every replica of this sink shares: the replica that starts
    /// last fences the others, which can then commit nothing more. With `sharding`, each
    /// shard's is this followed by `-{i}-of-{shards}`: the ids of two shard counts differ, so
    /// that a shard of a new count can fence every shard of the old one before it reads their
    /// checkpoints without fencing a shard of its own count. Default:
    /// `kubecast.{cluster}.{sink}`.
    #[serde(default)]
    pub id: Option<String>,
    /// Compacted topic of the sinks' checkpoints, one record per sink keyed
    /// `{cluster}/{sink}` (with `sharding`, per shard: `{cluster}/{sink}/shard-{i}-of-{n}`);
    /// must exist (compacted, one partition), or be created by `create_topics`. Default:
    /// `kubecast.checkpoints`.
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// Compacted topic of the known state (object uid -> namespace, name and last delivered
    /// resourceVersion, and with routes or alert rules the routes' marks and the alert
    /// episodes; a tombstone on delete); must exist (compacted, one partition), or be
    /// created by `create_topics`. Default:
    /// `kubecast.state.{cluster}.{sink}`.
    #[serde(default)]
    pub state_topic: Option<String>,
    /// Events per transaction, at most. Default: 500.
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    /// How long a transaction waits for more events after its first one, in milliseconds:
    /// the latency an event may gain for fewer, larger transactions. Events that arrive
    /// while a commit runs go into the next transaction anyway, so under load transactions
    /// grow without it. Default: 5 (BENCHMARKS.md, issue 24: at 100 changes/s, 0 gives the
    /// lowest delay and the most CPU, 10 and more add their wait to every event's delay).
    #[serde(default = "default_max_ms")]
    pub max_ms: u64,
    /// librdkafka's `transaction.timeout.ms`: how long the broker keeps a transaction open
    /// for a producer that went silent before aborting it. Default: 60000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u32,
}

impl Default for TransactionsConfig {
    fn default() -> TransactionsConfig {
        TransactionsConfig {
            id: None,
            checkpoint_topic: default_checkpoint_topic(),
            state_topic: None,
            max_events: default_max_events(),
            max_ms: default_max_ms(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

fn default_checkpoint_topic() -> String {
    "kubecast.checkpoints".to_string()
}
fn default_max_events() -> usize {
    500
}
fn default_max_ms() -> u64 {
    5
}
fn default_timeout_ms() -> u32 {
    60_000
}

/// The validated transactions of one sink.
#[derive(Clone)]
pub struct TxnSettings {
    /// The sink's name.
    pub sink: String,
    /// This sink's (with `sharding`, this shard's) `transactional.id`.
    pub id: String,
    /// `transactions.id` as configured: the id of every shard count's shards, before the
    /// shard ([`transactional_id`]).
    pub base_id: String,
    pub checkpoint_topic: String,
    /// This sink's key in the checkpoint topic: `{cluster}/{sink}` (with `sharding`, per
    /// shard: `{cluster}/{sink}/shard-{i}-of-{n}`).
    pub checkpoint_key: String,
    /// `{cluster}/{sink}`: the key of every shard count's checkpoints, before the shard.
    pub checkpoint_base: String,
    /// With `sharding`, this sink's shard.
    pub shard: Option<crate::model::Shard>,
    pub state_topic: String,
    pub max_events: usize,
    pub linger: Duration,
    pub timeout: Duration,
    /// The producer that took over (fenced the others) and the position it read, handed
    /// from the pipeline's start ([`crate::sinks::Keeper`]) to the running sink.
    pub(super) ready: Arc<Mutex<Option<Ready>>>,
    /// What a standby has read of the topics so far, for its take-over. Held for the whole
    /// of each standby read, so that a take-over waits for a read under way rather than
    /// finding the reader out of its place and reading everything again.
    pub(super) warm: Arc<tokio::sync::Mutex<Option<StateReader>>>,
}

impl std::fmt::Debug for TxnSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnSettings")
            .field("id", &self.id)
            .field("checkpoint_topic", &self.checkpoint_topic)
            .field("state_topic", &self.state_topic)
            .field("max_events", &self.max_events)
            .field("linger", &self.linger)
            .finish_non_exhaustive()
    }
}

/// The `transactional.id` of `shard` under `base` (`base` itself without sharding, or for
/// the one shard of one).
pub fn transactional_id(base: &str, shard: Option<crate::model::Shard>) -> String {
    match shard {
        Some(s) if s.count > 1 => format!("{base}-{}-of-{}", s.index, s.count),
        _ => base.to_string(),
    }
}

/// The checkpoint key of `shard` under `base` (`base` itself without sharding).
pub fn checkpoint_key(base: &str, shard: Option<crate::model::Shard>) -> String {
    match shard {
        Some(s) => format!("{base}/shard-{}-of-{}", s.index, s.count),
        None => base.to_string(),
    }
}

/// The shard a checkpoint key under `base` names (the unsharded `base` is shard 0 of 1):
/// `None` for another sink's key.
pub fn shard_of_key(base: &str, key: &str) -> Option<crate::model::Shard> {
    if key == base {
        return crate::model::Shard::new(0, 1);
    }
    let rest = key.strip_prefix(base)?.strip_prefix("/shard-")?;
    let (index, count) = rest.split_once("-of-")?;
    crate::model::Shard::new(index.parse().ok()?, count.parse().ok()?)
}

impl TxnSettings {
    /// The transactional ids a shard of `count` shards may have committed under: each
    /// shard's, and the earlier releases' `{id}-{i}` (which named no count).
    pub fn ids_of(&self, count: u32) -> Vec<String> {
        let shards = (0..count).filter_map(|i| crate::model::Shard::new(i, count));
        let mut ids: Vec<String> = shards
            .map(|s| transactional_id(&self.base_id, Some(s)))
            .collect();
        if count > 1 {
            ids.extend((0..count).map(|i| format!("{}-{i}", self.base_id)));
        }
        ids
    }

    /// The consumer group the state reader names: `kubecast-reader-{id}`, with sharding
    /// `kubecast-reader-{id}-{i}` (the name earlier releases gave it, so that an ACL granted
    /// for it by hand still holds). The reader assigns its partitions and reads from offsets
    /// of its own, never joining the group or committing or fetching offsets in it: the
    /// group is only a name, and shards of two counts reading under one name at once do not
    /// meet.
    pub fn reader_group(&self) -> String {
        match self.shard {
            Some(s) => format!("kubecast-reader-{}-{}", self.base_id, s.index),
            None => format!("kubecast-reader-{}", self.base_id),
        }
    }

    /// Makes these the settings of one shard's sink: its own transactional id (a shard that
    /// moves fences its previous holder only; the ids of other counts differ, [`Self::ids_of`])
    /// and checkpoint. The checkpoint's key names the
    /// shard count too: positions saved for other ranges are not this shard's, so after a
    /// change of count each shard continues from those of the earlier count's shards that
    /// overlap its range ([`crate::model::continue_from`]). The state topic is shared (an
    /// object's record is keyed by its uid, which is in one shard only).
    pub fn shard(&mut self, shard: crate::model::Shard) {
        self.id = transactional_id(&self.base_id, Some(shard));
        self.checkpoint_key = checkpoint_key(&self.checkpoint_base, Some(shard));
        self.shard = Some(shard);
    }
}

impl TransactionsConfig {
    /// Checks the values of sink `sink` (at field path `at`); `valid_topic` is the Kafka
    /// topic-name rule.
    pub fn settings(
        &self,
        at: &str,
        sink: &str,
        cluster: &str,
        valid_topic: fn(&str) -> bool,
        issues: &mut Vec<Issue>,
    ) -> TxnSettings {
        let at = format!("{at}.transactions");
        let id = self
            .id
            .clone()
            .unwrap_or_else(|| format!("kubecast.{cluster}.{sink}"));
        if id.trim().is_empty() {
            issues.push(Issue::new(format!("{at}.id"), "must not be empty"));
        }
        let state_topic = self
            .state_topic
            .clone()
            .unwrap_or_else(|| format!("kubecast.state.{cluster}.{sink}"));
        for (field, topic) in [
            ("checkpoint_topic", &self.checkpoint_topic),
            ("state_topic", &state_topic),
        ] {
            if !valid_topic(topic) {
                issues.push(Issue::new(
                    format!("{at}.{field}"),
                    format!("`{topic}` is not a valid Kafka topic (at most 249 of [a-zA-Z0-9._-])"),
                ));
            }
        }
        if self.checkpoint_topic == state_topic {
            issues.push(Issue::new(
                format!("{at}.state_topic"),
                "must differ from checkpoint_topic",
            ));
        }
        Issue::at_least(
            issues,
            format!("{at}.max_events"),
            self.max_events as u64,
            1,
        );
        Issue::at_least(
            issues,
            format!("{at}.timeout_ms"),
            u64::from(self.timeout_ms),
            1000,
        );
        if self.max_ms >= u64::from(self.timeout_ms) {
            issues.push(Issue::new(
                format!("{at}.max_ms"),
                "must be shorter than timeout_ms (the broker would abort the transaction)",
            ));
        }
        TxnSettings {
            sink: sink.to_string(),
            base_id: id.clone(),
            id,
            checkpoint_topic: self.checkpoint_topic.clone(),
            checkpoint_key: format!("{cluster}/{sink}"),
            checkpoint_base: format!("{cluster}/{sink}"),
            shard: None,
            state_topic,
            max_events: self.max_events,
            linger: Duration::from_millis(self.max_ms),
            timeout: Duration::from_millis(u64::from(self.timeout_ms)),
            ready: Arc::default(),
            warm: Arc::default(),
        }
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;
    use crate::model::Shard;

    #[test]
    fn each_shard_count_has_transactional_ids_of_its_own() {
        let base = "kubecast.prod.k";
        assert_eq!(transactional_id(base, None), base);
        assert_eq!(
            transactional_id(base, Shard::new(0, 1)),
            base,
            "one shard is unsharded"
        );
        assert_eq!(
            transactional_id(base, Shard::new(2, 6)),
            "kubecast.prod.k-2-of-6"
        );
        let ids = |count| -> Vec<String> {
            (0..count)
                .map(|i| transactional_id(base, Shard::new(i, count)))
                .collect()
        };
        let (four, six) = (ids(4), ids(6));
        assert!(four.iter().all(|id| !six.contains(id)), "{four:?} {six:?}");
    }

    #[test]
    fn the_ids_to_fence_of_a_count_are_its_shards_and_an_earlier_releases() {
        let mut issues = Vec::new();
        let txn = TransactionsConfig {
            id: Some("k".into()),
            ..TransactionsConfig::default()
        }
        .settings("sinks.k", "k", "prod", |_| true, &mut issues);
        assert!(issues.is_empty());
        assert_eq!(txn.ids_of(1), ["k"]);
        assert_eq!(txn.ids_of(2), ["k-0-of-2", "k-1-of-2", "k-0", "k-1"]);
    }

    #[test]
    fn the_readers_group_is_the_one_the_earlier_release_named() {
        let mut issues = Vec::new();
        let mut txn = TransactionsConfig {
            id: Some("k".into()),
            ..TransactionsConfig::default()
        }
        .settings("sinks.k", "k", "prod", |_| true, &mut issues);
        assert_eq!(txn.reader_group(), "kubecast-reader-k");
        // The earlier release: `kubecast-reader-{id}-{i}` for every shard, whatever the count.
        for (index, count) in [(2, 6), (2, 4), (0, 1)] {
            let mut t = txn.clone();
            t.shard(Shard::new(index, count).expect("a shard"));
            assert_eq!(t.reader_group(), format!("kubecast-reader-k-{index}"));
        }
        txn.shard(Shard::new(1, 3).expect("a shard"));
        assert_eq!(txn.id, "k-1-of-3", "the transactional id names the count");
    }

    #[test]
    fn checkpoint_keys_name_their_shard_and_other_sinks_keys_none() {
        let base = "prod/kafka";
        for shard in [None, Shard::new(0, 1), Shard::new(3, 6)] {
            let key = checkpoint_key(base, shard);
            assert_eq!(
                shard_of_key(base, &key),
                Some(shard.unwrap_or(Shard { index: 0, count: 1 })),
                "{key}"
            );
        }
        for other in [
            "prod/kafka2",
            "prod/kafka/shard-6-of-6",
            "prod/kafka/shard-x-of-2",
            "prod",
        ] {
            assert_eq!(shard_of_key(base, other), None, "{other}");
        }
    }
}
