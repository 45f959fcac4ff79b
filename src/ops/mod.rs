//! Operating kubecast: Prometheus metrics, liveness and readiness, and the HTTP endpoint that
//! serves them (`metrics.address`, `--metrics-address`).
//!
//! Entry point: [`Ops`], one shared handle (`Arc<Ops>`) through which the pipeline, the
//! watches, the sinks and the durable log record what they do; [`serve`] exposes it.

mod health;
mod labels;
mod metrics;
mod server;

pub use health::Health;
pub use labels::Outcome;
pub use metrics::{Metrics, SinkMetrics};
pub use server::{BindError, serve};

/// Metrics and readiness, shared.
#[derive(Debug, Default)]
pub struct Ops {
    pub metrics: Metrics,
    pub health: Health,
}

impl Ops {
    /// `sink` connected to (or lost) its destination.
    pub fn sink_connected(&self, sink: &str, up: bool) {
        self.metrics.connected(sink, up);
        self.health.sink_connected(sink, up);
    }

    /// `sink` lost its destination for the reason `why`, which readiness names.
    pub fn sink_down(&self, sink: &str, why: String) {
        self.metrics.connected(sink, false);
        self.health.sink_down(sink, why);
    }
}
