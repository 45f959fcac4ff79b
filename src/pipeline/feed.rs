//! What the pipeline tells the exactly-once sink (the keeper) as it goes: how far every
//! other sink has settled (it commits nothing beyond, so a restart from its checkpoint
//! resends them what they lacked), and the pipeline's [`Step`]s: the keeper commits whole
//! steps with the objects' states and the watch positions they leave (positions move
//! without an event when a list completes or a bookmark arrives, and a restart resumes
//! there instead of listing again).
//!
//! Entry point: [`Feed`], owned by [`super::durable::Durable`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::sinks::{KeeperFeed, Step};

type StepSlot = Arc<Mutex<Option<mpsc::UnboundedReceiver<Step>>>>;

pub struct Feed {
    keeper: Option<String>,
    /// Per other sink, the highest sequence number it settled.
    acked: HashMap<String, u64>,
    settled: watch::Sender<u64>,
    /// With a keeper: the steps' sender, and the receiver until the keeper takes it.
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
        let steps = keeper.map(|_| {
            let (tx, rx) = mpsc::unbounded_channel();
            (tx, Arc::new(Mutex::new(Some(rx))))
        });
        Feed {
            keeper: keeper.map(str::to_string),
            acked,
            settled: watch::channel(all).0,
            steps,
        }
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

    /// The keeper's side.
    pub fn subscribe(&self) -> KeeperFeed {
        KeeperFeed {
            settled: self.settled.subscribe(),
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
        let mut positions = HashMap::new();
        positions.insert("a".into(), Some("7".to_string()));
        positions.insert("b".into(), None);
        assert_eq!(
            resume_points(&positions),
            BTreeMap::from([("a".to_string(), "7".to_string())])
        );
        let all: HashMap<std::sync::Arc<str>, Option<String>> =
            HashMap::from([("*".into(), Some("9".to_string()))]);
        assert_eq!(resume_points(&all)["*"], "9");
    }
}
