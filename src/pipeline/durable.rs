//! The pipeline's side of the durable state: what a restart resumes from, and logging each
//! batch (its events and the watch positions they move) before the events go to the sinks.
//!
//! Entry point: [`Durable::open`]. Without `state.dir` it keeps nothing and every method is
//! a no-op, so the pipeline reads the same either way.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::classify::{Classifier, Scope};
use crate::config::Validated;
use crate::event::Event;
use crate::store::{Record, Snapshot, Store, StoreError, StoreSettings};
use crate::watch::Observed;

/// What the pipeline starts from.
pub struct Start {
    pub classifier: Classifier,
    /// Per scope, the resourceVersion to watch from; missing or `None`: list first.
    pub resume: HashMap<Scope, Option<String>>,
    /// Per sink, the events it has not acknowledged, oldest first.
    pub pending: BTreeMap<String, Vec<Arc<Event>>>,
}

pub struct Durable {
    store: Option<Store>,
    positions: HashMap<Scope, Option<String>>,
    per_namespace: bool,
    batch: Vec<Record>,
    snapshot_due: bool,
}

impl Durable {
    /// Opens the state directory (if configured) and rebuilds the known state and the
    /// watch positions from its snapshot and the log after it.
    pub fn open(config: &Validated) -> Result<(Durable, Start), StoreError> {
        let per_namespace = !config.watch.namespaces.is_empty();
        let initial = config.watch.initial_list;
        let Some(dir) = &config.state.dir else {
            let durable = Durable {
                store: None,
                positions: HashMap::new(),
                per_namespace,
                batch: Vec::new(),
                snapshot_due: false,
            };
            let start = Start {
                classifier: Classifier::new(initial),
                resume: HashMap::new(),
                pending: BTreeMap::new(),
            };
            return Ok((durable, start));
        };
        let settings = StoreSettings {
            dir: dir.clone(),
            fsync: config.state.fsync,
            fsync_interval: Duration::from_millis(config.state.fsync_interval_ms),
            segment_bytes: config.state.segment_mib * 1024 * 1024,
            snapshot_interval: Duration::from_secs(config.state.snapshot_interval_seconds),
        };
        let sinks: Vec<String> = config.sinks.iter().map(|(n, _)| n.clone()).collect();
        let (store, restored) = Store::open(settings, &sinks)?;
        let fresh = restored.snapshot.next_seq == 0 && restored.replay.is_empty();
        let mut classifier = if fresh {
            Classifier::new(initial)
        } else {
            Classifier::restored(initial, restored.snapshot.known)
        };
        let mut durable = Durable {
            store: Some(store),
            positions: HashMap::new(),
            per_namespace,
            batch: Vec::new(),
            snapshot_due: false,
        };
        for (scope, rv) in restored.snapshot.positions {
            durable.positions.insert(scope.map(Arc::from), rv);
        }
        for record in restored.replay {
            match record {
                Record::Event { event, from_watch } => {
                    classifier.replay(&event);
                    if from_watch {
                        durable
                            .positions
                            .insert(durable.scope_of(&event.namespace), Some(event.rv.clone()));
                    }
                }
                Record::Position { scope, rv, .. } => {
                    durable.positions.insert(scope.map(Arc::from), rv);
                }
            }
        }
        let unacked: usize = restored.pending.values().map(Vec::len).sum();
        tracing::info!(
            dir = %dir.display(),
            fresh,
            known_pods = classifier.len(),
            unacknowledged = unacked,
            positions = ?durable.positions,
            "state restored"
        );
        let start = Start {
            classifier,
            resume: durable.positions.clone(),
            pending: restored.pending,
        };
        Ok((durable, start))
    }

    fn scope_of(&self, namespace: &str) -> Scope {
        self.per_namespace.then(|| Arc::from(namespace))
    }

    /// Gives `event` its place in the log (its sequence number) and queues its record;
    /// `from_watch` events also move their scope's position.
    pub fn event(&mut self, mut event: Event, from_watch: bool) -> Arc<Event> {
        let Some(store) = self.store.as_mut() else {
            return Arc::new(event);
        };
        event.seq = store.take_seq();
        let event = Arc::new(event);
        if from_watch {
            let scope = self.scope_of(&event.namespace);
            self.positions.insert(scope, Some(event.rv.clone()));
        }
        self.batch.push(Record::Event {
            event: event.clone(),
            from_watch,
        });
        event
    }

    /// Records the watch position an observation moves (after its events): a list under
    /// way means "list again" on restart; a finished list or a bookmark is a resume point.
    pub fn observed(&mut self, item: &Observed) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let (scope, rv) = match item {
            Observed::ListStart { scope } => (scope.clone(), None),
            Observed::ListDone { scope, rv } => {
                // The known state after a list (skipped pods included) is snapshotted soon.
                self.snapshot_due = true;
                (scope.clone(), Some(rv.clone()))
            }
            Observed::Bookmark { scope, rv } => (scope.clone(), Some(rv.clone())),
            _ => return,
        };
        let seq = store.take_seq();
        self.positions.insert(scope.clone(), rv.clone());
        self.batch.push(Record::Position {
            seq,
            scope: scope.map(|s| s.to_string()),
            rv,
        });
    }

    /// Logs the queued records (synced as `state.fsync` says). Call before the batch's
    /// events go to the sinks.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        let result = store.append(&self.batch);
        self.batch.clear();
        result
    }

    /// `sink` settled everything up to `seq`.
    pub fn acked(&mut self, sink: &str, seq: u64) {
        if let Some(store) = self.store.as_mut() {
            store.acked(sink, seq);
        }
    }

    /// Periodic upkeep: interval syncs, cursors, snapshots, compaction.
    pub fn maintain(&mut self, classifier: &Classifier) -> Result<(), StoreError> {
        let force = std::mem::take(&mut self.snapshot_due);
        let positions = &self.positions;
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        let next_seq = store.next_seq();
        store.maintain(force, || snapshot(next_seq, classifier, positions))
    }

    /// Everything to disk, on shutdown.
    pub fn close(&mut self, classifier: &Classifier) -> Result<(), StoreError> {
        let positions = &self.positions;
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        let next_seq = store.next_seq();
        store.close(|| snapshot(next_seq, classifier, positions))
    }
}

fn snapshot(
    next_seq: u64,
    classifier: &Classifier,
    positions: &HashMap<Scope, Option<String>>,
) -> Snapshot {
    Snapshot {
        next_seq,
        known: classifier.known_pods(),
        positions: positions
            .iter()
            .map(|(s, rv)| (s.as_deref().map(str::to_string), rv.clone()))
            .collect(),
    }
}
