//! One sink's per-event metrics ([`SinkMetrics`]), resolved once by
//! [`super::Metrics::sink`], and its share of the held gauges ([`Held`]): with shards, each
//! shard's queue of a sink adds its own and takes it back when it goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use prometheus_client::registry::Registry;

use super::labels::{InstanceLabel, Outcome};

/// One sink's per-event metrics, resolved once (each handle shares its value with the
/// registry's family).
#[derive(Debug, Clone)]
pub struct SinkMetrics {
    delivered: Counter,
    dead_lettered: Counter,
    dropped: Counter,
    coalesced: Counter,
    held: Arc<Held>,
    delay: Histogram,
}

/// One queue's share of the sink's held gauges: with shards, each shard's queue of the sink
/// adds its own, and takes it back when it goes.
#[derive(Debug)]
pub(super) struct Held {
    events: Gauge,
    bytes: Gauge,
    /// This queue's share as last set (one bridge sets it, so a swap is its delta).
    mine_events: AtomicI64,
    mine_bytes: AtomicI64,
}

impl Held {
    pub(super) fn new(events: Gauge, bytes: Gauge) -> Arc<Held> {
        Arc::new(Held {
            events,
            bytes,
            mine_events: AtomicI64::new(0),
            mine_bytes: AtomicI64::new(0),
        })
    }

    fn set(&self, events: i64, bytes: i64) {
        self.events
            .inc_by(events - self.mine_events.swap(events, Ordering::Relaxed));
        self.bytes
            .inc_by(bytes - self.mine_bytes.swap(bytes, Ordering::Relaxed));
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.set(0, 0);
    }
}

impl SinkMetrics {
    /// The handles: the delivered, dead-lettered, dropped and coalesced counters, the share
    /// of the held gauges and the delay histogram.
    pub(super) fn new(outcomes: [Counter; 4], held: Arc<Held>, delay: Histogram) -> SinkMetrics {
        let [delivered, dead_lettered, dropped, coalesced] = outcomes;
        SinkMetrics {
            delivered,
            dead_lettered,
            dropped,
            coalesced,
            held,
            delay,
        }
    }

    pub fn event(&self, outcome: Outcome) {
        match outcome {
            Outcome::delivered => &self.delivered,
            Outcome::dead_lettered => &self.dead_lettered,
            Outcome::dropped => &self.dropped,
            Outcome::coalesced => &self.coalesced,
            // Counted by `Metrics::retried`, off the per-event path.
            Outcome::retried => return,
        }
        .inc();
    }

    pub fn held(&self, events: usize, bytes: usize) {
        self.held.set(events as i64, bytes as i64);
    }

    pub fn delay(&self, seconds: f64) {
        self.delay.observe(seconds);
    }
}

/// One Alertmanager instance's metrics: requests answered 2xx, requests failed (no 2xx, 400
/// or 422), alerts refused, and the active alerts kubecast keeps there.
#[derive(Clone, Debug, Default)]
pub struct AlertmanagerMetrics {
    pub sent: Counter,
    pub failed: Counter,
    pub invalid: Counter,
    pub active: Gauge,
}

/// The Alertmanager sinks' families, by sink and instance.
#[derive(Debug, Default)]
pub(super) struct AlertmanagerFamilies {
    sent: Family<InstanceLabel, Counter>,
    failed: Family<InstanceLabel, Counter>,
    invalid: Family<InstanceLabel, Counter>,
    active: Family<InstanceLabel, Gauge>,
}

impl AlertmanagerFamilies {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "alertmanager_requests_sent",
            "Requests an Alertmanager instance accepted (2xx), per instance",
            self.sent.clone(),
        );
        r.register(
            "alertmanager_requests_failed",
            "Requests to an Alertmanager instance without a 2xx, 400 or 422 answer (sent again with the next resend)",
            self.failed.clone(),
        );
        r.register(
            "alertmanager_alerts_invalid",
            "Alerts an Alertmanager instance refused (400 or 422); never sent to it again",
            self.invalid.clone(),
        );
        r.register(
            "alertmanager_alerts_active",
            "Active alerts kubecast keeps at an Alertmanager instance",
            self.active.clone(),
        );
    }

    /// The handles of `instance` of sink `sink`.
    pub(super) fn of(&self, sink: &str, instance: &str) -> AlertmanagerMetrics {
        let l = InstanceLabel {
            sink: sink.to_string(),
            instance: instance.to_string(),
        };
        AlertmanagerMetrics {
            sent: self.sent.get_or_create(&l).clone(),
            failed: self.failed.get_or_create(&l).clone(),
            invalid: self.invalid.get_or_create(&l).clone(),
            active: self.active.get_or_create(&l).clone(),
        }
    }
}
