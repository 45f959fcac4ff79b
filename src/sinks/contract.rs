//! The one contract between the pipeline and a sink.
//!
//! A sink kind is a config type that implements [`SinkSpec`] (pure validation into a runnable
//! sink) and a validated sink that implements [`Sink`] (run until the queue closes). What the
//! pipeline gives a running sink: its bounded queue ([`QueueRx`]) and its [`Acks`]. What the
//! sink gives back: one [`Report`] per event in sequence order — delivered on the
//! destination's own acknowledgement, or dead-lettered with a reason — and, if it cannot go
//! on, a [`SinkError`] with its cause, which stops kubecast (exit 1).
//!
//! Every sink gets the same envelope from the contract: its `queue` limits and its
//! `dead_letter` destination ([`Common`]); a sink's own config holds only its own fields.
//! To add a sink: a folder under `src/sinks/` with its config (implementing [`SinkSpec`]) and
//! its task (implementing [`Sink`]), and one line in `sink_kinds!` in `src/sinks/mod.rs`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use super::config::Common;
use super::dead_letter::DeadLetter;
use super::queue::{CompatShape, QueueConfig, QueueRx};
use crate::event::Event;
use crate::model::ChangeKind;
use crate::ops::Ops;
use crate::vocab::Issue;

/// A sink kind's config (the fields under `sinks.NAME` besides `type`, `queue` and
/// `dead_letter`).
pub trait SinkSpec: Serialize + DeserializeOwned + Debug + Clone + Send + 'static {
    /// Whether this sink writes dead letters to a `dead_letter.topic` of its own (Kafka).
    /// Every sink can write them to `dead_letter.file`.
    const DEAD_LETTER_TOPIC: bool = false;

    /// Checks the values without any I/O and builds the sink that will run. `at` is the
    /// field path of this sink (`sinks.NAME`), for the issues it reports; `common` is its
    /// envelope; `cluster` the configured cluster name (for topic templates).
    fn validate(
        &self,
        at: &str,
        common: &Common,
        cluster: &str,
    ) -> Result<Box<dyn Sink>, Vec<Issue>>;
}

/// A validated sink, ready to run.
pub trait Sink: Debug + Send + 'static {
    /// Takes events from `queue` until it is closed and empty, and returns once every event
    /// it took has been reported through `acks`, in sequence order. An error means the sink
    /// cannot work (rejected credentials, an unwritable file): kubecast stops on it. Errors a
    /// retry can fix (a broker down) are retried inside, never returned.
    fn run(
        self: Box<Self>,
        queue: QueueRx,
        acks: Acks,
    ) -> BoxFuture<'static, Result<(), SinkError>>;

    /// A sink that keeps alerts standing at its destination and sends them again (the
    /// Alertmanager sink) takes, before it runs, the alert events of every firing episode
    /// and of those resolved within the last 15 minutes, from the durable state (`standing`
    /// makes them; other sinks never call it): after a restart or a take-over it re-sends
    /// them at once.
    fn restore_alerts(&mut self, _standing: &dyn Fn() -> Vec<Arc<Event>>) {}

    /// Which events this sink takes of those its routes send it (of every event without
    /// routes). The pipeline never hands it the others, and moves its cursor past them as it
    /// does past events its routes skip: a sink that takes only alerts (Alertmanager's)
    /// holds back nothing but alerts.
    fn takes(&self) -> Takes {
        Takes::Every
    }

    /// A sink that keeps the pipeline's resume point at its destination (the exactly-once
    /// Kafka sink) returns its [`Keeper`]; the pipeline then starts from what it kept.
    fn keeper(&self) -> Option<Arc<dyn Keeper>> {
        None
    }
}

/// Which events a sink kind takes ([`Sink::takes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Takes {
    /// Every event it is sent.
    #[default]
    Every,
    /// Only alert events (`io.kubecast.alert.firing` and `.resolved`).
    Alerts,
}

impl Takes {
    /// Whether a sink that takes `self` takes an event of `kind`.
    pub fn admits(self, kind: ChangeKind) -> bool {
        match self {
            Takes::Every => true,
            Takes::Alerts => kind.is_alert(),
        }
    }
}

/// Keeps the pipeline's resume point (the last committed event, the watch positions and the
/// state of each object as of it) at the sink's destination, in the same unit of work as the
/// events: what a restart starts from is then exactly what the destination shows. The
/// objects' states are opaque bytes to the keeper: the pipeline encodes and decodes them.
pub trait Keeper: Send + Sync {
    /// Takes the destination over from any other replica, so that nothing the others send
    /// from now on becomes visible, then reads what was last committed (`None`: nothing
    /// ever was). Retries while the destination is unreachable; errors are fatal.
    fn take_over(&self) -> BoxFuture<'static, Result<Option<Kept>, SinkError>>;

    /// While this replica stands by: keeps reading what the leader commits, so that a
    /// take-over has only the rest to read. Runs until dropped.
    fn keep_warm(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
}

/// What a [`Keeper`] had committed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Kept {
    /// The sequence number of the last event committed.
    pub seq: u64,
    /// Per scope label, the resourceVersion the watch resumes after; a scope missing here
    /// is listed again.
    pub positions: BTreeMap<String, String>,
    /// Each object's state as committed, by key (its uid), as the pipeline encoded it.
    pub states: Vec<(String, Vec<u8>)>,
    /// Where this keeper's own checkpoint is missing or older than those of another shard
    /// count (`sharding.shards` changed): that count's positions, per shard index, for
    /// continuing where its shards stopped (`positions` is then empty).
    pub earlier: Option<Vec<BTreeMap<String, String>>>,
}

/// What became of an event a sink took, as its window settles it (in sequence order).
#[derive(Debug)]
pub enum Settled {
    /// The destination acknowledged it.
    Delivered(Arc<Event>),
    /// The destination refused it (or it can never be sent), for this reason.
    Refused(Arc<Event>, String),
}

/// What a sink says about an event, in the order of its acks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The destination acknowledged the event.
    Delivered { sink: Arc<str>, seq: u64 },
    /// The event can never be delivered to this sink; it went to the dead-letter
    /// destination (or, without one, was logged as an error) with `reason`.
    DeadLettered {
        sink: Arc<str>,
        seq: u64,
        reason: String,
    },
}

impl Report {
    /// The sink and the sequence number this report settles (with everything before it).
    pub fn settles(&self) -> (&str, u64) {
        match self {
            Report::Delivered { sink, seq } | Report::DeadLettered { sink, seq, .. } => {
                (sink, *seq)
            }
        }
    }
}

/// Why a sink stopped for good: which sink, and the cause (its own module's error).
#[derive(Debug, thiserror::Error)]
#[error("sink `{sink}` failed")]
pub struct SinkError {
    pub sink: Arc<str>,
    #[source]
    pub cause: Box<dyn std::error::Error + Send + Sync>,
    /// Another replica took the destination over (a newer leader's keeper fenced this
    /// one): this replica may stand by again rather than exit.
    pub fenced: bool,
}

/// What a sink task reports through. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Acks {
    sink: Arc<str>,
    reports: mpsc::UnboundedSender<Report>,
    dead_letter: Arc<DeadLetter>,
    ops: Arc<Ops>,
    feed: KeeperFeed,
}

/// What the pipeline tells a [`Keeper`] as it goes (other sinks ignore it).
#[derive(Debug, Clone)]
pub struct KeeperFeed {
    /// The highest sequence number every sink but the keeper has settled.
    pub settled: watch::Receiver<u64>,
    /// The pipeline's [`Step`]s, taken once by the keeper (`None` for other sinks and for
    /// sinks run without a pipeline).
    pub steps: Option<Arc<std::sync::Mutex<Option<mpsc::UnboundedReceiver<Step>>>>>,
}

/// One batch of the pipeline as a [`Keeper`] commits it. A change becomes any number of
/// events (one per route that takes it, alerts), some for other sinks only, and moves its
/// object's state; a restart from a checkpoint in the middle of a change would number its
/// events again differently. So a keeper commits whole steps: the events up to `upto` that
/// are its own, the object states and the positions after them, and the checkpoint `upto`.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// The sequence number of the last event numbered by the end of the step.
    pub upto: u64,
    /// The last event of the step that goes to the keeper, if any: the keeper commits the
    /// step once it has taken that event.
    pub keeper_last: Option<u64>,
    /// The watch positions after the step (per scope label; a scope missing is listed
    /// again).
    pub positions: BTreeMap<String, String>,
    /// The state of each object the step moved, by key (its uid), in order (an object may
    /// come twice; the last one stands); `None`: the object is gone. Opaque to the keeper.
    pub states: Vec<(Arc<str>, Option<Vec<u8>>)>,
}

impl KeeperFeed {
    /// A feed for sinks run without a pipeline around them (benchmarks): nothing is waited
    /// for and no position moves.
    pub fn idle() -> KeeperFeed {
        KeeperFeed {
            settled: watch::channel(u64::MAX).1,
            steps: None,
        }
    }
}

/// The dead-letter file refused a write: the event would be lost, so the sink stops.
#[derive(Debug, thiserror::Error)]
#[error("writing the dead letter of event {id}")]
pub struct DeadLetterError {
    id: String,
    #[source]
    source: std::io::Error,
}

impl Acks {
    /// The acks of sink `sink`, reported into `reports`; `feed` is for a [`Keeper`].
    pub fn new(
        sink: Arc<str>,
        reports: mpsc::UnboundedSender<Report>,
        dead_letter: DeadLetter,
        ops: Arc<Ops>,
        feed: KeeperFeed,
    ) -> Acks {
        Acks {
            sink,
            reports,
            dead_letter: Arc::new(dead_letter),
            ops,
            feed,
        }
    }

    /// The highest sequence number that every sink but the [`Keeper`] has settled: a
    /// keeper commits no event beyond it, so that a restart from its checkpoint sends the
    /// others everything they had not acknowledged.
    pub fn settled_by_others(&self) -> watch::Receiver<u64> {
        self.feed.settled.clone()
    }

    /// The pipeline's steps ([`Step`]): `Some` once, for the keeper run by a pipeline.
    pub fn take_steps(&self) -> Option<mpsc::UnboundedReceiver<Step>> {
        let slot = self.feed.steps.as_ref()?;
        // The slot holds a receiver or nothing; a panic elsewhere does not spoil it.
        slot.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The sink is connected to its destination (`true`) or lost it: readiness and the
    /// `kubecast_sink_connected` gauge follow.
    pub fn connected(&self, up: bool) {
        self.ops.sink_connected(&self.sink, up);
    }

    /// The sink lost its destination for a reason readiness should name (never a secret).
    pub fn down_because(&self, why: String) {
        self.ops.sink_down(&self.sink, why);
    }

    /// The counter of the destination's answers with status `code` (HTTP sinks); the sink
    /// keeps it and counts each answer.
    pub fn responses(&self, code: u16) -> prometheus_client::metrics::counter::Counter {
        self.ops.metrics.http_responses(&self.sink, code)
    }

    /// The metrics of Alertmanager instance `instance` (its URL as logs show it).
    pub fn alertmanager_metrics(&self, instance: &str) -> crate::ops::AlertmanagerMetrics {
        self.ops.metrics.alertmanager(&self.sink, instance)
    }

    /// The OTLP receiver rejected `n` records of a request it accepted (a partial success).
    pub fn otlp_rejected(&self, n: u64) {
        self.ops.metrics.otlp_rejected(&self.sink, n);
    }

    /// `n` events are sent again (after a reconnect).
    pub fn retried(&self, n: u64) {
        self.ops.metrics.retried(&self.sink, n);
    }

    /// The sink's name, for logs.
    pub fn sink(&self) -> &Arc<str> {
        &self.sink
    }

    /// The destination acknowledged `seq` (and, since acks come in order, all before it).
    pub fn delivered(&self, seq: u64) {
        // The receiver lives as long as the pipeline; after it is gone nobody counts.
        let _ = self.reports.send(Report::Delivered {
            sink: self.sink.clone(),
            seq,
        });
    }

    /// `event` can never be delivered here: write it to the dead-letter file (a sink with a
    /// dead-letter destination of its own writes there and calls [`Acks::reported_dead`])
    /// and report it.
    pub async fn dead_letter(&self, event: &Event, reason: String) -> Result<(), SinkError> {
        self.dead_letter
            .write(&self.sink, event, &reason)
            .await
            .map_err(|source| {
                self.failed(DeadLetterError {
                    id: event.id.clone(),
                    source,
                })
            })?;
        self.reported_dead(event.seq, reason);
        Ok(())
    }

    /// Reports settled events in order: delivered, or dead-lettered with the reason.
    pub async fn settle(&self, settled: Vec<Settled>) -> Result<(), SinkError> {
        for s in settled {
            match s {
                Settled::Delivered(event) => self.delivered(event.seq),
                Settled::Refused(event, reason) => self.dead_letter(&event, reason).await?,
            }
        }
        Ok(())
    }

    /// Reports `seq` as dead-lettered (after the sink stored it somewhere itself).
    pub fn reported_dead(&self, seq: u64, reason: String) {
        let _ = self.reports.send(Report::DeadLettered {
            sink: self.sink.clone(),
            seq,
            reason,
        });
    }

    /// This sink's fatal error, caused by `cause`.
    pub fn failed(&self, cause: impl std::error::Error + Send + Sync + 'static) -> SinkError {
        SinkError::new(self.sink.clone(), cause)
    }
}

impl SinkError {
    /// Sink `sink` cannot go on, because of `cause`.
    pub fn new(sink: Arc<str>, cause: impl std::error::Error + Send + Sync + 'static) -> SinkError {
        SinkError {
            sink,
            cause: Box::new(cause),
            fenced: false,
        }
    }

    /// Marks the error as another replica's take-over ([`SinkError::fenced`]).
    pub fn fenced(mut self) -> SinkError {
        self.fenced = true;
        self
    }
}

/// A sink that passed validation, with its envelope.
#[derive(Debug)]
pub struct ValidSink {
    pub queue: QueueConfig,
    /// Which events leave the queue in a compatibility shape.
    pub compat: CompatShape,
    pub dead_letter: DeadLetter,
    pub sink: Box<dyn Sink>,
}

impl ValidSink {
    /// Validates the envelope and then `spec` (`name` is the sink's key under `sinks`),
    /// reporting every issue of both.
    pub fn validate<S: SinkSpec>(
        name: &str,
        spec: &S,
        common: &Common,
        cluster: &str,
    ) -> Result<ValidSink, Vec<Issue>> {
        let at = format!("sinks.{name}");
        let mut issues = common.check(&at, S::DEAD_LETTER_TOPIC);
        match spec.validate(&at, common, cluster) {
            Ok(sink) if issues.is_empty() => Ok(ValidSink {
                queue: common.queue.clone(),
                compat: CompatShape {
                    all: common.compat,
                    routes: common
                        .route_compat
                        .iter()
                        .map(|(r, c)| (Arc::from(r.as_str()), *c))
                        .collect(),
                },
                dead_letter: DeadLetter::new(
                    common.dead_letter.as_ref().and_then(|d| d.file.clone()),
                ),
                sink,
            }),
            Ok(_) => Err(issues),
            Err(more) => {
                issues.extend(more);
                Err(issues)
            }
        }
    }
}
