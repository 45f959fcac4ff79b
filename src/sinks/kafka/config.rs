//! The Kafka sink's config and its validated form (the librdkafka properties to use).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::topics::{CreateTopics, CreateTopicsConfig};
use super::txn_config::{TransactionsConfig, TxnSettings};
use crate::vocab::Issue;
use crate::sinks::{Common, Placeholder, Secret, Sink, SinkSpec, Template, TlsConfig, Topics};

/// `type: kafka`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port...]`. Required.
    pub brokers: String,
    /// Topic template; may use `{cluster}`, `{namespace}`, `{kind}` (lower case) and
    /// `{resource}` (`deployments.apps`). Default: `kubecast.pods`.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// CloudEvents Kafka binding mode: `binary` (attributes as `ce_` headers, data as the
    /// value) or `structured` (the whole event as JSON). Default: `binary`.
    #[serde(default)]
    pub mode: Mode,
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd`. Default: `none`.
    #[serde(default)]
    pub compression: Compression,
    /// TLS to the brokers. Default: plaintext.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// SASL authentication. Default: none.
    #[serde(default)]
    pub sasl: Option<SaslConfig>,
    /// Largest record kubecast sends; a larger event is dead-lettered. Must not exceed the
    /// broker's `message.max.bytes`. Default: 1000000.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: u32,
    /// How long librdkafka may try to deliver one record before giving up, in
    /// milliseconds; 0 means forever, which keeps per-pod order through any outage.
    /// Default: 0.
    #[serde(default)]
    pub delivery_timeout_ms: u32,
    /// Records sent but not yet acknowledged, at most. Default: 1000. While a broker is
    /// slow or down the sink holds these and its queue in memory (README, "Sizing").
    #[serde(default = "default_in_flight")]
    pub in_flight: usize,
    /// Extra librdkafka producer properties (`linger.ms: "5"`). Those kubecast's guarantees
    /// rest on (`enable.idempotence`, `acks`, ...) cannot be overridden.
    #[serde(default)]
    pub librdkafka: BTreeMap<String, String>,
    /// Exactly-once for `read_committed` consumers: events go out in Kafka transactions
    /// together with this sink's checkpoint and the known state, which then live in Kafka
    /// instead of `state.dir` (README, "Delivery guarantees"). Default: false (at-least-once
    /// through the idempotent producer).
    #[serde(default)]
    pub exactly_once: bool,
    /// The transactions of `exactly_once`.
    #[serde(default)]
    pub transactions: TransactionsConfig,
    /// Create the topics this sink writes when they do not exist (README, "Production
    /// Kafka"). Default: unset, and a topic that does not exist stops kubecast naming it
    /// (a broker that auto-creates topics still creates event topics on first use).
    #[serde(default)]
    pub create_topics: Option<CreateTopicsConfig>,
}

fn default_topic() -> String {
    "kubecast.pods".to_string()
}
fn default_max_message_bytes() -> u32 {
    1_000_000
}
fn default_in_flight() -> usize {
    // 1,000 keeps a Kafka outage's memory small (measured: 10,000 held events of 5 KB made
    // 188 MiB resident, 2,024 made 46 MiB) and did not slow the initial list of 10,000 pods.
    1_000
}

/// The CloudEvents binding mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Binary,
    Structured,
}

/// Record compression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// SASL settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    /// User name.
    pub username: String,
    /// Password; better set through `KUBECAST_SINKS__{NAME}__SASL__PASSWORD`.
    pub password: Secret,
}

/// The validated Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    pub topic: Topics,
    pub mode: Mode,
    pub max_message_bytes: usize,
    pub in_flight: usize,
    pub dead_letter_topic: Option<String>,
    /// `too_large: reference`: an event above `max_message_bytes` goes in reference mode.
    pub too_large_reference: bool,
    /// Every librdkafka property, kubecast's own and the user's.
    pub properties: Vec<(String, Secret)>,
    /// With `exactly_once: true`, its transactions.
    pub exactly_once: Option<TxnSettings>,
    /// With `create_topics`, how to create the topics that do not exist.
    pub create_topics: Option<CreateTopics>,
    /// The sink's field path, `sinks.NAME`, for the errors that name a setting.
    pub at: String,
}

/// librdkafka's `socket.timeout.ms` unless `librdkafka` sets it.
const SOCKET_TIMEOUT_MS: &str = "15000";

/// Properties whose values kubecast's delivery guarantees depend on.
const PROTECTED: &[&str] = &[
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "bootstrap.servers",
];

impl SinkSpec for KafkaConfig {
    const DEAD_LETTER_TOPIC: bool = true;

    fn validate(&self, at: &str, common: &Common, cluster: &str) -> Result<Box<dyn Sink>, Vec<Issue>> {
        Ok(Box::new(self.settings(at, common, cluster)?))
    }
}

impl KafkaConfig {
    /// A config with every default and `brokers` still empty: the base of a reader's
    /// connection (`kubecast replay` checks its flags through [`KafkaConfig::settings`]).
    pub fn reader() -> KafkaConfig {
        KafkaConfig {
            brokers: String::new(),
            topic: default_topic(),
            mode: Mode::default(),
            compression: Compression::default(),
            tls: None,
            sasl: None,
            max_message_bytes: default_max_message_bytes(),
            delivery_timeout_ms: 0,
            in_flight: default_in_flight(),
            librdkafka: BTreeMap::new(),
            exactly_once: false,
            transactions: TransactionsConfig::default(),
            create_topics: None,
        }
    }

    /// Checks the values and derives the producer properties; `at` is the field path of this
    /// sink (`sinks.NAME`).
    pub fn settings(&self, at: &str, common: &Common, cluster: &str) -> Result<KafkaSettings, Vec<Issue>> {
        let mut issues = Vec::new();
        if self.brokers.trim().is_empty() {
            issues.push(Issue::new(
                format!("{at}.brokers"),
                "must name at least one host:port",
            ));
        }
        let topic = Topics::parse(&self.topic, at, common, &mut issues, |text| {
            let t = Template::parse(
                text,
                &[
                    Placeholder::Cluster,
                    Placeholder::Namespace,
                    Placeholder::Kind,
                    Placeholder::Resource,
                ],
                cluster,
            )?;
            let sample = t.render(&crate::sinks::Vars {
                namespace: "ns",
                name: "",
                kind: "Kind",
                resource: "resources.example.com",
            });
            if !valid_topic(&sample) {
                return Err(format!("`{text}` gives topic `{sample}`: Kafka topics are at most 249 of [a-zA-Z0-9._-]"));
            }
            Ok(t)
        });
        Issue::at_least(
            &mut issues,
            format!("{at}.max_message_bytes"),
            u64::from(self.max_message_bytes),
            1024,
        );
        Issue::at_least(
            &mut issues,
            format!("{at}.in_flight"),
            self.in_flight as u64,
            1,
        );
        // The envelope (queue, dead_letter.file) is checked by the sink contract.
        for key in self.librdkafka.keys() {
            if PROTECTED.contains(&key.as_str()) {
                issues.push(Issue::new(format!("{at}.librdkafka.{key}"),
                    "is set by kubecast (its delivery guarantees depend on it) and cannot be overridden"));
            }
        }
        let mut props: Vec<(String, Secret)> = Vec::new();
        let mut set = |k: &str, v: &str| props.push((k.to_string(), Secret(v.to_string())));
        set("bootstrap.servers", &self.brokers);
        set("enable.idempotence", "true");
        set("acks", "all");
        set("max.in.flight.requests.per.connection", "5");
        set("message.timeout.ms", &self.delivery_timeout_ms.to_string());
        // A request unanswered this long closes its connection (librdkafka's
        // `socket.max.fails` is 1) and goes again on a new one: a black-holed broker
        // connection is replaced within 15 s of the first request into it, instead of
        // librdkafka's 60 (a transactional producer's: the transaction timeout). A
        // connection idle at the cut may get its first request only when another's timed
        // out (a metadata request after a failed produce), so the closes can chain: with a
        // producer's three connections, at most about 45 s, inside the minute the partition
        // tests hold every connection to (20 s chained to 61 s once). Overridable under
        // `librdkafka`.
        set("socket.timeout.ms", SOCKET_TIMEOUT_MS);
        set(
            "message.max.bytes",
            &(self.max_message_bytes.max(1024) + 1024).to_string(),
        );
        set(
            "compression.type",
            match self.compression {
                Compression::None => "none",
                Compression::Gzip => "gzip",
                Compression::Snappy => "snappy",
                Compression::Lz4 => "lz4",
                Compression::Zstd => "zstd",
            },
        );
        let protocol = match (&self.tls, &self.sasl) {
            (None, None) => "plaintext",
            (Some(_), None) => "ssl",
            (None, Some(_)) => "sasl_plaintext",
            (Some(_), Some(_)) => "sasl_ssl",
        };
        set("security.protocol", protocol);
        if let Some(tls) = &self.tls {
            for (key, file, name) in [
                ("ssl.ca.location", &tls.ca_file, "ca_file"),
                ("ssl.certificate.location", &tls.cert_file, "cert_file"),
                ("ssl.key.location", &tls.key_file, "key_file"),
            ] {
                if let Some(f) = file {
                    set(key, &f.display().to_string());
                } else if name != "ca_file" && (tls.cert_file.is_some() != tls.key_file.is_some()) {
                    issues.push(Issue::new(
                        format!("{at}.tls.{name}"),
                        "cert_file and key_file go together",
                    ));
                }
            }
        }
        if let Some(sasl) = &self.sasl {
            let mech = sasl.mechanism.to_ascii_uppercase();
            if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&mech.as_str()) {
                issues.push(Issue::new(
                    format!("{at}.sasl.mechanism"),
                    format!(
                        "`{}` is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
                        sasl.mechanism
                    ),
                ));
            }
            set("sasl.mechanism", &mech);
            set("sasl.username", &sasl.username);
            props.push(("sasl.password".to_string(), sasl.password.clone()));
        }
        for (k, v) in &self.librdkafka {
            props.push((k.clone(), Secret(v.clone())));
        }
        let dead_letter_topic = common.dead_letter.as_ref().and_then(|d| d.topic.clone());
        if let Some(t) = &dead_letter_topic
            && !valid_topic(t)
        {
            issues.push(Issue::new(
                format!("{at}.dead_letter.topic"),
                format!("`{t}` is not a valid Kafka topic"),
            ));
        }
        let exactly_once = self.exactly_once.then(|| {
            let sink = at.strip_prefix("sinks.").unwrap_or(at);
            let mut txn = self
                .transactions
                .settings(at, sink, cluster, valid_topic, &mut issues);
            if let Some(shard) = common.shard {
                txn.shard(shard);
            }
            txn
        });
        let create_topics = self.create_topics.as_ref().map(|c| c.settings(at, &mut issues));
        match topic {
            Some(topic) if issues.is_empty() => Ok(KafkaSettings {
                create_topics,
                at: at.to_string(),
                exactly_once,
                topic,
                mode: self.mode,
                max_message_bytes: self.max_message_bytes as usize,
                in_flight: self.in_flight,
                dead_letter_topic,
                too_large_reference: common.too_large == crate::sinks::TooLarge::Reference,
                properties: props,
            }),
            _ => Err(issues),
        }
    }
}

fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> KafkaConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn the_producer_is_idempotent_with_acks_all_and_keeps_user_properties() {
        let s = config("brokers: 127.0.0.1:9092\nlibrdkafka:\n  linger.ms: '5'\n")
            .settings("sinks.k", &Common::default(), "c")
            .unwrap();
        let get = |k: &str| {
            s.properties
                .iter()
                .find(|(p, _)| p == k)
                .map(|(_, v)| v.0.clone())
        };
        assert_eq!(get("enable.idempotence").as_deref(), Some("true"));
        assert_eq!(get("acks").as_deref(), Some("all"));
        assert_eq!(get("linger.ms").as_deref(), Some("5"));
        assert_eq!(get("security.protocol").as_deref(), Some("plaintext"));
    }

    #[test]
    fn guarantees_cannot_be_overridden_and_bad_topics_are_named() {
        let issues = config("brokers: b:1\ntopic: 'pods/{name}'\nlibrdkafka:\n  acks: '1'\n")
            .settings("sinks.k", &Common::default(), "c")
            .unwrap_err();
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert!(fields.contains(&"sinks.k.topic"), "{issues:?}");
        assert!(fields.contains(&"sinks.k.librdkafka.acks"), "{issues:?}");
    }

    #[test]
    fn sasl_over_tls_selects_sasl_ssl_and_never_prints_the_password() {
        let s = config("brokers: b:1\ntls: {ca_file: /ca.pem}\nsasl: {mechanism: scram-sha-512, username: u, password: hunter2}\n")
            .settings("sinks.k", &Common::default(), "c")
            .unwrap();
        assert!(
            s.properties
                .contains(&("security.protocol".into(), Secret("sasl_ssl".into())))
        );
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
