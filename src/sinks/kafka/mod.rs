//! The Kafka sink: CloudEvents Kafka protocol binding over an idempotent librdkafka
//! producer with `acks=all`. Entry point: [`run`].

mod config;
mod sink;

pub use config::{Compression, KafkaConfig, KafkaSettings, Mode, SaslConfig};
pub use sink::{headers_of, run};
