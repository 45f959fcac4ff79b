//! The state of the running bridge and what it does with each batch of observations,
//! each event handed to a sink, each report coming back, and at shutdown.
//!
//! Entry point: [`Bridge`], driven by [`super::run`]. While a sink's queue is full the bridge
//! waits for it, but still takes reports and does its upkeep, so acknowledgements keep
//! moving the durable cursors during backpressure.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Interval;

use super::durable::Durable;
use super::{PipelineError, Stats};
use crate::classify::{Change, Classifier};
use crate::event::{Encoder, Event};
use crate::sinks::{Pushed, Report, SinkHandle};
use crate::watch::Observed;

/// How long a shutdown waits for the sinks to deliver what they hold.
const DRAIN: Duration = Duration::from_secs(15);

/// Why the main loop ended.
pub enum Halt {
    Shutdown,
    Failed(PipelineError),
}

impl From<PipelineError> for Halt {
    fn from(e: PipelineError) -> Halt {
        Halt::Failed(e)
    }
}

pub struct Bridge {
    pub sinks: Vec<SinkHandle>,
    pub reports: mpsc::UnboundedReceiver<Report>,
    pub upkeep: Interval,
    stats: Stats,
    durable: Durable,
    classifier: Classifier,
    encoder: Encoder,
}

impl Bridge {
    pub fn new(
        sinks: Vec<SinkHandle>,
        reports: mpsc::UnboundedReceiver<Report>,
        durable: Durable,
        classifier: Classifier,
        encoder: Encoder,
    ) -> Bridge {
        let mut upkeep = tokio::time::interval(Duration::from_millis(200));
        upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Bridge {
            stats: Stats::new(&sinks),
            sinks,
            reports,
            upkeep,
            durable,
            classifier,
            encoder,
        }
    }

    pub fn on_report(&mut self, r: &Report) {
        settle(&mut self.stats, &mut self.durable, r);
    }

    /// Interval syncs, cursors, snapshots, compaction.
    pub fn on_upkeep(&mut self) -> Result<(), PipelineError> {
        Ok(self.durable.maintain(&self.classifier)?)
    }

    /// Classifies and encodes a batch, and logs it durably; returns its events.
    pub fn process(&mut self, items: Vec<Observed>) -> Result<Vec<Arc<Event>>, PipelineError> {
        let mut events = Vec::new();
        for item in items {
            let from_watch = matches!(item, Observed::Applied { .. } | Observed::Deleted { .. });
            let position = matches!(
                item,
                Observed::ListStart { .. } | Observed::ListDone { .. } | Observed::Bookmark { .. }
            )
            .then(|| item.clone());
            for change in classify(&mut self.classifier, item) {
                let event = self
                    .durable
                    .event(encode(&mut self.encoder, &change), from_watch);
                self.stats.emitted(&event);
                events.push(event);
            }
            if let Some(p) = position {
                self.durable.observed(&p);
            }
        }
        // Logged before any sink sees it: the resume point never runs ahead of what is
        // stored.
        self.durable.commit()?;
        Ok(events)
    }

    /// Hands `event` to one sink (`only`) or to all, waiting while a queue is full; reports
    /// and upkeep go on meanwhile, and a shutdown ends the wait.
    pub async fn hand_to<F: Future<Output = ()>>(
        &mut self,
        only: Option<&str>,
        event: Arc<Event>,
        shutdown: &mut Pin<&mut F>,
    ) -> Result<(), Halt> {
        let Bridge {
            sinks,
            reports,
            upkeep,
            stats,
            durable,
            classifier,
            ..
        } = self;
        for s in sinks.iter().filter(|s| only.is_none_or(|o| o == &*s.name)) {
            let send = s.queue.push(event.clone());
            tokio::pin!(send);
            loop {
                // Reports first: what the sinks settled is counted before more is handed
                // over, so the held counts are exact and cursors move during backpressure.
                tokio::select! {
                    biased;
                    Some(r) = reports.recv() => settle(stats, durable, &r),
                    _ = upkeep.tick() => durable.maintain(classifier).map_err(|e| Halt::Failed(e.into()))?,
                    pushed = &mut send => {
                        match pushed {
                            Err(_) => {
                                // The sink's own error is collected when the bridge finishes.
                                return Err(Halt::Failed(PipelineError::SinkGone(s.name.to_string())));
                            }
                            Ok(Pushed::Queued) => stats.handed(&s.name, &event),
                            Ok(Pushed::Coalesced) => stats.coalesced(&s.name),
                            Ok(Pushed::Dropped) => {
                                stats.dropped(&s.name);
                                tracing::error!(sink = %s.name, id = %event.id, "sink queue full: event dropped (when_full: drop)");
                            }
                        }
                        break;
                    }
                    _ = shutdown.as_mut() => return Err(Halt::Shutdown),
                }
            }
        }
        Ok(())
    }

    /// Closes the queues, waits (up to [`DRAIN`]) for the sinks to deliver what they hold,
    /// saves the state, and returns the totals or the first error.
    pub async fn finish(
        mut self,
        outcome: Result<(), PipelineError>,
    ) -> Result<Stats, PipelineError> {
        let mut first_error = None;
        let deadline = tokio::time::Instant::now() + DRAIN;
        for SinkHandle { name, queue, task } in std::mem::take(&mut self.sinks) {
            drop(queue);
            let abort = task.abort_handle();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    first_error.get_or_insert(PipelineError::Sink(e));
                }
                Ok(Err(_)) => {
                    first_error.get_or_insert(PipelineError::SinkGone(name.to_string()));
                }
                Err(_) => {
                    abort.abort();
                    tracing::error!(sink = %name, "shutdown: the sink did not deliver everything in time; the rest is sent after the restart");
                }
            }
        }
        while let Ok(r) = self.reports.try_recv() {
            self.on_report(&r);
        }
        self.stats.log_summary(self.classifier.len());
        if let Err(e) = self.durable.close(&self.classifier) {
            tracing::error!(error = %e, "saving the state at shutdown failed");
            return Err(e.into());
        }
        // A failed sink's own error says more than `SinkGone`.
        if let Some(e) = first_error {
            return Err(e);
        }
        outcome?;
        Ok(self.stats)
    }
}

/// A sink's report: counted, and its cursor moved. A free function so that
/// [`Bridge::hand_to`] can call it while it holds a sink's queue.
fn settle(stats: &mut Stats, durable: &mut Durable, r: &Report) {
    stats.report(r);
    let (sink, seq) = r.settles();
    durable.acked(sink, seq);
}

/// What the classifier makes of one observation.
fn classify(c: &mut Classifier, item: Observed) -> Vec<Change> {
    match item {
        Observed::ListStart { scope } => {
            c.list_start(&scope);
            Vec::new()
        }
        Observed::Listed { scope, pod } => c.listed(&scope, pod).into_iter().collect(),
        Observed::ListDone { scope, .. } => c.list_done(&scope),
        Observed::Applied { pod, .. } => c.applied(pod).into_iter().collect(),
        Observed::Deleted { pod, .. } => vec![c.deleted(pod)],
        Observed::Bookmark { .. } => Vec::new(),
    }
}

fn encode(encoder: &mut Encoder, change: &Change) -> Event {
    let (event, error) = encoder.encode(change);
    if let Some(e) = error {
        tracing::warn!(id = %event.id, error = %e, "pod sent as reference data");
    }
    tracing::debug!(id = %event.id, subject = %event.subject(), "event");
    event
}
