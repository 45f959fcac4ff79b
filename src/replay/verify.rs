//! `--verify`: checks each pod's chain of `k8sprevrv` links from its first event to its last,
//! and reports gaps, order violations and duplicates. Entry point: [`Verifier`].
//!
//! Per object it keeps the resourceVersion of the latest event and the links still missing,
//! not the events: memory grows with the objects in the topic, not with its length.
//!
//! - A **gap**: an event links to a resourceVersion never seen for its object (or the chain
//!   starts again at an `added` with no link while the object had events: what happened in
//!   between is not in the topic). A link that a later event fills is an order violation
//!   instead.
//! - An **order violation**: an event older (by resourceVersion) than one already read for
//!   the same object.
//! - A **duplicate**: an event whose `source` and `id` were read before, or an `added` with
//!   no link at the resourceVersion already read (a restart without saved state lists the
//!   pod again). kubecast delivers at least once, so duplicates are expected after restarts;
//!   they do not make the record incomplete.
//!
//! When the range starts at the very beginning of every partition, an object's first event
//! must be an `added` (or link to nothing); otherwise chains are checked from each object's
//! first event in the range.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::facts::{Facts, Kind, ObjectKey, Place, rv_order};

/// Problems kept per object; beyond that they are counted.
const KEPT: usize = 8;

/// One object's chain as read so far.
#[derive(Debug, Default)]
struct Chain {
    object: String,
    last_rv: Option<String>,
    /// Links to resourceVersions not (yet) seen: the event that needs it, and the version.
    missing: Vec<(String, Place, String)>,
    problems: Vec<String>,
    more_problems: usize,
    order_violations: usize,
    restarts: usize,
    duplicates: usize,
    first_duplicate: Option<(String, Place)>,
    events: u64,
}

impl Chain {
    fn problem(&mut self, text: String) {
        if self.problems.len() < KEPT {
            self.problems.push(text);
        } else {
            self.more_problems += 1;
        }
    }

    fn duplicate(&mut self, id: &str, place: Place) {
        self.duplicates += 1;
        if self.first_duplicate.is_none() {
            self.first_duplicate = Some((id.to_string(), place));
        }
    }

    fn incomplete(&self) -> bool {
        !self.missing.is_empty() || self.restarts > 0
    }
}

/// The verdict.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub objects: usize,
    pub incomplete: usize,
    pub out_of_order: usize,
    pub duplicates: u64,
    /// Pod change events checked.
    pub checked: u64,
    /// Events with no chain (alerts, other producers' events).
    pub unchained: u64,
}

impl Verdict {
    /// Whether the record is complete and in order (duplicates allowed).
    pub fn passed(&self) -> bool {
        self.incomplete == 0 && self.out_of_order == 0
    }
}

/// A chain: its object (cluster and uid), and the alert rule for an alert chain.
type ChainKey = (ObjectKey, Option<String>);

/// Checks chains event by event.
#[derive(Debug)]
pub struct Verifier {
    chains: HashMap<ChainKey, Chain>,
    /// Whether an object's first event must start its chain (the range starts at the
    /// beginning of every partition).
    from_start: bool,
    unchained: u64,
}

impl Verifier {
    pub fn new(from_start: bool) -> Verifier {
        Verifier {
            chains: HashMap::new(),
            from_start,
            unchained: 0,
        }
    }

    /// Takes the next event of the topic (in partition order); `repeat`: its source and id
    /// were read before; `id` is its CloudEvents id.
    pub fn observe(&mut self, facts: &Facts, id: &str, repeat: bool) {
        // An object's changes form one chain; its alerts of each rule another (`firing`
        // links to the last alert of the rule, `resolved` to its `firing`).
        let alert_rule = (facts.kind == Kind::Alert)
            .then(|| {
                id.split_once(":alert:")
                    .and_then(|(_, r)| r.rsplit_once(':'))
            })
            .flatten()
            .map(|(rule, _)| rule);
        let (Some(object), Some(rv), true) = (
            facts.key(),
            &facts.rv,
            facts.is_change() || alert_rule.is_some(),
        ) else {
            self.unchained += 1;
            return;
        };
        let key = (object, alert_rule.map(str::to_string));
        let chain = self.chains.entry(key).or_insert_with(|| Chain {
            object: match alert_rule {
                Some(rule) => format!("{} (alert {rule})", facts.object()),
                None => facts.object(),
            },
            ..Chain::default()
        });
        chain.events += 1;
        if repeat {
            chain.duplicate(id, facts.place.clone());
            return;
        }
        let prev = facts.prev_rv.as_deref().unwrap_or_default();
        let Some(last) = chain.last_rv.clone() else {
            if self.from_start && !prev.is_empty() {
                chain
                    .missing
                    .push((id.to_string(), facts.place.clone(), prev.to_string()));
            }
            chain.last_rv = Some(rv.clone());
            return;
        };
        if prev == last {
            chain.last_rv = Some(rv.clone());
            return;
        }
        if prev.is_empty() && alert_rule.is_some_and(|r| r.starts_with("warning_event-")) {
            // A Warning-event alert links to the last one while the Event objects behind it
            // exist; after they expired (their TTL) a new episode starts the chain again.
            chain.last_rv = Some(rv.clone());
            return;
        }
        if rv_order(rv, &last) == Some(std::cmp::Ordering::Less) {
            // Late: it may fill a link a later event needed.
            chain.missing.retain(|(_, _, missing)| missing != rv);
            chain.order_violations += 1;
            chain.problem(format!(
                "event {id} ({}) has resourceVersion {rv}, older than {last} read before it",
                facts.place
            ));
            return;
        }
        if prev.is_empty() && facts.kind == Kind::Added && *rv == last {
            // A re-list (kubecast restarted without its state) adding the pod again at the
            // version already read: the same state again, under an `added` id.
            chain.duplicate(id, facts.place.clone());
            return;
        }
        if prev.is_empty() && facts.kind == Kind::Added {
            chain.restarts += 1;
            chain.problem(format!(
                "event {id} ({}) starts the chain again at resourceVersion {rv} after {last}: \
                 the changes in between are not in the topic",
                facts.place
            ));
        } else {
            chain
                .missing
                .push((id.to_string(), facts.place.clone(), prev.to_string()));
        }
        chain.last_rv = Some(rv.clone());
    }

    /// The broken links so far, by object: the event that links to a missing version, and
    /// that version (the report's `gap:` lines).
    pub fn gaps(&self) -> Vec<(ObjectKey, String, String)> {
        let mut gaps = Vec::new();
        for ((object, _), chain) in &self.chains {
            for (id, _, rv) in &chain.missing {
                gaps.push((object.clone(), id.clone(), rv.clone()));
            }
        }
        gaps
    }

    /// The verdict, and the report: one block per object with a problem, then a summary
    /// line.
    pub fn finish(self) -> (Verdict, String) {
        let mut verdict = Verdict {
            objects: self.chains.len(),
            unchained: self.unchained,
            ..Verdict::default()
        };
        let mut out = String::new();
        let clusters: std::collections::BTreeSet<String> =
            self.chains.keys().map(|(o, _)| o.cluster.clone()).collect();
        // One cluster reads as it always did; a fleet names each object's cluster.
        let fleet = clusters.len() > 1;
        let mut chains: Vec<(ChainKey, Chain)> = self.chains.into_iter().collect();
        chains.sort_by(|a, b| {
            (&a.0.0.cluster, &a.1.object, &a.0).cmp(&(&b.0.0.cluster, &b.1.object, &b.0))
        });
        for ((object, _), c) in chains {
            verdict.checked += c.events;
            verdict.duplicates += c.duplicates as u64;
            if c.incomplete() {
                verdict.incomplete += 1;
            }
            if c.order_violations > 0 {
                verdict.out_of_order += 1;
            }
            let mut lines = Vec::new();
            for (id, place, rv) in &c.missing {
                lines.push(format!(
                    "gap: event {id} ({place}) links to resourceVersion {rv}, which is not in the topic"
                ));
            }
            lines.extend(c.problems.iter().cloned());
            if c.more_problems > 0 {
                lines.push(format!("... and {} more", c.more_problems));
            }
            if let Some((id, place)) = &c.first_duplicate {
                lines.push(format!(
                    "{} duplicate(s), the first {id} ({place}): delivered again (the same id, or re-listed at the same resourceVersion)",
                    c.duplicates
                ));
            }
            if lines.is_empty() {
                continue;
            }
            let verdict_word = match (c.incomplete(), c.order_violations > 0) {
                (true, _) => "INCOMPLETE",
                (false, true) => "OUT OF ORDER",
                (false, false) => "DUPLICATES",
            };
            if fleet {
                let _ = writeln!(
                    out,
                    "{verdict_word} {} (cluster {}, uid {})",
                    c.object, object.cluster, object.uid
                );
            } else {
                let _ = writeln!(out, "{verdict_word} {} (uid {})", c.object, object.uid);
            }
            for l in lines {
                let _ = writeln!(out, "  {l}");
            }
        }
        let _ = writeln!(
            out,
            "verify: {} pod change event(s) of {} object(s){}{}: {} incomplete, {} out of order, {} duplicate(s); {} event(s) without a chain (other producers' events) not checked: {}",
            verdict.checked,
            verdict.objects,
            if fleet {
                let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
                format!(" in {} clusters ({})", clusters.len(), names.join(", "))
            } else {
                String::new()
            },
            if self.from_start {
                " from the beginning of the topic"
            } else {
                ", each chain checked from its first event in the range"
            },
            verdict.incomplete,
            verdict.out_of_order,
            verdict.duplicates,
            verdict.unchained,
            if verdict.passed() { "PASSED" } else { "FAILED" },
        );
        (verdict, out)
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
