//! The fan-out: the events on their way into the sink queues (the outbox), handed to each
//! sink that takes them in order, and what the sinks report back.
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
use crate::sinks::{NotPushed, Pushed, Report};

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
    outbox: VecDeque<Outgoing>,
}

impl Fanout {
    pub fn new(queues: Vec<(Arc<str>, QueueTx)>) -> Fanout {
        Fanout {
            queues,
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
        let Fanout { queues, outbox } = self;
        while let Some(out) = outbox.front_mut() {
            while let Some((name, queue)) = queues.get(out.next) {
                if !out.to.includes(out.next, name) {
                    if let To::Sinks(_) = out.to
                        && let Some(seq) = stats.skipped(name, out.event.seq)
                    {
                        // Holding nothing, the sink has settled everything up to here.
                        durable.acked(name, seq);
                    }
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

/// A sink's report: counted, and its cursor moved (past the events its routes skipped, once
/// it holds nothing).
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
