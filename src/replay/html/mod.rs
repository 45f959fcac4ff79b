//! `--html FILE`: an audit timeline of the replayed range as one self-contained HTML file
//! (scripts and styles inline, a Content-Security-Policy that forbids every fetch). Entry
//! point: [`Timeline`], fed each selected event while reading, then written with
//! [`Timeline::write`].
//!
//! The file stores each object's first version and one JSON merge patch per later change
//! ([`patch`]), so status churn costs the fields that changed; the page rebuilds a version by
//! applying the patches in order. One lane per object, grouped by kind and namespace; alert
//! episodes become bars from `firing` to `resolved`; the gaps `--verify` finds become marks
//! naming the missing resourceVersion. The page itself is `page.js` and `page.css`.

mod patch;
mod write;

pub use patch::{apply as apply_patch, merge_patch};

use std::collections::{BTreeMap, HashMap};

use cloudevents::{AttributesReader, Event};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::decode::{data_is_json, json_of, time_text};
use super::facts::{Facts, Kind, ObjectKey};

pub use write::{Header, write_file};

/// One change of an object: a mark on its lane.
#[derive(Debug, Serialize)]
struct Mark {
    /// Milliseconds since the epoch (the event's `time`).
    t: i64,
    /// The `time` attribute as written (what `--state-at` prints).
    tt: String,
    /// `added`, `initial`, `modified`, `deleted` or `inferred`.
    ty: &'static str,
    rv: String,
    id: String,
    /// The merge patch from the previous version (`None` for the first, or no change), kept
    /// as its JSON text: a parsed patch costs several times its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    p: Option<Box<RawValue>>,
}

/// An alert episode: from its `firing` to its `resolved` (still open at the range's end).
#[derive(Debug, Serialize)]
struct Episode {
    rule: String,
    from: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<i64>,
    id: String,
}

/// A link `--verify` found broken: the event that links to a version not in the topic.
#[derive(Debug, Serialize)]
struct Gap {
    /// The event whose `k8sprevrv` names the missing version.
    id: String,
    /// The missing resourceVersion.
    rv: String,
}

/// One object's lane.
#[derive(Debug, Serialize)]
struct Lane {
    /// The cluster its events' `source` names (empty for other producers').
    cluster: String,
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    ns: String,
    name: String,
    uid: String,
    /// Its first version in the range, as JSON text (`null` for an object with alerts only).
    first: Option<Box<RawValue>>,
    marks: Vec<Mark>,
    alerts: Vec<Episode>,
    gaps: Vec<Gap>,
    /// The latest version, to diff the next one against; not written.
    #[serde(skip)]
    last: Option<Value>,
}

/// The timeline of a replay, built event by event.
#[derive(Debug, Default)]
pub struct Timeline {
    lanes: HashMap<ObjectKey, Lane>,
    /// The counts per type, per cluster (the header shows the totals, and these when there
    /// is more than one cluster).
    clusters: BTreeMap<String, BTreeMap<&'static str, u64>>,
    span: Option<(i64, i64)>,
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// Takes the next selected event (duplicates already left out).
    pub fn observe(&mut self, facts: &Facts, event: &Event) {
        let (Some(key), Some(t)) = (facts.key(), facts.time_ms) else {
            return;
        };
        if facts.kind == Kind::Other {
            return;
        }
        let ty = facts.change_word(event);
        // The cluster's name is copied once, not for every event.
        if !self.clusters.contains_key(&key.cluster) {
            self.clusters.insert(key.cluster.clone(), BTreeMap::new());
        }
        if let Some(counts) = self.clusters.get_mut(&key.cluster) {
            *counts.entry(ty).or_default() += 1;
        }
        self.span = Some(match self.span {
            Some((a, b)) => (a.min(t), b.max(t)),
            None => (t, t),
        });
        let lane = self.lanes.entry(key.clone()).or_insert_with(|| Lane {
            cluster: key.cluster.clone(),
            kind: facts.k8s_kind.clone(),
            api_version: facts.api_version.clone(),
            ns: facts.namespace.clone().unwrap_or_default(),
            name: facts.name.clone().unwrap_or_default(),
            uid: key.uid.clone(),
            first: None,
            marks: Vec::new(),
            alerts: Vec::new(),
            gaps: Vec::new(),
            last: None,
        });
        let id = event.id().to_string();
        if facts.kind == Kind::Alert {
            // `{uid}:{rv}:alert:{rule}:{firing|resolved}`.
            let rule = id
                .split_once(":alert:")
                .and_then(|(_, r)| r.rsplit_once(':'))
                .map_or("alert", |(rule, _)| rule)
                .to_string();
            if ty == "firing" {
                lane.alerts.push(Episode {
                    rule,
                    from: t,
                    to: None,
                    id,
                });
            } else if let Some(open) = lane
                .alerts
                .iter_mut()
                .rev()
                .find(|e| e.rule == rule && e.to.is_none())
            {
                open.to = Some(t);
            }
            return;
        }
        let data = event
            .data()
            .and_then(|d| json_of(d, data_is_json(event)))
            .unwrap_or(Value::Null);
        let p = match &lane.last {
            None => {
                lane.first = raw(&data);
                None
            }
            Some(last) => patch::merge_patch(last, &data).and_then(|p| raw(&p)),
        };
        lane.last = Some(data);
        lane.marks.push(Mark {
            t,
            tt: time_text(event).unwrap_or_default(),
            ty,
            rv: facts.rv.clone().unwrap_or_default(),
            id,
            p,
        });
    }

    /// Marks the gaps `--verify` found: (the object, the event, the missing version).
    pub fn gaps(&mut self, gaps: Vec<(ObjectKey, String, String)>) {
        for (object, id, rv) in gaps {
            if let Some(lane) = self.lanes.get_mut(&object) {
                lane.gaps.push(Gap { id, rv });
            }
        }
    }
}

/// `value` as JSON text. Serializing a `Value` cannot fail and gives valid JSON, so this is
/// always `Some`.
fn raw(value: &Value) -> Option<Box<RawValue>> {
    RawValue::from_string(value.to_string()).ok()
}

/// The lanes in the page's order: by cluster, kind (Pods first), namespace and name.
fn in_page_order(lanes: HashMap<ObjectKey, Lane>) -> Vec<Lane> {
    let mut lanes: Vec<Lane> = lanes.into_values().collect();
    let rank = |l: &Lane| {
        (
            l.cluster.clone(),
            l.kind != "Pod",
            l.kind.clone(),
            l.api_version.clone(),
        )
    };
    lanes.sort_by(|a, b| (rank(a), &a.ns, &a.name, &a.uid).cmp(&(rank(b), &b.ns, &b.name, &b.uid)));
    lanes
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
