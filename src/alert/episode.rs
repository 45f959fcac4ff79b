//! Alert episodes: a rule's condition starts holding for a pod (the episode begins, at that
//! change's resourceVersion), fires once it has held for the rule's `for`, and resolves when
//! it stops holding or the pod is deleted — once per episode, not on every update while it
//! holds. An alert's id is a pure function of (rule, pod uid, the resourceVersion at which
//! its episode began), so two replicas or a restart give the same id; the deadline of a
//! pending `for` is the begin's observation time plus `for`, kept with the episode, so a
//! restart that restores the episodes fires at the original deadline.
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
}

impl Episode {
    /// The memory this episode leaves when it closes: the `k8srv` of the last alert event
    /// of its rule for its object, for the next episode's link.
    fn memory(&self, last_alert_rv: String) -> Episode {
        Episode {
            fired: false,
            closed: true,
            resolve_at: None,
            prev_alert_rv: last_alert_rv,
            fired_rv: String::new(),
            facts: Map::new(),
            message: String::new(),
            container: None,
            ..self.clone()
        }
    }
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
    /// evidence and message. `for_ms` is the rule's `for`.
    pub fn observe(
        &mut self,
        rule: &str,
        for_ms: i64,
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
                        deadline: seen.now.saturating_add(for_ms),
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
                    },
                );
                self.tick(seen.now)
            }
            (None, Some(_)) => match self.remove(&key) {
                Some(mut ep) if ep.fired => {
                    ep.rv = seen.rv.to_string();
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

    /// Pod `uid` was deleted: its firing alerts resolve, its pending ones are dropped.
    pub fn deleted(&mut self, uid: &str) -> Vec<Transition> {
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
            .map(Transition::Resolved)
            .collect()
    }

    fn resolve_quiet(&mut self, now: i64) -> Vec<Transition> {
        let mut out = Vec::new();
        while let Some((at, key)) = self.quiet.first().cloned() {
            if at > now {
                break;
            }
            if let Some(ep) = self.remove(&key) {
                self.insert(key, ep.memory(ep.rv.clone()));
                out.push(Transition::Resolved(ep));
            } else {
                self.quiet.remove(&(at, key));
            }
        }
        out
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
mod tests {
    use serde_json::json;

    use super::*;

    fn evidence(n: u64) -> Option<(Evidence, String)> {
        let facts = match json!({"restartCount": n}) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Some((
            Evidence {
                container: Some("app".into()),
                facts,
            },
            format!("{n} restarts"),
        ))
    }

    fn seen<'a>(uid: &'a str, rv: &'a str, now: i64) -> Seen<'a> {
        Seen {
            uid,
            namespace: "ns",
            name: "p",
            rv,
            now,
        }
    }

    fn kinds(ts: &[Transition]) -> Vec<String> {
        ts.iter()
            .map(|t| match t {
                Transition::Firing(e) => {
                    format!("firing {}", alert_id(&e.rule, &e.uid, &e.began_rv))
                }
                Transition::Resolved(e) => {
                    format!("resolved {}", alert_id(&e.rule, &e.uid, &e.began_rv))
                }
            })
            .collect()
    }

    #[test]
    fn an_episode_fires_once_after_its_for_and_resolves_once() {
        let mut eps = Episodes::default();
        assert!(
            eps.observe("restarts", 5_000, &seen("u", "10", 1_000), evidence(6))
                .is_empty(),
            "pending"
        );
        assert!(
            eps.observe("restarts", 5_000, &seen("u", "11", 2_000), evidence(7))
                .is_empty(),
            "still pending"
        );
        assert_eq!(eps.next_deadline(), Some(6_000));
        assert!(eps.tick(5_999).is_empty());
        // The deadline passes with no further change: it fires on time, with the latest evidence.
        let fired = eps.tick(6_000);
        assert_eq!(kinds(&fired), vec!["firing u:10:alert:restarts"]);
        match &fired[0] {
            Transition::Firing(e) => assert_eq!(e.facts["restartCount"], 7),
            other => panic!("{other:?}"),
        }
        assert!(
            eps.observe("restarts", 5_000, &seen("u", "12", 7_000), evidence(8))
                .is_empty(),
            "not again"
        );
        assert!(eps.tick(100_000).is_empty());
        let resolved = eps.observe("restarts", 5_000, &seen("u", "13", 8_000), None);
        assert_eq!(kinds(&resolved), vec!["resolved u:10:alert:restarts"]);
        // A new episode has a new id.
        eps.observe("restarts", 0, &seen("u", "20", 9_000), evidence(9));
        assert_eq!(
            kinds(&eps.tick(9_000)),
            Vec::<String>::new(),
            "fired inside observe"
        );
    }

    #[test]
    fn zero_for_fires_at_once_and_a_short_episode_says_nothing() {
        let mut eps = Episodes::default();
        assert_eq!(
            kinds(&eps.observe("failed", 0, &seen("u", "5", 1_000), evidence(0))),
            vec!["firing u:5:alert:failed"]
        );
        let mut eps = Episodes::default();
        eps.observe("notready", 300_000, &seen("u", "5", 1_000), evidence(0));
        assert!(
            eps.observe("notready", 300_000, &seen("u", "6", 2_000), None)
                .is_empty()
        );
        assert_eq!(eps.next_deadline(), None);
    }

    #[test]
    fn a_restored_copy_fires_at_the_original_deadline_with_the_same_id() {
        let mut eps = Episodes::default();
        eps.observe("notready", 60_000, &seen("u", "42", 1_000), evidence(0));
        // Saved and restored, as a restart does.
        let saved = serde_json::to_string(&eps).expect("episodes serialize");
        let mut restored: Episodes = serde_json::from_str(&saved).expect("and read back");
        assert_eq!(restored.next_deadline(), Some(61_000));
        assert_eq!(
            kinds(&restored.tick(61_000)),
            vec!["firing u:42:alert:notready"]
        );
        assert_eq!(
            kinds(&eps.tick(61_000)),
            vec!["firing u:42:alert:notready"],
            "the same id as the original's"
        );
    }

    #[test]
    fn restoring_a_pods_episodes_replaces_them_and_their_deadlines() {
        let mut eps = Episodes::default();
        eps.observe("notready", 60_000, &seen("u", "1", 1_000), evidence(0));
        eps.observe("notready", 60_000, &seen("v", "2", 2_000), evidence(0));
        let saved = eps.of("u");
        // The same episode restored over itself keeps one deadline.
        eps.restore("u", saved.clone());
        assert_eq!(eps.next_deadline(), Some(61_000));
        eps.restore("u", Vec::new());
        assert_eq!(
            eps.next_deadline(),
            Some(62_000),
            "u's deadline went with it"
        );
        eps.restore("u", saved);
        assert_eq!(
            kinds(&eps.tick(62_000)),
            vec!["firing u:1:alert:notready", "firing v:2:alert:notready"]
        );
        assert_eq!(eps.next_deadline(), None);
    }

    #[test]
    fn deleting_a_pod_resolves_what_fired_and_drops_what_was_pending() {
        let mut eps = Episodes::default();
        eps.observe("failed", 0, &seen("u", "5", 1_000), evidence(0));
        eps.observe("notready", 60_000, &seen("u", "5", 1_000), evidence(0));
        assert_eq!(kinds(&eps.deleted("u")), vec!["resolved u:5:alert:failed"]);
        assert_eq!(eps.next_deadline(), None);
    }

    #[test]
    fn each_resolved_links_to_its_firing_and_each_firing_to_the_last_alert_of_its_rule() {
        let mut eps = Episodes::default();
        let fired = eps.observe("restarts", 0, &seen("u", "10", 1_000), evidence(6));
        let Some(Transition::Firing(first)) = fired.first() else {
            panic!("{fired:?}")
        };
        assert_eq!(
            (first.fired_rv.as_str(), first.prev_alert_rv.as_str()),
            ("10", ""),
            "the first alert starts the chain"
        );
        let resolved = eps.observe("restarts", 0, &seen("u", "12", 2_000), None);
        let Some(Transition::Resolved(r)) = resolved.first() else {
            panic!("{resolved:?}")
        };
        assert_eq!(
            (r.rv.as_str(), r.fired_rv.as_str()),
            ("12", "10"),
            "resolved at 12, links to its firing at 10"
        );
        assert!(
            eps.is_empty(),
            "the memory left behind is not an open episode"
        );
        // A pending episode that never fires keeps the link.
        assert!(
            eps.observe("restarts", 5_000, &seen("u", "13", 3_000), evidence(7))
                .is_empty()
        );
        assert!(
            eps.observe("restarts", 5_000, &seen("u", "14", 3_500), None)
                .is_empty()
        );
        let fired = eps.observe("restarts", 0, &seen("u", "15", 4_000), evidence(8));
        let Some(Transition::Firing(second)) = fired.first() else {
            panic!("{fired:?}")
        };
        assert_eq!(
            second.prev_alert_rv, "12",
            "links to the last alert event of the rule: the resolve at 12"
        );
        // The memory goes with the object; nothing resolves twice.
        assert_eq!(
            kinds(&eps.deleted("u")),
            vec!["resolved u:15:alert:restarts"]
        );
        assert!(eps.of("u").is_empty());
    }

    #[test]
    fn a_warning_group_fires_once_whichever_event_shows_it_and_resolves_when_quiet() {
        let mut eps = Episodes::default();
        let warn = |uid, rv, now| (uid, rv, now);
        let (t, refreshed) = {
            let (uid, rv, now) = warn("e1", "20", 1_000);
            eps.observe_quiet(
                "warning_event",
                5_000,
                &seen(uid, rv, now),
                evidence(1),
                "pod/FailedScheduling",
            )
        };
        assert_eq!(
            (kinds(&t), refreshed),
            (vec!["firing e1:20:alert:warning_event".to_string()], None)
        );
        // Another Event of the same object and reason: the first Event's episode is refreshed.
        let (t, refreshed) = eps.observe_quiet(
            "warning_event",
            5_000,
            &seen("e2", "21", 3_000),
            evidence(1),
            "pod/FailedScheduling",
        );
        assert!(t.is_empty());
        assert_eq!(refreshed.as_deref(), Some("e1"));
        assert_eq!(
            eps.next_deadline(),
            Some(8_000),
            "quiet counts from the last such Event"
        );
        assert!(eps.tick(7_999).is_empty());
        assert_eq!(
            kinds(&eps.tick(8_000)),
            vec!["resolved e1:20:alert:warning_event"]
        );
        // Later, the same group again: a new episode linking to the last alert.
        let (t, _) = eps.observe_quiet(
            "warning_event",
            5_000,
            &seen("e3", "30", 9_000),
            evidence(1),
            "pod/FailedScheduling",
        );
        let Some(Transition::Firing(ep)) = t.first() else {
            panic!("{t:?}")
        };
        assert_eq!(ep.prev_alert_rv, "20");
    }
}
