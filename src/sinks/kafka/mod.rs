//! The Kafka sink: CloudEvents Kafka protocol binding over an idempotent librdkafka
//! producer with `acks=all`. Entry point: [`KafkaConfig`], whose validated form
//! [`KafkaSettings`] is the running sink; `acls` says what ACLs a config needs (`kubecast
//! kafka-acls`).
//!
//! The files depend on each other one way, from the sink down: `sink` (at least once) and
//! `exactly_once` (its one loop, committing the pipeline's steps) over `commit` (one
//! transaction) over `take_over` (fence, read the committed state; `fence` for other
//! shard counts' ids, `state_reader`, `checkpoint`) over `txn` (the transactional producer)
//! over `hold` (refusals and long waits, for readiness), `topics` (each topic looked up, or
//! created, before its first record), `record` (an event as a record), `producer` and `context` (librdkafka's errors
//! and log), all over `refusal` (what Kafka refused, named as an ACL).

pub mod acls;
mod commit;
mod config;
mod context;
mod inflight;
mod producer;
mod record;
pub mod refusal;
pub mod topics;
pub mod checkpoint;
mod exactly_once;
mod fence;
mod hold;
mod sink;
mod state_reader;
mod take_over;
pub mod txn;
mod txn_config;

pub use config::{Compression, KafkaConfig, KafkaSettings, Mode, SaslConfig};
pub use topics::CreateTopicsConfig;
pub use context::KafkaSinkError;
pub use record::headers_of;
pub use take_over::ExactlyOnceError;
pub use txn_config::{TransactionsConfig, TxnSettings};
