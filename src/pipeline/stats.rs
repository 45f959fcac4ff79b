//! Counters of the running bridge: events emitted per type, and per sink what was delivered
//! and what was dead-lettered. Logged at shutdown; the metrics endpoint will read them too.

use std::collections::BTreeMap;

use crate::event::{ChangeKind, Event};
use crate::sinks::{Report, SinkHandle};

/// What one sink reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub delivered: u64,
    pub dead_lettered: u64,
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
    pub fn new(sinks: &[SinkHandle]) -> Stats {
        Stats {
            sinks: sinks
                .iter()
                .map(|s| (s.name.to_string(), SinkStats::default()))
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

    pub fn report(&mut self, r: &Report) {
        match r {
            Report::Delivered { sink, .. } => {
                self.sinks.entry(sink.to_string()).or_default().delivered += 1
            }
            Report::DeadLettered { sink, .. } => {
                self.sinks
                    .entry(sink.to_string())
                    .or_default()
                    .dead_lettered += 1
            }
        }
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
            tracing::info!(sink = %name, delivered = s.delivered, dead_lettered = s.dead_lettered, "sink totals");
        }
    }
}
