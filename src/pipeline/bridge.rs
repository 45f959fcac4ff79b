//! The bridge's one event loop: it owns the bridge's state (known state, durable log,
//! counters, the events on their way into the sink queues) and waits, in this order of
//! priority, for a shutdown, a sink task that ended, sink reports, upkeep, a watch that
//! ended, room in a full sink queue, and the next batch of observations.
//!
//! Entry point: [`Bridge::run`]. A full `block` queue holds the events behind it (and so the
//! watch: backpressure), while reports, upkeep and a failing sink are still seen at once.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Interval;

use super::durable::Durable;
use super::routed::{Routes, To, encode_at, now_ms};
use super::{Grace, PipelineError, Stats};
use crate::classify::{Change, Classifier};
use crate::event::{Encoder, Event};
use crate::ops::Ops;
use crate::sinks::queue::{Closed, QueueTx};
use crate::sinks::{NotPushed, Pushed, Report, SinkExit, Sinks};
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

/// An event on its way into the sink queues.
struct Outgoing {
    event: Arc<Event>,
    /// The sinks that take it.
    to: To,
    /// The index of the next sink to hand it to.
    next: usize,
    /// When the change was observed (the event's `time`), parsed once for all sinks.
    observed: Option<jiff::Timestamp>,
}

impl Outgoing {
    fn new(event: Arc<Event>, to: To) -> Outgoing {
        Outgoing {
            observed: event.time.parse().ok(),
            event,
            to,
            next: 0,
        }
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
    /// With routes or alert rules, the router and its routes' sinks.
    pub routes: Option<Routes>,
    pub ops: Arc<Ops>,
    /// How long a shutdown waits for the sinks to deliver what they hold.
    pub grace: Grace,
}

pub struct Bridge {
    /// Each sink's name and the sender side of its queue, in config order.
    queues: Vec<(Arc<str>, QueueTx)>,
    tasks: JoinSet<SinkExit>,
    reports: mpsc::UnboundedReceiver<Report>,
    watches: JoinSet<Result<(), WatchError>>,
    observed: mpsc::Receiver<Observed>,
    resources: Vec<Arc<str>>,
    upkeep: Interval,
    stats: Stats,
    durable: Durable,
    classifier: Classifier,
    encoder: Encoder,
    outbox: VecDeque<Outgoing>,
    routes: Option<Routes>,
    /// The next alert timer, armed for `timer_at` (ms since the epoch).
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    timer_at: Option<i64>,
    ops: Arc<Ops>,
    grace: Grace,
    /// A list completed: freed memory goes back to the system once the sinks have what it
    /// emitted, or by this time at the latest.
    trim_by: Option<tokio::time::Instant>,
}

/// How long after a list its freed memory is returned at the latest, when the sinks never
/// run empty (a busy cluster).
const TRIM_WITHIN: Duration = Duration::from_secs(5);

impl Bridge {
    pub fn new(parts: Parts) -> Bridge {
        let mut upkeep = tokio::time::interval(Duration::from_millis(200));
        upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let outbox = parts
            .pending
            .into_iter()
            .flat_map(|(sink, events)| {
                let sink: Arc<str> = sink.into();
                events
                    .into_iter()
                    .map(move |event| Outgoing::new(event, To::Only(sink.clone())))
            })
            .collect();
        Bridge {
            stats: Stats::new(
                parts.sinks.queues.iter().map(|(n, _)| &**n),
                parts.ops.clone(),
            ),
            queues: parts.sinks.queues,
            tasks: parts.sinks.tasks,
            reports: parts.reports,
            watches: parts.watches,
            observed: parts.observed,
            resources: parts.resources,
            upkeep,
            durable: parts.durable,
            classifier: parts.classifier,
            encoder: parts.encoder,
            outbox,
            routes: parts.routes,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            timer_at: None,
            ops: parts.ops,
            grace: parts.grace,
            trim_by: None,
        }
    }

    /// Arms the timer for the router's next alert deadline, if it moved.
    fn arm_timer(&mut self) {
        let due = self.routes.as_ref().and_then(Routes::next_deadline);
        if due == self.timer_at {
            return;
        }
        self.timer_at = due;
        if let Some(at) = due {
            let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
            self.timer
                .as_mut()
                .reset(tokio::time::Instant::now() + Duration::from_millis(wait));
        }
    }

    /// Runs until `shutdown` completes (then the sinks drain what they hold) or a fatal
    /// error: a watch the apiserver refuses, a sink that ended, a state directory that
    /// cannot be written.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<Stats, PipelineError> {
        tracing::info!(sinks = self.queues.len(), "kubecast started");
        tokio::pin!(shutdown);
        let outcome = loop {
            let blocked = match self.pump() {
                Ok(b) => b,
                Err(h) => break h,
            };
            self.arm_timer();
            let timer_due = self.timer_at.is_some() && self.outbox.is_empty();
            let step = tokio::select! {
                biased;
                _ = &mut shutdown => Err(Halt::Shutdown),
                Some(exit) = self.tasks.join_next() => Err(sink_ended(exit)),
                Some(report) = self.reports.recv() => {
                    settle(&mut self.stats, &mut self.durable, &report);
                    Ok(())
                }
                _ = self.upkeep.tick() => {
                    // The resources resolved at start, and any found since (a custom resource
                    // whose CRD came later).
                    let counts = self.classifier.counts();
                    let mut keys: Vec<&str> = self.resources.iter().map(|r| &**r).collect();
                    keys.extend(counts.keys().map(|k| &**k).filter(|k| !self.resources.iter().any(|r| &**r == *k)));
                    self.ops.metrics.known_objects(&keys, counts);
                    self.trim_after_list();
                    let router = self.routes.as_ref().map(Routes::router);
                    self.durable.maintain(&self.classifier, router).await.map_err(Halt::from)
                }
                _ = &mut self.timer, if timer_due => self.alert_timers().await,
                Some(done) = self.watches.join_next() => match done {
                    Ok(Err(e)) => Err(e.into()),
                    _ => Ok(()),
                },
                pushed = wait_for_room(&self.queues, &self.outbox, blocked), if blocked.is_some() => {
                    self.pushed(pushed)
                }
                item = self.observed.recv(), if self.outbox.is_empty() => match item {
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

    /// Hands the outbox's events to the sink queues as far as they take them without
    /// waiting; returns the index of the sink whose full queue holds the next event.
    fn pump(&mut self) -> Result<Option<usize>, Halt> {
        let Bridge {
            queues,
            reports,
            stats,
            durable,
            outbox,
            ops,
            ..
        } = self;
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
                        return Err(Halt::Failed(PipelineError::SinkGone(name.to_string())));
                    }
                }
            }
            outbox.pop_front();
        }
        Ok(None)
    }

    /// The blocked sink took the front event (or is gone).
    fn pushed(&mut self, pushed: Result<Pushed, Closed>) -> Result<(), Halt> {
        // Settled before counted, as in `pump`.
        drain(&mut self.reports, &mut self.stats, &mut self.durable);
        let Some(out) = self.outbox.front_mut() else {
            return Ok(());
        };
        let Some((name, _)) = self.queues.get(out.next) else {
            return Ok(());
        };
        match pushed {
            Ok(p) => {
                hand_over(&mut self.stats, &self.ops, name, out, p);
                Ok(())
            }
            Err(_) => Err(Halt::Failed(PipelineError::SinkGone(name.to_string()))),
        }
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
        let mut events: Vec<(Arc<Event>, To)> = Vec::new();
        let listed = items.iter().any(|i| matches!(i, Observed::ListDone { .. }));
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
                if let Some(routes) = self.routes.as_mut() {
                    routes.change(
                        &change,
                        from_watch,
                        &self.encoder,
                        &mut self.durable,
                        &mut self.stats,
                        &mut events,
                    );
                    continue;
                }
                let event = self
                    .durable
                    .event(encode(&self.encoder, &change), from_watch);
                self.stats.emitted(&event);
                events.push((event, To::All));
            }
            if let Some(p) = position {
                self.durable.observed(&p);
            }
        }
        // Logged before any sink sees it: the resume point never runs ahead of what is
        // stored.
        self.durable.commit().await?;
        self.outbox.extend(
            events
                .into_iter()
                .map(|(event, to)| Outgoing::new(event, to)),
        );
        if listed {
            self.trim_by
                .get_or_insert(tokio::time::Instant::now() + TRIM_WITHIN);
        }
        Ok(())
    }

    /// After a list, once what it emitted has left (or [`TRIM_WITHIN`] passed), returns the
    /// list's freed working set to the system.
    fn trim_after_list(&mut self) {
        let Some(by) = self.trim_by else { return };
        let drained = self.outbox.is_empty() && self.stats.held_events() == 0;
        if drained || tokio::time::Instant::now() >= by {
            self.trim_by = None;
            super::trim::after_list();
        }
    }

    /// The alert timers that are due fire: their events are logged and go out like others.
    async fn alert_timers(&mut self) -> Result<(), Halt> {
        self.timer_at = None;
        let Some(routes) = self.routes.as_mut() else {
            return Ok(());
        };
        let mut events = Vec::new();
        routes.tick(
            &self.encoder,
            &mut self.durable,
            &mut self.stats,
            &mut events,
        );
        self.durable.commit().await?;
        self.outbox.extend(
            events
                .into_iter()
                .map(|(event, to)| Outgoing::new(event, to)),
        );
        Ok(())
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
        let names: Vec<Arc<str>> = self.queues.drain(..).map(|(n, _)| n).collect();
        let mut first_error = outcome.err();
        let mut ended = Vec::new();
        let deadline = tokio::time::Instant::now() + self.grace.get();
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
        let router = self.routes.as_ref().map(Routes::router);
        if let Err(e) = self.durable.close(&self.classifier, router).await {
            tracing::error!(error = %crate::error_chain(&e), "saving the state at shutdown failed");
            return Err(e.into());
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.stats),
        }
    }
}

/// A sink's report: counted, and its cursor moved (past the events its routes skipped, once
/// it holds nothing).
fn settle(stats: &mut Stats, durable: &mut Durable, r: &Report) {
    stats.report(r);
    let (sink, seq) = r.settles();
    durable.acked(sink, seq);
    if let Some(past) = stats.settled_past(sink, seq) {
        durable.acked(sink, past);
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

/// Waits until the sink at `blocked` takes the outbox's front event.
async fn wait_for_room(
    queues: &[(Arc<str>, QueueTx)],
    outbox: &VecDeque<Outgoing>,
    blocked: Option<usize>,
) -> Result<Pushed, Closed> {
    match (blocked.and_then(|i| queues.get(i)), outbox.front()) {
        (Some((_, queue)), Some(out)) => queue.push(out.event.clone()).await,
        _ => std::future::pending().await,
    }
}

/// `sink`'s queue took `out`'s event: counts what became of it and moves `out` on to the
/// next sink.
fn hand_over(stats: &mut Stats, ops: &Ops, sink: &str, out: &mut Outgoing, pushed: Pushed) {
    match pushed {
        Pushed::Queued => stats.handed(sink, &out.event, out.observed),
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

/// Takes every report already waiting.
fn drain(reports: &mut mpsc::UnboundedReceiver<Report>, stats: &mut Stats, durable: &mut Durable) {
    while let Ok(r) = reports.try_recv() {
        settle(stats, durable, &r);
    }
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

fn encode(encoder: &Encoder, change: &Change) -> Event {
    encode_at(encoder, change, encoder.mode(), jiff::Timestamp::now())
}
