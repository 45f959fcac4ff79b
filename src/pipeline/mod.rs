//! The running bridge: the watches feed the delta classifier, whose changes are encoded once
//! and handed to every sink's bounded queue; the sinks report back what their destinations
//! acknowledged.
//!
//! Entry point: [`run`]. A full sink queue makes [`run`] wait, which stops it reading the
//! watch channel, which stops the watches reading the apiserver: backpressure end to end.

mod durable;
mod stats;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::classify::{Change, Classifier};
use crate::config::Validated;
use crate::event::{Encoder, Event};
use crate::sinks::{self, Report, SinkHandle};
use crate::watch::{self, Observed, WatchError, WatchSettings};

pub use stats::Stats;

/// Why the bridge stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error(transparent)]
    Sink(#[from] sinks::SinkError),
    #[error("sink `{0}` stopped unexpectedly")]
    SinkGone(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// How long a shutdown waits for the sinks to deliver what they hold.
const DRAIN: Duration = Duration::from_secs(15);

/// Observations taken together into one log append.
const BATCH: usize = 256;

/// Runs the bridge until `shutdown` completes (then drains the sinks) or a fatal error.
pub async fn run(
    config: Validated,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> Result<Stats, PipelineError> {
    let settings = Arc::new(WatchSettings {
        label_selector: config.watch.label_selector.clone(),
        field_selector: config.watch.field_selector.clone(),
        page_size: config.watch.page_size,
        timeout_seconds: config.watch.timeout_seconds,
        max_backoff: Duration::from_secs(u64::from(config.watch.max_backoff_seconds)),
        streaming: config.watch.streaming_list,
    });
    let (mut durable, start) = durable::Durable::open(&config)?;
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    let sinks: Vec<SinkHandle> = config
        .sinks
        .into_iter()
        .map(|(name, valid)| sinks::start(&name, valid, reports_tx.clone()))
        .collect();
    drop(reports_tx);

    // One watch per scope, shared by every sink.
    let (observed_tx, mut observed) = mpsc::channel::<Observed>(256);
    let scopes: Vec<_> = if config.watch.namespaces.is_empty() {
        vec![None]
    } else {
        config
            .watch
            .namespaces
            .iter()
            .map(|ns| Some(Arc::<str>::from(ns.as_str())))
            .collect()
    };
    let mut watches: JoinSet<Result<(), WatchError>> = JoinSet::new();
    for scope in scopes {
        let resume = start.resume.get(&scope).cloned().flatten();
        let handle = watch::spawn(
            client.clone(),
            scope,
            settings.clone(),
            resume,
            observed_tx.clone(),
        );
        watches.spawn(async move { handle.await.unwrap_or(Ok(())) });
    }
    drop(observed_tx);

    let mut classifier = start.classifier;
    let mut encoder = Encoder::new(
        &config.cluster,
        config.encoding.data,
        config.encoding.redact.clone(),
    );
    let mut stats = Stats::new(&sinks);
    tracing::info!(cluster = %config.cluster, sinks = sinks.len(), "kubecast started");
    tokio::pin!(shutdown);
    // Upkeep of the durable state: interval syncs, cursors, snapshots, compaction.
    let mut upkeep = tokio::time::interval(Duration::from_millis(200));
    upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the sinks had not acknowledged before the restart goes first, in order.
    for s in &sinks {
        for event in start.pending.get(&*s.name).into_iter().flatten() {
            if s.queue.send(event.clone()).await.is_err() {
                break;
            }
        }
    }

    let outcome: Result<(), PipelineError> = loop {
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            Some(report) = reports.recv() => {
                stats.report(&report);
                let (Report::Delivered { sink, seq } | Report::DeadLettered { sink, seq, .. }) = &report;
                durable.acked(sink, *seq);
            }
            _ = upkeep.tick() => if let Err(e) = durable.maintain(&classifier) { break Err(e.into()) },
            Some(done) = watches.join_next() => {
                if let Ok(Err(e)) = done {
                    break Err(e.into());
                }
            }
            item = observed.recv() => {
                let Some(first) = item else {
                    // Every watch has ended; only an error ends one.
                    break first_watch_error(&mut watches).await;
                };
                // A batch of what is ready: one log append (and fsync) for all of it.
                let mut items = vec![first];
                while items.len() < BATCH {
                    match observed.try_recv() {
                        Ok(i) => items.push(i),
                        Err(_) => break,
                    }
                }
                let mut events = Vec::new();
                for item in items {
                    let from_watch = matches!(item, Observed::Applied { .. } | Observed::Deleted { .. });
                    let position = matches!(item, Observed::ListStart { .. } | Observed::ListDone { .. } | Observed::Bookmark { .. })
                        .then(|| item.clone());
                    for change in classify(&mut classifier, item) {
                        let event = durable.event(encode(&mut encoder, &change), from_watch);
                        stats.emitted(&event);
                        events.push(event);
                    }
                    if let Some(p) = position {
                        durable.observed(&p);
                    }
                }
                // Logged before any sink sees it: the resume point never runs ahead of
                // what is stored.
                if let Err(e) = durable.commit() {
                    break Err(e.into());
                }
                // Some(None): shutdown; Some(Some(name)): the sink `name` has stopped.
                let mut failed: Option<Option<String>> = None;
                for event in events {
                    // Waiting here is the backpressure; a shutdown still gets through.
                    tokio::select! {
                        r = fan_out(&sinks, event) => if let Err(name) = r { failed = Some(Some(name)); break },
                        _ = &mut shutdown => { failed = Some(None); break }
                    }
                }
                match failed {
                    Some(None) => break Ok(()),
                    // The sink's own error is collected by `drain` below.
                    Some(Some(name)) => break Err(PipelineError::SinkGone(name)),
                    None => {}
                }
            }
        }
    };

    watches.abort_all();
    drop(observed);
    let drained = drain(sinks, &mut reports, &mut stats, &mut durable).await;
    stats.log_summary(classifier.len());
    if let Err(e) = durable.close(&classifier) {
        tracing::error!(error = %e, "saving the state at shutdown failed");
        return Err(e.into());
    }
    // A failed sink's own error (from `drain`) says more than `SinkGone`.
    drained?;
    outcome?;
    Ok(stats)
}

/// The first error among the ended watches.
async fn first_watch_error(
    watches: &mut JoinSet<Result<(), WatchError>>,
) -> Result<(), PipelineError> {
    while let Some(done) = watches.join_next().await {
        if let Ok(Err(e)) = done {
            return Err(e.into());
        }
    }
    Ok(())
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

/// Hands `event` to every sink's queue, waiting while one is full. The error names a sink
/// whose task has ended.
async fn fan_out(sinks: &[SinkHandle], event: Arc<Event>) -> Result<(), String> {
    for s in sinks {
        if s.queue.send(event.clone()).await.is_err() {
            return Err(s.name.to_string());
        }
    }
    Ok(())
}

/// Closes every queue and waits (up to [`DRAIN`]) for the sinks to deliver what they hold.
async fn drain(
    sinks: Vec<SinkHandle>,
    reports: &mut mpsc::UnboundedReceiver<sinks::Report>,
    stats: &mut Stats,
    durable: &mut durable::Durable,
) -> Result<(), PipelineError> {
    let mut first_error = None;
    let deadline = tokio::time::Instant::now() + DRAIN;
    for SinkHandle { name, queue, task } in sinks {
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
                tracing::error!(sink = %name, "shutdown: the sink did not deliver everything in time");
            }
        }
    }
    while let Ok(r) = reports.try_recv() {
        stats.report(&r);
        let (Report::Delivered { sink, seq } | Report::DeadLettered { sink, seq, .. }) = &r;
        durable.acked(sink, *seq);
    }
    first_error.map_or(Ok(()), Err)
}
