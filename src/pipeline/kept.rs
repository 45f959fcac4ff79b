//! The objects' states as the keeper (the exactly-once sink) stores them: the pipeline
//! encodes each object's state into the bytes of one record ([`StateRecord`], keyed by the
//! object's uid) and decodes what the keeper had committed back into the known state and the
//! routing state. The keeper stores the bytes without reading them.
//!
//! Entry points: [`StateRecord::of_state`] and [`StateRecord::of_event`] (encoding),
//! [`KeptState::decode`] (what a take-over read).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alert::episode::Episode;
use crate::event::Event;
use crate::model::{ChangeKind, KnownObject, ObjectRef, legacy};
use crate::route::engine::{Mark, ObjectState};
use crate::sinks::Kept;

/// What the keeper had committed, decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptState {
    /// The sequence number of the last event committed.
    pub seq: u64,
    /// Per scope label, the resourceVersion the watch resumes after.
    pub positions: BTreeMap<String, String>,
    /// Each known object at the resourceVersion of its last committed event.
    pub known: Vec<KnownObject>,
    /// With routes or alert rules: each object's routing state (route marks, alert
    /// episodes) as committed.
    pub routing: Vec<ObjectState>,
    /// After a change of shard count: the earlier count's positions per shard
    /// ([`crate::sinks::Kept::earlier`]), turned into `positions` and `floors` by
    /// [`KeptState::of_shard`].
    pub earlier: Option<Vec<BTreeMap<String, String>>>,
    /// What the earlier count's shards had passed on, left out of the watches resumed from
    /// the earliest of their positions.
    pub floors: Option<crate::model::Floors>,
}

impl KeptState {
    /// Decodes the keeper's committed checkpoint and object states.
    pub fn decode(kept: Kept) -> Result<KeptState, KeptError> {
        let (known, routing) = decode(&kept.states)?;
        Ok(KeptState {
            seq: kept.seq,
            positions: kept.positions,
            known,
            routing,
            earlier: kept.earlier,
            floors: None,
        })
    }

    /// The part of it that is `shard`'s: the shards' objects share the keeper's state topic
    /// (an object's record is keyed by its uid, which hashes into one shard only). After a
    /// change of shard count, the positions are where the earlier count's shards that
    /// overlap `shard` had reached (the earliest of theirs), with the floors that leave out
    /// what each had passed on.
    pub fn of_shard(mut self, shard: Option<crate::model::Shard>) -> KeptState {
        if let Some(shard) = shard {
            self.known.retain(|k| shard.contains(&k.object.uid));
            self.routing.retain(|r| shard.contains(&r.uid));
        }
        if let Some(earlier) = self.earlier.take() {
            let (positions, floors) = crate::model::continue_from(&earlier, shard);
            tracing::info!(
                earlier_shards = earlier.len(),
                resumed_scopes = positions.len(),
                "the shard count changed: continuing where the earlier count's shards stopped"
            );
            self.positions = positions;
            self.floors = Some(floors);
        }
        self
    }
}

/// The value of an object's record in the keeper's state (its key is the object's uid).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateRecord {
    /// The object's resource key (`deployments.apps`); empty for Pods ([`legacy`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
    /// The resourceVersion of the object's last event committed.
    pub rv: String,
    /// With routes or alert rules: the label of the watch scope the object came from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
    /// With routes: each route's mark for the object (its chain link, predicate
    /// fingerprint and match).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
    /// With alert rules: the object's open episodes (pending with their deadlines, firing)
    /// and the memories of closed ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub episodes: Vec<Episode>,
}

/// A committed state record that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("the exactly-once sink's state record of object `{key}` is damaged: {reason}")]
pub struct KeptError {
    pub key: String,
    pub reason: String,
}

impl StateRecord {
    /// The record's value.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings, numbers and maps of them always serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The record of an object's routing state; `None` (a tombstone) once it is gone.
    pub fn of_state(state: &ObjectState) -> Option<StateRecord> {
        (!state.gone).then(|| StateRecord {
            resource: legacy::stored_resource(state.resource_key()).to_string(),
            namespace: state.namespace.clone(),
            name: state.name.clone(),
            rv: state.rv.clone(),
            scope: state.scope.clone(),
            marks: state.marks.clone(),
            episodes: state.episodes.clone(),
        })
    }

    /// The record an event leaves without routes or alert rules: the object at the event's
    /// resourceVersion; `None` (a tombstone) for a delete.
    pub fn of_event(e: &Event) -> Option<StateRecord> {
        (e.kind != ChangeKind::Deleted).then(|| StateRecord {
            resource: legacy::stored_resource(&e.object.resource).to_string(),
            namespace: e.object.namespace.to_string(),
            name: e.object.name.clone(),
            rv: e.rv.clone(),
            ..StateRecord::default()
        })
    }

    fn known(&self, uid: &str) -> KnownObject {
        KnownObject {
            object: ObjectRef {
                uid: uid.to_string(),
                resource: legacy::resource_of(&self.resource).into(),
                namespace: self.namespace.as_str().into(),
                name: self.name.clone(),
            },
            rv: self.rv.clone(),
        }
    }

    /// The routing state it holds, if it holds marks or episodes.
    fn routing(self, uid: &str) -> Option<ObjectState> {
        (!self.marks.is_empty() || !self.episodes.is_empty()).then(|| ObjectState {
            uid: uid.to_string(),
            resource: self.resource,
            scope: self.scope,
            namespace: self.namespace,
            name: self.name,
            rv: self.rv,
            gone: false,
            marks: self.marks,
            episodes: self.episodes,
        })
    }
}

/// The known objects and the routing states (the objects with route marks or alert
/// episodes) of what a keeper had committed.
pub fn decode(
    states: &[(String, Vec<u8>)],
) -> Result<(Vec<KnownObject>, Vec<ObjectState>), KeptError> {
    let mut known = Vec::with_capacity(states.len());
    let mut routing = Vec::new();
    for (key, bytes) in states {
        let record: StateRecord = serde_json::from_slice(bytes).map_err(|e| KeptError {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        known.push(record.known(key));
        routing.extend(record.routing(key));
    }
    Ok((known, routing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_record_of_the_pod_only_version_reads_as_a_pod_and_pods_keep_that_form() {
        let old = br#"{"namespace":"ns","name":"p","rv":"7"}"#.to_vec();
        let (known, _) = decode(&[("u".to_string(), old.clone())]).expect("decodes");
        assert_eq!(&*known[0].object.resource, "pods");
        let again: StateRecord = serde_json::from_slice(&old).expect("a state");
        assert_eq!(again.to_bytes(), old, "a Pod's record is written as before");
        let node = StateRecord {
            resource: "nodes".into(),
            name: "n".into(),
            rv: "8".into(),
            ..StateRecord::default()
        };
        let (known, _) = decode(&[("n".to_string(), node.to_bytes())]).expect("decodes");
        assert_eq!(&*known[0].object.resource, "nodes");
    }

    #[test]
    fn a_routing_state_round_trips_through_its_record_with_marks_and_episodes() {
        let state = ObjectState {
            uid: "u1".into(),
            resource: "deployments.apps".into(),
            scope: "deployments.apps/*".into(),
            namespace: "ns".into(),
            name: "web".into(),
            rv: "42".into(),
            gone: false,
            marks: vec![Mark {
                fp: 7,
                last: "41".into(),
                matched: true,
            }],
            episodes: serde_json::from_str(
                r#"[{"rule":"rollout_stuck","uid":"u1","namespace":"ns","name":"web","began_rv":"40","began_at":1000,"deadline":601000,"fired":false,"rv":"42","container":null,"facts":{},"message":"m"}]"#,
            )
            .expect("an episode"),
        };
        let record = StateRecord::of_state(&state).expect("not gone").to_bytes();
        let (known, routing) = decode(&[("u1".to_string(), record)]).expect("decodes");
        assert_eq!(routing, vec![state]);
        assert_eq!(known[0].rv, "42", "the known state reads it too");
        let plain = StateRecord {
            namespace: "ns".into(),
            name: "p".into(),
            rv: "1".into(),
            ..StateRecord::default()
        };
        let (_, routing) = decode(&[("u2".to_string(), plain.to_bytes())]).expect("decodes");
        assert!(
            routing.is_empty(),
            "a record without routes or alerts restores no routing state"
        );
    }

    #[test]
    fn a_damaged_record_names_its_object() {
        let e = decode(&[("u9".to_string(), b"{".to_vec())]).expect_err("damaged");
        assert_eq!(e.key, "u9");
    }
}
