//! The Kafka ACLs a config needs, per sink, for its principal: exactly what kubecast does
//! and nothing more (`kubecast kafka-acls`). Entry points: [`of_sink`], [`render_commands`],
//! [`render_json`].
//!
//! Kafka's own implications keep the list short: Write and Read each grant Describe, and
//! Write on any topic grants the idempotent producer's IdempotentWrite on the cluster.
//! The state reader of an exactly-once sink assigns partitions itself and commits nothing,
//! but librdkafka's consumer still names a group: `kubecast-reader-{transactions.id}`, with
//! sharding `kubecast-reader-{transactions.id}-{i}` (the shard count not in it).

use serde::Serialize;

use super::KafkaSettings;
use super::refusal::{Operation, Resource};

/// One ACL: `principal` may do `operation` on the resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Acl {
    /// The sink that needs it (the first, when several do).
    pub sink: String,
    pub principal: String,
    /// `topic` or `transactional-id`.
    pub resource_type: &'static str,
    pub resource_name: String,
    /// `literal` or `prefixed`.
    pub pattern_type: &'static str,
    pub operation: &'static str,
    /// Why kubecast needs it.
    pub why: String,
}

/// The ACLs of one Kafka sink (one shard's settings) for `principal`.
pub fn of_sink(sink: &str, settings: &KafkaSettings, principal: &str) -> Vec<Acl> {
    let mut out = Vec::new();
    let create = settings.create_topics.is_some();
    let mut add = |resource: Resource, name: &str, prefixed: bool, ops: &[Operation], why: &str| {
        for op in ops {
            out.push(Acl {
                sink: sink.to_string(),
                principal: principal.to_string(),
                resource_type: match resource {
                    Resource::TransactionalId => "transactional-id",
                    Resource::Group => "group",
                    Resource::Cluster => "cluster",
                    Resource::Topic => "topic",
                },
                resource_name: name.to_string(),
                pattern_type: if prefixed { "prefixed" } else { "literal" },
                operation: op.name(),
                why: why.to_string(),
            });
        }
    };
    let write: &[Operation] = if create { &[Operation::Write, Operation::Create] } else { &[Operation::Write] };
    for template in settings.topic.all() {
        let (prefix, literal) = template.prefix();
        let why = if literal {
            "its events".to_string()
        } else {
            format!("its events (topics starting `{prefix}`, from the topic template)")
        };
        if prefix.is_empty() {
            // A template that starts with a placeholder can name any topic.
            add(Resource::Topic, "*", false, write, &why);
        } else {
            add(Resource::Topic, &prefix, !literal, write, &why);
        }
    }
    if let Some(t) = &settings.dead_letter_topic {
        add(Resource::Topic, t, false, write, "its dead letters");
    }
    if let Some(txn) = &settings.exactly_once {
        let state: &[Operation] = if create {
            &[Operation::Write, Operation::Read, Operation::Create]
        } else {
            &[Operation::Write, Operation::Read]
        };
        add(Resource::Topic, &txn.checkpoint_topic, false, state, "exactly-once: its checkpoints, written in its transactions and read back on taking over");
        add(Resource::Topic, &txn.state_topic, false, state, "exactly-once: the objects' known state, written in its transactions and read back on taking over");
        if txn.shard.is_some() {
            // Every shard count's ids and an earlier release's (`{id}-{i}`) start `{id}-`: a
            // shard fences those of another count before continuing from their checkpoints.
            let prefix = format!("{}-", txn.base_id);
            add(Resource::TransactionalId, &prefix, true, &[Operation::Write], "exactly-once: its shards' transactions, and fencing those of another shard count before continuing from its checkpoints");
            add(Resource::TransactionalId, &txn.base_id, false, &[Operation::Write], "exactly-once: fencing the unsharded sink's transactions before continuing from its checkpoint");
        } else {
            add(Resource::TransactionalId, &txn.id, false, &[Operation::Write], "exactly-once: its transactions");
        }
        add(Resource::Group, &txn.reader_group(), false, &[Operation::Read], "exactly-once: the group its state reader names (no offsets are committed in it)");
    }
    out
}

/// `acls` without repeats (two sinks writing one topic need its ACL once).
pub fn dedup(acls: Vec<Acl>) -> Vec<Acl> {
    let mut out: Vec<Acl> = Vec::new();
    for a in acls {
        let same = |b: &Acl| {
            (b.principal.as_str(), b.resource_type, b.resource_name.as_str(), b.pattern_type, b.operation)
                == (a.principal.as_str(), a.resource_type, a.resource_name.as_str(), a.pattern_type, a.operation)
        };
        if !out.iter().any(same) {
            out.push(a);
        }
    }
    out
}

/// The ACLs as `kafka-acls.sh` command lines, each under a comment saying why, for the
/// cluster at `brokers` (the admin's client settings go in `admin.properties`).
pub fn render_commands(acls: &[Acl], brokers: &str) -> String {
    let mut out = String::from(
        "# The Kafka ACLs kubecast needs (`kubecast kafka-acls`). Run as a Kafka admin; admin.properties\n\
         # holds the admin's client settings (security.protocol, sasl.mechanism, sasl.jaas.config).\n",
    );
    for a in acls {
        let resource = match a.resource_type {
            "transactional-id" => format!("--transactional-id {}", a.resource_name),
            "group" => format!("--group {}", a.resource_name),
            "cluster" => "--cluster".to_string(),
            _ => format!("--topic {}", shell_word(&a.resource_name)),
        };
        let pattern = if a.pattern_type == "prefixed" { " --resource-pattern-type prefixed" } else { "" };
        out.push_str(&format!(
            "# sink {}: {}\nkafka-acls.sh --bootstrap-server {brokers} --command-config admin.properties --add --allow-principal {} --operation {} {resource}{pattern}\n",
            a.sink, a.why, shell_word(&a.principal), a.operation
        ));
    }
    out
}

/// The ACLs as a JSON array (`--format json`), one object per ACL.
pub fn render_json(acls: &[Acl]) -> String {
    // A list of plain structs of strings always serializes.
    let mut text = serde_json::to_string_pretty(acls).unwrap_or_default();
    text.push('\n');
    text
}

/// `word` quoted for a POSIX shell when it holds anything but safe characters.
fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/=@".contains(&b)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::Common;
    use crate::sinks::kafka::KafkaConfig;

    fn settings(yaml: &str) -> KafkaSettings {
        let c: KafkaConfig = serde_saphyr::from_str(yaml).unwrap();
        c.settings("sinks.k", &Common::default(), "prod").unwrap()
    }

    fn lines(acls: &[Acl]) -> Vec<String> {
        acls.iter()
            .map(|a| format!("{} {} {} {}", a.operation, a.resource_type, a.pattern_type, a.resource_name))
            .collect()
    }

    #[test]
    fn an_at_least_once_sink_needs_write_on_its_topic_and_nothing_else() {
        let acls = of_sink("k", &settings("brokers: b:1\ntopic: kubecast.pods\n"), "User:kubecast");
        assert_eq!(lines(&acls), ["Write topic literal kubecast.pods"]);
    }

    #[test]
    fn a_templated_topic_is_granted_by_its_prefix_and_create_only_with_create_topics() {
        let acls = of_sink(
            "k",
            &settings("brokers: b:1\ntopic: 'k8s.{cluster}.{namespace}'\ncreate_topics: {}\n"),
            "User:kubecast",
        );
        assert_eq!(lines(&acls), ["Write topic prefixed k8s.prod.", "Create topic prefixed k8s.prod."]);
    }

    #[test]
    fn an_exactly_once_sink_also_needs_its_state_topics_and_its_transactional_id() {
        let acls = of_sink("k", &settings("brokers: b:1\nexactly_once: true\n"), "User:kubecast");
        assert_eq!(
            lines(&acls),
            [
                "Write topic literal kubecast.pods",
                "Write topic literal kubecast.checkpoints",
                "Read topic literal kubecast.checkpoints",
                "Write topic literal kubecast.state.prod.k",
                "Read topic literal kubecast.state.prod.k",
                "Write transactional-id literal kubecast.prod.k",
                "Read group literal kubecast-reader-kubecast.prod.k",
            ]
        );
        let text = render_commands(&acls, "b:1");
        assert!(text.contains("--operation Write --transactional-id kubecast.prod.k\n"), "{text}");
        assert!(text.contains("--allow-principal User:kubecast --operation Read --topic kubecast.checkpoints\n"), "{text}");
    }

    #[test]
    fn shards_need_every_shard_counts_transactional_ids_and_their_own_reader_group() {
        let c: KafkaConfig = serde_saphyr::from_str("brokers: b:1\nexactly_once: true\n").unwrap();
        let common = Common {
            shard: crate::model::Shard::new(1, 3),
            ..Common::default()
        };
        let s = c.settings("sinks.k", &common, "prod").unwrap();
        let lines = lines(&of_sink("k", &s, "User:kubecast"));
        assert!(lines.contains(&"Write transactional-id prefixed kubecast.prod.k-".to_string()), "{lines:?}");
        assert!(lines.contains(&"Write transactional-id literal kubecast.prod.k".to_string()), "{lines:?}");
        assert!(lines.contains(&"Read group literal kubecast-reader-kubecast.prod.k-1".to_string()), "{lines:?}");
    }

    #[test]
    fn two_sinks_on_one_topic_need_its_acl_once() {
        let s = settings("brokers: b:1\n");
        let mut all = of_sink("a", &s, "User:k");
        all.extend(of_sink("b", &s, "User:k"));
        assert_eq!(dedup(all).len(), 1);
    }
}
