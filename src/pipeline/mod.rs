//! The running bridge: the watches feed the delta classifier, whose changes are encoded once,
//! numbered (and held until every sink acknowledges them, or logged durably), and handed to
//! every sink's bounded queue; the sinks report back what their destinations acknowledged,
//! which moves each sink's cursor and the resume point.
//!
//! Entry point: [`run`], which sets the parts up and hands them to the one event loop
//! (`bridge`); with leader election a replica runs the bridge for each term it leads
//! (`elected`), and with `sharding` one bridge per shard it holds (`sharded`). It can be
//! driven in-process (the integration tests do) with a validated config, a kube client and a
//! shutdown future. A full sink queue holds the loop's events, which stops it reading the
//! watch channel, which stops the watches reading the apiserver: backpressure end to end.

mod bridge;
mod durable;
mod elected;
mod fanout;
mod feed;
pub mod kept;
mod resources;
mod routed;
mod sharded;
mod stats;
mod trim;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::Validated;
use crate::event::Encoder;
use crate::ops::{self, Ops};
use crate::sinks::{self, SinkError};
use crate::store::StoreError;
use crate::watch::{self, Observed, Target, WatchError, WatchSettings};

pub use resources::{Planned, ResourceError, grants_offline, plan as plan_resources, plan_served};

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
    #[error("a shard's bridge panicked")]
    ShardPanicked,
    #[error(transparent)]
    Resource(#[from] ResourceError),
    #[error(transparent)]
    Kept(#[from] kept::KeptError),
}

impl PipelineError {
    /// The config names something the cluster does not serve or the config may not watch:
    /// like an invalid config, exit 2.
    pub fn is_config(&self) -> bool {
        matches!(self, PipelineError::Resource(ResourceError::Invalid { .. }))
    }

    /// A newer leader's exactly-once sink fenced this replica's: it may stand by again.
    pub fn is_fenced(&self) -> bool {
        matches!(self, PipelineError::Sink(e) if e.fenced)
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
    // The watch scopes are added as the resources are resolved.
    let ops = Arc::new(Ops::new(config.sinks.iter().map(|(n, _)| n.clone())));
    let server = match config.metrics_address {
        Some(address) => Some(ops::serve(address, ops.clone()).await?),
        None => None,
    };
    let outcome = match config.leader_election.clone() {
        Some(election) if config.shards > 1 => {
            sharded::sharded(config, client, shutdown, ops, election).await
        }
        Some(election) => elected::elected(config, client, shutdown, ops, election).await,
        None => {
            // A single replica publishes all along: it leads (kubecast_leader 1), so rules
            // that look for a leader hold with or without election.
            ops.metrics.leader(true);
            bridge(config, client, shutdown, ops, None).await
        }
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
    grace: Option<Grace>,
) -> Result<Stats, PipelineError> {
    let max_backoff = Duration::from_secs(u64::from(config.watch.max_backoff_seconds));
    tokio::pin!(shutdown);
    // What each `watch.resources` entry names, from the apiserver's discovery.
    let planned = tokio::select! {
        p = resources::plan(&client, &config.watch, max_backoff) => p?,
        _ = &mut shutdown => return Ok(Stats::default()),
    };
    // With routes, the apiserver filters by what every route's selector requires.
    let route_selector = config
        .routing
        .as_ref()
        .and_then(crate::config::union_selector);
    let resolved: Vec<Arc<str>> = planned
        .iter()
        .filter_map(|p| match &p.target {
            Target::Resolved(r) => Some(r.key().clone()),
            Target::Pending { .. } => None,
        })
        .collect();
    // Pods' positions were per namespace in state written before other kinds were watched.
    let per_namespace = planned
        .iter()
        .any(|p| p.is_pods() && !p.namespaces.is_empty());
    // An exactly-once sink keeps the resume point: it takes over (fencing any other replica)
    // before anything is read, so what it read is final.
    let keeper = config
        .sinks
        .iter()
        .find_map(|(name, v)| v.sink.keeper().map(|k| (name.clone(), k)));
    let kept = match &keeper {
        // Taking over waits for unreachable brokers; a shutdown meanwhile ends it.
        Some((_, k)) => tokio::select! {
            kept = k.take_over() => Some(
                kept?
                    .map(kept::KeptState::decode)
                    .transpose()?
                    .map(|k| k.of_shard(config.shard)),
            ),
            _ = &mut shutdown => return Ok(Stats::default()),
        },
        None => None,
    };
    // After a change of shard count: what the earlier shards had passed on, left out of the
    // watches that resume from the earliest of their positions.
    let floors = kept
        .as_ref()
        .and_then(|k| k.as_ref())
        .and_then(|k| k.floors.clone())
        .map(Arc::new);
    // Alert rules of other kinds judge the resources they name, as watched.
    let router = match &config.routing {
        Some(r) => {
            let mut rules = r.rules.clone();
            resources::bind_rules(&client, &mut rules, &planned).await?;
            Some(
                Router::new(r.routes.clone(), rules).with_redaction(config.encoding.redact.clone()),
            )
        }
        None => None,
    };
    let (durable, start) = Durable::open(DurableSettings {
        state: config.state.clone(),
        per_namespace,
        initial: config.watch.initial_list,
        sinks: config.sinks.iter().map(|(n, _)| n.clone()).collect(),
        ops: ops.clone(),
        resources: resolved.iter().map(|k| k.to_string()).collect(),
        keeper: keeper.map(|(name, _)| (name, kept.flatten())),
        router,
    })
    .await?;
    ops.health.restored();
    let mut valid_sinks = config.sinks;
    // A sink that re-sends standing alerts (Alertmanager's) starts from the restored episodes,
    // as they stand now: a resolve that fell due while kubecast was down is not sent as firing.
    if let Some(router) = start.router.as_ref() {
        let now = routed::now_ms();
        for (name, v) in &mut valid_sinks {
            let standing = || routed::standing_alerts(router, &config.cluster, name, now);
            v.sink.restore_alerts(&standing);
        }
    }
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let sinks = sinks::start(valid_sinks, reports_tx, ops.clone(), durable.feed());

    // One watch per (resource, scope), shared by every sink.
    let (observed_tx, observed) = mpsc::channel::<Observed>(256);
    let mut watches: JoinSet<Result<(), WatchError>> = JoinSet::new();
    for p in planned {
        let label_selector = match (p.label_selector.clone(), route_selector.clone()) {
            (Some(own), Some(routes)) => Some(format!("{own},{routes}")),
            (own, routes) => own.or(routes),
        };
        let settings = Arc::new(WatchSettings {
            label_selector,
            field_selector: p.field_selector.clone(),
            page_size: config.watch.page_size,
            timeout_seconds: config.keepalive.watch_timeout(config.watch.timeout_seconds),
            silence: config.keepalive.watch_silence,
            max_backoff,
            streaming: config.watch.streaming_list,
            resync: config
                .watch
                .resync_seconds
                .map(|s| Duration::from_secs(u64::from(s))),
            ops: ops.clone(),
            shard: config.shard,
            floors: floors.clone(),
        });
        if let Target::Resolved(r) = &p.target {
            // Not ready until each scope has listed, from the start.
            for scope in watch::scopes(r, &p.namespaces) {
                ops.health.expect(scope.label(), scope.describe());
            }
        }
        watches.spawn(watch::run_resource(
            client.clone(),
            p.target,
            p.namespaces,
            settings,
            start.resume.clone(),
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
        resources: resolved,
        durable,
        classifier: start.classifier,
        encoder,
        pending: start.pending.into_iter().collect(),
        routes: match start.router {
            Some(router) => {
                let feeds = config
                    .routing
                    .as_ref()
                    .map(|r| r.feeds.clone())
                    .unwrap_or_default();
                Routes::new(router, &feeds, config.encoding.data)
            }
            None => Routes::trivial(),
        },
        ops,
        grace: grace
            .unwrap_or_else(|| Grace::new(Duration::from_secs(config.shutdown.grace_seconds))),
    })
    .run(shutdown)
    .await
}
