//! The router: what each classified change becomes once routes and alert rules apply. Per
//! route it decides whether the change goes out (types, namespaces, selector, change
//! predicate) and with which chain link (`k8sprevrv` is the previous event *that route*
//! emitted for the pod); per alert rule it moves the pod's episode and says what fired or
//! resolved; when time passes ([`Router::tick`]) it fires the `for` timers that are due.
//!
//! Entry point: [`Router::on_change`]. Everything it keeps per pod (a fingerprint, a chain
//! link and a match per route, and the open episodes) comes back as a [`ObjectState`] after
//! each change, which the pipeline logs durably; [`Router::restore`] and [`RouterSnapshot`]
//! bring it back after a restart, so predicates, chains and pending timers continue.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::aspects::fingerprint;
use super::config::Route;
use crate::alert::episode::{Episode, Episodes, Seen, Transition};
use crate::alert::rule::Rule;
use crate::classify::Change;
use crate::model::ChangeKind;
use crate::redact::redacted_value;
use crate::redact::{RedactConfig, shape_of};

/// What a route keeps of one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Fingerprint of the route's predicate aspects at the pod's last change.
    pub fp: u64,
    /// resourceVersion of the last event the route emitted for the pod; empty: none yet.
    pub last: String,
    /// Whether the route selected the pod (namespace and labels) at its last change.
    pub matched: bool,
}

/// One object's routing state after a change: logged, so that a restart continues from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectState {
    pub uid: String,
    /// The object's resource key; empty in states logged before other kinds were watched
    /// (Pods).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// The label of the watch scope it came from; empty as above.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
    pub namespace: String,
    pub name: String,
    /// The resourceVersion the known state moves to.
    pub rv: String,
    /// The pod was deleted: forget it.
    pub gone: bool,
    pub marks: Vec<Mark>,
    pub episodes: Vec<Episode>,
}

/// Everything the router keeps, for the state snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterSnapshot {
    pub marks: BTreeMap<String, Vec<Mark>>,
    pub episodes: Episodes,
}

/// One event to emit.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// The change itself, on `route` (`None`: no routes are configured, every sink takes
    /// it), linking to `prev_rv`.
    Change {
        route: Option<usize>,
        prev_rv: String,
    },
    /// An alert of rule `rule` (an index into the rules) on `route`.
    Alert {
        route: Option<usize>,
        rule: usize,
        transition: Box<Transition>,
    },
}

/// What one change or one tick produced: the events, and the pod states to log.
#[derive(Debug, Default)]
pub struct Routed {
    pub outs: Vec<Out>,
    pub states: Vec<ObjectState>,
}

#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<Route>,
    rules: Vec<Rule>,
    marks: HashMap<Box<str>, Vec<Mark>>,
    episodes: Episodes,
    /// Whether a change's object must be parsed (a selector, a predicate or a rule reads it).
    parse: bool,
    /// What alert evidence and messages redact (`encoding.redact`).
    redact: RedactConfig,
}

impl ObjectState {
    /// The object's resource key (`pods` for a state without one).
    /// The object's identity, borrowed.
    pub fn key(&self) -> crate::model::ObjectKey<'_> {
        crate::model::ObjectKey {
            uid: &self.uid,
            resource: self.resource_key(),
            namespace: &self.namespace,
            name: &self.name,
        }
    }

    pub fn resource_key(&self) -> &str {
        crate::model::legacy::resource_of(&self.resource)
    }
}

impl Router {
    pub fn new(routes: Vec<Route>, rules: Vec<Rule>) -> Router {
        let parse = !rules.is_empty()
            || routes
                .iter()
                .any(|r| r.selector.is_some() || !r.changes.is_empty());
        Router {
            routes,
            rules,
            marks: HashMap::new(),
            episodes: Episodes::default(),
            parse,
            redact: RedactConfig::default(),
        }
    }

    /// Alert evidence and messages redact what `redact` says (the defaults until then).
    pub fn with_redaction(mut self, redact: RedactConfig) -> Router {
        self.redact = redact;
        self
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Whether an event of `route` (`None`: of no route) goes to `sink`.
    pub fn feeds(&self, route: Option<&str>, sink: &str) -> bool {
        match route {
            None => true,
            Some(route) => self
                .routes
                .iter()
                .any(|r| r.name == route && r.sinks.iter().any(|s| s == sink)),
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// When the next `for` timer is due (ms since the epoch).
    pub fn next_deadline(&self) -> Option<i64> {
        self.episodes.next_deadline()
    }

    /// Open alert episodes.
    pub fn open_episodes(&self) -> usize {
        self.episodes.len()
    }

    /// Routes and evaluates `change`, observed at `now` (ms since the epoch).
    pub fn on_change(&mut self, change: &Change, now: i64) -> Routed {
        let pod: Option<Value> = if self.parse {
            change.object.as_deref().and_then(super::view::parse)
        } else {
            None
        };
        let labels = pod.as_ref().map(super::view::labels).unwrap_or_default();
        let mut routed = Routed::default();
        let mut marks = self
            .marks
            .remove(change.uid.as_str())
            .unwrap_or_else(|| vec![Mark::default(); self.routes.len()]);
        if self.routes.is_empty() {
            routed.outs.push(Out::Change {
                route: None,
                prev_rv: change.prev_rv.clone(),
            });
        }
        for (i, (r, m)) in self.routes.iter().zip(marks.iter_mut()).enumerate() {
            if !r.takes_resource(&change.resource) {
                continue;
            }
            if change.kind == ChangeKind::Deleted {
                // The pod as it was last seen decides (an inferred delete has no object).
                let selected = m.matched
                    || pod.is_some() && r.selects(&change.namespace, &labels)
                    || !m.last.is_empty();
                if selected && r.takes_kind(ChangeKind::Deleted) {
                    routed.outs.push(Out::Change {
                        route: Some(i),
                        prev_rv: m.last.clone(),
                    });
                }
                continue;
            }
            let matched = r.selects(&change.namespace, &labels);
            let fp = match &pod {
                Some(p) if !r.changes.is_empty() => combined(p, r),
                _ => 0,
            };
            // The first event of a pod on a route always goes out; after that a `modified`
            // goes out when one of the predicate's aspects changed since the last change.
            let changed = change.kind == ChangeKind::Added
                || m.last.is_empty()
                || r.changes.is_empty()
                || pod.is_none()
                || fp != m.fp;
            if matched && changed && r.takes_kind(change.kind) {
                routed.outs.push(Out::Change {
                    route: Some(i),
                    prev_rv: std::mem::replace(&mut m.last, change.rv.clone()),
                });
            }
            m.fp = fp;
            m.matched = matched;
        }
        let seen = Seen {
            uid: &change.uid,
            namespace: &change.namespace,
            name: &change.name,
            rv: &change.rv,
            now,
        };
        let mut transitions = Vec::new();
        // Other objects whose episodes were refreshed without a transition.
        let mut touched: Vec<String> = Vec::new();
        if change.kind == ChangeKind::Deleted {
            for mut t in self.episodes.deleted(&change.uid, now) {
                if let Transition::Resolved(ep) = &mut t {
                    ep.rv = change.rv.clone();
                }
                transitions.push(t);
            }
        } else if let Some(pod) = pod.as_ref() {
            // The object as every output shows it, made when a rule first holds: rules judge
            // the real values, evidence and messages show what redaction leaves.
            let mut shown: Option<Value> = None;
            // Each rule judges the objects of its own resource.
            for rule in &self.rules {
                if rule.resource.key() != change.resource.key() {
                    continue;
                }
                let holds = rule.evaluate(pod).map(|e| {
                    // From the change's own bytes: the same pass as its `full` data.
                    let shown = shown.get_or_insert_with(|| {
                        let bytes = change.object.as_deref().unwrap_or_default();
                        redacted_value(bytes, &self.redact, shape_of(&change.resource))
                    });
                    rule.published(e, shown)
                });
                if rule.quiet_ms > 0 {
                    // Per involved object and reason, whichever Event shows it.
                    let group = format!(
                        "{}/{}",
                        pod["involvedObject"]["uid"].as_str().unwrap_or_default(),
                        pod["reason"].as_str().unwrap_or_default()
                    );
                    let (t, refreshed) = self.episodes.observe_quiet(
                        &rule.name,
                        rule.quiet_ms,
                        &seen,
                        holds,
                        &group,
                    );
                    transitions.extend(t);
                    touched.extend(refreshed.filter(|u| *u != change.uid));
                } else {
                    transitions.extend(self.episodes.observe(
                        &rule.name,
                        rule.timing(),
                        &seen,
                        holds,
                    ));
                }
            }
        }
        let gone = change.kind == ChangeKind::Deleted;
        routed.states.push(ObjectState {
            uid: change.uid.clone(),
            resource: change.resource.key().to_string(),
            scope: change.scope.to_string(),
            namespace: change.namespace.clone(),
            name: change.name.clone(),
            rv: change.rv.clone(),
            gone,
            marks: if gone { Vec::new() } else { marks.clone() },
            episodes: self.episodes.of(&change.uid),
        });
        if !gone && !self.routes.is_empty() {
            self.marks.insert(change.uid.as_str().into(), marks.clone());
        }
        // A deleted pod's marks still route its resolved alerts.
        self.alerts(transitions, Some((&change.uid, &marks)), &mut routed);
        for uid in touched {
            self.log_state(&uid, change.resource.key(), &mut routed);
        }
        routed
    }

    /// The `for` timers due at `now` fire.
    pub fn tick(&mut self, now: i64) -> Routed {
        let mut routed = Routed::default();
        let transitions = self.episodes.tick(now);
        self.alerts(transitions, None, &mut routed);
        routed
    }

    /// Routes `transitions`; pods other than `current` (whose state is already in
    /// `routed`) get their state logged too, since their episodes moved.
    fn alerts(
        &mut self,
        transitions: Vec<Transition>,
        current: Option<(&str, &[Mark])>,
        routed: &mut Routed,
    ) {
        // Objects other than the current one whose episodes moved, with their resource.
        let mut others = BTreeMap::new();
        for t in transitions {
            let (ep, kind) = match &t {
                Transition::Firing(ep) => (ep, ChangeKind::AlertFiring),
                Transition::Resolved(ep) => (ep, ChangeKind::AlertResolved),
            };
            let Some(rule) = self.rules.iter().position(|r| r.name == ep.rule) else {
                continue;
            };
            let marks = match current {
                Some((uid, m)) if uid == ep.uid => Some(m),
                _ => {
                    others.insert(ep.uid.clone(), self.rules[rule].resource.key().clone());
                    self.marks.get(ep.uid.as_str()).map(Vec::as_slice)
                }
            };
            if self.routes.is_empty() {
                routed.outs.push(Out::Alert {
                    route: None,
                    rule,
                    transition: Box::new(t),
                });
                continue;
            }
            for (i, r) in self.routes.iter().enumerate() {
                let matched = marks.and_then(|m| m.get(i)).is_some_and(|m| m.matched);
                if matched && r.takes_kind(kind) {
                    routed.outs.push(Out::Alert {
                        route: Some(i),
                        rule,
                        transition: Box::new(t.clone()),
                    });
                }
            }
        }
        for (uid, resource) in others {
            self.log_state(&uid, &resource, routed);
        }
    }

    /// Logs the state of object `uid` (of `resource`), whose episodes moved without a change
    /// of its own.
    fn log_state(&self, uid: &str, resource: &str, routed: &mut Routed) {
        let episodes = self.episodes.of(uid);
        let Some(first) = episodes.first() else {
            return;
        };
        if routed.states.iter().any(|s| s.uid == uid) {
            return;
        }
        routed.states.push(ObjectState {
            uid: uid.to_string(),
            resource: resource.to_string(),
            scope: String::new(),
            namespace: first.namespace.clone(),
            name: first.name.clone(),
            rv: first.rv.clone(),
            gone: false,
            marks: self.marks.get(uid).cloned().unwrap_or_default(),
            episodes,
        });
    }

    /// The alerts standing for `sink` at `now`: each firing episode, and each resolved at or
    /// after `since` (ms since the epoch; see [`Episodes::standing`]), on the routes that feed
    /// `sink` and selected its object (every one without routes), as a re-sending sink must
    /// know them after a restart.
    pub fn standing(&self, sink: &str, since: i64, now: i64) -> Vec<Out> {
        let mut out = Vec::new();
        for ep in self.episodes.standing(since, now) {
            let Some(rule) = self.rules.iter().position(|r| r.name == ep.rule) else {
                continue;
            };
            let t = if ep.is_active() {
                Transition::Firing(ep.clone())
            } else {
                Transition::Resolved(ep.clone())
            };
            if self.routes.is_empty() {
                out.push(Out::Alert {
                    route: None,
                    rule,
                    transition: Box::new(t),
                });
                continue;
            }
            let marks = self.marks.get(ep.uid.as_str());
            for (i, r) in self.routes.iter().enumerate() {
                let matched = marks.and_then(|m| m.get(i)).is_some_and(|m| m.matched);
                if matched
                    && r.sinks.iter().any(|s| s == sink)
                    && r.takes_kind(ChangeKind::AlertFiring)
                {
                    out.push(Out::Alert {
                        route: Some(i),
                        rule,
                        transition: Box::new(t.clone()),
                    });
                }
            }
        }
        out
    }

    /// Brings back one pod's state (replaying the durable log).
    pub fn restore(&mut self, state: &ObjectState) {
        if state.gone {
            self.marks.remove(state.uid.as_str());
        } else if !self.routes.is_empty() {
            self.marks
                .insert(state.uid.as_str().into(), self.fit(state.marks.clone()));
        }
        self.episodes
            .restore(&state.uid, self.known_rules(&state.episodes));
    }

    /// Everything, for a snapshot.
    pub fn snapshot(&self) -> RouterSnapshot {
        RouterSnapshot {
            marks: self
                .marks
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            episodes: self.episodes.clone(),
        }
    }

    /// Starts from a snapshot.
    pub fn restore_snapshot(&mut self, snap: RouterSnapshot) {
        if !self.routes.is_empty() {
            self.marks = snap
                .marks
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), self.fit(v)))
                .collect();
        }
        for uid in snap.episodes.uids() {
            let eps = self.known_rules(&snap.episodes.of(&uid));
            self.episodes.restore(&uid, eps);
        }
    }

    /// Marks saved under another set of routes: as many as there are routes now (a route
    /// added since starts with none; the config's order is by name, so a renamed route loses
    /// its marks, which only means its next event for each pod goes out).
    fn fit(&self, mut marks: Vec<Mark>) -> Vec<Mark> {
        marks.resize(self.routes.len(), Mark::default());
        marks
    }

    /// Episodes of rules still configured (a rule removed from the config says no more).
    fn known_rules(&self, episodes: &[Episode]) -> Vec<Episode> {
        episodes
            .iter()
            .filter(|e| self.rules.iter().any(|r| r.name == e.rule))
            .cloned()
            .collect()
    }
}

/// One fingerprint over every aspect of a route's predicate.
fn combined(pod: &Value, route: &Route) -> u64 {
    route.changes.iter().fold(0xcbf2_9ce4_8422_2325, |h, a| {
        (h ^ fingerprint(pod, a)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
