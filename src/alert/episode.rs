//! Alert episodes: a rule's condition starts holding for a pod (the episode begins, at that
//! change's resourceVersion), fires once it has held for the rule's `for`, and resolves once
//! its condition has stopped holding for the rule's `keep_firing_for` (a condition that holds
//! again meanwhile continues the same episode) or the pod is deleted — once per episode, not
//! on every update while it holds, nor on every turn of a crash loop. An alert's id is a pure
//! function of (rule, pod uid, the resourceVersion at which its episode began), so two
//! replicas or a restart give the same id; the deadlines of a pending `for` and of a
//! `keep_firing_for` are kept with the episode, so a restart that restores the episodes fires
//! and resolves at the original times.
//!
//! Entry point: [`Episodes`]: [`Episodes::observe`] for each change of a pod,
//! [`Episodes::tick`] when time passes (the next deadline is [`Episodes::next_deadline`]),
//! [`Episodes::deleted`] when the pod goes. Times are milliseconds since the Unix epoch.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::builtin::Evidence;

/// The id of the alert of `rule` for pod `uid` whose episode began at `began_rv`.
pub fn alert_id(rule: &str, uid: &str, began_rv: &str) -> String {
    format!("{uid}:{began_rv}:alert:{rule}")
}

/// One episode, as kept (durably) between changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    pub rule: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub began_rv: String,
    /// When the change that began it was observed.
    pub began_at: i64,
    /// When it fires (began_at + for).
    pub deadline: i64,
    pub fired: bool,
    /// The pod's resourceVersion when last seen.
    pub rv: String,
    /// The evidence and the message last seen while it held.
    pub container: Option<String>,
    pub facts: Map<String, Value>,
    pub message: String,
    /// The object's resourceVersion when the episode fired: the `k8srv` of its `firing`
    /// event, which its `resolved` event links to (`k8sprevrv`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fired_rv: String,
    /// The `k8srv` of the previous alert event of this rule for this object (the last
    /// episode's `resolved`), which this episode's `firing` links to; empty for the first.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prev_alert_rv: String,
    /// Not an episode but the memory of the last one, kept for that link: it neither fires
    /// nor resolves, and goes with the object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    /// `warning_event`: the involved object and reason the episode stands for
    /// (`{uid}/{reason}`), whichever Event object showed it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// `warning_event`: when it resolves unless another matching Event is seen first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve_at: Option<i64>,
    /// A firing episode whose condition no longer holds: when it last stopped holding. It
    /// resolves at `resolve_at` (this plus `keep_firing_for`) unless it holds again first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared_at: Option<i64>,
    /// When the episode resolved: set on its `resolved` transition and kept in the memory it
    /// leaves, so that a sink that re-sends resolved alerts for a while (Alertmanager's) can
    /// after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<i64>,
}

impl Episode {
    /// The memory this episode leaves when it closes: the `k8srv` of the last alert event
    /// of its rule for its object, for the next episode's link.
    /// It keeps what the alert said (its message, evidence and resolve time), for a sink
    /// that re-sends resolved alerts.
    fn memory(&self, last_alert_rv: String) -> Episode {
        Episode {
            fired: false,
            closed: true,
            resolve_at: None,
            cleared_at: None,
            prev_alert_rv: last_alert_rv,
            fired_rv: String::new(),
            ..self.clone()
        }
    }

    /// Resolves it at `at`; when it was kept firing, its evidence says since when its
    /// condition no longer held and for how long it was kept.
    fn resolve(mut self, at: i64) -> Episode {
        if let (Some(cleared), false) = (self.cleared_at, self.closed) {
            let time = |ms: i64| {
                jiff::Timestamp::from_millisecond(ms)
                    .map(|t| Value::String(t.to_string()))
                    .unwrap_or(Value::Null)
            };
            self.facts.insert("clearedAt".into(), time(cleared));
            self.facts.insert(
                "keptFiringFor".into(),
                Value::String(super::duration::show_duration(at.saturating_sub(cleared))),
            );
        }
        self.resolved_at = Some(at);
        self
    }

    /// Whether it is firing: fired, and neither closed nor resolved.
    pub fn is_active(&self) -> bool {
        self.fired && !self.closed && self.resolved_at.is_none()
    }
}

/// A rule's timing: how long its condition must hold before it fires (`for`), and how long
/// it must have stopped holding before a firing episode resolves (`keep_firing_for`), in
/// milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    pub for_ms: i64,
    pub keep_ms: i64,
}

/// What an observation or the passing of time did.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Firing(Episode),
    Resolved(Episode),
}

/// The pod as one change shows it, observed at `now` (ms since the epoch).
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub uid: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub rv: &'a str,
    pub now: i64,
}

/// Every open episode, keyed `{uid}/{rule}` (a JSON map key, so they can be saved), and the
/// deadlines of those not yet fired, in order: the next one is found without a scan.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "Saved", into = "Saved")]
pub struct Episodes {
    open: BTreeMap<String, Episode>,
    due: BTreeSet<(i64, String)>,
    /// Firing `warning_event` episodes by the time they resolve.
    quiet: BTreeSet<(i64, String)>,
}

/// What is saved of [`Episodes`]: the deadlines are rebuilt from it.
#[derive(Clone, Serialize, Deserialize)]
struct Saved {
    open: BTreeMap<String, Episode>,
}

impl From<Saved> for Episodes {
    fn from(s: Saved) -> Episodes {
        let mut e = Episodes::default();
        for (k, ep) in s.open {
            e.insert(k, ep);
        }
        e
    }
}

impl From<Episodes> for Saved {
    fn from(e: Episodes) -> Saved {
        Saved { open: e.open }
    }
}

impl Episodes {
    /// A change of the pod `seen`; `holds` says whether `rule`'s condition holds now, with its
    /// evidence and message. `timing` is the rule's `for` and `keep_firing_for`.
    pub fn observe(
        &mut self,
        rule: &str,
        timing: Timing,
        seen: &Seen,
        holds: Option<(Evidence, String)>,
    ) -> Vec<Transition> {
        let key = format!("{}/{rule}", seen.uid);
        // The memory of a closed episode links the next one's firing, and is otherwise none.
        let prev_alert_rv = match self.open.get(&key) {
            Some(ep) if ep.closed => {
                let rv = ep.prev_alert_rv.clone();
                if holds.is_none() {
                    return Vec::new();
                }
                self.remove(&key);
                rv
            }
            _ => String::new(),
        };
        match (holds, self.open.get_mut(&key)) {
            (Some((e, message)), Some(ep)) => {
                ep.container = e.container;
                ep.facts = e.facts;
                ep.message = message;
                ep.rv = seen.rv.to_string();
                // Holding again while kept firing: the same episode goes on, nothing is said.
                if ep.cleared_at.is_some()
                    && let Some(mut ep) = self.remove(&key)
                {
                    ep.cleared_at = None;
                    ep.resolve_at = None;
                    self.insert(key, ep);
                }
                // Still holding: it fires when its deadline passes (tick), not again.
                self.tick(seen.now)
            }
            (Some((e, message)), None) => {
                self.insert(
                    key,
                    Episode {
                        rule: rule.to_string(),
                        uid: seen.uid.to_string(),
                        namespace: seen.namespace.to_string(),
                        name: seen.name.to_string(),
                        began_rv: seen.rv.to_string(),
                        began_at: seen.now,
                        deadline: seen.now.saturating_add(timing.for_ms),
                        fired: false,
                        rv: seen.rv.to_string(),
                        container: e.container,
                        facts: e.facts,
                        message,
                        fired_rv: String::new(),
                        prev_alert_rv,
                        closed: false,
                        group: String::new(),
                        resolve_at: None,
                        cleared_at: None,
                        resolved_at: None,
                    },
                );
                self.tick(seen.now)
            }
            // Kept firing already: it resolves when its time comes (tick).
            (None, Some(ep)) if ep.cleared_at.is_some() => Vec::new(),
            (None, Some(_)) => match self.remove(&key) {
                // It stopped holding: kept firing for `keep_firing_for` in case it holds again.
                Some(mut ep) if ep.fired && timing.keep_ms > 0 => {
                    ep.rv = seen.rv.to_string();
                    ep.cleared_at = Some(seen.now);
                    ep.resolve_at = Some(seen.now.saturating_add(timing.keep_ms));
                    self.insert(key, ep);
                    Vec::new()
                }
                Some(mut ep) if ep.fired => {
                    ep.rv = seen.rv.to_string();
                    let ep = ep.resolve(seen.now);
                    self.insert(key, ep.memory(ep.rv.clone()));
                    vec![Transition::Resolved(ep)]
                }
                // It stopped holding before its `for`: nothing was said, nothing to resolve;
                // the link to the last alert stays.
                Some(ep) if !ep.prev_alert_rv.is_empty() => {
                    let rv = ep.prev_alert_rv.clone();
                    self.insert(key, ep.memory(rv));
                    Vec::new()
                }
                _ => Vec::new(),
            },
            (None, None) => Vec::new(),
        }
    }

    /// The open episodes of pod `uid`.
    pub fn of(&self, uid: &str) -> Vec<Episode> {
        let from = format!("{uid}/");
        self.open
            .range(from.clone()..)
            .take_while(|(k, _)| k.starts_with(&from))
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Replaces the open episodes of pod `uid` (restoring a saved state).
    pub fn restore(&mut self, uid: &str, episodes: Vec<Episode>) {
        let from = format!("{uid}/");
        let old: Vec<String> = self
            .open
            .range(from.clone()..)
            .take_while(|(k, _)| k.starts_with(&from))
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            self.remove(&k);
        }
        for e in episodes {
            self.insert(format!("{uid}/{}", e.rule), e);
        }
    }

    /// The pods with an open episode (or the memory of a closed one).
    pub fn uids(&self) -> BTreeSet<String> {
        self.open.values().map(|e| e.uid.clone()).collect()
    }

    /// Open episodes.
    pub fn len(&self) -> usize {
        self.open.values().filter(|e| !e.closed).count()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A matching Event `seen` of a `warning_event` rule (`holds`), for the involved object
    /// and reason `group`: the group's episode, under whichever Event object showed it
    /// first, fires now and resolves `quiet_ms` after the last such Event. Returns the
    /// transitions, and the Event object whose episode was only refreshed (its state moved).
    pub fn observe_quiet(
        &mut self,
        rule: &str,
        quiet_ms: i64,
        seen: &Seen,
        holds: Option<(Evidence, String)>,
        group: &str,
    ) -> (Vec<Transition>, Option<String>) {
        let Some((e, message)) = holds else {
            return (Vec::new(), None);
        };
        let open = self
            .open
            .iter()
            .find(|(_, ep)| !ep.closed && ep.rule == rule && ep.group == group)
            .map(|(k, _)| k.clone());
        if let Some(key) = open
            && let Some(mut ep) = self.remove(&key)
        {
            ep.facts = e.facts;
            ep.message = message;
            ep.resolve_at = Some(seen.now.saturating_add(quiet_ms));
            if ep.uid == seen.uid {
                ep.rv = seen.rv.to_string();
            }
            let uid = ep.uid.clone();
            self.insert(key, ep);
            return (Vec::new(), Some(uid));
        }
        // The last alert of the group, wherever its memory is, links the new one.
        let prev_alert_rv = self
            .open
            .values()
            .find(|m| m.closed && m.rule == rule && m.group == group)
            .map(|m| m.prev_alert_rv.clone())
            .unwrap_or_default();
        let ep = Episode {
            rule: rule.to_string(),
            uid: seen.uid.to_string(),
            namespace: seen.namespace.to_string(),
            name: seen.name.to_string(),
            began_rv: seen.rv.to_string(),
            began_at: seen.now,
            deadline: seen.now,
            fired: true,
            rv: seen.rv.to_string(),
            container: e.container,
            facts: e.facts,
            message,
            fired_rv: seen.rv.to_string(),
            prev_alert_rv,
            closed: false,
            group: group.to_string(),
            resolve_at: Some(seen.now.saturating_add(quiet_ms)),
            cleared_at: None,
            resolved_at: None,
        };
        self.insert(format!("{}/{rule}", seen.uid), ep.clone());
        (vec![Transition::Firing(ep)], None)
    }

    /// Fires every pending episode whose deadline is at or before `now`, and resolves every
    /// `warning_event` episode quiet since its deadline.
    pub fn tick(&mut self, now: i64) -> Vec<Transition> {
        let mut out = self.resolve_quiet(now);
        while let Some((deadline, key)) = self.due.first().cloned() {
            if deadline > now {
                break;
            }
            self.due.remove(&(deadline, key.clone()));
            if let Some(ep) = self.open.get_mut(&key).filter(|e| !e.closed) {
                ep.fired = true;
                ep.fired_rv = ep.rv.clone();
                out.push(Transition::Firing(ep.clone()));
            }
        }
        out
    }

    /// Pod `uid` was deleted (seen at `now`): its firing alerts resolve at once, also those
    /// kept firing (nothing is left to hold again), its pending ones are dropped.
    pub fn deleted(&mut self, uid: &str, now: i64) -> Vec<Transition> {
        let from = format!("{uid}/");
        let keys: Vec<String> = self
            .open
            .range(from.clone()..)
            .take_while(|(k, _)| k.starts_with(&from))
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.remove(&k))
            .filter(|ep| ep.fired && !ep.closed)
            .map(|ep| Transition::Resolved(ep.resolve(now)))
            .collect()
    }

    fn resolve_quiet(&mut self, now: i64) -> Vec<Transition> {
        let mut out = Vec::new();
        while let Some((at, key)) = self.quiet.first().cloned() {
            if at > now {
                break;
            }
            if let Some(ep) = self.remove(&key) {
                // Resolved at its time, however late the tick (a restart after it).
                let ep = ep.resolve(at);
                self.insert(key, ep.memory(ep.rv.clone()));
                out.push(Transition::Resolved(ep));
            } else {
                self.quiet.remove(&(at, key));
            }
        }
        out
    }

    /// What stands at `now` for a sink that re-sends alerts after a restart: the firing
    /// episodes, and those resolved at or after `since`. It is read as a [`Episodes::tick`]
    /// at `now` would leave it, without moving anything: an episode whose `keep_firing_for`
    /// or quiet ran out before `now` (while kubecast was down) stands resolved at its time,
    /// as the tick that follows says, never as firing (which would fire it again).
    pub fn standing(&self, since: i64, now: i64) -> impl Iterator<Item = Episode> + '_ {
        self.open.values().filter_map(move |e| match e.resolve_at {
            Some(at) if e.is_active() && at <= now => (at >= since).then(|| e.clone().resolve(at)),
            _ if e.is_active() => Some(e.clone()),
            _ => (e.closed && e.resolved_at.is_some_and(|at| at >= since)).then(|| e.clone()),
        })
    }

    /// The earliest deadline of a pending or quiet episode: when to [`Episodes::tick`] next.
    pub fn next_deadline(&self) -> Option<i64> {
        let due = self.due.first().map(|(d, _)| *d);
        let quiet = self.quiet.first().map(|(d, _)| *d);
        due.into_iter().chain(quiet).min()
    }

    fn insert(&mut self, key: String, ep: Episode) {
        self.remove(&key);
        if !ep.fired && !ep.closed {
            self.due.insert((ep.deadline, key.clone()));
        }
        if let Some(at) = ep.resolve_at.filter(|_| ep.fired && !ep.closed) {
            self.quiet.insert((at, key.clone()));
        }
        self.open.insert(key, ep);
    }

    fn remove(&mut self, key: &str) -> Option<Episode> {
        let ep = self.open.remove(key)?;
        self.due.remove(&(ep.deadline, key.to_string()));
        if let Some(at) = ep.resolve_at {
            self.quiet.remove(&(at, key.to_string()));
        }
        Some(ep)
    }
}

#[cfg(test)]
#[path = "episode_tests.rs"]
mod tests;
