//! The Kafka sink: CloudEvents Kafka protocol binding over an idempotent librdkafka
//! producer with `acks=all`. Entry point: [`KafkaConfig`], whose validated form
//! [`KafkaSettings`] is the running sink.

mod config;
mod inflight;
mod producer;
pub mod checkpoint;
mod exactly_once;
mod sink;
mod state_reader;
mod steps;
mod take_over;
pub mod txn;
mod txn_config;

pub use config::{Compression, KafkaConfig, KafkaSettings, Mode, SaslConfig};
pub use exactly_once::ExactlyOnceError;
pub use sink::{KafkaSinkError, headers_of};
pub use txn_config::{TransactionsConfig, TxnSettings};
