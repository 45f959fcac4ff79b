//! What the pipeline tells the exactly-once sink (the keeper) as it goes: how far every
//! other sink has settled (it commits nothing beyond, so a restart from its checkpoint
//! resends them what they lacked), and the watch positions after the last event numbered
//! (they move without an event when a list completes or a bookmark arrives, and the keeper
//! commits them so that a restart resumes there instead of listing again).
//!
//! With routes or alert rules, it also carries the pipeline's [`Step`]s: the keeper then
//! commits whole steps with the routing state they leave.
//!
//! Entry point: [`Feed`], owned by [`super::durable::Durable`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::sinks::{KeeperFeed, Positions, Step};

type StepSlot = Arc<Mutex<Option<mpsc::UnboundedReceiver<Step>>>>;

pub struct Feed {
    keeper: Option<String>,
    /// Per other sink, the highest sequence number it settled.
    acked: HashMap<String, u64>,
    settled: watch::Sender<u64>,
    positions: watch::Sender<Positions>,
    /// With routes or alert rules beside a keeper: the steps' sender, and the receiver
    /// until the keeper takes it.
    steps: Option<(mpsc::UnboundedSender<Step>, StepSlot)>,
}

impl Feed {
    /// The feed for `sinks`, of which `keeper` (if any) keeps the checkpoint; everything up
    /// to `from` counts as settled.
    pub fn new(sinks: &[String], keeper: Option<&str>, from: u64) -> Feed {
        let acked: HashMap<String, u64> = sinks
            .iter()
            .filter(|s| Some(s.as_str()) != keeper)
            .map(|s| (s.clone(), from))
            .collect();
        // With no other sink, nothing is waited for.
        let all = if acked.is_empty() { u64::MAX } else { from };
        Feed {
            keeper: keeper.map(str::to_string),
            acked,
            settled: watch::channel(all).0,
            positions: watch::channel(Positions {
                seq: from,
                positions: BTreeMap::new(),
            })
            .0,
            steps: None,
        }
    }

    /// The keeper commits whole [`Step`]s (with routes or alert rules).
    pub fn with_steps(mut self) -> Feed {
        if self.keeper.is_some() {
            let (tx, rx) = mpsc::unbounded_channel();
            self.steps = Some((tx, Arc::new(Mutex::new(Some(rx)))));
        }
        self
    }

    /// Whether the keeper takes steps.
    pub fn has_steps(&self) -> bool {
        self.steps.is_some()
    }

    /// Hands a finished step to the keeper.
    pub fn step(&self, step: Step) {
        if let Some((tx, _)) = &self.steps {
            // The keeper gone means the pipeline is stopping on its error.
            let _ = tx.send(step);
        }
    }

    /// Whether a keeper listens.
    pub fn has_keeper(&self) -> bool {
        self.keeper.is_some()
    }

    /// `sink` settled everything up to `seq`.
    pub fn acked(&mut self, sink: &str, seq: u64) {
        if self.keeper.as_deref() == Some(sink) {
            return;
        }
        if let Some(a) = self.acked.get_mut(sink) {
            *a = (*a).max(seq);
        }
        if let Some(min) = self.acked.values().min().copied() {
            self.settled
                .send_if_modified(|v| std::mem::replace(v, min) != min);
        }
    }

    /// After event `seq`, the watch positions (by scope label) are `positions`.
    pub fn moved(&self, seq: u64, positions: &HashMap<Arc<str>, Option<String>>) {
        let now = Positions {
            seq,
            positions: resume_points(positions),
        };
        self.positions.send_if_modified(|p| {
            let changed = *p != now;
            *p = now;
            changed
        });
    }

    /// The keeper's side.
    pub fn subscribe(&self) -> KeeperFeed {
        KeeperFeed {
            settled: self.settled.subscribe(),
            positions: self.positions.subscribe(),
            steps: self.steps.as_ref().map(|(_, slot)| slot.clone()),
        }
    }
}

/// The watch positions a restart resumes from: each scope's resourceVersion, leaving out the
/// scopes being listed (they are listed again).
pub fn resume_points(positions: &HashMap<Arc<str>, Option<String>>) -> BTreeMap<String, String> {
    positions
        .iter()
        .filter_map(|(scope, rv)| Some((scope.to_string(), rv.clone()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keeper_waits_for_the_slowest_other_sink_and_nobody_when_alone() {
        let names = ["kafka".to_string(), "mqtt".to_string(), "file".to_string()];
        let mut feed = Feed::new(&names, Some("kafka"), 10);
        let rx = feed.subscribe();
        assert_eq!(*rx.settled.borrow(), 10);
        feed.acked("mqtt", 15);
        assert_eq!(*rx.settled.borrow(), 10, "the file sink is still at 10");
        feed.acked("kafka", 99);
        assert_eq!(
            *rx.settled.borrow(),
            10,
            "the keeper's own acks do not count"
        );
        feed.acked("file", 12);
        assert_eq!(*rx.settled.borrow(), 12);
        let alone = Feed::new(&names[..1], Some("kafka"), 0);
        assert_eq!(*alone.subscribe().settled.borrow(), u64::MAX);
    }

    #[test]
    fn positions_name_each_scope_and_leave_out_those_being_listed() {
        let feed = Feed::new(&["k".to_string()], Some("k"), 0);
        let rx = feed.subscribe();
        let mut positions = HashMap::new();
        positions.insert("a".into(), Some("7".to_string()));
        positions.insert("b".into(), None);
        feed.moved(3, &positions);
        let p = rx.positions.borrow().clone();
        assert_eq!(p.seq, 3);
        assert_eq!(
            p.positions,
            BTreeMap::from([("a".to_string(), "7".to_string())])
        );
        let all: HashMap<std::sync::Arc<str>, Option<String>> =
            HashMap::from([("*".into(), Some("9".to_string()))]);
        feed.moved(4, &all);
        assert_eq!(rx.positions.borrow().positions["*"], "9");
    }
}
