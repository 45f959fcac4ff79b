//! The events the HTTP sink holds, in sequence order, and which of them may be sent next.
//! Entry point: [`Window`].
//!
//! Requests run side by side, but the events of one object (one `partitionkey`) never
//! overtake each other: an event is sent only when no earlier event of its object is waiting
//! or in flight. A request that failed in a retriable way puts its events back in their
//! places; answers come in any order, and events are settled (reported) in sequence order.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use crate::event::Event;

/// One request: the positions its events take in the window, and the events with their
/// encoded bodies.
pub type Request = (Positions, Vec<(Arc<Event>, Bytes)>);

/// One held event.
#[derive(Debug)]
struct Entry {
    event: Arc<Event>,
    /// Its encoded form: the body, or its part of a batch's body.
    body: Bytes,
    since: Instant,
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Waiting,
    Sending,
    Delivered,
    Refused(String),
}

pub use crate::sinks::Settled;

/// A request's events, by their positions in the window.
pub type Positions = Vec<u64>;

/// The held events in sequence order.
#[derive(Debug, Default)]
pub struct Window {
    entries: VecDeque<Entry>,
    /// Position of `entries[0]`.
    front: u64,
    /// The objects with an event in flight.
    busy: HashSet<String>,
    waiting: usize,
    /// No entry before this position waits: scans start here, so that the events in flight
    /// at the front are not looked at again and again.
    scan_from: u64,
}

impl Window {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Events neither in flight nor settled.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Holds `event`, encoded as `body`.
    pub fn push(&mut self, event: Arc<Event>, body: Bytes) {
        self.entries.push_back(Entry { event, body, since: Instant::now(), state: State::Waiting });
        self.waiting += 1;
    }

    /// Holds `event` as already refused (too large): it settles in its place.
    pub fn push_refused(&mut self, event: Arc<Event>, reason: String) {
        self.entries.push_back(Entry { event, body: Bytes::new(), since: Instant::now(), state: State::Refused(reason) });
    }

    /// When the oldest waiting event was pushed.
    pub fn oldest_waiting(&self) -> Option<Instant> {
        if self.waiting == 0 {
            return None;
        }
        self.entries
            .iter()
            .skip(self.start())
            .find(|e| e.state == State::Waiting)
            .map(|e| e.since)
    }

    /// Index of the first entry that may wait.
    fn start(&self) -> usize {
        usize::try_from(self.scan_from.saturating_sub(self.front)).unwrap_or(usize::MAX)
    }

    /// Moves `scan_from` past the entries at it that do not wait.
    fn advance(&mut self) {
        let mut i = self.start();
        while self.entries.get(i).is_some_and(|e| e.state != State::Waiting) {
            i += 1;
        }
        self.scan_from = self.front + i as u64;
    }

    /// The next request: up to `max_events` waiting events whose objects have nothing
    /// earlier waiting or in flight, and at most `max_bytes` of them (one event is always
    /// taken). `full_only`: only if that fills `max_events` or `max_bytes` (a batch that may
    /// still wait for more). Marks them in flight.
    pub fn next_request(&mut self, max_events: usize, max_bytes: usize, full_only: bool) -> Option<Request> {
        if self.waiting == 0 {
            return None;
        }
        // Objects that cannot go in this request: in flight, or an earlier event of theirs
        // was left out.
        let mut blocked: HashSet<&str> = HashSet::new();
        let mut taken: Vec<usize> = Vec::new();
        let mut bytes = 0usize;
        let mut full = false;
        for (i, e) in self.entries.iter().enumerate().skip(self.start()) {
            if e.state != State::Waiting {
                continue;
            }
            let key = e.event.object.uid.as_str();
            if self.busy.contains(key) || blocked.contains(key) {
                blocked.insert(key);
                continue;
            }
            if !taken.is_empty() && bytes + e.body.len() > max_bytes {
                full = true;
                blocked.insert(key);
                continue;
            }
            taken.push(i);
            bytes += e.body.len();
            if taken.len() == max_events {
                full = true;
                break;
            }
            if max_events == 1 {
                break;
            }
        }
        if taken.is_empty() || (full_only && !full) {
            return None;
        }
        let mut events = Vec::with_capacity(taken.len());
        for &i in &taken {
            let e = &mut self.entries[i];
            e.state = State::Sending;
            self.busy.insert(e.event.object.uid.clone());
            events.push((e.event.clone(), e.body.clone()));
        }
        self.waiting -= taken.len();
        self.advance();
        Some((taken.into_iter().map(|i| self.front + i as u64).collect(), events))
    }

    /// The request of `positions` was answered: delivered, or refused with `reason`.
    pub fn finish(&mut self, positions: &[u64], refused: Option<&str>) {
        for &p in positions {
            if let Some(e) = self.entry(p) {
                e.state = match refused {
                    None => State::Delivered,
                    Some(r) => State::Refused(r.to_string()),
                };
                let uid = e.event.object.uid.clone();
                self.busy.remove(&uid);
            }
        }
    }

    /// The request of `positions` failed in a retriable way: its events wait again, first
    /// in line for their objects.
    pub fn retry(&mut self, positions: &[u64]) {
        for &p in positions {
            if let Some(e) = self.entry(p) {
                e.state = State::Waiting;
                let uid = e.event.object.uid.clone();
                self.busy.remove(&uid);
                self.waiting += 1;
                self.scan_from = self.scan_from.min(p);
            }
        }
    }

    fn entry(&mut self, p: u64) -> Option<&mut Entry> {
        let i = usize::try_from(p.checked_sub(self.front)?).ok()?;
        self.entries.get_mut(i)
    }

    /// Takes the settled events at the front, in order.
    pub fn settle(&mut self) -> Vec<Settled> {
        let mut out = Vec::new();
        while let Some(e) = self.entries.front() {
            match &e.state {
                State::Waiting | State::Sending => break,
                State::Delivered | State::Refused(_) => {}
            }
            let Some(e) = self.entries.pop_front() else { break };
            self.front += 1;
            out.push(match e.state {
                State::Refused(r) => Settled::Refused(e.event, r),
                _ => Settled::Delivered(e.event),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event(seq: u64, uid: &str) -> Arc<Event> {
        Arc::new(crate::store::record_tests_event(seq, uid, "1", crate::model::ChangeKind::Modified))
    }

    fn seqs(events: &[(Arc<Event>, Bytes)]) -> Vec<u64> {
        events.iter().map(|(e, _)| e.seq).collect()
    }

    fn body(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn an_objects_next_event_waits_for_its_previous_ones_answer() {
        let mut w = Window::default();
        for (seq, uid) in [(1, "a"), (2, "a"), (3, "b")] {
            w.push(event(seq, uid), body(10));
        }
        let (p1, e1) = w.next_request(1, 100, false).unwrap();
        let (p2, e2) = w.next_request(1, 100, false).unwrap();
        assert_eq!((seqs(&e1), seqs(&e2)), (vec![1], vec![3]), "b's event overtakes a's second, not a's first");
        assert!(w.next_request(1, 100, false).is_none(), "a's second waits for a's first");
        w.finish(&p2, None);
        assert!(w.settle().is_empty(), "3 is answered but 1 is not: nothing settles out of order");
        w.retry(&p1);
        let (p1, e1) = w.next_request(1, 100, false).unwrap();
        assert_eq!(seqs(&e1), [1], "a retried event goes first again");
        w.finish(&p1, None);
        assert_eq!(w.settle().len(), 1);
        let (p3, e3) = w.next_request(1, 100, false).unwrap();
        assert_eq!(seqs(&e3), [2]);
        w.finish(&p3, Some("HTTP 400"));
        let settled = w.settle();
        assert!(matches!(&settled[..], [Settled::Refused(e, r), Settled::Delivered(_)] if e.seq == 2 && r == "HTTP 400"));
        assert!(w.is_empty());
    }

    #[test]
    fn a_batch_takes_an_objects_events_in_order_within_its_limits() {
        let mut w = Window::default();
        for (seq, uid) in [(1, "a"), (2, "a"), (3, "b"), (4, "c")] {
            w.push(event(seq, uid), body(10));
        }
        assert!(w.next_request(5, 1000, true).is_none(), "four events do not fill a batch of five");
        let (_, e) = w.next_request(3, 1000, true).unwrap();
        assert_eq!(seqs(&e), [1, 2, 3]);
        let mut w = Window::default();
        for (seq, uid) in [(1, "a"), (2, "a"), (3, "b")] {
            w.push(event(seq, uid), body(10));
        }
        let (_, e) = w.next_request(10, 15, false).unwrap();
        assert_eq!(seqs(&e), [1], "a's second does not fit the bytes, and b fits only after it");
        let (_, e) = w.next_request(10, 15, false).unwrap();
        assert_eq!(seqs(&e), [3]);
    }

    proptest! {
        /// Whatever the answers, every object's events are sent in their order, never two of
        /// one object at once, and everything settles in sequence order.
        #[test]
        fn per_object_order_holds_under_any_answers(
            uids in proptest::collection::vec(0u8..4, 1..40),
            answers in proptest::collection::vec((0u8..3, 0usize..8), 1..200),
            max_events in 1usize..4,
        ) {
            let mut w = Window::default();
            for (i, u) in uids.iter().enumerate() {
                w.push(event(i as u64 + 1, &u.to_string()), body(10));
            }
            let mut flying: Vec<Request> = Vec::new();
            let mut sent: Vec<Vec<u64>> = vec![Vec::new(); 4];
            let mut settled = Vec::new();
            let mut step = |w: &mut Window, flying: &mut Vec<Request>, answer: u8, pick: usize| {
                while flying.len() < 3 {
                    let Some((p, e)) = w.next_request(max_events, 1000, false) else { break };
                    let mut keys: Vec<&str> = e.iter().map(|(e, _)| e.object.uid.as_str()).collect();
                    keys.dedup();
                    for (_, other) in flying.iter() {
                        for (o, _) in other {
                            prop_assert!(!keys.contains(&o.object.uid.as_str()), "two requests of one object at once");
                        }
                    }
                    flying.push((p, e));
                }
                if flying.is_empty() { return Ok(()); }
                let (p, e) = flying.remove(pick % flying.len());
                match answer {
                    0 => w.retry(&p),
                    _ => {
                        for (e, _) in &e {
                            let s = &mut sent[e.object.uid.parse::<usize>().unwrap()];
                            prop_assert!(s.last().is_none_or(|l| *l < e.seq), "an object's events overtook each other");
                            s.push(e.seq);
                        }
                        w.finish(&p, (answer == 2).then_some("refused"));
                    }
                }
                settled.extend(w.settle().into_iter().map(|s| match s { Settled::Delivered(e) | Settled::Refused(e, _) => e.seq }));
                Ok(())
            };
            for (answer, pick) in answers {
                step(&mut w, &mut flying, answer, pick)?;
            }
            for _ in 0..1000 {
                if w.is_empty() { break; }
                step(&mut w, &mut flying, 1, 0)?;
            }
            prop_assert!(w.is_empty());
            prop_assert_eq!(settled, (1..=uids.len() as u64).collect::<Vec<_>>());
        }
    }
}
