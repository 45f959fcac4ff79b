//! Counters of the running bridge: events emitted per type, and per sink what was delivered,
//! dead-lettered, coalesced or dropped and what it holds. Logged at shutdown, and recorded
//! as they change into the metrics ([`crate::ops`]), with each event's delivery delay.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::event::Event;
use crate::model::ChangeKind;
use crate::ops::{Ops, Outcome, SinkMetrics};
use crate::sinks::Report;

/// What one sink reported, and what it holds.
#[derive(Debug, Clone, Default)]
pub struct SinkStats {
    pub delivered: u64,
    pub dead_lettered: u64,
    /// Replaced in the queue by the same pod's newer `modified` event (`when_full: coalesce`).
    pub coalesced: u64,
    /// Dropped because the queue was full (`when_full: drop`).
    pub dropped: u64,
    /// Pending from before a restart but of a kind this sink does not take (a change logged
    /// for the Alertmanager sink, which takes only alerts): settled without sending.
    pub passed_by: u64,
    /// Handed to the sink and not yet settled: (seq, data bytes, when the change was
    /// observed), oldest first.
    outstanding: VecDeque<(u64, usize, jiff::Timestamp)>,
    outstanding_bytes: usize,
    /// The most events and data bytes the sink held at once.
    pub peak_events: usize,
    pub peak_bytes: usize,
    /// The last event skipped (not for this sink's routes, or of a kind it does not take)
    /// while it held others.
    skipped: u64,
    /// Where its counts are recorded.
    metrics: Option<SinkMetrics>,
}

impl SinkStats {
    fn record(&self, outcome: Outcome) {
        if let Some(m) = &self.metrics {
            m.event(outcome);
        }
    }

    fn record_held(&self) {
        if let Some(m) = &self.metrics {
            m.held(self.outstanding.len(), self.outstanding_bytes);
        }
    }

    /// Settles everything up to `seq` (a sink settles in order); returns each settled
    /// event's delay since it was observed, in seconds.
    fn settle(&mut self, seq: u64) -> Vec<f64> {
        let now = jiff::Timestamp::now();
        let mut delays = Vec::new();
        while self.outstanding.front().is_some_and(|(s, _, _)| *s <= seq) {
            if let Some((_, bytes, observed)) = self.outstanding.pop_front() {
                self.outstanding_bytes -= bytes;
                delays.push(now.duration_since(observed).as_secs_f64().max(0.0));
            }
        }
        delays
    }
}

/// Counters since the start.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub added: u64,
    pub modified: u64,
    pub deleted: u64,
    pub inferred_deletes: u64,
    pub alerts_fired: u64,
    pub alerts_resolved: u64,
    pub sinks: BTreeMap<String, SinkStats>,
    /// Where the counts are recorded as metrics.
    ops: Arc<Ops>,
}

impl Stats {
    /// Adds the counts of another bridge's run (a shard's) to these.
    pub fn absorb(&mut self, other: Stats) {
        self.added += other.added;
        self.modified += other.modified;
        self.deleted += other.deleted;
        self.inferred_deletes += other.inferred_deletes;
        self.alerts_fired += other.alerts_fired;
        self.alerts_resolved += other.alerts_resolved;
        for (name, s) in other.sinks {
            let mine = self.sinks.entry(name).or_default();
            mine.delivered += s.delivered;
            mine.dead_lettered += s.dead_lettered;
            mine.coalesced += s.coalesced;
            mine.dropped += s.dropped;
            mine.passed_by += s.passed_by;
            mine.peak_events = mine.peak_events.max(s.peak_events);
            mine.peak_bytes = mine.peak_bytes.max(s.peak_bytes);
        }
    }

    /// Events handed to the sinks and not yet settled, over all sinks.
    pub fn held_events(&self) -> usize {
        self.sinks.values().map(|s| s.outstanding.len()).sum()
    }

    pub fn new<'a>(sinks: impl IntoIterator<Item = &'a str>, ops: Arc<Ops>) -> Stats {
        let mut stats = Stats {
            ops,
            ..Stats::default()
        };
        for s in sinks {
            stats.sink(s);
        }
        stats
    }

    /// The counts of `name` (known from the start: no allocation on the per-event path).
    fn sink(&mut self, name: &str) -> &mut SinkStats {
        if !self.sinks.contains_key(name) {
            let s = SinkStats {
                metrics: Some(self.ops.metrics.sink(name)),
                ..SinkStats::default()
            };
            self.sinks.insert(name.to_string(), s);
        }
        // Inserted just above when missing.
        self.sinks.get_mut(name).expect("the sink's stats exist")
    }

    pub fn emitted(&mut self, e: &Event) {
        self.changed(e.kind, e.inferred);
    }

    /// A change of a pod was observed (with routes, whether or not a route emitted it).
    pub fn changed(&mut self, kind: ChangeKind, inferred: bool) {
        self.ops.metrics.observed(kind, inferred);
        match kind {
            ChangeKind::Added => self.added += 1,
            ChangeKind::Modified => self.modified += 1,
            ChangeKind::Deleted => {
                self.deleted += 1;
                self.inferred_deletes += u64::from(inferred);
            }
            ChangeKind::AlertFiring | ChangeKind::AlertResolved => self.alerted(kind),
        }
    }

    /// An alert fired or resolved.
    pub fn alerted(&mut self, kind: ChangeKind) {
        self.ops.metrics.alert(kind);
        match kind {
            ChangeKind::AlertFiring => self.alerts_fired += 1,
            _ => self.alerts_resolved += 1,
        }
    }

    /// `sink` does not get the event `seq` (its routes or its kind): returns the sequence
    /// number its cursor can move to now, if it holds nothing; otherwise that waits for its
    /// reports.
    pub fn skipped(&mut self, sink: &str, seq: u64) -> Option<u64> {
        let s = self.sink(sink);
        if s.outstanding.is_empty() {
            return Some(seq);
        }
        s.skipped = s.skipped.max(seq);
        None
    }

    /// After a report of `sink` up to `seq`: how far its cursor can move past the events it
    /// skipped meanwhile, once it holds nothing.
    pub fn settled_past(&mut self, sink: &str, seq: u64) -> Option<u64> {
        let s = self.sinks.get_mut(sink)?;
        (s.outstanding.is_empty() && s.skipped > seq).then_some(s.skipped)
    }

    /// An event pending for `sink` from before a restart is of a kind it does not take:
    /// returns how many so far.
    pub fn passed_by(&mut self, sink: &str) -> u64 {
        let s = self.sink(sink);
        s.passed_by += 1;
        s.passed_by
    }

    pub fn coalesced(&mut self, sink: &str) {
        let s = self.sink(sink);
        s.coalesced += 1;
        s.record(Outcome::coalesced);
    }

    pub fn dropped(&mut self, sink: &str) {
        let s = self.sink(sink);
        s.dropped += 1;
        s.record(Outcome::dropped);
    }

    /// `e` went into `sink`'s queue; its delivery delay counts from its `time`.
    pub fn handed(&mut self, sink: &str, e: &Event) {
        let s = self.sink(sink);
        s.outstanding.push_back((e.seq, e.data.len(), e.time));
        s.outstanding_bytes += e.data.len();
        s.peak_events = s.peak_events.max(s.outstanding.len());
        s.peak_bytes = s.peak_bytes.max(s.outstanding_bytes);
        s.record_held();
    }

    pub fn report(&mut self, r: &Report) {
        let (sink, seq) = r.settles();
        let s = self.sink(sink);
        let outcome = match r {
            Report::Delivered { .. } => {
                s.delivered += 1;
                Outcome::delivered
            }
            Report::DeadLettered { .. } => {
                s.dead_lettered += 1;
                Outcome::dead_lettered
            }
        };
        s.record(outcome);
        let delays = s.settle(seq);
        if let Some(m) = &s.metrics {
            for d in delays {
                m.delay(d);
            }
        }
        s.record_held();
    }

    pub fn log_summary(&self, known_objects: usize) {
        tracing::info!(
            added = self.added,
            modified = self.modified,
            deleted = self.deleted,
            inferred_deletes = self.inferred_deletes,
            alerts_fired = self.alerts_fired,
            alerts_resolved = self.alerts_resolved,
            known_objects,
            "kubecast stopped"
        );
        for (name, s) in &self.sinks {
            tracing::info!(
                sink = %name,
                delivered = s.delivered,
                dead_lettered = s.dead_lettered,
                coalesced = s.coalesced,
                dropped = s.dropped,
                passed_by = s.passed_by,
                peak_events = s.peak_events,
                peak_bytes = s.peak_bytes,
                "sink totals"
            );
        }
    }
}
