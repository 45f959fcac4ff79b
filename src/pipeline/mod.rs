//! The running bridge: the watches feed the delta classifier, whose changes are encoded once
//! and handed to every sink's bounded queue; the sinks report back what their destinations
//! acknowledged.
//!
//! Entry point: [`run`]. A full sink queue makes [`run`] wait, which stops it reading the
//! watch channel, which stops the watches reading the apiserver: backpressure end to end.

mod bridge;
mod durable;
mod stats;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::Validated;
use crate::event::Encoder;
use crate::sinks::{self, SinkHandle};
use crate::watch::{self, Observed, WatchError, WatchSettings};

use bridge::{Bridge, Halt};

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
    let (durable, start) = durable::Durable::open(&config)?;
    let (reports_tx, reports) = mpsc::unbounded_channel();
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

    let encoder = Encoder::new(
        &config.cluster,
        config.encoding.data,
        config.encoding.redact.clone(),
    );
    let mut bridge = Bridge::new(sinks, reports, durable, start.classifier, encoder);
    tracing::info!(cluster = %config.cluster, sinks = bridge.sinks.len(), "kubecast started");
    tokio::pin!(shutdown);

    let outcome = async {
        // What the sinks had not acknowledged before the restart goes first, in order.
        for (sink, events) in start.pending {
            for event in events {
                bridge.hand_to(Some(&sink), event, &mut shutdown).await?;
            }
        }
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => return Err(Halt::Shutdown),
                Some(report) = bridge.reports.recv() => bridge.on_report(&report),
                _ = bridge.upkeep.tick() => bridge.on_upkeep()?,
                Some(done) = watches.join_next() => {
                    if let Ok(Err(e)) = done {
                        return Err(Halt::Failed(e.into()));
                    }
                }
                item = observed.recv() => {
                    let Some(first) = item else {
                        // Every watch has ended; only an error ends one.
                        return first_watch_error(&mut watches).await.map_err(Halt::Failed);
                    };
                    // A batch of what is ready: one log append (and fsync) for all of it.
                    let mut items = vec![first];
                    while items.len() < BATCH {
                        match observed.try_recv() {
                            Ok(i) => items.push(i),
                            Err(_) => break,
                        }
                    }
                    let events = bridge.process(items)?;
                    for event in events {
                        bridge.hand_to(None, event, &mut shutdown).await?;
                    }
                }
            }
        }
    }
    .await;
    let outcome: Result<(), PipelineError> = match outcome {
        Ok(()) | Err(Halt::Shutdown) => Ok(()),
        Err(Halt::Failed(e)) => Err(e),
    };

    watches.abort_all();
    drop(observed);
    bridge.finish(outcome).await
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
