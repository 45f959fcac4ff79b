//! kubecast watches Kubernetes Pods (and any resource kind it is told to) and publishes
//! every change as a CloudEvent to Kafka topics and MQTT brokers.
//!
//! Each event's id is a pure function of the object's uid, its resourceVersion and the kind of
//! change, so a change delivered twice (after a restart, a re-list or a failover) carries the
//! same id both times. A bounded, durable local queue per sink absorbs outages; an event
//! counts as delivered only on the sink's own acknowledgement.
//!
//! The pipeline, from the apiserver to the sinks:
//!
//! ```text
//! watch -> delta classifier -> CloudEvent encoder -> durable log (store) -> per-sink queue -> sink
//!                                                        ^                                  |
//!                                                        +------ cursor <------ ack --------+
//! ```
//!
//! [`pipeline::run`] drives it; [`sinks::contract`] is the seam between the pipeline and a
//! sink.
//!
//! The binary's entry point is `src/main.rs`; this library holds the pipeline so that the
//! integration tests in `tests/` can drive it against the real local stack
//! (`scripts/stack`).

/// The version of this build, as printed by `kubecast --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `e` and its causes, joined with `: ` (a cause whose text its parent already shows is left
/// out), for logs and the final error message.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

pub mod alert;
pub mod backoff;
pub mod classify;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod event;
#[doc(hidden)]
pub mod fuzz;
pub mod ha;
pub mod kinds;
pub mod model;
pub mod net;
pub mod ops;
pub mod pipeline;
pub mod rbac;
pub mod redact;
pub mod replay;
pub mod route;
pub mod sinks;
pub mod store;
pub mod vocab;
pub mod watch;
