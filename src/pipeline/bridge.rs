//! The bridge's one event loop: it owns the bridge's state (known state, durable log,
//! counters, the events on their way into the sink queues) and waits, in this order of
//! priority, for a shutdown, a sink task that ended, sink reports, upkeep, a watch that
//! ended, room in a full sink queue, and the next batch of observations.
//!
//! Entry point: [`Bridge::run`]. A change takes one path: classified, routed and encoded
//! ([`super::routed`]), numbered and logged ([`super::durable`]), then handed to the sinks
//! ([`super::fanout`]). A full `block` queue holds the events behind it (and so the watch:
//! backpressure), while reports, upkeep and a failing sink are still seen at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use super::durable::Durable;
use super::fanout::{Fanout, drain, settle};
use super::routed::{Emitted, Routes, To, now_ms};
use super::{Grace, PipelineError, Stats};
use crate::classify::{Change, Classifier};
use crate::event::{Encoder, Event};
use crate::model::ChangeKind;
use crate::ops::Ops;
use crate::sinks::{Report, SinkExit, Sinks};
use crate::store::StoreError;
use crate::watch::{Observed, WatchError};

/// Observations taken together into one log append.
const BATCH: usize = 256;

/// Why the loop ended.
enum Halt {
    Shutdown,
    Failed(PipelineError),
}

impl From<PipelineError> for Halt {
    fn from(e: PipelineError) -> Halt {
        Halt::Failed(e)
    }
}

impl From<StoreError> for Halt {
    fn from(e: StoreError) -> Halt {
        Halt::Failed(e.into())
    }
}

impl From<WatchError> for Halt {
    fn from(e: WatchError) -> Halt {
        Halt::Failed(e.into())
    }
}

/// The inputs of the bridge, set up by [`super::run`].
pub struct Parts {
    pub sinks: Sinks,
    pub reports: mpsc::UnboundedReceiver<Report>,
    pub watches: JoinSet<Result<(), WatchError>>,
    pub observed: mpsc::Receiver<Observed>,
    /// The keys of the resources resolved at start, for the known-objects metric.
    pub resources: Vec<Arc<str>>,
    pub durable: Durable,
    pub classifier: Classifier,
    pub encoder: Encoder,
    /// Per sink, what it had not acknowledged before the restart: handed over first.
    pub pending: Vec<(String, Vec<Arc<Event>>)>,
    /// The route-and-encode stage (trivial without routes and alert rules).
    pub routes: Routes,
    pub ops: Arc<Ops>,
    /// How long a shutdown waits for the sinks to deliver what they hold.
    pub grace: Grace,
}

pub struct Bridge {
    fanout: Fanout,
    tasks: JoinSet<SinkExit>,
    reports: mpsc::UnboundedReceiver<Report>,
    watches: JoinSet<Result<(), WatchError>>,
    observed: mpsc::Receiver<Observed>,
    resources: Vec<Arc<str>>,
    /// The next upkeep, armed for `upkeep_at`: only when something is due (see
    /// [`Bridge::arm_upkeep`]), so an idle kubecast sleeps.
    upkeep: std::pin::Pin<Box<Sleep>>,
    upkeep_at: Instant,
    last_upkeep: Instant,
    stats: Stats,
    durable: Durable,
    classifier: Classifier,
    encoder: Encoder,
    routes: Routes,
    /// The next alert timer, armed for `timer_at` (ms since the epoch).
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    timer_at: Option<i64>,
    ops: Arc<Ops>,
    grace: Grace,
    /// A list completed: freed memory goes back to the system once the sinks have what it
    /// emitted, or by this time at the latest.
    trim_by: Option<tokio::time::Instant>,
    /// The events of the batch being logged, released to the fan-out once it is committed.
    unlogged: Vec<(Arc<Event>, To)>,
}

/// How long after a list its freed memory is returned at the latest, when the sinks never
/// run empty (a busy cluster).
const TRIM_WITHIN: Duration = Duration::from_secs(5);

/// How often upkeep runs while the sinks drain what a list emitted (to return its memory as
/// soon as they have it).
const TRIM_CHECK: Duration = Duration::from_millis(200);

/// The shortest time between two upkeeps, however much is due: a bound, so nothing due in
/// the past can make the loop spin.
const UPKEEP_MIN_GAP: Duration = Duration::from_millis(50);

/// The longest upkeep waits when nothing is due: the state directory's free space (a metric)
/// stays this fresh.
const UPKEEP_MAX_GAP: Duration = Duration::from_secs(10);

impl Bridge {
    pub fn new(parts: Parts) -> Bridge {
        let now = Instant::now();
        let stats = Stats::new(
            parts.sinks.queues.iter().map(|(n, _)| &**n),
            parts.ops.clone(),
        );
        let mut fanout = Fanout::new(parts.sinks.queues, parts.sinks.takes);
        for (sink, events) in parts.pending {
            let sink: Arc<str> = sink.into();
            for event in events {
                fanout.push(event, To::Only(sink.clone()));
            }
        }
        Bridge {
            stats,
            fanout,
            tasks: parts.sinks.tasks,
            reports: parts.reports,
            watches: parts.watches,
            observed: parts.observed,
            resources: parts.resources,
            upkeep: Box::pin(tokio::time::sleep_until(now)),
            upkeep_at: now,
            last_upkeep: now,
            durable: parts.durable,
            classifier: parts.classifier,
            encoder: parts.encoder,
            routes: parts.routes,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            timer_at: None,
            ops: parts.ops,
            grace: parts.grace,
            trim_by: None,
            unlogged: Vec::new(),
        }
    }

    /// Arms the timer for the router's next alert deadline, if it moved.
    fn arm_timer(&mut self) {
        let due = self.routes.next_deadline();
        if due == self.timer_at {
            return;
        }
        self.timer_at = due;
        if let Some(at) = due {
            let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
            self.timer
                .as_mut()
                .reset(Instant::now() + Duration::from_millis(wait));
        }
    }

    /// Arms the upkeep for the earliest of: what the state directory has due, the check for
    /// a list's freed memory, and [`UPKEEP_MAX_GAP`] after the last one; never sooner than
    /// [`UPKEEP_MIN_GAP`] after it.
    fn arm_upkeep(&mut self) {
        let trim = self.trim_by.map(|by| by.min(self.last_upkeep + TRIM_CHECK));
        let at = [
            self.durable.next_due().map(Instant::from_std),
            trim,
            Some(self.last_upkeep + UPKEEP_MAX_GAP),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(self.last_upkeep + UPKEEP_MAX_GAP)
        .max(self.last_upkeep + UPKEEP_MIN_GAP);
        if at != self.upkeep_at {
            self.upkeep_at = at;
            self.upkeep.as_mut().reset(at);
        }
    }

    /// The known-objects gauge per resource: those resolved at start, and any found since (a
    /// custom resource whose CRD came later).
    fn report_known(&self) {
        let counts = self.classifier.counts();
        let mut keys: Vec<&str> = self.resources.iter().map(|r| &**r).collect();
        keys.extend(
            counts
                .keys()
                .map(|k| &**k)
                .filter(|k| !self.resources.iter().any(|r| &**r == *k)),
        );
        self.ops.metrics.known_objects(self.ops.part, &keys, counts);
    }

    /// Runs until `shutdown` completes (then the sinks drain what they hold) or a fatal
    /// error: a watch the apiserver refuses, a sink that ended, a state directory that
    /// cannot be written.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Stats, PipelineError> {
        tracing::info!(sinks = self.fanout.sinks(), "kubecast started");
        tokio::pin!(shutdown);
        self.report_known();
        let outcome = loop {
            let blocked = match self.fanout.pump(
                &mut self.reports,
                &mut self.stats,
                &mut self.durable,
                &self.ops,
            ) {
                Ok(b) => b,
                Err(e) => break Halt::Failed(e),
            };
            // The resume point moves past what every sink acknowledged (reports taken above
            // or in the last turn).
            if let Err(e) = self.durable.log_delivered().await {
                break Halt::Failed(e.into());
            }
            self.arm_timer();
            self.arm_upkeep();
            let timer_due = self.timer_at.is_some() && self.fanout.is_empty();
            let step = tokio::select! {
                biased;
                _ = &mut shutdown => Err(Halt::Shutdown),
                Some(exit) = self.tasks.join_next() => Err(sink_ended(exit)),
                Some(report) = self.reports.recv() => {
                    settle(&mut self.stats, &mut self.durable, &report);
                    Ok(())
                }
                _ = &mut self.upkeep => {
                    self.last_upkeep = Instant::now();
                    self.trim_after_list();
                    self.durable.maintain(&self.classifier, self.routes.router()).await.map_err(Halt::from)
                }
                _ = &mut self.timer, if timer_due => self.alert_timers().await,
                Some(done) = self.watches.join_next() => match done {
                    Ok(Err(e)) => Err(e.into()),
                    _ => Ok(()),
                },
                pushed = self.fanout.wait_for_room(blocked), if blocked.is_some() => {
                    self.fanout
                        .pushed(pushed, &mut self.reports, &mut self.stats, &mut self.durable, &self.ops)
                        .map_err(Halt::Failed)
                }
                item = self.observed.recv(), if self.fanout.is_empty() => match item {
                    Some(first) => self.take_batch(first).await,
                    // Every watch has ended; only an error ends one.
                    None => match self.first_watch_error().await {
                        Some(e) => Err(e.into()),
                        None => Err(Halt::Shutdown),
                    },
                },
            };
            if let Err(h) = step {
                break h;
            }
        };
        let outcome = match outcome {
            Halt::Shutdown => Ok(()),
            Halt::Failed(e) => Err(e),
        };
        self.finish(outcome).await
    }

    /// Classifies, encodes and logs a batch of what the watches have ready (one log append
    /// and fsync for all of it); its events go to the outbox.
    async fn take_batch(&mut self, first: Observed) -> Result<(), Halt> {
        let mut items = vec![first];
        while items.len() < BATCH {
            match self.observed.try_recv() {
                Ok(i) => items.push(i),
                Err(_) => break,
            }
        }
        let listed = items.iter().any(|i| matches!(i, Observed::ListDone { .. }));
        let mut known_moved = false;
        for item in items {
            let from_watch = matches!(item, Observed::Applied { .. } | Observed::Deleted { .. });
            let position = matches!(
                item,
                Observed::ListStart { .. }
                    | Observed::ListDone { .. }
                    | Observed::Bookmark { .. }
                    | Observed::Unserved { .. }
            )
            .then(|| item.clone());
            for change in classify(&mut self.classifier, item) {
                // Only an added or deleted object changes how many are known.
                known_moved |= change.kind != ChangeKind::Modified;
                self.stats.changed(change.kind, change.inferred);
                let emitted = self.routes.change(&change, from_watch, &self.encoder);
                self.log(emitted);
            }
            if let Some(p) = position {
                self.durable.observed(&p);
            }
        }
        // Logged (or held until the sinks settle it) before any sink sees it: the resume
        // point never runs ahead of what is stored or acknowledged.
        self.durable.commit().await?;
        self.release();
        if known_moved {
            self.report_known();
        }
        if listed {
            self.trim_by.get_or_insert(Instant::now() + TRIM_WITHIN);
        }
        Ok(())
    }

    /// After a list, once what it emitted has left (or [`TRIM_WITHIN`] passed), returns the
    /// list's freed working set to the system.
    fn trim_after_list(&mut self) {
        let Some(by) = self.trim_by else { return };
        let drained = self.fanout.is_empty() && self.stats.held_events() == 0;
        if drained || Instant::now() >= by {
            self.trim_by = None;
            super::trim::after_list();
        }
    }

    /// The alert timers that are due fire: their events are logged and go out like others.
    async fn alert_timers(&mut self) -> Result<(), Halt> {
        self.timer_at = None;
        let emitted = self.routes.tick(&self.encoder);
        self.log(emitted);
        self.durable.commit().await?;
        self.release();
        Ok(())
    }

    /// Numbers and logs what the stage emitted (events, then object states); the events
    /// wait in `unlogged` until the batch is committed.
    fn log(&mut self, emitted: Emitted) {
        for (event, to, from_watch) in emitted.events {
            if event.kind.is_alert() {
                self.stats.alerted(event.kind);
            }
            let event = self.durable.event(event, from_watch);
            self.durable.routed(event.seq, &to);
            self.unlogged.push((event, to));
        }
        for (state, from_watch) in emitted.states {
            self.durable.state(state, from_watch);
        }
    }

    /// The committed batch's events go to the fan-out.
    fn release(&mut self) {
        for (event, to) in self.unlogged.drain(..) {
            self.fanout.push(event, to);
        }
    }

    /// The first error among the ended watches.
    async fn first_watch_error(&mut self) -> Option<WatchError> {
        while let Some(done) = self.watches.join_next().await {
            if let Ok(Err(e)) = done {
                return Some(e);
            }
        }
        None
    }

    /// Closes the queues, waits (up to the grace period) for the sinks to deliver what they hold,
    /// saves the state, and returns the totals or the first error.
    async fn finish(mut self, outcome: Result<(), PipelineError>) -> Result<Stats, PipelineError> {
        self.watches.abort_all();
        self.observed.close();
        let names = self.fanout.close();
        let mut first_error = outcome.err();
        let mut ended = Vec::new();
        let deadline = Instant::now() + self.grace.get();
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(Ok(exit))) => {
                    ended.push(exit.sink.clone());
                    if let Err(e) = exit.outcome {
                        // A failed sink's own error says more than `SinkGone`.
                        if first_error
                            .as_ref()
                            .is_none_or(|f| matches!(f, PipelineError::SinkGone(_)))
                        {
                            first_error = Some(e.into());
                        }
                    }
                }
                // Cancelled: only `abort_all` below does that.
                Ok(Some(Err(_))) => {}
                Ok(None) => break,
                Err(_) => {
                    for name in names.iter().filter(|n| !ended.contains(n)) {
                        tracing::error!(sink = %name, "shutdown: the sink did not deliver everything in time; the rest is sent after the restart");
                    }
                    self.tasks.abort_all();
                    break;
                }
            }
        }
        drain(&mut self.reports, &mut self.stats, &mut self.durable);
        self.stats.log_summary(self.classifier.len());
        if self.durable.is_broken() {
            // A snapshot now would claim that what failed to be written is on disk.
            tracing::error!(
                "the state is not saved at shutdown: a write to the state directory failed; a restart resumes from what was written before it"
            );
        } else if let Err(e) = self
            .durable
            .close(&self.classifier, self.routes.router())
            .await
        {
            tracing::error!(error = %crate::error_chain(&e), "saving the state at shutdown failed");
            return Err(e.into());
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.stats),
        }
    }
}

/// A sink task that ended before the queues were closed: always an error.
fn sink_ended(exit: Result<SinkExit, tokio::task::JoinError>) -> Halt {
    let e = match exit {
        Ok(SinkExit {
            outcome: Err(e), ..
        }) => e.into(),
        Ok(SinkExit {
            sink,
            outcome: Ok(()),
        }) => PipelineError::SinkGone(sink.to_string()),
        // Sink tasks catch their panics; only an abort (at shutdown) gets here.
        Err(e) => PipelineError::SinkGone(e.to_string()),
    };
    Halt::Failed(e)
}

/// What the classifier makes of one observation.
fn classify(c: &mut Classifier, item: Observed) -> Vec<Change> {
    match item {
        Observed::ListStart { scope } => {
            c.list_start(&scope);
            Vec::new()
        }
        Observed::Listed { scope, object } => c.listed(&scope, object).into_iter().collect(),
        Observed::ListDone { scope, .. } => c.list_done(&scope),
        Observed::Applied { scope, object } => c.applied(&scope, object).into_iter().collect(),
        Observed::Deleted { scope, object } => vec![c.deleted(&scope, object)],
        Observed::Bookmark { .. } => Vec::new(),
        // Nothing of the scope is left: a list that finds nothing.
        Observed::Unserved { scope } => {
            c.list_start(&scope);
            c.list_done(&scope)
        }
    }
}
