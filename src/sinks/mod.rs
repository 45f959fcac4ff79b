//! Sinks: where events go. One folder or file per sink kind; each sink runs as its own task,
//! takes events from its bounded queue and reports an event delivered only on the
//! destination's own acknowledgement.
//!
//! Entry points: [`SinkConfig`] (the config of one sink: its kind and its envelope),
//! [`contract`] (what a sink implements and reports), [`start`] (spawns validated sinks).
//!
//! Adding a sink kind is a new folder here (its config implementing [`SinkSpec`], its task
//! implementing [`Sink`]) and one line in `sink_kinds!` below: that line declares its module,
//! its `type` name in the config, and its place in validation.

mod config;
pub mod contract;
mod dead_letter;
pub mod queue;
mod runner;
pub mod tls;
pub mod url;

pub use config::{
    Common, DeadLetterConfig, Placeholder, Secret, SinkConfig, Template, TlsConfig, TooLarge,
    Topics, Vars,
};
pub use contract::{
    Acks, Keeper, KeeperFeed, Kept, Report, Settled, Sink, SinkError, SinkSpec, Step, Takes,
    ValidSink,
};
pub use dead_letter::DeadLetter;
pub use queue::{CompatShape, NotPushed, Pushed, QueueConfig, WhenFull};
pub use runner::{Ended, SinkExit, Sinks, start};

/// Declares the sink kinds: each entry's module, its variant of [`SinkKind`] (whose
/// lower-case name is the `type` in the config) and its config type, which implements
/// [`SinkSpec`].
macro_rules! sink_kinds {
    ($($(#[doc = $doc:literal])* $module:ident => $variant:ident($config:ty),)+) => {
        $(pub mod $module;)+

        /// The kind of a sink, chosen by its `type` field, with the kind's own settings.
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
        #[serde(tag = "type", rename_all = "lowercase")]
        pub enum SinkKind {
            $($(#[doc = $doc])* $variant($config),)+
        }

        impl SinkKind {
            /// Validates this sink (`name` is its key under `sinks`) with its envelope.
            pub fn validate(&self, name: &str, common: &Common, cluster: &str) -> Result<ValidSink, Vec<crate::vocab::Issue>> {
                match self {
                    $(SinkKind::$variant(spec) => ValidSink::validate(name, spec, common, cluster),)+
                }
            }
        }
    };
}

sink_kinds! {
    /// Apache Kafka through librdkafka.
    kafka => Kafka(kafka::KafkaConfig),
    /// An MQTT 5 or 3.1.1 broker.
    mqtt => Mqtt(mqtt::MqttConfig),
    /// CloudEvents over HTTP: Knative Brokers and Services, webhooks.
    http => Http(http::HttpConfig),
    /// OpenTelemetry (OTLP logs over HTTP or gRPC): the Collector and its backends.
    otlp => Otlp(otlp::OtlpConfig),
    /// Prometheus Alertmanager (API v2): alert episodes as alerts, resent as Prometheus does.
    alertmanager => Alertmanager(alertmanager::AlertmanagerConfig),
    /// JSON lines (structured CloudEvents) on standard output.
    stdout => Stdout(stdout::StdoutConfig),
    /// JSON lines (structured CloudEvents) appended to a file.
    file => File(file::FileConfig),
}
