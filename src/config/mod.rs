//! kubecast's configuration: the YAML file's shape, with a doc comment and an explicit
//! default on every field.
//!
//! Entry points: [`load`] reads a file, applies `KUBECAST_...` environment overrides and
//! returns a [`Config`]; [`Config::validate`] (pure, no I/O) turns it into the
//! [`Validated`] form the pipeline runs on. Nothing connects before validation passed.

mod load;
mod resources;
mod routing;
mod validate;

#[cfg(test)]
mod proptests;

pub use crate::classify::InitialList;
pub use crate::cluster::KubernetesConfig;
pub use crate::redact::RedactConfig;
pub use crate::store::StateConfig;
pub use crate::vocab::{DataMode, Issue};
pub use crate::watch::StreamingList;
pub use load::{ConfigError, load, load_str};
pub use resources::{ResourceConfig, ResourceScope, default_resources};
pub use routing::{MAX_ROUTES, Routing, union_selector};
pub use validate::{Validated, ValidationError};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sinks::SinkConfig;

/// The whole configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Name of the watched cluster; goes into every event's `source`
    /// (`k8s://{cluster}/api/v1/namespaces/{namespace}/pods`). Required: a DNS-1123 label.
    pub cluster: String,
    /// How to reach the kube-apiserver.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// What to watch.
    #[serde(default)]
    pub watch: WatchConfig,
    /// How events are encoded.
    #[serde(default)]
    pub encoding: EncodingConfig,
    /// Where events go, keyed by a name of your choice (used in logs and dead letters).
    /// At least one sink is required.
    pub sinks: BTreeMap<String, SinkConfig>,
    /// The durable state: the buffer of unacknowledged events, the known state and the
    /// resume point. Without it, a restart starts afresh.
    #[serde(default)]
    pub state: StateConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// The operations endpoint: `/metrics`, `/healthz`, `/readyz`.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Stopping on SIGINT or SIGTERM.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Several replicas with one leader (README, "High availability").
    #[serde(default)]
    pub leader_election: crate::ha::LeaderElectionConfig,
    /// The objects split into shards that the replicas share (README, "High availability").
    #[serde(default)]
    pub sharding: crate::ha::ShardingConfig,
    /// Which events go to which sinks, keyed by a name of your choice (README, "Routes").
    /// Default: none, meaning every sink gets every event.
    #[serde(default)]
    pub routes: BTreeMap<String, crate::route::config::RouteConfig>,
    /// Pod alert rules (README, "Alerts"). Default: none (no alerts); `alerts: {}` turns the
    /// built-in rules on.
    #[serde(default)]
    pub alerts: Option<crate::alert::config::AlertsConfig>,
}

/// Where `/metrics` (Prometheus text format), `/healthz` and `/readyz` are served.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `HOST:PORT` to listen on, e.g. `127.0.0.1:9464` (or `0.0.0.0:9464` in a Pod). Default:
    /// none, meaning no endpoint. The flag `--metrics-address` overrides it.
    #[serde(default)]
    pub address: Option<String>,
}

/// How kubecast stops.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Seconds the sinks get, after SIGTERM, to deliver what they hold; what they could not
    /// deliver stays in the state directory and goes after the restart. Keep it below the
    /// Pod's `terminationGracePeriodSeconds`. Default: 20.
    #[serde(default = "default_grace")]
    pub grace_seconds: u64,
}

fn default_grace() -> u64 {
    20
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace_seconds: default_grace(),
        }
    }
}

/// What to watch and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchConfig {
    /// The resources to watch, as `kubectl get` names them (`pods`, `nodes`, `events`,
    /// `deploy`, `deployments.apps`, `jobs.v1.batch`, `widgets.example.com`), or maps
    /// `{resource, namespaces, label_selector, field_selector, allow_secrets}` that override
    /// the settings below for one resource. One watch per (resource, namespace). Default:
    /// `[pods]`.
    #[serde(default = "default_resources", deserialize_with = "resources::entries")]
    pub resources: Vec<ResourceConfig>,
    /// Namespaces to watch. Default: empty, meaning all namespaces (one watch); otherwise one
    /// watch per namespace.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Label selector applied by the apiserver (`app=web,tier!=cache`). Default: none.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Field selector applied by the apiserver (`spec.nodeName=node-1`). Default: none.
    #[serde(default)]
    pub field_selector: Option<String>,
    /// On a start with no saved state, whether objects that already exist are emitted once as
    /// `added` (flagged `k8sinitial`) or only remembered. Default: `emit`.
    #[serde(default)]
    pub initial_list: InitialList,
    /// How to ask for the initial state: `on`, a watch stream (`sendInitialEvents`, falling
    /// back to paginated lists where the apiserver refuses it); `off`, paginated lists;
    /// `auto`, the faster as measured, which is paginated lists. Default: `auto`.
    #[serde(default)]
    pub streaming_list: StreamingList,
    /// Objects per page when listing. Default: 500.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Seconds after which the apiserver ends a watch request and kubecast opens the next
    /// one from the last resourceVersion. Sent as at most three quarters of
    /// `kubernetes.keepalive.watch_silence_seconds` (90 with the default 120), so that a
    /// quiet watch without bookmarks ends cleanly before it would be taken for dead.
    /// Default: 300.
    #[serde(default = "default_watch_timeout")]
    pub timeout_seconds: u32,
    /// Longest wait between two attempts after an error, in seconds. Default: 30.
    #[serde(default = "default_max_backoff")]
    pub max_backoff_seconds: u32,
    /// The seeds' resync period: list again this often and compare with the known state, so
    /// that anything a watch missed is emitted (and its alert rules evaluated); pods that did
    /// not change emit nothing. Alert `for` timers do not need it (they fire on time on their
    /// own). Default: none.
    #[serde(default)]
    pub resync_seconds: Option<u32>,
}

fn default_page_size() -> u32 {
    500
}
fn default_watch_timeout() -> u32 {
    300
}
fn default_max_backoff() -> u32 {
    30
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            resources: default_resources(),
            namespaces: Vec::new(),
            label_selector: None,
            field_selector: None,
            initial_list: InitialList::default(),
            streaming_list: StreamingList::default(),
            page_size: default_page_size(),
            timeout_seconds: default_watch_timeout(),
            max_backoff_seconds: default_max_backoff(),
            resync_seconds: None,
        }
    }
}

/// How events are encoded.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncodingConfig {
    /// What `data` holds: `full` (the Pod without managedFields, redacted), `summary`
    /// (phase, conditions, container states, node, IPs, labels, owner) or `reference`
    /// (uid, namespace, name and resourceVersion only). Default: `full`.
    #[serde(default)]
    pub data: DataMode,
    /// Redaction of secret-looking values in `full` data.
    #[serde(default)]
    pub redact: RedactConfig,
}

impl Default for EncodingConfig {
    fn default() -> Self {
        EncodingConfig {
            data: DataMode::Full,
            redact: RedactConfig::default(),
        }
    }
}

/// Logging, to standard error (standard output may be a sink).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter such as `info` or `kubecast=debug,info`. Default: `info`.
    /// `RUST_LOG`, when set, wins.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// `text` or `json`. Default: `text`.
    #[serde(default)]
    pub format: LogFormat,
}

fn default_log_level() -> String {
    "info".to_string()
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: default_log_level(),
            format: LogFormat::Text,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}
