//! Property test of the classifier against a simple model: whatever mix of live watch events
//! and gaps closed by a re-list, a consumer applying the emitted changes ends with exactly the
//! cluster's pods, each chain links (`prev_rv` = the consumer's last version), and a pod that
//! did not change emits nothing.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::{all, pod};
use super::*;

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Update(u8),
    Delete(u8),
    /// Disconnect: the following `n` cluster ops happen unseen, then a re-list.
    Gap(Vec<(u8, u8)>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..8).prop_map(Op::Create),
        (0u8..8).prop_map(Op::Update),
        (0u8..8).prop_map(Op::Delete),
        proptest::collection::vec((0u8..3, 0u8..8), 0..6).prop_map(Op::Gap),
    ]
}

/// The cluster: pod slot -> (uid, rv). A re-created slot gets a new uid.
#[derive(Default)]
struct Cluster {
    pods: BTreeMap<u8, (String, u64)>,
    rv: u64,
    generation: u64,
}

impl Cluster {
    fn change(&mut self, what: u8, slot: u8) -> Option<(bool, Object)> {
        self.rv += 1;
        match (what, self.pods.contains_key(&slot)) {
            (0, false) => {
                self.generation += 1;
                let uid = format!("u{slot}-{}", self.generation);
                self.pods.insert(slot, (uid.clone(), self.rv));
                Some((true, pod(&uid, "ns", &self.rv.to_string())))
            }
            (1, true) => {
                let entry = self.pods.get_mut(&slot)?;
                entry.1 = self.rv;
                Some((true, pod(&entry.0, "ns", &self.rv.to_string())))
            }
            (2, true) => {
                let (uid, _) = self.pods.remove(&slot)?;
                Some((false, pod(&uid, "ns", &self.rv.to_string())))
            }
            _ => None,
        }
    }

    fn truth(&self) -> BTreeMap<String, String> {
        self.pods
            .values()
            .map(|(u, rv)| (u.clone(), rv.to_string()))
            .collect()
    }
}

fn consume(seen: &mut BTreeMap<String, String>, changes: Vec<Change>) -> Result<(), TestCaseError> {
    for c in changes {
        let last = seen.get(&c.uid).cloned().unwrap_or_default();
        prop_assert_eq!(&c.prev_rv, &last, "chain of {} broken", c.uid);
        // An inferred delete carries the last known resourceVersion; every other change is new.
        if !c.inferred {
            prop_assert_ne!(&c.rv, &last, "{} re-emitted unchanged", c.uid);
        }
        match c.kind {
            ChangeKind::Deleted => {
                seen.remove(&c.uid);
            }
            _ => {
                seen.insert(c.uid.clone(), c.rv.clone());
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn consumers_of_the_classifier_always_converge_on_the_cluster(ops in proptest::collection::vec(op(), 1..40)) {
        let mut cluster = Cluster::default();
        let mut classifier = Classifier::new(InitialList::Emit);
        let mut seen = BTreeMap::new();
        for op in ops {
            let mut out = Vec::new();
            match op {
                Op::Create(s) | Op::Update(s) | Op::Delete(s) => {
                    let what = match op { Op::Create(_) => 0, Op::Update(_) => 1, _ => 2 };
                    match cluster.change(what, s) {
                        Some((true, p)) => out.extend(classifier.applied(&all(), p)),
                        Some((false, p)) => out.push(classifier.deleted(&all(), p)),
                        None => {}
                    }
                }
                Op::Gap(changes) => {
                    for (what, slot) in changes {
                        cluster.change(what, slot);
                    }
                    classifier.list_start(&all());
                    for (uid, rv) in cluster.truth() {
                        out.extend(classifier.listed(&all(), pod(&uid, "ns", &rv)));
                    }
                    out.extend(classifier.list_done(&all()));
                }
            }
            consume(&mut seen, out)?;
            prop_assert_eq!(&seen, &cluster.truth());
            let counted: usize = classifier.counts().values().sum();
            prop_assert_eq!(counted, classifier.len(), "the per-resource counts follow the known state");
        }
    }
}
