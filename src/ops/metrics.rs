//! kubecast's Prometheus metrics: the families, their labels, and the text exposition.
//!
//! Entry point: [`Metrics`], shared (`Arc`) by the pipeline, the watches, the sinks' acks and
//! the durable log; every handle is atomic, so recording never waits. What is recorded per
//! event goes through handles resolved once ([`SinkMetrics`], the change types), not through
//! a label lookup per event. The names and labels are the README's metrics table.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::labels::*;
use super::sink_metrics::Held;
pub use super::sink_metrics::SinkMetrics;
use crate::model::ChangeKind;

fn delay_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn fsync_histogram() -> Histogram {
    // 50 µs to ~1.6 s.
    Histogram::new(exponential_buckets(0.00005, 2.0, 16))
}

/// Every metric kubecast exports.
pub struct Metrics {
    registry: Registry,
    observed: Family<TypeLabel, Counter>,
    /// `observed`'s counters for added, modified and deleted.
    by_kind: [Counter; 3],
    inferred_deletes: Counter,
    alerts: Family<AlertLabel, Counter>,
    known_pods: Gauge,
    known_objects: Family<ResourceLabel, Gauge>,
    sink_events: Family<SinkOutcome, Counter>,
    held_events: Family<SinkLabel, Gauge>,
    held_bytes: Family<SinkLabel, Gauge>,
    capacity_events: Family<SinkLabel, Gauge>,
    capacity_bytes: Family<SinkLabel, Gauge>,
    connected: Family<SinkLabel, Gauge>,
    http_responses: Family<CodeLabel, Counter>,
    otlp_rejected: Family<SinkLabel, Counter>,
    alertmanager: super::sink_metrics::AlertmanagerFamilies,
    delay: Family<SinkLabel, Histogram, fn() -> Histogram>,
    watch_requests: Family<ScopeLabel, Counter>,
    lists: Family<ScopeLabel, Counter>,
    gone: Family<ScopeLabel, Counter>,
    restarts: Family<RestartLabel, Counter>,
    buffer_bytes: Gauge,
    disk_free: Gauge,
    disk_size: Gauge,
    fsync: Histogram,
    leader: Gauge,
    terms: Counter,
    shard_filter: Family<ShardFilterLabel, Gauge>,
    shards_owned: Gauge,
    /// Each part's (shard's) known objects per resource: the gauges show their sums.
    known_parts: Mutex<HashMap<(u32, String), i64>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("kubecast"),
            observed: Family::default(),
            by_kind: Default::default(),
            inferred_deletes: Counter::default(),
            alerts: Family::default(),
            known_pods: Gauge::default(),
            known_objects: Family::default(),
            sink_events: Family::default(),
            held_events: Family::default(),
            held_bytes: Family::default(),
            capacity_events: Family::default(),
            capacity_bytes: Family::default(),
            connected: Family::default(),
            http_responses: Family::default(),
            otlp_rejected: Family::default(),
            alertmanager: Default::default(),
            delay: Family::new_with_constructor(delay_histogram),
            watch_requests: Family::default(),
            lists: Family::default(),
            gone: Family::default(),
            restarts: Family::default(),
            buffer_bytes: Gauge::default(),
            disk_free: Gauge::default(),
            disk_size: Gauge::default(),
            fsync: fsync_histogram(),
            leader: Gauge::default(),
            terms: Counter::default(),
            shard_filter: Family::default(),
            shards_owned: Gauge::default(),
            known_parts: Mutex::default(),
        };
        m.by_kind = [Kind::added, Kind::modified, Kind::deleted]
            .map(|k| m.observed.get_or_create(&TypeLabel { r#type: k }).clone());
        let r = &mut m.registry;
        let build: Family<VersionLabel, Gauge> = Family::default();
        build
            .get_or_create(&VersionLabel {
                version: crate::VERSION.to_string(),
            })
            .set(1);
        r.register(
            "build_info",
            "The running kubecast's version (always 1)",
            build,
        );
        r.register(
            "events_observed",
            "Changes of pods turned into events, by type",
            m.observed.clone(),
        );
        r.register(
            "inferred_deletes",
            "Deletes inferred from a re-list (the pod vanished while the watch was away)",
            m.inferred_deletes.clone(),
        );
        r.register(
            "alerts",
            "Alert events emitted, by state (firing, resolved)",
            m.alerts.clone(),
        );
        r.register(
            "known_pods",
            "Pods in the known state (uid -> resourceVersion); kubecast_known_objects{resource=\"pods\"} under its older name",
            m.known_pods.clone(),
        );
        r.register(
            "known_objects",
            "Objects in the known state (uid -> resourceVersion), by resource",
            m.known_objects.clone(),
        );
        r.register(
            "sink_events",
            "Events per sink and outcome: delivered, dead_lettered, dropped, coalesced, retried",
            m.sink_events.clone(),
        );
        r.register(
            "sink_held_events",
            "Events handed to the sink (queued or in flight) and not yet acknowledged",
            m.held_events.clone(),
        );
        r.register(
            "sink_held_bytes",
            "Data bytes of the events the sink holds",
            m.held_bytes.clone(),
        );
        r.register(
            "sink_queue_capacity_events",
            "The bound of the sink's queue in events (queue.events)",
            m.capacity_events.clone(),
        );
        r.register(
            "sink_queue_capacity_bytes",
            "The bound of the sink's queue in data bytes (queue.bytes)",
            m.capacity_bytes.clone(),
        );
        r.register(
            "sink_connected",
            "1 while the sink is connected to its destination",
            m.connected.clone(),
        );
        r.register(
            "http_responses",
            "Answers of an HTTP sink's receiver, by status code",
            m.http_responses.clone(),
        );
        r.register(
            "otlp_rejected_records",
            "Log records an OTLP receiver accepted the request of but rejected (partial success)",
            m.otlp_rejected.clone(),
        );
        m.alertmanager.register(r);
        r.register(
            "delivery_delay_seconds",
            "From kubecast observing a change (the event's time) to the sink's acknowledgement",
            m.delay.clone(),
        );
        r.register(
            "watch_requests",
            "Watch requests opened (each restart of the watch counts)",
            m.watch_requests.clone(),
        );
        r.register(
            "watch_lists",
            "Lists of pods (initial and re-lists)",
            m.lists.clone(),
        );
        r.register(
            "watch_gone",
            "410 Gone answers: the resume point was too old, a re-list followed",
            m.gone.clone(),
        );
        r.register(
            "watch_restarts",
            "Lists and watches started again after a failure, by why: connection (failed, or dropped as dead by TCP keepalive), silent (neither an event nor a bookmark for kubernetes.keepalive.watch_silence_seconds), error (the apiserver answered one), unreadable, ended_early",
            m.restarts.clone(),
        );
        r.register(
            "leader",
            "1 while this replica publishes: always without leader_election, with it while it leads (0 standing by)",
            m.leader.clone(),
        );
        r.register(
            "leader_terms",
            "With leader_election: terms this replica started leading",
            m.terms.clone(),
        );
        r.register(
            "watch_shard_filter",
            "With sharding: 1 for each resource and where its objects are filtered by shard (server: the apiserver; client: kubecast, the apiserver sent every object)",
            m.shard_filter.clone(),
        );
        r.register(
            "shards_owned",
            "With sharding: the shards this replica holds",
            m.shards_owned.clone(),
        );
        r.register(
            "buffer_bytes",
            "Bytes of the durable buffer's log on disk",
            m.buffer_bytes.clone(),
        );
        r.register(
            "buffer_disk_free_bytes",
            "Free bytes (for an unprivileged user) of the filesystem holding the state directory",
            m.disk_free.clone(),
        );
        r.register(
            "buffer_disk_size_bytes",
            "Size of the filesystem holding the state directory",
            m.disk_size.clone(),
        );
        r.register(
            "buffer_fsync_seconds",
            "Time of each fsync of the durable buffer",
            m.fsync.clone(),
        );
        m
    }

    /// The metrics in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }

    pub fn observed(&self, kind: ChangeKind, inferred: bool) {
        let i = match kind {
            ChangeKind::Added => 0,
            ChangeKind::Modified => 1,
            ChangeKind::Deleted => 2,
            // Alerts are not changes of pods; they are counted by the alerts' own metric.
            ChangeKind::AlertFiring | ChangeKind::AlertResolved => return,
        };
        self.by_kind[i].inc();
        if inferred {
            self.inferred_deletes.inc();
        }
    }

    /// An alert fired or resolved.
    pub fn alert(&self, kind: ChangeKind) {
        let state = match kind {
            ChangeKind::AlertResolved => AlertState::resolved,
            _ => AlertState::firing,
        };
        self.alerts.get_or_create(&AlertLabel { state }).inc();
    }

    /// The known state's size per resource key (every watched resource, 0 when empty) of
    /// `part` (the shard, 0 without shards); the gauges show the sum over the parts.
    pub fn known_objects(&self, part: u32, resources: &[&str], counts: &HashMap<Arc<str>, usize>) {
        let mut parts = self.known_parts.lock().unwrap_or_else(|p| p.into_inner());
        for r in resources {
            let n = counts.get(*r).copied().unwrap_or(0) as i64;
            parts.insert((part, r.to_string()), n);
            self.show_known(&parts, r);
        }
    }

    /// Shard `part` is gone from this replica: its known objects no longer count.
    pub fn forget_part(&self, part: u32) {
        let mut parts = self.known_parts.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<String> = parts
            .keys()
            .filter(|(p, _)| *p == part)
            .map(|(_, r)| r.clone())
            .collect();
        for r in gone {
            parts.remove(&(part, r.clone()));
            self.show_known(&parts, &r);
        }
    }

    fn show_known(&self, parts: &HashMap<(u32, String), i64>, resource: &str) {
        let n: i64 = parts
            .iter()
            .filter(|((_, r), _)| r == resource)
            .map(|(_, n)| n)
            .sum();
        self.known_objects
            .get_or_create(&ResourceLabel {
                resource: resource.to_string(),
            })
            .set(n);
        if resource == crate::model::legacy::PODS {
            self.known_pods.set(n);
        }
    }

    /// The per-event handles of `sink`.
    pub fn sink(&self, sink: &str) -> SinkMetrics {
        let outcome = |outcome| {
            self.sink_events
                .get_or_create(&SinkOutcome {
                    sink: sink.to_string(),
                    outcome,
                })
                .clone()
        };
        let label = SinkLabel {
            sink: sink.to_string(),
        };
        SinkMetrics::new(
            [
                outcome(Outcome::delivered),
                outcome(Outcome::dead_lettered),
                outcome(Outcome::dropped),
                outcome(Outcome::coalesced),
            ],
            Held::new(
                self.held_events.get_or_create(&label).clone(),
                self.held_bytes.get_or_create(&label).clone(),
            ),
            self.delay.get_or_create(&label).clone(),
        )
    }

    /// `n` events of `sink` sent again.
    pub fn retried(&self, sink: &str, n: u64) {
        self.sink_events
            .get_or_create(&SinkOutcome {
                sink: sink.to_string(),
                outcome: Outcome::retried,
            })
            .inc_by(n);
    }

    /// Whether this replica leads (`kubecast_leader`), as last set.
    pub fn is_leader(&self) -> bool {
        self.leader.get() == 1
    }

    /// This replica leads (`true`) or stands by.
    pub fn leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if leading {
            self.terms.inc();
        }
    }

    /// The metrics of Alertmanager `instance` of sink `sink`.
    pub fn alertmanager(
        &self,
        sink: &str,
        instance: &str,
    ) -> super::sink_metrics::AlertmanagerMetrics {
        self.alertmanager.of(sink, instance)
    }

    /// `sink`'s receiver answered with `code`.
    /// The counter of `sink`'s receiver answering `code`: a handle the sink keeps, so that
    /// counting an answer allocates nothing.
    pub fn http_responses(&self, sink: &str, code: u16) -> Counter {
        self.http_responses
            .get_or_create(&CodeLabel {
                sink: sink.to_string(),
                code,
            })
            .clone()
    }

    /// `n` records of `sink`'s requests rejected by its OTLP receiver (a partial success).
    pub fn otlp_rejected(&self, sink: &str, n: u64) {
        self.otlp_rejected
            .get_or_create(&SinkLabel {
                sink: sink.to_string(),
            })
            .inc_by(n);
    }

    pub fn connected(&self, sink: &str, up: bool) {
        self.connected
            .get_or_create(&SinkLabel {
                sink: sink.to_string(),
            })
            .set(i64::from(up));
    }

    pub fn watch_request(&self, scope: &str) {
        self.watch_requests.get_or_create(&scope_label(scope)).inc();
    }

    pub fn list(&self, scope: &str) {
        self.lists.get_or_create(&scope_label(scope)).inc();
    }

    pub fn gone(&self, scope: &str) {
        self.gone.get_or_create(&scope_label(scope)).inc();
    }

    /// A list or watch of `scope` started again after a failure, for `reason`.
    pub fn watch_restart(&self, scope: &str, reason: &str) {
        let label = RestartLabel {
            resource: scope_label(scope).resource,
            reason: reason.to_string(),
        };
        self.restarts.get_or_create(&label).inc();
    }

    /// The bounds of `sink`'s queue.
    pub fn queue_bounds(&self, sink: &str, events: usize, bytes: usize) {
        let label = SinkLabel {
            sink: sink.to_string(),
        };
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.capacity_events
            .get_or_create(&label)
            .set(gauge(events));
        self.capacity_bytes.get_or_create(&label).set(gauge(bytes));
    }

    /// The state directory's filesystem: free bytes and size.
    pub fn buffer_disk(&self, free: u64, size: u64) {
        self.disk_free.set(i64::try_from(free).unwrap_or(i64::MAX));
        self.disk_size.set(i64::try_from(size).unwrap_or(i64::MAX));
    }

    pub fn buffer_bytes(&self, bytes: u64) {
        self.buffer_bytes.set(bytes as i64);
    }

    pub fn fsync(&self, seconds: f64) {
        self.fsync.observe(seconds);
    }

    /// A sharded watch of `resource` found who filters its objects by shard: the apiserver
    /// (`server`) or kubecast. Whether this is the first time for the resource and place.
    pub fn shard_filter(&self, resource: &str, server: bool) -> bool {
        let label = ShardFilterLabel {
            resource: resource.to_string(),
            r#where: if server {
                FilterPlace::server
            } else {
                FilterPlace::client
            },
        };
        self.shard_filter.get_or_create(&label).set(1) == 0
    }

    /// How many shards this replica holds.
    pub fn shards_owned(&self, n: usize) {
        self.shards_owned.set(n as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_sinks_answers_are_counted_by_status_code() {
        let m = Metrics::new();
        m.http_responses("knative", 202).inc();
        m.http_responses("knative", 202).inc();
        m.http_responses("knative", 503).inc();
        let text = m.encode();
        assert!(
            text.contains("kubecast_http_responses_total{sink=\"knative\",code=\"202\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("kubecast_http_responses_total{sink=\"knative\",code=\"503\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn gauges_of_several_shards_show_their_sum_and_a_shard_that_goes_takes_its_share() {
        let m = Metrics::new();
        let counts = |n| HashMap::from([(Arc::<str>::from("pods"), n)]);
        m.known_objects(0, &["pods"], &counts(3));
        m.known_objects(1, &["pods"], &counts(4));
        let (a, b) = (m.sink("kafka"), m.sink("kafka"));
        a.held(2, 200);
        b.held(5, 500);
        let text = m.encode();
        assert!(
            text.contains("kubecast_known_objects{resource=\"pods\"} 7"),
            "{text}"
        );
        assert!(text.contains("kubecast_known_pods 7"), "{text}");
        assert!(
            text.contains("kubecast_sink_held_events{sink=\"kafka\"} 7"),
            "{text}"
        );
        m.forget_part(0);
        drop(a);
        b.held(1, 100);
        let text = m.encode();
        assert!(
            text.contains("kubecast_known_objects{resource=\"pods\"} 4"),
            "{text}"
        );
        assert!(
            text.contains("kubecast_sink_held_events{sink=\"kafka\"} 1"),
            "{text}"
        );
        assert!(m.shard_filter("pods", true), "the first time");
        assert!(!m.shard_filter("pods", true), "not again");
        m.shards_owned(3);
        let text = m.encode();
        assert!(
            text.contains("kubecast_watch_shard_filter{resource=\"pods\",where=\"server\"} 1"),
            "{text}"
        );
        assert!(text.contains("kubecast_shards_owned 3"), "{text}");
    }

    #[test]
    fn the_text_format_names_every_family_with_its_labels() {
        let m = Metrics::new();
        m.observed(ChangeKind::Deleted, true);
        let kafka = m.sink("kafka");
        kafka.event(Outcome::delivered);
        kafka.delay(0.004);
        m.queue_bounds("kafka", 1024, 64 << 20);
        m.buffer_disk(5_000, 10_000);
        m.watch_restart("deployments.apps/*", "silent");
        let text = m.encode();
        for needle in [
            "kubecast_sink_queue_capacity_events{sink=\"kafka\"} 1024",
            "kubecast_sink_queue_capacity_bytes{sink=\"kafka\"} 67108864",
            "kubecast_buffer_disk_free_bytes 5000",
            "kubecast_buffer_disk_size_bytes 10000",
            "kubecast_build_info{version=",
            "kubecast_events_observed_total{type=\"deleted\"} 1",
            "kubecast_inferred_deletes_total 1",
            "kubecast_watch_restarts_total{resource=\"deployments.apps\",reason=\"silent\"} 1",
            "kubecast_sink_events_total{sink=\"kafka\",outcome=\"delivered\"} 1",
            "kubecast_delivery_delay_seconds_bucket{sink=\"kafka\",le=\"0.008\"} 1",
        ] {
            assert!(text.contains(needle), "{needle} missing in:\n{text}");
        }
    }
}
