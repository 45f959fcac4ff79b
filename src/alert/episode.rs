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

use std::collections::BTreeMap;

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
    pub began_rv: String,
    /// When the change that began it was observed.
    pub began_at: i64,
    /// When it fires (began_at + for).
    pub deadline: i64,
    pub fired: bool,
    /// The evidence last seen while it held.
    pub container: Option<String>,
    pub facts: Map<String, Value>,
}

/// What an observation or the passing of time did.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    Firing(Episode),
    Resolved(Episode),
}

/// Every open episode, keyed `{uid}/{rule}` (a JSON map key, so they can be saved).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episodes {
    open: BTreeMap<String, Episode>,
}

impl Episodes {
    /// Pod `uid` changed (to resourceVersion `rv`, observed at `now`); `holds` says whether
    /// `rule`'s condition holds now. `for_ms` is the rule's `for`.
    pub fn observe(
        &mut self,
        rule: &str,
        uid: &str,
        rv: &str,
        holds: Option<Evidence>,
        now: i64,
        for_ms: i64,
    ) -> Vec<Transition> {
        let key = format!("{uid}/{rule}");
        match (holds, self.open.get_mut(&key)) {
            (Some(e), Some(ep)) => {
                ep.container = e.container;
                ep.facts = e.facts;
                // Still holding: it fires when its deadline passes (tick), not again.
                self.tick(now)
            }
            (Some(e), None) => {
                self.open.insert(
                    key,
                    Episode {
                        rule: rule.to_string(),
                        uid: uid.to_string(),
                        began_rv: rv.to_string(),
                        began_at: now,
                        deadline: now.saturating_add(for_ms),
                        fired: false,
                        container: e.container,
                        facts: e.facts,
                    },
                );
                self.tick(now)
            }
            (None, Some(_)) => match self.open.remove(&key) {
                Some(ep) if ep.fired => vec![Transition::Resolved(ep)],
                // It stopped holding before its `for`: nothing was said, nothing to resolve.
                _ => Vec::new(),
            },
            (None, None) => Vec::new(),
        }
    }

    /// Fires every pending episode whose deadline is at or before `now`.
    pub fn tick(&mut self, now: i64) -> Vec<Transition> {
        self.open
            .values_mut()
            .filter(|ep| !ep.fired && ep.deadline <= now)
            .map(|ep| {
                ep.fired = true;
                Transition::Firing(ep.clone())
            })
            .collect()
    }

    /// Pod `uid` was deleted: its firing alerts resolve, its pending ones are dropped.
    pub fn deleted(&mut self, uid: &str) -> Vec<Transition> {
        let keys: Vec<String> = self
            .open
            .iter()
            .filter(|(_, ep)| ep.uid == uid)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.open.remove(&k))
            .filter(|ep| ep.fired)
            .map(Transition::Resolved)
            .collect()
    }

    /// The earliest deadline of a pending episode: when to [`Episodes::tick`] next.
    pub fn next_deadline(&self) -> Option<i64> {
        self.open
            .values()
            .filter(|ep| !ep.fired)
            .map(|ep| ep.deadline)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn evidence(n: u64) -> Option<Evidence> {
        Some(Evidence {
            container: Some("app".into()),
            facts: match json!({"restartCount": n}) {
                Value::Object(m) => m,
                _ => Map::new(),
            },
        })
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
            eps.observe("restarts", "u", "10", evidence(6), 1_000, 5_000)
                .is_empty(),
            "pending"
        );
        assert!(
            eps.observe("restarts", "u", "11", evidence(7), 2_000, 5_000)
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
            eps.observe("restarts", "u", "12", evidence(8), 7_000, 5_000)
                .is_empty(),
            "not again"
        );
        assert!(eps.tick(100_000).is_empty());
        let resolved = eps.observe("restarts", "u", "13", None, 8_000, 5_000);
        assert_eq!(kinds(&resolved), vec!["resolved u:10:alert:restarts"]);
        // A new episode has a new id.
        eps.observe("restarts", "u", "20", evidence(9), 9_000, 0);
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
            kinds(&eps.observe("failed", "u", "5", evidence(0), 1_000, 0)),
            vec!["firing u:5:alert:failed"]
        );
        let mut eps = Episodes::default();
        eps.observe("notready", "u", "5", evidence(0), 1_000, 300_000);
        assert!(
            eps.observe("notready", "u", "6", None, 2_000, 300_000)
                .is_empty()
        );
        assert_eq!(eps.next_deadline(), None);
    }

    #[test]
    fn a_restored_copy_fires_at_the_original_deadline_with_the_same_id() {
        let mut eps = Episodes::default();
        eps.observe("notready", "u", "42", evidence(0), 1_000, 60_000);
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
    fn deleting_a_pod_resolves_what_fired_and_drops_what_was_pending() {
        let mut eps = Episodes::default();
        eps.observe("failed", "u", "5", evidence(0), 1_000, 0);
        eps.observe("notready", "u", "5", evidence(0), 1_000, 60_000);
        assert_eq!(kinds(&eps.deleted("u")), vec!["resolved u:5:alert:failed"]);
        assert_eq!(eps.next_deadline(), None);
    }
}
