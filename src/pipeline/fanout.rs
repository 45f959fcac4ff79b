//! The fan-out: the events on their way into the sink queues (the outbox), handed to each
//! sink that takes them in order, and what the sinks report back. A sink gets an event when
//! its routes send it there ([`To`]) and its kind takes it ([`Takes`]: Alertmanager's takes
//! only alerts); past the others its cursor moves as soon as it holds nothing, so a sink
//! waiting on its destination holds back only what it takes.
//!
//! Entry point: [`Fanout::pump`], which hands over as far as the queues take without
//! waiting; [`Fanout::wait_for_room`] waits for a full `block` queue (backpressure), and
//! [`settle`] counts a sink's report and moves its cursor.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::PipelineError;
use super::durable::Durable;
use super::routed::To;
use super::stats::Stats;
use crate::event::Event;
use crate::ops::Ops;
use crate::sinks::queue::{Closed, QueueTx};
use crate::sinks::{NotPushed, Pushed, Report, Takes};

/// An event on its way into the sink queues.
struct Outgoing {
    event: Arc<Event>,
    /// The sinks that take it.
    to: To,
    /// The index of the next sink to hand it to.
    next: usize,
}

/// Each sink's queue and the events not yet in all of the queues that take them.
pub struct Fanout {
    /// Each sink's name and the sender side of its queue, in config order.
    queues: Vec<(Arc<str>, QueueTx)>,
    /// What each sink's kind takes, in config order (a sink missing here takes every event).
    takes: Vec<Takes>,
    outbox: VecDeque<Outgoing>,
}

impl Fanout {
    pub fn new(queues: Vec<(Arc<str>, QueueTx)>, takes: Vec<Takes>) -> Fanout {
        Fanout {
            queues,
            takes,
            outbox: VecDeque::new(),
        }
    }

    /// The number of sinks.
    pub fn sinks(&self) -> usize {
        self.queues.len()
    }

    /// Whether every event has been handed to all of its sinks.
    pub fn is_empty(&self) -> bool {
        self.outbox.is_empty()
    }

    /// Queues `event` for the sinks `to`.
    pub fn push(&mut self, event: Arc<Event>, to: To) {
        self.outbox.push_back(Outgoing { event, to, next: 0 });
    }

    /// Closes the queues (the sinks then finish what they hold); returns the sinks' names.
    pub fn close(&mut self) -> Vec<Arc<str>> {
        self.queues.drain(..).map(|(n, _)| n).collect()
    }

    /// Hands the outbox's events to the sink queues as far as they take them without
    /// waiting; returns the index of the sink whose full queue holds the next event.
    pub fn pump(
        &mut self,
        reports: &mut mpsc::UnboundedReceiver<Report>,
        stats: &mut Stats,
        durable: &mut Durable,
        ops: &Ops,
    ) -> Result<Option<usize>, PipelineError> {
        let Fanout {
            queues,
            takes,
            outbox,
        } = self;
        while let Some(out) = outbox.front_mut() {
            while let Some((name, queue)) = queues.get(out.next) {
                let sent = out.to.includes(out.next, name);
                let taken = takes.get(out.next).is_none_or(|t| t.admits(out.event.kind));
                if !sent || !taken {
                    pass_by(stats, durable, name, out, sent);
                    out.next += 1;
                    continue;
                }
                // What the sinks settled is counted before more is handed over, so the
                // held counts are exact (a sink reports an event before it takes the next).
                drain(reports, stats, durable);
                match queue.try_push(&out.event) {
                    Ok(p) => hand_over(stats, ops, name, out, p),
                    Err(NotPushed::Full) => return Ok(Some(out.next)),
                    // The sink's own error arrives from its task; this names it meanwhile.
                    Err(NotPushed::Closed) => {
                        return Err(PipelineError::SinkGone(name.to_string()));
                    }
                }
            }
            outbox.pop_front();
        }
        Ok(None)
    }

    /// The blocked sink took the front event (or is gone).
    pub fn pushed(
        &mut self,
        pushed: Result<Pushed, Closed>,
        reports: &mut mpsc::UnboundedReceiver<Report>,
        stats: &mut Stats,
        durable: &mut Durable,
        ops: &Ops,
    ) -> Result<(), PipelineError> {
        // Settled before counted, as in `pump`.
        drain(reports, stats, durable);
        let Some(out) = self.outbox.front_mut() else {
            return Ok(());
        };
        let Some((name, _)) = self.queues.get(out.next) else {
            return Ok(());
        };
        match pushed {
            Ok(p) => {
                hand_over(stats, ops, name, out, p);
                Ok(())
            }
            Err(_) => Err(PipelineError::SinkGone(name.to_string())),
        }
    }

    /// Waits until the sink at `blocked` takes the outbox's front event.
    pub async fn wait_for_room(&self, blocked: Option<usize>) -> Result<Pushed, Closed> {
        match (
            blocked.and_then(|i| self.queues.get(i)),
            self.outbox.front(),
        ) {
            (Some((_, queue)), Some(out)) => queue.push(out.event.clone()).await,
            _ => std::future::pending().await,
        }
    }
}

/// `sink` does not get `out`'s event: its routes do not send it there (`sent` false), or its
/// kind does not take it. Holding nothing, the sink has then settled everything up to here.
/// An event from before a restart for another sink only (`To::Only`) was settled here then.
fn pass_by(stats: &mut Stats, durable: &mut Durable, sink: &str, out: &Outgoing, sent: bool) {
    if !sent && matches!(out.to, To::Only(_)) {
        return;
    }
    if sent && matches!(out.to, To::Only(_)) && stats.passed_by(sink) == 1 {
        // Logged before this sink's kind took only some events; now it never sends them.
        tracing::info!(
            sink,
            "events pending from before the restart that this sink does not take (not alerts) are settled without sending (passed_by in the sink totals)"
        );
    }
    if let Some(seq) = stats.skipped(sink, out.event.seq) {
        durable.acked(sink, seq);
    }
}

/// `sink`'s queue took `out`'s event: counts what became of it and moves `out` on to the
/// next sink.
fn hand_over(stats: &mut Stats, ops: &Ops, sink: &str, out: &mut Outgoing, pushed: Pushed) {
    match pushed {
        Pushed::Queued => stats.handed(sink, &out.event),
        Pushed::Coalesced => stats.coalesced(sink),
        Pushed::Dropped => {
            stats.dropped(sink);
            tracing::error!(sink, id = %out.event.id, "sink queue full: event dropped (when_full: drop)");
        }
    }
    if let To::Only(_) = out.to {
        // Sent before the restart, not acknowledged: sent again.
        ops.metrics.retried(sink, 1);
    }
    out.next += 1;
}

/// A sink's report: counted, and its cursor moved (past the events it did not get, once it
/// holds nothing).
pub fn settle(stats: &mut Stats, durable: &mut Durable, r: &Report) {
    stats.report(r);
    let (sink, seq) = r.settles();
    durable.acked(sink, seq);
    if let Some(past) = stats.settled_past(sink, seq) {
        durable.acked(sink, past);
    }
}

/// Takes every report already waiting.
pub fn drain(
    reports: &mut mpsc::UnboundedReceiver<Report>,
    stats: &mut Stats,
    durable: &mut Durable,
) {
    while let Ok(r) = reports.try_recv() {
        settle(stats, durable, &r);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;
    use crate::model::ChangeKind;
    use crate::pipeline::durable::DurableSettings;
    use crate::sinks::queue::{QueueConfig, QueueRx, queue};
    use crate::store::record_tests_event as event;

    /// A fan-out to `k` (every event) and `am` (alerts only), with `k` as a keeper so that
    /// the keeper feed's `settled` shows `am`'s cursor (the keeper's own acks do not count).
    struct Rig {
        fanout: Fanout,
        am: QueueRx,
        k: QueueRx,
        stats: Stats,
        durable: Durable,
        reports: mpsc::UnboundedReceiver<Report>,
        ops: Ops,
        settled: tokio::sync::watch::Receiver<u64>,
    }

    async fn rig() -> Rig {
        let (ktx, k) = queue(QueueConfig::default());
        let (amtx, am) = queue(QueueConfig::default());
        let fanout = Fanout::new(
            vec![("k".into(), ktx), ("am".into(), amtx)],
            vec![Takes::Every, Takes::Alerts],
        );
        let (durable, _) = Durable::open(DurableSettings {
            state: crate::store::StateConfig::default(),
            per_namespace: true,
            initial: crate::classify::InitialList::Emit,
            sinks: vec!["k".to_string(), "am".to_string()],
            ops: Arc::default(),
            resources: vec!["pods".to_string()],
            keeper: Some(("k".to_string(), None)),
            router: None,
        })
        .await
        .expect("no state directory to open");
        let settled = durable.feed().settled;
        Rig {
            fanout,
            am,
            k,
            stats: Stats::new(["k", "am"], Arc::default()),
            durable,
            reports: mpsc::unbounded_channel().1,
            ops: Ops::default(),
            settled,
        }
    }

    impl Rig {
        fn push(&mut self, seq: u64, kind: ChangeKind, to: To) {
            let e = event(seq, &format!("u{seq}"), &seq.to_string(), kind);
            self.fanout.push(Arc::new(e), to);
            let blocked = self
                .fanout
                .pump(
                    &mut self.reports,
                    &mut self.stats,
                    &mut self.durable,
                    &self.ops,
                )
                .expect("the queues are open");
            assert_eq!(blocked, None, "no queue is full");
        }

        /// `am`'s cursor: how far the others have settled for the keeper.
        fn am_cursor(&self) -> u64 {
            *self.settled.borrow()
        }

        fn report(&mut self, sink: &str, seq: u64) {
            let r = Report::Delivered {
                sink: sink.into(),
                seq,
            };
            settle(&mut self.stats, &mut self.durable, &r);
        }

        /// The sequence numbers each queue got: `(k, am)`.
        async fn handed(mut self) -> (Vec<u64>, Vec<u64>) {
            self.fanout.close();
            let mut k = Vec::new();
            while let Some(e) = self.k.recv().await {
                k.push(e.seq);
            }
            let mut am = Vec::new();
            while let Some(e) = self.am.recv().await {
                am.push(e.seq);
            }
            (k, am)
        }
    }

    #[tokio::test]
    async fn an_alerts_only_sink_gets_only_alerts_and_an_unconfirmed_alert_holds_back_only_its_own_cursor()
     {
        let mut r = rig().await;
        r.push(1, ChangeKind::Added, To::All);
        assert_eq!(
            r.am_cursor(),
            1,
            "holding nothing, am passes a change at once"
        );
        r.push(2, ChangeKind::AlertFiring, To::All);
        for seq in 3..=5 {
            r.push(seq, ChangeKind::Modified, To::All);
        }
        assert_eq!(
            r.am_cursor(),
            1,
            "am's cursor waits at its unconfirmed alert"
        );
        r.report("k", 5);
        assert_eq!(
            r.am_cursor(),
            1,
            "another sink's acks do not move am's cursor"
        );
        r.report("am", 2);
        assert_eq!(
            r.am_cursor(),
            5,
            "confirmed, am's cursor moves past the changes it never took"
        );
        // A route that names am sends it a change: its kind still does not take it.
        r.push(6, ChangeKind::Deleted, To::Sinks(0b11));
        assert_eq!(r.am_cursor(), 6);
        r.push(7, ChangeKind::AlertResolved, To::Sinks(0b10));
        let (k, am) = r.handed().await;
        assert_eq!(k, [1, 2, 3, 4, 5, 6]);
        assert_eq!(am, [2, 7], "only the alerts");
    }

    #[tokio::test]
    async fn changes_pending_from_before_a_restart_for_an_alerts_only_sink_are_settled_unsent_and_counted()
     {
        let mut r = rig().await;
        // Logged when am still took every event; none acknowledged by am.
        r.push(1, ChangeKind::Added, To::Only("am".into()));
        r.push(2, ChangeKind::Modified, To::Only("am".into()));
        assert_eq!(r.am_cursor(), 2, "settled without sending");
        r.push(3, ChangeKind::AlertFiring, To::Only("am".into()));
        r.push(4, ChangeKind::Modified, To::Only("am".into()));
        assert_eq!(r.am_cursor(), 2, "behind the pending alert");
        // Pending for another sink only: am had settled it before the restart.
        r.push(5, ChangeKind::Modified, To::Only("k".into()));
        r.report("am", 3);
        assert_eq!(r.am_cursor(), 4);
        assert_eq!(r.stats.sinks["am"].passed_by, 3);
        assert_eq!(r.stats.sinks["k"].passed_by, 0);
        let (k, am) = r.handed().await;
        assert_eq!(k, [5]);
        assert_eq!(am, [3]);
    }
}
