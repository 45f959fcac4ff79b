//! Operating kubecast: Prometheus metrics, liveness and readiness, and the HTTP endpoint that
//! serves them (`metrics.address`, `--metrics-address`).
//!
//! Entry point: [`Ops`], one shared handle (`Arc<Ops>`) through which the pipeline, the
//! watches, the sinks and the durable log record what they do; [`serve`] exposes it.

mod health;
mod labels;
mod metrics;
mod server;
mod sink_metrics;

pub use health::Health;
pub use labels::Outcome;
pub use metrics::{Metrics, SinkMetrics};
pub use server::{BindError, serve};
pub use sink_metrics::AlertmanagerMetrics;

/// Metrics and readiness, shared. With `sharding`, each shard a replica holds runs with its
/// own handle ([`Ops::part`]): the same metrics (counters add up; gauges of the known state
/// and the queues are summed over the shards) and a readiness of its own, which the
/// replica's readiness is made of.
#[derive(Debug, Default)]
pub struct Ops {
    pub metrics: std::sync::Arc<Metrics>,
    pub health: std::sync::Arc<Health>,
    /// Which part of the replica this handle records for: the shard, or 0 without shards.
    pub part: u32,
}

impl Ops {
    /// Unsharded: one part, with readiness for these sinks.
    pub fn new(sinks: impl IntoIterator<Item = String>) -> Ops {
        Ops {
            metrics: Default::default(),
            health: std::sync::Arc::new(Health::new(std::iter::empty(), sinks)),
            part: 0,
        }
    }

    /// The handle of shard `part`, whose readiness the replica's includes until
    /// [`Ops::release`].
    pub fn part(&self, part: u32, sinks: impl IntoIterator<Item = String>) -> Ops {
        let health = std::sync::Arc::new(Health::new(std::iter::empty(), sinks));
        self.health.hold(part, health.clone());
        Ops {
            metrics: self.metrics.clone(),
            health,
            part,
        }
    }

    /// Shard `part` is no longer this replica's: its readiness and its gauges' share go.
    pub fn release(&self, part: u32) {
        self.health.release(part);
        self.metrics.forget_part(part);
    }

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
