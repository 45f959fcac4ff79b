//! Counters of the running bridge: events emitted per type, and per sink what was delivered
//! and what was dead-lettered. Logged at shutdown; the metrics endpoint will read them too.

use std::collections::{BTreeMap, VecDeque};

use crate::event::{ChangeKind, Event};
use crate::sinks::Report;

/// What one sink reported, and what it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub delivered: u64,
    pub dead_lettered: u64,
    /// Replaced in the queue by the same pod's newer `modified` event (`when_full: coalesce`).
    pub coalesced: u64,
    /// Dropped because the queue was full (`when_full: drop`).
    pub dropped: u64,
    /// Handed to the sink and not yet settled: (seq, data bytes), oldest first.
    outstanding: VecDeque<(u64, usize)>,
    outstanding_bytes: usize,
    /// The most events and data bytes the sink held at once.
    pub peak_events: usize,
    pub peak_bytes: usize,
}

impl SinkStats {
    fn settle(&mut self, seq: u64) {
        // A sink settles in order, so everything up to `seq` is settled.
        while self.outstanding.front().is_some_and(|(s, _)| *s <= seq) {
            if let Some((_, bytes)) = self.outstanding.pop_front() {
                self.outstanding_bytes -= bytes;
            }
        }
    }
}

/// Counters since the start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub added: u64,
    pub modified: u64,
    pub deleted: u64,
    pub inferred_deletes: u64,
    pub sinks: BTreeMap<String, SinkStats>,
}

impl Stats {
    pub fn new<'a>(sinks: impl IntoIterator<Item = &'a str>) -> Stats {
        Stats {
            sinks: sinks
                .into_iter()
                .map(|s| (s.to_string(), SinkStats::default()))
                .collect(),
            ..Stats::default()
        }
    }

    pub fn emitted(&mut self, e: &Event) {
        match e.kind {
            ChangeKind::Added => self.added += 1,
            ChangeKind::Modified => self.modified += 1,
            ChangeKind::Deleted => {
                self.deleted += 1;
                self.inferred_deletes += u64::from(e.inferred);
            }
        }
    }

    pub fn coalesced(&mut self, sink: &str) {
        self.sinks.entry(sink.to_string()).or_default().coalesced += 1;
    }

    pub fn dropped(&mut self, sink: &str) {
        self.sinks.entry(sink.to_string()).or_default().dropped += 1;
    }

    /// `e` went into `sink`'s queue.
    pub fn handed(&mut self, sink: &str, e: &Event) {
        let s = self.sinks.entry(sink.to_string()).or_default();
        s.outstanding.push_back((e.seq, e.data.len()));
        s.outstanding_bytes += e.data.len();
        s.peak_events = s.peak_events.max(s.outstanding.len());
        s.peak_bytes = s.peak_bytes.max(s.outstanding_bytes);
    }

    pub fn report(&mut self, r: &Report) {
        let (sink, seq) = r.settles();
        let s = self.sinks.entry(sink.to_string()).or_default();
        match r {
            Report::Delivered { .. } => s.delivered += 1,
            Report::DeadLettered { .. } => s.dead_lettered += 1,
        }
        s.settle(seq);
    }

    pub fn log_summary(&self, known_pods: usize) {
        tracing::info!(
            added = self.added,
            modified = self.modified,
            deleted = self.deleted,
            inferred_deletes = self.inferred_deletes,
            known_pods,
            "kubecast stopped"
        );
        for (name, s) in &self.sinks {
            tracing::info!(
                sink = %name,
                delivered = s.delivered,
                dead_lettered = s.dead_lettered,
                coalesced = s.coalesced,
                dropped = s.dropped,
                peak_events = s.peak_events,
                peak_bytes = s.peak_bytes,
                "sink totals"
            );
        }
    }
}
