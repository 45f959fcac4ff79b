//! The pipeline's side of the durable state: what a restart resumes from, each event's place
//! in the stream, and logging each batch (its events and the watch positions they move)
//! before the events go to the sinks.
//!
//! Entry point: [`Durable::open`]. Without `state.dir` it keeps nothing (events are numbered
//! by a counter of this process) and the rest is a no-op, so the pipeline reads the same
//! either way. Disk work (appends, fsyncs, snapshots, compaction) never runs on a runtime
//! worker: on the thread of a multi-threaded runtime's `block_on` (where `kubecast run`'s
//! event loop lives) it runs in place, elsewhere on tokio's blocking pool. The event loop
//! awaits it either way, so the store is never used by two at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::classify::{Classifier, label_of_stored};
use crate::config::{InitialList, StateConfig};
use crate::event::Event;
use crate::model::ChangeKind;
use crate::ops::Ops;
use crate::route::engine::{ObjectState, Router};
use crate::sinks::{KeeperFeed, Kept, Step};
use crate::store::{Record, Snapshot, Store, StoreError, StoreSettings};
use crate::watch::Observed;

use super::feed::{Feed, resume_points};
use super::routed::To;

/// What the durable state needs to know of the config.
#[derive(Debug, Clone)]
pub struct DurableSettings {
    pub state: StateConfig,
    /// Pods are watched per namespace: how the scope of a Pod event logged before other
    /// kinds were watched is derived (its namespace, or `*`).
    pub per_namespace: bool,
    /// The keys of the resources watched (resolved at start); objects of others are
    /// forgotten. A custom resource still waited for is not among them yet.
    pub resources: Vec<String>,
    pub initial: InitialList,
    /// The configured sinks' names: each has a cursor.
    pub sinks: Vec<String>,
    /// Where the buffer's size and fsync times are recorded.
    pub ops: Arc<Ops>,
    /// The sink that keeps the resume point in its destination (exactly-once Kafka), with
    /// what it had committed; then there is no state directory.
    pub keeper: Option<(String, Option<Kept>)>,
    /// With routes or alert rules: the router, whose state is restored with the rest.
    pub router: Option<Router>,
}

/// What the pipeline starts from.
pub struct Start {
    pub classifier: Classifier,
    /// Per scope label, the resourceVersion to watch from; missing or `None`: list first.
    pub resume: HashMap<String, Option<String>>,
    /// Per sink, the events it has not acknowledged, oldest first.
    pub pending: BTreeMap<String, Vec<Arc<Event>>>,
    /// The router, restored.
    pub router: Option<Router>,
}

pub struct Durable {
    /// `None` without a state directory, and while a blocking call has it.
    store: Option<Store>,
    /// The next sequence number when there is no store.
    next_seq: u64,
    /// Per scope label, the resourceVersion a restart watches from (`None`: list again).
    positions: HashMap<Arc<str>, Option<String>>,
    per_namespace: bool,
    batch: Vec<Record>,
    snapshot_due: bool,
    ops: Arc<Ops>,
    feed: Feed,
    /// With a keeper that takes steps: the keeper's place among the sinks (index, name), and
    /// the step under way.
    keeper_at: Option<(usize, Arc<str>)>,
    step: Step,
}

impl Durable {
    /// Opens the state directory (if configured) and rebuilds the known state and the
    /// watch positions from its snapshot and the log after it.
    pub async fn open(settings: DurableSettings) -> Result<(Durable, Start), StoreError> {
        tokio::task::spawn_blocking(move || Durable::open_blocking(settings))
            .await
            .map_err(|e| StoreError::Worker(e.to_string()))?
    }

    fn open_blocking(s: DurableSettings) -> Result<(Durable, Start), StoreError> {
        let mut durable = Durable {
            store: None,
            next_seq: 1,
            positions: HashMap::new(),
            per_namespace: s.per_namespace,
            batch: Vec::new(),
            snapshot_due: false,
            ops: s.ops.clone(),
            feed: Feed::new(&s.sinks, s.keeper.as_ref().map(|(n, _)| n.as_str()), 0),
            keeper_at: None,
            step: Step::default(),
        };
        let mut router = s.router;
        if let Some((keeper, kept)) = s.keeper {
            return Ok(durable.kept(keeper, kept, &s.sinks, s.initial, &s.resources, router));
        }
        let Some(dir) = &s.state.dir else {
            let start = Start {
                classifier: Classifier::new(s.initial),
                resume: HashMap::new(),
                pending: BTreeMap::new(),
                router,
            };
            return Ok((durable, start));
        };
        let settings = StoreSettings {
            dir: dir.clone(),
            fsync: s.state.fsync,
            fsync_interval: Duration::from_millis(s.state.fsync_interval_ms),
            segment_bytes: s.state.segment_mib * 1024 * 1024,
            snapshot_interval: Duration::from_secs(s.state.snapshot_interval_seconds),
        };
        let (store, restored) = Store::open(settings, &s.sinks)?;
        let fresh = restored.snapshot.next_seq == 0 && restored.replay.is_empty();
        let mut classifier = if fresh {
            Classifier::new(s.initial)
        } else {
            Classifier::restored(s.initial, restored.snapshot.known)
        };
        durable.store = Some(store);
        for (scope, rv) in restored.snapshot.positions {
            durable
                .positions
                .insert(label_of_stored(scope.as_deref()).into(), rv);
        }
        if let (Some(r), Some(snap)) = (router.as_mut(), restored.snapshot.routing) {
            r.restore_snapshot(snap);
        }
        for record in restored.replay {
            match record {
                // With a router, the pod states below are the known state.
                Record::Event { event, from_watch } if router.is_none() => {
                    // A logged event moves its object's known state as it did when emitted.
                    classifier.restore_object(
                        &event.uid,
                        &event.resource,
                        &event.namespace,
                        &event.name,
                        &event.rv,
                        event.kind == ChangeKind::Deleted,
                    );
                    if from_watch {
                        let label = event.scope_key(durable.per_namespace);
                        durable.positions.insert(label, Some(event.rv.clone()));
                    }
                }
                Record::Event { .. } => {}
                Record::Position { scope, rv, .. } => {
                    durable
                        .positions
                        .insert(label_of_stored(scope.as_deref()).into(), rv);
                }
                Record::State {
                    state, from_watch, ..
                } => {
                    classifier.restore_object(
                        &state.uid,
                        state.resource_key(),
                        &state.namespace,
                        &state.name,
                        &state.rv,
                        state.gone,
                    );
                    if let Some(r) = router.as_mut() {
                        r.restore(&state);
                    }
                    if from_watch {
                        let label = durable.state_scope(&state);
                        durable.positions.insert(label, Some(state.rv.clone()));
                    }
                }
            }
        }
        let keys: Vec<&str> = s.resources.iter().map(String::as_str).collect();
        classifier.retain_resources(&keys);
        let mut pending = restored.pending;
        if let Some(r) = &router {
            // Each sink gets back only what its routes sent it.
            for (sink, events) in pending.iter_mut() {
                events.retain(|e| r.feeds(e.route.as_deref(), sink));
            }
        }
        let unacked: usize = pending.values().map(Vec::len).sum();
        tracing::info!(
            dir = %dir.display(),
            fresh,
            known_objects = classifier.len(),
            unacknowledged = unacked,
            positions = ?durable.positions,
            "state restored"
        );
        let start = Start {
            classifier,
            resume: resume_of(&durable.positions),
            pending,
            router,
        };
        Ok((durable, start))
    }

    /// Starts from what the keeper had committed (or afresh when it had nothing). With a
    /// router, the keeper commits whole steps and the routing state with them.
    fn kept(
        mut self,
        keeper: String,
        kept: Option<Kept>,
        sinks: &[String],
        initial: InitialList,
        resources: &[String],
        mut router: Option<Router>,
    ) -> (Durable, Start) {
        let from = kept.as_ref().map_or(0, |k| k.seq);
        self.next_seq = from + 1;
        self.step.upto = from;
        self.feed = Feed::new(sinks, Some(&keeper), from);
        if router.is_some() {
            self.feed = self.feed.with_steps();
            let index = sinks
                .iter()
                .position(|s| *s == keeper)
                .unwrap_or(usize::MAX);
            self.keeper_at = Some((index, keeper.as_str().into()));
        }
        let Some(kept) = kept else {
            let start = Start {
                classifier: Classifier::new(initial),
                resume: HashMap::new(),
                pending: BTreeMap::new(),
                router,
            };
            return (self, start);
        };
        // Positions are by scope label; one no watch has (the config changed) is not used.
        self.positions = kept
            .positions
            .into_iter()
            .map(|(scope, rv)| (Arc::from(scope), Some(rv)))
            .collect();
        if let Some(r) = router.as_mut() {
            for state in &kept.routing {
                r.restore(state);
            }
        }
        tracing::info!(
            sink = keeper,
            seq = kept.seq,
            known_objects = kept.known.len(),
            routing_states = kept.routing.len(),
            positions = ?self.positions,
            "state restored from the exactly-once sink's checkpoint"
        );
        let mut classifier = Classifier::restored(initial, kept.known);
        let keys: Vec<&str> = resources.iter().map(String::as_str).collect();
        classifier.retain_resources(&keys);
        let start = Start {
            classifier,
            resume: resume_of(&self.positions),
            pending: BTreeMap::new(),
            router,
        };
        (self, start)
    }

    /// What the keeper is told as the pipeline goes.
    pub fn feed(&self) -> KeeperFeed {
        self.feed.subscribe()
    }

    /// Whether anyone needs the watch positions: the store (the resume point) or a keeper.
    /// Without either, the per-event path does not track them.
    fn keeps_positions(&self) -> bool {
        self.store.is_some() || self.feed.has_keeper()
    }

    /// The scope label of a logged routing state (derived for a Pod's logged before other
    /// kinds were watched).
    fn state_scope(&self, state: &ObjectState) -> Arc<str> {
        if !state.scope.is_empty() {
            state.scope.as_str().into()
        } else if self.per_namespace {
            state.namespace.as_str().into()
        } else {
            "*".into()
        }
    }

    /// Runs `f` on the store where blocking is allowed; a no-op without a store.
    ///
    /// The event loop awaits the disk work, so it gains nothing from running it on another
    /// thread; on a multi-threaded runtime `block_in_place` runs it right here (on the
    /// `block_on` thread, which is no worker, with no hand-off at all), which saves the two
    /// thread wake-ups of a trip through the blocking pool per batch (BENCHMARKS.md, issue
    /// 24). A current-thread runtime (the in-process tests) must not block: the pool there.
    async fn blocking(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<(), StoreError> + Send + 'static,
    ) -> Result<(), StoreError> {
        let Some(mut store) = self.store.take() else {
            return Ok(());
        };
        let multi_threaded = tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread;
        let (store, result) = if multi_threaded {
            let result = tokio::task::block_in_place(|| f(&mut store));
            (store, result)
        } else {
            tokio::task::spawn_blocking(move || {
                let result = f(&mut store);
                (store, result)
            })
            .await
            .map_err(|e| StoreError::Worker(e.to_string()))?
        };
        let (ops, store) = (&self.ops.metrics, self.store.insert(store));
        for t in store.take_fsync_times() {
            ops.fsync(t);
        }
        ops.buffer_bytes(store.disk_bytes());
        result
    }

    /// Gives `event` its place in the stream (its sequence number) and, with a store, queues
    /// its record; `from_watch` events also move their scope's position.
    pub fn event(&mut self, mut event: Event, from_watch: bool) -> Arc<Event> {
        event.from_watch = from_watch;
        if from_watch && self.keeps_positions() {
            // The event's own label: no allocation on the per-event path.
            let scope = event.scope_key(self.per_namespace);
            self.positions.insert(scope, Some(event.rv.clone()));
        }
        let Some(store) = self.store.as_mut() else {
            event.seq = self.next_seq;
            self.next_seq += 1;
            return Arc::new(event);
        };
        event.seq = store.take_seq();
        let event = Arc::new(event);
        self.batch.push(Record::Event {
            event: event.clone(),
            from_watch,
        });
        event
    }

    /// With a router: logs one pod's state after a change (or a timer); `from_watch` moves
    /// its scope's watch position to the state's resourceVersion.
    pub fn state(&mut self, state: ObjectState, from_watch: bool) {
        if from_watch && self.keeps_positions() {
            let scope = self.state_scope(&state);
            self.positions.insert(scope, Some(state.rv.clone()));
        }
        if self.feed.has_steps() {
            self.step.states.push(Arc::new(state));
            return;
        }
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let seq = store.take_seq();
        self.batch.push(Record::State {
            seq,
            state: Arc::new(state),
            from_watch,
        });
    }

    /// Event `seq` goes to the sinks `to`: the keeper notes the last of its own in the step.
    pub fn routed(&mut self, seq: u64, to: &To) {
        if let Some((index, name)) = &self.keeper_at
            && to.includes(*index, name)
        {
            self.step.keeper_last = Some(seq);
        }
    }

    /// Records the watch position an observation moves (after its events): a list under
    /// way means "list again" on restart; a finished list or a bookmark is a resume point.
    pub fn observed(&mut self, item: &Observed) {
        let (scope, rv) = match item {
            Observed::ListStart { scope } | Observed::Unserved { scope } => (scope.clone(), None),
            Observed::ListDone { scope, rv } => {
                // The known state after a list (skipped pods included) is snapshotted soon.
                self.snapshot_due = true;
                (scope.clone(), Some(rv.clone()))
            }
            Observed::Bookmark { scope, rv } => (scope.clone(), Some(rv.clone())),
            _ => return,
        };
        if !self.keeps_positions() {
            return;
        }
        self.positions.insert(scope.label().clone(), rv.clone());
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let seq = store.take_seq();
        self.batch.push(Record::Position {
            seq,
            scope: scope.stored(),
            rv,
        });
    }

    /// Logs the queued records (synced as `state.fsync` says). Call before the batch's
    /// events go to the sinks.
    pub async fn commit(&mut self) -> Result<(), StoreError> {
        // No store with a keeper: the events were numbered by `next_seq`. A keeper taking
        // steps gets the positions with them.
        if self.feed.has_steps() {
            self.finish_step();
        } else if self.feed.has_keeper() {
            self.feed.moved(self.next_seq - 1, &self.positions);
        }
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.blocking(move |store| store.append(&batch)).await
    }

    /// Hands the step under way to the keeper when it moved anything.
    fn finish_step(&mut self) {
        let positions = resume_points(&self.positions);
        let upto = self.next_seq - 1;
        let moved = upto != self.step.upto
            || !self.step.states.is_empty()
            || positions != self.step.positions;
        if !moved {
            return;
        }
        let step = Step {
            upto,
            keeper_last: self.step.keeper_last.take(),
            positions: positions.clone(),
            states: std::mem::take(&mut self.step.states),
        };
        // What the next step is compared with.
        self.step.upto = upto;
        self.step.positions = positions;
        self.feed.step(step);
    }

    /// `sink` settled everything up to `seq`.
    pub fn acked(&mut self, sink: &str, seq: u64) {
        self.feed.acked(sink, seq);
        if let Some(store) = self.store.as_mut() {
            store.acked(sink, seq);
        }
    }

    /// Periodic upkeep: interval syncs, cursors, snapshots, compaction.
    pub async fn maintain(
        &mut self,
        classifier: &Classifier,
        router: Option<&Router>,
    ) -> Result<(), StoreError> {
        let Some(store) = self.store.as_ref() else {
            return Ok(());
        };
        let force = std::mem::take(&mut self.snapshot_due);
        // The snapshot is taken here, on the loop, where the classifier lives; only the
        // writing goes to the blocking pool.
        let snap = store
            .snapshot_due(force)
            .then(|| snapshot(store.next_seq(), classifier, router, &self.positions));
        self.blocking(move |store| store.maintain(snap)).await?;
        if let Some((free, size)) = self.store.as_ref().and_then(Store::disk_space) {
            self.ops.metrics.buffer_disk(free, size);
        }
        Ok(())
    }

    /// Everything to disk, on shutdown.
    pub async fn close(
        &mut self,
        classifier: &Classifier,
        router: Option<&Router>,
    ) -> Result<(), StoreError> {
        let Some(store) = self.store.as_ref() else {
            return Ok(());
        };
        let snap = snapshot(store.next_seq(), classifier, router, &self.positions);
        self.blocking(move |store| store.close(snap)).await
    }
}

/// The resume point per scope label, for the watches.
fn resume_of(positions: &HashMap<Arc<str>, Option<String>>) -> HashMap<String, Option<String>> {
    positions
        .iter()
        .map(|(s, rv)| (s.to_string(), rv.clone()))
        .collect()
}

fn snapshot(
    next_seq: u64,
    classifier: &Classifier,
    router: Option<&Router>,
    positions: &HashMap<Arc<str>, Option<String>>,
) -> Snapshot {
    Snapshot {
        next_seq,
        known: classifier.known_objects(),
        routing: router.map(Router::snapshot),
        positions: positions
            .iter()
            .map(|(s, rv)| ((&**s != "*").then(|| s.to_string()), rv.clone()))
            .collect(),
    }
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
