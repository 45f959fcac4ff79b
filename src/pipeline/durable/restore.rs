//! Where a start begins: the state directory's snapshot and the log after it, or what the
//! exactly-once sink had committed, or nothing (a fresh start). Entry point:
//! [`Durable::open_blocking`], called by [`Durable::open`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::super::feed::Feed;
use super::{Durable, DurableSettings, Held, Start};
use crate::classify::{Classifier, InitialList, label_of_stored};
use crate::model::ChangeKind;
use crate::route::engine::Router;
use crate::sinks::Step;

use super::super::kept::KeptState;
use crate::store::{LogPolicy, Record, Store, StoreError, StoreSettings};

impl Durable {
    pub(super) fn open_blocking(s: DurableSettings) -> Result<(Durable, Start), StoreError> {
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
            states_of_events: s.router.is_none(),
            held: None,
            last_event: 0,
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
        if s.state.log == LogPolicy::WhenBehind {
            durable.held = Some(Held::new(
                Duration::from_millis(s.state.behind_ms),
                usize::try_from(s.state.behind_mib.saturating_mul(1024 * 1024))
                    .unwrap_or(usize::MAX),
                durable.states_of_events,
            ));
        }
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
                    let gone = event.kind == ChangeKind::Deleted;
                    classifier.restore_object(event.object.key(), &event.rv, gone);
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
                    classifier.restore_object(state.key(), &state.rv, state.gone);
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

    /// Starts from what the keeper had committed (or afresh when it had nothing); the keeper
    /// commits whole steps with the objects' states.
    fn kept(
        mut self,
        keeper: String,
        kept: Option<KeptState>,
        sinks: &[String],
        initial: InitialList,
        resources: &[String],
        mut router: Option<Router>,
    ) -> (Durable, Start) {
        let from = kept.as_ref().map_or(0, |k| k.seq);
        self.next_seq = from + 1;
        self.step.upto = from;
        self.feed = Feed::new(sinks, Some(&keeper), from);
        let index = sinks
            .iter()
            .position(|s| *s == keeper)
            .unwrap_or(usize::MAX);
        self.keeper_at = Some((index, keeper.as_str().into()));
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
}

/// The resume point per scope label, for the watches.
pub(super) fn resume_of(
    positions: &HashMap<Arc<str>, Option<String>>,
) -> HashMap<String, Option<String>> {
    positions
        .iter()
        .map(|(s, rv)| (s.to_string(), rv.clone()))
        .collect()
}
