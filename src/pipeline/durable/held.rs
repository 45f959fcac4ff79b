//! The batches logged in memory only (`state.log: when_behind`): each committed batch of
//! records waits here until every sink has settled its events, and is then dropped without
//! ever being written, or until it must be written: it is older than `state.behind_ms`, more
//! than `state.behind_mib` is held, or a snapshot is about to cover it.
//!
//! Entry point: [`Held`], owned by [`super::Durable`].
//!
//! Why a crash loses nothing: what a restart resumes from is the last snapshot and the
//! unbroken run of log records after it. A batch leaves this queue either settled by every
//! sink or written, in order, and a snapshot is only written once nothing is held; so the
//! resume point on disk never passes a change that is neither acknowledged nor logged, and
//! the watch, resuming there, is sent again whatever was only in memory.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::store::Record;

/// One committed batch, not written.
struct Batch {
    records: Vec<Record>,
    /// The highest event number at the batch's end: once every sink settled it, the batch
    /// (and every one before it) is delivered.
    upto: u64,
    at: Instant,
    bytes: usize,
}

/// The batches held in memory, oldest first.
pub struct Held {
    batches: VecDeque<Batch>,
    bytes: usize,
    after: Duration,
    max_bytes: usize,
}

impl Held {
    /// Holds batches for `after` at most, and `max_bytes` of event data.
    pub fn new(after: Duration, max_bytes: usize) -> Held {
        Held {
            batches: VecDeque::new(),
            bytes: 0,
            after,
            max_bytes,
        }
    }

    /// Holds a committed batch whose events end at number `upto`.
    pub fn push(&mut self, records: Vec<Record>, upto: u64) {
        let bytes = records
            .iter()
            .map(|r| match r {
                Record::Event { event, .. } => event.data.len(),
                _ => 0,
            })
            .sum();
        self.bytes += bytes;
        self.batches.push_back(Batch {
            records,
            upto,
            at: Instant::now(),
            bytes,
        });
    }

    /// Every sink settled everything up to `settled`: the batches it covers are dropped.
    /// Sinks settle in order, so those are always the oldest.
    pub fn settled(&mut self, settled: u64) {
        while let Some(b) = self.batches.front()
            && b.upto <= settled
        {
            self.bytes -= b.bytes;
            self.batches.pop_front();
        }
    }

    /// The records to write now, oldest first: every batch with `all`, else those held
    /// longer than the bound and the oldest beyond the memory bound.
    pub fn take_due(&mut self, all: bool) -> Vec<Record> {
        let now = Instant::now();
        let mut out = Vec::new();
        while let Some(b) = self.batches.front()
            && (all || now >= b.at + self.after || self.bytes > self.max_bytes)
        {
            self.bytes -= b.bytes;
            if let Some(b) = self.batches.pop_front() {
                out.extend(b.records);
            }
        }
        out
    }

    /// Whether more than the memory bound is held (the oldest are then written at once).
    pub fn over(&self) -> bool {
        self.bytes > self.max_bytes
    }

    /// When the oldest batch is due to be written, if any is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.batches.front().map(|b| b.at + self.after)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;
    use crate::store::record_tests_event as event;
    use std::sync::Arc;

    fn batch(seq: u64) -> Vec<Record> {
        let mut e = event(seq, "u", &seq.to_string(), ChangeKind::Modified);
        e.data = bytes::Bytes::from(vec![b'x'; 100]);
        vec![Record::Event {
            event: Arc::new(e),
            from_watch: true,
        }]
    }

    #[test]
    fn a_batch_every_sink_settled_is_dropped_and_never_written() {
        let mut held = Held::new(Duration::from_secs(60), 1 << 20);
        held.push(batch(1), 1);
        held.push(batch(2), 2);
        held.settled(1);
        assert_eq!(held.bytes, 100);
        held.settled(2);
        assert!(held.is_empty() && held.bytes == 0);
        assert!(held.take_due(true).is_empty(), "nothing is left to write");
    }

    #[test]
    fn a_batch_held_longer_than_the_bound_is_written_and_a_younger_one_waits() {
        let mut held = Held::new(Duration::from_millis(30), 1 << 20);
        held.push(batch(1), 1);
        std::thread::sleep(Duration::from_millis(40));
        held.push(batch(2), 2);
        let due = held.take_due(false);
        assert_eq!(due.iter().map(Record::seq).collect::<Vec<_>>(), [1]);
        assert_eq!(held.batches.len(), 1, "the younger batch waits");
        assert!(held.next_due().is_some());
        let all = held.take_due(true);
        assert_eq!(all.iter().map(Record::seq).collect::<Vec<_>>(), [2]);
        assert_eq!(held.next_due(), None);
    }

    #[test]
    fn beyond_the_memory_bound_the_oldest_are_written_at_once() {
        let mut held = Held::new(Duration::from_secs(60), 250);
        for seq in 1..=3 {
            held.push(batch(seq), seq);
        }
        assert!(held.over());
        let due = held.take_due(false);
        assert_eq!(due.iter().map(Record::seq).collect::<Vec<_>>(), [1]);
        assert!(!held.over(), "200 bytes are held, within the bound");
    }

    #[test]
    fn a_batch_without_events_is_settled_with_everything_before_it() {
        let mut held = Held::new(Duration::from_secs(60), 1 << 20);
        held.push(batch(1), 1);
        // A bookmark's position: no event of its own, it waits for event 1.
        held.push(
            vec![Record::Position {
                seq: 2,
                scope: None,
                rv: Some("9".into()),
            }],
            1,
        );
        held.settled(0);
        assert_eq!(held.batches.len(), 2);
        held.settled(1);
        assert!(held.is_empty());
    }
}
