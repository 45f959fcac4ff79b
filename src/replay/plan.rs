//! A validated `kubecast replay`: what to read ([`Range`], [`TopicChoice`]), which events
//! to keep ([`Filter`]), what to print and where. Entry point: [`Plan`], made by
//! [`ReplayArgs::validate`](super::args::ReplayArgs::validate).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kube::core::Selector;

use super::ReplayError;
use crate::sinks::Secret;

/// `--format`: which of these a replay takes depends on what it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A report as JSON (`--state-at`, `--diff-clusters`); the changes as JSON lines
    /// (`--follow` or a replay).
    Json,
    /// A report as a table (`--state-at`, `--diff-clusters`).
    Table,
    /// One compact line per change: time, cluster, kind, namespace/name, change and the
    /// fields that changed.
    Line,
    /// Every event whole, as structured-mode CloudEvents, one per line.
    Events,
}

/// How a report prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFormat {
    Json,
    Table,
}

/// How the selected events print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFormat {
    /// Structured-mode CloudEvents, one per line (a replay's default).
    Events,
    /// Compact coloured lines (`--follow`'s default on a terminal).
    Line,
    /// One JSON object per change (`--follow`'s default elsewhere).
    Json,
}

/// A topic to read: a name, or a pattern every topic's whole name is matched against.
#[derive(Debug, Clone)]
pub enum TopicChoice {
    Name(String),
    Pattern(regex::Regex),
}

impl TopicChoice {
    /// Whether `topic` is one this choice reads. A pattern never takes an internal topic
    /// (`__consumer_offsets`): it holds no events.
    pub fn takes(&self, topic: &str) -> bool {
        match self {
            TopicChoice::Name(n) => n == topic,
            TopicChoice::Pattern(re) => !topic.starts_with("__") && re.is_match(topic),
        }
    }
}

impl std::fmt::Display for TopicChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopicChoice::Name(n) => write!(f, "{n}"),
            TopicChoice::Pattern(re) => write!(f, "{}", re.as_str()),
        }
    }
}

/// `--diff-clusters A B [--at TIME]`.
#[derive(Debug, Clone)]
pub struct DiffClusters {
    pub a: String,
    pub b: String,
    /// Milliseconds since the epoch, and as given (`now` when `--at` is not).
    pub at_ms: i64,
    pub at: String,
}

/// Offsets given per partition, or for all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offsets {
    pub all: Option<i64>,
    pub per: BTreeMap<i32, i64>,
}

impl Offsets {
    /// The offset for `partition`, if one was given.
    pub fn of(&self, partition: i32) -> Option<i64> {
        self.per.get(&partition).copied().or(self.all)
    }
}

/// Which records to read.
#[derive(Debug, Clone, Default)]
pub struct Range {
    /// Milliseconds since the epoch.
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub from: Offsets,
    pub to: Offsets,
    /// `None`: every partition.
    pub partitions: Option<Vec<i32>>,
}

impl Range {
    /// The range in words, for a report's header.
    pub fn describe(&self) -> String {
        let time = |ms: i64| {
            jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
        };
        let offsets = |o: &Offsets| {
            let mut parts: Vec<String> = o.all.iter().map(|n| format!("{n}")).collect();
            parts.extend(o.per.iter().map(|(p, n)| format!("{p}:{n}")));
            parts.join(", ")
        };
        let mut words = Vec::new();
        if let Some(ms) = self.since_ms {
            words.push(format!("since {}", time(ms)));
        }
        if let Some(ms) = self.until_ms {
            words.push(format!("until {}", time(ms)));
        }
        if self.from != Offsets::default() {
            words.push(format!("from offset {}", offsets(&self.from)));
        }
        if self.to != Offsets::default() {
            words.push(format!("to offset {}", offsets(&self.to)));
        }
        if let Some(p) = &self.partitions {
            words.push(format!("partition(s) {p:?}"));
        }
        if words.is_empty() {
            "the whole topic".to_string()
        } else {
            words.join(", ")
        }
    }
}

/// Which events to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub resources: Vec<String>,
    /// Cluster names or globs; an event whose `source` names no cluster matches none.
    pub clusters: Vec<String>,
    pub namespaces: Vec<String>,
    pub names: Vec<String>,
    pub uids: Vec<String>,
    pub types: Vec<String>,
    pub labels: Option<Selector>,
}

/// Where the selected events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
    /// Re-published through sink `name` of the kubecast config `config`.
    Sink {
        config: PathBuf,
        name: String,
    },
    /// Only a report (`--verify`, `--state-at`) is printed.
    Nowhere,
}

/// A validated `kubecast replay`.
#[derive(Debug, Clone)]
pub struct Plan {
    pub topics: Vec<TopicChoice>,
    /// The consumer's connection properties (brokers, TLS, SASL).
    pub connection: Vec<(String, Secret)>,
    pub range: Range,
    pub filter: Filter,
    /// `Some(window)` when deduplicating.
    pub dedup: Option<usize>,
    pub verify: bool,
    /// `--state-at`: the time in milliseconds, and as given.
    pub state_at: Option<(i64, String)>,
    pub format: StateFormat,
    pub destination: Destination,
    /// `--html`: the report's file.
    pub html: Option<PathBuf>,
    pub stall: Duration,
    /// `--follow`: read on after the end until interrupted.
    pub follow: bool,
    /// How the events print; `None`: `--follow`'s default, chosen by whether standard output
    /// is a terminal.
    pub events: Option<EventFormat>,
    pub diff: Option<DiffClusters>,
    /// The default redaction with the names of `--redact-annotation` and `--redact-label`;
    /// [`Plan::redaction`] adds `--config`'s.
    pub redact: crate::redact::RedactConfig,
    /// `--config`: whose `encoding.redact` names are redacted too (and whose `--sink`
    /// re-publishes, see [`Destination::Sink`]).
    pub config: Option<PathBuf>,
}

impl Plan {
    /// What every output's data is redacted by: the default rules, the names of `--config`'s
    /// `encoding.redact` and those of `--redact-annotation` and `--redact-label`. Fails when
    /// `--config` cannot be loaded.
    pub fn redaction(&self) -> Result<crate::redact::RedactConfig, ReplayError> {
        let mut redact = self.redact.clone();
        if let Some(path) = &self.config {
            let loaded = crate::config::load(path).map_err(|e| {
                ReplayError::Config(format!("{}: {}", path.display(), crate::error_chain(&e)))
            })?;
            let names = loaded.encoding.redact;
            redact.annotations.extend(names.annotations);
            redact.labels.extend(names.labels);
        }
        Ok(redact)
    }

    /// The topics as the command line named them, for messages.
    pub fn topics_text(&self) -> String {
        let names: Vec<String> = self.topics.iter().map(|t| format!("`{t}`")).collect();
        names.join(", ")
    }
}

/// A bad command line: exit 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct UsageError {
    pub flag: String,
    pub message: String,
}

pub(super) fn usage(flag: &str, message: impl Into<String>) -> UsageError {
    UsageError {
        flag: flag.to_string(),
        message: message.into(),
    }
}
