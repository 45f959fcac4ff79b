//! The batches held in memory only (`state.log: when_behind`): each committed batch of
//! records waits here until every sink has settled its events, and then only the resume
//! point it moves is logged (its objects' states and watch positions, not the events), or
//! until it must be logged whole: it is older than `state.behind_ms`, more than
//! `state.behind_mib` is held, or a snapshot is about to cover it.
//!
//! Entry point: [`Held`], owned by [`super::Durable`].
//!
//! What a crash costs: a restart resumes from the last snapshot and the log after it.
//! Batches leave this queue oldest first, each either settled by every sink (its resume
//! point logged) or logged whole, and a snapshot is only written once nothing is held; so the
//! resume point on disk never passes a change that is neither acknowledged nor logged, and
//! the watch, resuming there, is sent again whatever was only in memory, as long as the
//! apiserver still has it. A change it no longer has (its watch history compacted: 410, a
//! re-list) reached only the sinks that acknowledged it before the crash; `log: always` is
//! the mode that hands every sink every change.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use std::sync::Arc;

use crate::event::Event;
use crate::model::ChangeKind;
use crate::route::engine::ObjectState;
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
    /// Without a router an event is what moves its object's known state; with one, the
    /// batch's object states do (and its events move nothing).
    events_move_state: bool,
    /// The resume points of settled batches, to be logged.
    delivered: Vec<Record>,
}

impl Held {
    /// Holds batches for `after` at most, and `max_bytes` of event data.
    pub fn new(after: Duration, max_bytes: usize, events_move_state: bool) -> Held {
        Held {
            batches: VecDeque::new(),
            bytes: 0,
            after,
            max_bytes,
            events_move_state,
            delivered: Vec::new(),
        }
    }

    /// Holds a committed batch whose events end at number `upto`, committed at `now`.
    pub fn push(&mut self, records: Vec<Record>, upto: u64, now: Instant) {
        let bytes = records.iter().map(held_bytes).sum();
        self.bytes += bytes;
        self.batches.push_back(Batch {
            records,
            upto,
            at: now,
            bytes,
        });
    }

    /// Every sink settled everything up to `settled`: the batches it covers leave, their
    /// resume points to be logged ([`Held::take_delivered`]). Sinks settle in order, so
    /// those are always the oldest.
    pub fn settled(&mut self, settled: u64) {
        while let Some(b) = self.batches.front()
            && b.upto <= settled
        {
            self.bytes -= b.bytes;
            if let Some(b) = self.batches.pop_front() {
                let events_move_state = self.events_move_state;
                self.delivered.extend(
                    b.records
                        .into_iter()
                        .filter_map(|r| resume_point(r, events_move_state)),
                );
            }
        }
    }

    /// The resume points of the batches settled since the last call.
    pub fn take_delivered(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.delivered)
    }

    /// The records to write at `now`, oldest first: every batch with `all`, else those held
    /// longer than the bound and the oldest beyond the memory bound.
    pub fn take_due(&mut self, all: bool, now: Instant) -> Vec<Record> {
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

    /// Whether settled batches wait to be logged.
    pub fn has_delivered(&self) -> bool {
        !self.delivered.is_empty()
    }

    /// Whether more than the memory bound is held (the oldest are then written at once).
    pub fn over(&self) -> bool {
        self.bytes > self.max_bytes
    }

    /// When the oldest batch is due to be written, if any is held.
    pub fn next_due(&self) -> Option<Instant> {
        self.batches.front().map(|b| b.at + self.after)
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

/// What a held record counts against `state.behind_mib`: an event's data (the bulk of it),
/// and a router's object state, whose alert episodes and marks a busy router keeps per change.
fn held_bytes(r: &Record) -> usize {
    use std::mem::size_of;
    match r {
        Record::Event { event, .. } => event.data.len(),
        Record::Position { scope, rv, .. } => {
            size_of::<Record>()
                + scope.as_ref().map_or(0, String::len)
                + rv.as_ref().map_or(0, String::len)
        }
        Record::State { state: s, .. } => {
            let strings = [&s.uid, &s.resource, &s.scope, &s.namespace, &s.name, &s.rv];
            size_of::<ObjectState>()
                + strings.iter().map(|t| t.len()).sum::<usize>()
                + s.marks
                    .iter()
                    .map(|m| size_of::<crate::route::engine::Mark>() + m.last.len())
                    .sum::<usize>()
                + s.episodes.iter().map(episode_bytes).sum::<usize>()
        }
    }
}

/// An alert episode's size in memory, near enough: its strings and its evidence.
fn episode_bytes(e: &crate::alert::episode::Episode) -> usize {
    std::mem::size_of::<crate::alert::episode::Episode>()
        + e.rule.len()
        + e.uid.len()
        + e.namespace.len()
        + e.name.len()
        + e.began_rv.len()
        + e.rv.len()
        + e.container.as_ref().map_or(0, String::len)
        + e.message.len()
        // The evidence is a few short fields: counted, not measured (no walk per change).
        + e.facts.len() * 64
}

/// What a delivered record leaves in the log: the object state an event moves (without the
/// event; nothing when a router's states move them instead), object states and positions as
/// they are.
fn resume_point(r: Record, events_move_state: bool) -> Option<Record> {
    match r {
        Record::Event { event, from_watch } => events_move_state.then(|| Record::State {
            seq: event.seq,
            state: Arc::new(state_of(&event)),
            from_watch,
        }),
        other => Some(other),
    }
}

/// The known state an event leaves its object in.
fn state_of(e: &Event) -> ObjectState {
    ObjectState {
        uid: e.object.uid.clone(),
        resource: e.object.resource.to_string(),
        scope: e.scope.to_string(),
        namespace: e.object.namespace.to_string(),
        name: e.object.name.clone(),
        rv: e.rv.clone(),
        gone: e.kind == ChangeKind::Deleted,
        marks: Vec::new(),
        episodes: Vec::new(),
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
    fn a_batch_every_sink_settled_leaves_only_its_resume_point_to_log() {
        let mut held = Held::new(Duration::from_secs(60), 1 << 20, true);
        held.push(batch(1), 1, Instant::now());
        held.push(batch(2), 2, Instant::now());
        held.settled(1);
        assert_eq!(held.bytes, 100);
        held.settled(2);
        assert!(held.is_empty() && held.bytes == 0);
        assert!(
            held.take_due(true, Instant::now()).is_empty(),
            "no event is left to write"
        );
        let delivered = held.take_delivered();
        let states: Vec<(u64, &str, bool)> = delivered
            .iter()
            .map(|r| match r {
                Record::State { seq, state, .. } => (*seq, state.rv.as_str(), state.gone),
                other => panic!("an event's resume point is its object's state: {other:?}"),
            })
            .collect();
        assert_eq!(states, [(1, "1", false), (2, "2", false)]);
        assert!(!held.has_delivered());
    }

    #[test]
    fn with_a_router_a_delivered_batch_keeps_its_object_states_and_drops_its_events() {
        let mut held = Held::new(Duration::from_secs(60), 1 << 20, false);
        let mut records = batch(1);
        records.push(Record::Position {
            seq: 2,
            scope: None,
            rv: Some("9".into()),
        });
        held.push(records, 1, Instant::now());
        held.settled(1);
        let seqs: Vec<u64> = held.take_delivered().iter().map(Record::seq).collect();
        assert_eq!(seqs, [2], "the position stays, the event goes");
    }

    #[test]
    fn a_batch_held_longer_than_the_bound_is_written_and_a_younger_one_waits() {
        let mut held = Held::new(Duration::from_millis(30), 1 << 20, true);
        // Times set by the test, not read from a busy machine's clock.
        let t0 = Instant::now();
        held.push(batch(1), 1, t0);
        held.push(batch(2), 2, t0 + Duration::from_millis(20));
        let due = held.take_due(false, t0 + Duration::from_millis(35));
        assert_eq!(due.iter().map(Record::seq).collect::<Vec<_>>(), [1]);
        assert_eq!(held.batches.len(), 1, "the younger batch waits");
        assert!(held.next_due().is_some());
        let all = held.take_due(true, Instant::now());
        assert_eq!(all.iter().map(Record::seq).collect::<Vec<_>>(), [2]);
        assert_eq!(held.next_due(), None);
    }

    #[test]
    fn beyond_the_memory_bound_the_oldest_are_written_at_once() {
        let mut held = Held::new(Duration::from_secs(60), 250, true);
        for seq in 1..=3 {
            held.push(batch(seq), seq, Instant::now());
        }
        assert!(held.over());
        let due = held.take_due(false, Instant::now());
        assert_eq!(due.iter().map(Record::seq).collect::<Vec<_>>(), [1]);
        assert!(!held.over(), "200 bytes are held, within the bound");
    }

    #[test]
    fn a_batch_without_events_is_settled_with_everything_before_it() {
        let mut held = Held::new(Duration::from_secs(60), 1 << 20, true);
        held.push(batch(1), 1, Instant::now());
        // A bookmark's position: no event of its own, it waits for event 1.
        held.push(
            vec![Record::Position {
                seq: 2,
                scope: None,
                rv: Some("9".into()),
            }],
            1,
            Instant::now(),
        );
        held.settled(0);
        assert_eq!(held.batches.len(), 2);
        held.settled(1);
        assert!(held.is_empty());
    }
}
