//! The running bridge: the watches feed the delta classifier, whose changes are encoded once,
//! logged durably, and handed to every sink's bounded queue; the sinks report back what their
//! destinations acknowledged, which moves each sink's cursor.
//!
//! Entry point: [`run`], which sets the parts up and hands them to the one event loop
//! ([`bridge`]). It can be driven in-process (the integration tests do) with a validated
//! config, a kube client and a shutdown future. A full sink queue holds the loop's events,
//! which stops it reading the watch channel, which stops the watches reading the apiserver:
//! backpressure end to end.

mod bridge;
mod durable;
mod elected;
mod feed;
mod routed;
mod stats;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::Validated;
use crate::event::Encoder;
use crate::ops::{self, Health, Metrics, Ops};
use crate::sinks::kafka::ExactlyOnceError;
use crate::sinks::{self, SinkError};
use crate::store::StoreError;
use crate::watch::{self, Observed, WatchError, WatchSettings};

use bridge::{Bridge, Parts};
use durable::{Durable, DurableSettings};
use routed::Routes;

use crate::route::engine::Router;

pub use stats::{SinkStats, Stats};

/// Why the bridge stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("sink `{0}` stopped unexpectedly")]
    SinkGone(String),
    #[error("sink `{0}` panicked")]
    SinkPanicked(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Metrics(#[from] ops::BindError),
    #[error("the config no longer validates")]
    Config(#[source] crate::config::ValidationError),
    #[error("the leader election task stopped")]
    ElectorGone,
}

impl PipelineError {
    /// A newer leader's exactly-once sink fenced this replica's: it may stand by again.
    pub fn is_fenced(&self) -> bool {
        matches!(self, PipelineError::Sink(e) if e.cause.downcast_ref::<ExactlyOnceError>()
            .is_some_and(|c| matches!(c, ExactlyOnceError::Fenced { .. })))
    }
}

impl From<sinks::Ended> for PipelineError {
    fn from(e: sinks::Ended) -> PipelineError {
        match e {
            sinks::Ended::Failed(e) => PipelineError::Sink(e),
            sinks::Ended::Panicked(sink) => PipelineError::SinkPanicked(sink.to_string()),
        }
    }
}

/// Runs the bridge until `shutdown` completes (then drains the sinks) or a fatal error.
/// With `metrics_address`, serves `/metrics`, `/healthz` and `/readyz` meanwhile.
pub async fn run(
    config: Validated,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> Result<Stats, PipelineError> {
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
    let ops = Arc::new(Ops {
        metrics: Metrics::new(),
        health: Health::new(
            scopes
                .iter()
                .map(|s| s.as_deref().unwrap_or("*").to_string()),
            config.sinks.iter().map(|(n, _)| n.clone()),
        ),
    });
    let server = match config.metrics_address {
        Some(address) => Some(ops::serve(address, ops.clone()).await?),
        None => None,
    };
    let outcome = match config.leader_election.clone() {
        Some(election) => elected::elected(config, client, shutdown, ops, scopes, election).await,
        None => bridge(config, client, shutdown, ops, scopes, None).await,
    };
    if let Some(s) = server {
        s.abort();
    }
    outcome
}

/// How long a stop waits for the sinks to deliver what they hold. Shared, so that whoever
/// stops the bridge can shorten it first: a term that lost its Lease stops at once (the new
/// leader sends again whatever was not committed).
#[derive(Debug, Clone)]
pub(crate) struct Grace(Arc<AtomicU64>);

impl Grace {
    fn new(d: Duration) -> Grace {
        Grace(Arc::new(AtomicU64::new(d.as_millis() as u64)))
    }

    fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, d: Duration) {
        self.0.store(d.as_millis() as u64, Ordering::Relaxed);
    }
}

async fn bridge(
    config: Validated,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
    ops: Arc<Ops>,
    scopes: Vec<crate::classify::Scope>,
    grace: Option<Grace>,
) -> Result<Stats, PipelineError> {
    // With routes, the apiserver filters by what every route's selector requires.
    let label_selector = match (
        config.watch.label_selector.clone(),
        config
            .routing
            .as_ref()
            .and_then(crate::config::union_selector),
    ) {
        (Some(own), Some(routes)) => Some(format!("{own},{routes}")),
        (own, routes) => own.or(routes),
    };
    let settings = Arc::new(WatchSettings {
        label_selector,
        field_selector: config.watch.field_selector.clone(),
        page_size: config.watch.page_size,
        timeout_seconds: config.watch.timeout_seconds,
        max_backoff: Duration::from_secs(u64::from(config.watch.max_backoff_seconds)),
        streaming: config.watch.streaming_list,
        resync: config
            .watch
            .resync_seconds
            .map(|s| Duration::from_secs(u64::from(s))),
        ops: ops.clone(),
    });
    let per_namespace = !config.watch.namespaces.is_empty();
    // An exactly-once sink keeps the resume point: it takes over (fencing any other replica)
    // before anything is read, so what it read is final.
    let keeper = config
        .sinks
        .iter()
        .find_map(|(name, v)| v.sink.keeper().map(|k| (name.clone(), k)));
    tokio::pin!(shutdown);
    let kept = match &keeper {
        // Taking over waits for unreachable brokers; a shutdown meanwhile ends it.
        Some((_, k)) => tokio::select! {
            kept = k.take_over(per_namespace) => Some(kept?),
            _ = &mut shutdown => return Ok(Stats::default()),
        },
        None => None,
    };
    let (durable, start) = Durable::open(DurableSettings {
        state: config.state.clone(),
        per_namespace,
        initial: config.watch.initial_list,
        sinks: config.sinks.iter().map(|(n, _)| n.clone()).collect(),
        ops: ops.clone(),
        keeper: keeper.map(|(name, _)| (name, kept.flatten())),
        router: config
            .routing
            .as_ref()
            .map(|r| Router::new(r.routes.clone(), r.rules.clone())),
    })
    .await?;
    ops.health.restored();
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let sinks = sinks::start(config.sinks, reports_tx, ops.clone(), durable.feed());

    // One watch per scope, shared by every sink.
    let (observed_tx, observed) = mpsc::channel::<Observed>(256);
    let mut watches: JoinSet<Result<(), WatchError>> = JoinSet::new();
    for scope in scopes {
        let resume = start.resume.get(&scope).cloned().flatten();
        watches.spawn(watch::run(
            client.clone(),
            scope,
            settings.clone(),
            resume,
            observed_tx.clone(),
        ));
    }
    drop(observed_tx);

    let encoder = Encoder::new(
        &config.cluster,
        config.encoding.data,
        config.encoding.redact.clone(),
    );
    tracing::info!(cluster = %config.cluster, "starting the bridge");
    Bridge::new(Parts {
        sinks,
        reports,
        watches,
        observed,
        durable,
        classifier: start.classifier,
        encoder,
        pending: start.pending.into_iter().collect(),
        routes: start.router.map(|router| {
            let feeds = config
                .routing
                .as_ref()
                .map(|r| r.feeds.clone())
                .unwrap_or_default();
            Routes::new(router, &feeds, config.encoding.data)
        }),
        ops,
        grace: grace
            .unwrap_or_else(|| Grace::new(Duration::from_secs(config.shutdown.grace_seconds))),
    })
    .run(shutdown)
    .await
}
