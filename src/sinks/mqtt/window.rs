//! The MQTT sink's window: every publish handed to rumqttc, kept until the broker's PUBACK
//! for its packet id arrives, and settled in order.
//!
//! rumqttc reports packet ids in the order it sends the publishes (`Outgoing::Publish(pkid)`),
//! which is the order kubecast queued them, so the n-th id reported belongs to the n-th queued
//! publish that has none yet. Packet ids are reused once acknowledged, so an ack matches the
//! oldest unacknowledged publish with that id. An event is settled when all its publishes
//! are acknowledged and everything before it is settled: acks leave the window in sequence
//! order, as the sink contract requires. Entry point: [`Window`].

use std::collections::VecDeque;
use std::sync::Arc;

use super::conn::Message;
use crate::event::Event;

/// One publish in the window.
struct Entry {
    event: Arc<Event>,
    /// `None` for an event refused before it was sent (too large).
    message: Option<Message>,
    /// Whether this is the event's last publish (a delete with `retain` has two).
    last: bool,
    /// Handed to rumqttc on the current connection.
    queued: bool,
    /// The packet id rumqttc gave it on the current connection.
    pkid: Option<u16>,
    acked: bool,
    /// The broker acknowledged it with an error reason: it will never take it.
    refused: Option<String>,
}

pub use crate::sinks::Settled;

/// The publishes not yet settled, oldest first.
#[derive(Default)]
pub struct Window {
    entries: VecDeque<Entry>,
    /// A refusal of an event whose later publishes are still in the window.
    refusal: Option<(u64, String)>,
}

impl Window {
    /// Publishes in the window (an event may have two).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds the publishes of `event`.
    pub fn push(&mut self, event: Arc<Event>, messages: Vec<Message>) {
        let n = messages.len();
        for (i, message) in messages.into_iter().enumerate() {
            self.entries.push_back(Entry {
                event: event.clone(),
                message: Some(message),
                last: i + 1 == n,
                queued: false,
                pkid: None,
                acked: false,
                refused: None,
            });
        }
    }

    /// Adds `event` as refused without sending it (it can never be sent: too large). It is
    /// settled, as refused, once everything before it is.
    pub fn push_refused(&mut self, event: Arc<Event>, reason: String) {
        self.entries.push_back(Entry {
            event,
            message: None,
            last: true,
            queued: true,
            pkid: None,
            acked: true,
            refused: Some(reason),
        });
    }

    /// Hands every publish not yet queued to `publish`, in order, until it refuses one
    /// (rumqttc's channel is full: the rest goes with the next call).
    pub fn queue_with(&mut self, mut publish: impl FnMut(&Message) -> bool) {
        for e in self.entries.iter_mut().filter(|e| !e.queued) {
            if let Some(m) = &e.message
                && !publish(m)
            {
                break;
            }
            e.queued = true;
        }
    }

    /// rumqttc sent the next queued publish with `pkid`.
    pub fn sent(&mut self, pkid: u16) {
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.queued && e.pkid.is_none())
        {
            e.pkid = Some(pkid);
        }
    }

    /// The broker acknowledged `pkid` (`refused`: with an error reason).
    pub fn acked(&mut self, pkid: u16, refused: Option<String>) {
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.pkid == Some(pkid) && !e.acked)
        {
            e.acked = true;
            e.refused = refused;
        }
    }

    /// Takes the acknowledged publishes from the front; returns the events they complete,
    /// in order.
    pub fn settle(&mut self) -> Vec<Settled> {
        let mut out = Vec::new();
        while self.entries.front().is_some_and(|e| e.acked) {
            let Some(e) = self.entries.pop_front() else {
                break;
            };
            if let Some(reason) = e.refused {
                self.refusal.get_or_insert((e.event.seq, reason));
            }
            if e.last {
                match self.refusal.take() {
                    Some((seq, reason)) if seq == e.event.seq => {
                        out.push(Settled::Refused(e.event, reason))
                    }
                    _ => out.push(Settled::Delivered(e.event)),
                }
            }
        }
        out
    }

    /// The connection was lost: nothing unacknowledged is trusted, every such publish goes
    /// again on the next connection, in order.
    pub fn reset(&mut self) {
        for e in self.entries.iter_mut().filter(|e| e.message.is_some()) {
            e.queued = false;
            e.pkid = None;
            e.acked = false;
            e.refused = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;
    use crate::store::record_tests_event as event;
    use bytes::Bytes;

    fn message(topic: &str) -> Message {
        Message {
            topic: topic.to_string(),
            payload: Bytes::new(),
            retain: false,
            properties: Vec::new(),
            content_type: None,
        }
    }

    fn window_of(n: u64) -> Window {
        let mut w = Window::default();
        for seq in 1..=n {
            let e = Arc::new(event(seq, &format!("u{seq}"), "1", ChangeKind::Modified));
            w.push(e, vec![message("t")]);
        }
        w.queue_with(|_| true);
        w
    }

    fn seqs(settled: &[Settled]) -> Vec<u64> {
        settled
            .iter()
            .map(|s| match s {
                Settled::Delivered(e) | Settled::Refused(e, _) => e.seq,
            })
            .collect()
    }

    #[test]
    fn packet_ids_go_to_queued_publishes_in_order_and_acks_settle_in_order() {
        let mut w = window_of(3);
        for pkid in [7, 8, 9] {
            w.sent(pkid);
        }
        w.acked(9, None);
        w.acked(8, None);
        assert!(w.settle().is_empty(), "the oldest is not acknowledged yet");
        w.acked(7, None);
        assert_eq!(seqs(&w.settle()), vec![1, 2, 3]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_reused_packet_id_acknowledges_the_unacknowledged_publish() {
        let mut w = window_of(3);
        w.sent(1);
        w.sent(2);
        w.acked(2, None);
        // rumqttc reuses id 2 for the third publish while the first is still unacknowledged.
        w.sent(2);
        w.acked(2, None);
        assert!(w.settle().is_empty());
        w.acked(1, None);
        assert_eq!(seqs(&w.settle()), vec![1, 2, 3]);
    }

    #[test]
    fn an_event_with_two_publishes_settles_after_both() {
        let mut w = Window::default();
        let e = Arc::new(event(1, "u", "5", ChangeKind::Deleted));
        w.push(e, vec![message("t"), message("t")]);
        w.queue_with(|_| true);
        w.sent(1);
        w.sent(2);
        w.acked(1, None);
        assert!(w.settle().is_empty(), "the retained clear is still in flight");
        w.acked(2, None);
        assert_eq!(seqs(&w.settle()), vec![1]);
    }

    #[test]
    fn a_refused_publish_settles_as_refused_in_its_place() {
        let mut w = window_of(2);
        w.sent(1);
        w.sent(2);
        w.acked(2, Some("quota exceeded".into()));
        assert!(w.settle().is_empty(), "not before the older event");
        w.acked(1, None);
        let settled = w.settle();
        assert!(matches!(&settled[0], Settled::Delivered(e) if e.seq == 1));
        assert!(matches!(&settled[1], Settled::Refused(e, r) if e.seq == 2 && r == "quota exceeded"));
    }

    #[test]
    fn an_event_refused_before_sending_settles_after_the_ones_before_it() {
        let mut w = window_of(1);
        w.sent(1);
        w.push_refused(
            Arc::new(event(2, "big", "1", ChangeKind::Added)),
            "too large".into(),
        );
        assert!(w.settle().is_empty(), "event 1 is not acknowledged yet");
        w.reset();
        let mut sent = 0;
        w.queue_with(|_| {
            sent += 1;
            true
        });
        assert_eq!(sent, 1, "the refused event is never published");
        w.sent(1);
        w.acked(1, None);
        let settled = w.settle();
        assert!(matches!(&settled[0], Settled::Delivered(e) if e.seq == 1));
        assert!(matches!(&settled[1], Settled::Refused(e, r) if e.seq == 2 && r == "too large"));
    }

    #[test]
    fn after_a_reset_everything_unacknowledged_is_published_again_in_order() {
        let mut w = window_of(3);
        w.sent(1);
        w.acked(1, None);
        assert_eq!(seqs(&w.settle()), vec![1]);
        w.sent(2);
        w.reset();
        let mut again = Vec::new();
        w.queue_with(|m| {
            again.push(m.topic.clone());
            true
        });
        assert_eq!(again.len(), 2, "the two unacknowledged publishes go again");
        // The new connection numbers them afresh; an old id's late ack matches nothing.
        w.acked(2, None);
        assert!(w.settle().is_empty());
        w.sent(1);
        w.sent(2);
        w.acked(1, None);
        w.acked(2, None);
        assert_eq!(seqs(&w.settle()), vec![2, 3]);
    }

    #[test]
    fn a_full_channel_leaves_the_rest_for_the_next_call() {
        let mut w = window_of(3);
        w.reset();
        let mut room = 2;
        w.queue_with(|_| {
            room -= 1;
            room >= 0
        });
        w.sent(1);
        w.sent(2);
        w.sent(3); // nothing left without an id: ignored
        w.acked(1, None);
        w.acked(2, None);
        assert_eq!(seqs(&w.settle()), vec![1, 2]);
        w.queue_with(|_| true);
        w.sent(4);
        w.acked(4, None);
        assert_eq!(seqs(&w.settle()), vec![3]);
    }
}
