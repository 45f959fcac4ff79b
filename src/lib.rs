//! kubecast watches Kubernetes Pods and publishes every change as a CloudEvent to Kafka
//! topics and MQTT brokers.
//!
//! Each event's id is a pure function of the pod's uid, its resourceVersion and the kind of
//! change, so a change delivered twice (after a restart, a re-list or a failover) carries the
//! same id both times. A bounded, durable local queue per sink absorbs outages; an event
//! counts as delivered only on the sink's own acknowledgement.
//!
//! The pipeline, from the apiserver to the sinks:
//!
//! ```text
//! watch -> delta classifier -> rules -> CloudEvent encoder -> per-sink queue -> sink --ack--> checkpoint
//! ```
//!
//! The binary's entry point is `src/main.rs`; this library holds the pipeline so that the
//! integration tests in `tests/` can drive it against the real local stack
//! (`scripts/stack`).

/// The version of this build, as printed by `kubecast --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod backoff;
pub mod classify;
pub mod cluster;
pub mod config;
pub mod event;
pub mod pipeline;
pub mod sinks;
pub mod store;
pub mod watch;
