//! The pipeline's side of the durable state: what a restart resumes from, each event's place
//! in the stream, and logging each batch (its events and the watch positions they move):
//! with `state.log: when_behind` only when a sink falls behind on it (`held`), with `always`
//! before the events go to the sinks.
//!
//! Entry point: [`Durable::open`]. Without `state.dir` it keeps nothing (events are numbered
//! by a counter of this process) and the rest is a no-op, so the pipeline reads the same
//! either way. A batch's append and fsync run in place on the event loop's thread (it awaits
//! them anyway); snapshots, compaction and closing run on tokio's blocking pool, so a large
//! snapshot never holds up the watches and sinks sharing `kubecast run`'s one thread. The
//! event loop awaits the disk work either way, so the store is never used by two at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::classify::Classifier;
use crate::classify::InitialList;
use crate::event::Event;
use crate::ops::Ops;
use crate::route::engine::{ObjectState, Router};
use crate::sinks::{KeeperFeed, Step};
use crate::store::StateConfig;
use crate::store::{Record, Snapshot, Store, StoreError};

use super::kept::{KeptState, StateRecord};
use crate::watch::Observed;

mod held;
mod restore;

use held::Held;

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
    pub keeper: Option<(String, Option<KeptState>)>,
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
    /// With a keeper: its place among the sinks (index, name), and the step under way.
    keeper_at: Option<(usize, Arc<str>)>,
    step: Step,
    /// Without a router, an event is what moves its object's state (for the keeper); with
    /// one, the router's object states do.
    states_of_events: bool,
    /// With a store and `log: when_behind`: the committed batches not written (yet).
    held: Option<Held>,
    /// The number of the last event (what a batch must have settled to be delivered).
    last_event: u64,
}

impl Durable {
    /// Opens the state directory (if configured) and rebuilds the known state and the
    /// watch positions from its snapshot and the log after it.
    pub async fn open(settings: DurableSettings) -> Result<(Durable, Start), StoreError> {
        tokio::task::spawn_blocking(move || Durable::open_blocking(settings))
            .await
            .map_err(|e| StoreError::Worker(e.to_string()))?
    }

    /// What the keeper is told as the pipeline goes.
    pub fn feed(&self) -> KeeperFeed {
        self.feed.subscribe()
    }

    /// Whether a write to the state directory failed: nothing more is written (a snapshot
    /// would claim that what failed is on disk), so a shutdown must not try to save.
    pub fn is_broken(&self) -> bool {
        self.store.as_ref().is_some_and(Store::is_broken)
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

    /// Runs `f` on the store where blocking is allowed; a no-op without a store. `short`
    /// work (a batch's append and its fsync) runs right here on a current-thread runtime
    /// (`kubecast run`'s), and the rest (snapshots, compaction, closing) on tokio's blocking
    /// pool there.
    ///
    /// The event loop awaits the disk work, so it gains nothing from running it on another
    /// thread: a trip through the blocking pool costs two thread wake-ups per batch
    /// (BENCHMARKS.md, issue 24), while a batch's append holds the loop's thread no longer
    /// than the loop would wait for it anyway. On a multi-threaded runtime `block_in_place`
    /// runs it right here.
    async fn blocking(
        &mut self,
        short: bool,
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
        } else if short {
            let result = f(&mut store);
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
        if self.feed.has_keeper() && self.states_of_events {
            let value = StateRecord::of_event(&event).map(|r| r.to_bytes());
            self.step
                .states
                .push((event.object.uid.as_str().into(), value));
        }
        let Some(store) = self.store.as_mut() else {
            event.seq = self.next_seq;
            self.next_seq += 1;
            return Arc::new(event);
        };
        event.seq = store.take_seq();
        self.last_event = event.seq;
        let event = Arc::new(event);
        self.batch.push(Record::Event {
            event: event.clone(),
            from_watch,
        });
        event
    }

    /// With a router: logs one object's routing state after a change (or a timer), or hands
    /// it to the keeper with the step; `from_watch` moves its scope's watch position to the
    /// state's resourceVersion.
    pub fn state(&mut self, state: ObjectState, from_watch: bool) {
        if from_watch && self.keeps_positions() {
            let scope = self.state_scope(&state);
            self.positions.insert(scope, Some(state.rv.clone()));
        }
        if self.feed.has_keeper() {
            let value = StateRecord::of_state(&state).map(|r| r.to_bytes());
            self.step.states.push((state.uid.as_str().into(), value));
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

    /// Logs the queued records (synced as `state.fsync` says), or with `log: when_behind`
    /// holds them until the sinks settle them or fall behind. Call before the batch's events
    /// go to the sinks.
    pub async fn commit(&mut self) -> Result<(), StoreError> {
        // No store with a keeper: the events were numbered by `next_seq`, and the keeper gets
        // the positions and the objects' states with the step.
        if self.feed.has_keeper() {
            self.finish_step();
        }
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let batch = match self.held.as_mut() {
            Some(held) => {
                let now = std::time::Instant::now();
                held.push(batch, self.last_event, now);
                // A batch whose events every sink already settled (one that only moves a
                // position: a bookmark, a finished list) is delivered now; no report would
                // come to settle it, and writing it after `behind_ms` would cost an idle
                // cluster an fsync per watch and bookmark.
                if let Some(store) = self.store.as_ref() {
                    held.settled(store.min_cursor());
                }
                if !held.over() {
                    return Ok(());
                }
                // The log stays in order: delivered resume points before the spilled batches.
                let mut records = held.take_delivered();
                records.extend(held.take_due(false, now));
                records
            }
            None => batch,
        };
        self.blocking(true, move |store| store.append(&batch)).await
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

    /// Logs the resume point of the batches every sink settled since the last call (not
    /// synced: see [`Store::append_delivered`]). The bridge calls it after taking reports.
    pub async fn log_delivered(&mut self) -> Result<(), StoreError> {
        let Some(held) = self.held.as_mut().filter(|h| h.has_delivered()) else {
            return Ok(());
        };
        let records = held.take_delivered();
        self.blocking(true, move |store| store.append_delivered(&records))
            .await
    }

    /// `sink` settled everything up to `seq`.
    pub fn acked(&mut self, sink: &str, seq: u64) {
        self.feed.acked(sink, seq);
        if let Some(store) = self.store.as_mut() {
            store.acked(sink, seq);
            // Per report: the slowest cursor is looked up only while something is held.
            if let Some(held) = self.held.as_mut().filter(|h| !h.is_empty()) {
                held.settled(store.min_cursor());
            }
        }
    }

    /// When [`Durable::maintain`] has something to do next; `None` when nothing waits (or
    /// without a store).
    pub fn next_due(&self) -> Option<std::time::Instant> {
        let store = self.store.as_ref()?;
        if self.snapshot_due {
            return Some(std::time::Instant::now());
        }
        let held = self.held.as_ref().and_then(Held::next_due);
        store.next_due().into_iter().chain(held).min()
    }

    /// Upkeep when [`Durable::next_due`] says so: held batches the sinks fell behind on,
    /// interval syncs, cursors, snapshots, compaction.
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
        let snapshot_due = store.snapshot_due(force);
        // A snapshot covers every change so far: what is still held is written first, so the
        // resume point never passes a change neither acknowledged nor logged.
        let (delivered, spill) = match self.held.as_mut() {
            Some(held) => (
                held.take_delivered(),
                held.take_due(snapshot_due, std::time::Instant::now()),
            ),
            None => (Vec::new(), Vec::new()),
        };
        let snap =
            snapshot_due.then(|| snapshot(store.next_seq(), classifier, router, &self.positions));
        // Cursors, an interval fsync, compaction: short, in place; a snapshot off the loop.
        let short = snap.is_none();
        self.blocking(short, move |store| {
            if !delivered.is_empty() {
                store.append_delivered(&delivered)?;
            }
            if !spill.is_empty() {
                store.append(&spill)?;
            }
            store.maintain(snap)
        })
        .await?;
        if let Some((free, size)) = self.store.as_ref().and_then(Store::disk_space) {
            self.ops.metrics.buffer_disk(free, size);
        }
        Ok(())
    }

    /// Everything to disk, on shutdown: the upkeep with a snapshot, whatever is due.
    pub async fn close(
        &mut self,
        classifier: &Classifier,
        router: Option<&Router>,
    ) -> Result<(), StoreError> {
        self.snapshot_due = true;
        self.maintain(classifier, router).await
    }
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
mod behind_tests;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;
