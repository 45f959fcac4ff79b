//! The exactly-once Kafka sink (`exactly_once: true`): it commits whole [`Step`]s of the
//! pipeline in Kafka transactions, the way Kafka Connect's exactly-once source tasks commit
//! their offsets with their records. A transaction carries the sink's own events up to a
//! step's end (others go to other sinks only), the state of every object the steps moved
//! (state topic, keyed by uid, a tombstone when the object went; the bytes are the
//! pipeline's) and the checkpoint at the last step's end (its sequence number and the watch
//! positions after it). A `read_committed` consumer sees each change once: a restart or a
//! new leader starts from the committed checkpoint, so what a crash left uncommitted is
//! aborted and sent again, and nothing committed is sent twice.
//!
//! Entry points: [`super::take_over::TxnKeeper`] (at the pipeline's start: fence the other
//! replicas, read the checkpoint and the states) and [`run`] (the sink's one loop). A
//! transaction is cut at `max_events` or `max_ms` after its first event, and commits
//! nothing the other sinks have not settled yet ([`crate::sinks::Acks::settled_by_others`]),
//! so that a restart from the checkpoint resends them whatever they had not acknowledged.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::KafkaSettings;
use super::checkpoint::Checkpoint;
use super::commit::{Contents, report, transact};
use super::take_over::take_over;
use super::txn::Ready;
use super::txn_config::TxnSettings;
use crate::event::Event;
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, SinkError, Step};

/// What the sink holds between commits.
struct Held {
    /// Its events, taken from the queue, not committed yet (in sequence order).
    events: VecDeque<Arc<Event>>,
    /// Steps not committed yet, in order.
    steps: VecDeque<Step>,
    queue_open: bool,
    /// The pipeline's steps; `None` for a sink run without a pipeline, where each event is
    /// a step of its own.
    feed: Option<mpsc::UnboundedReceiver<Step>>,
    /// Whether the pipeline may still send steps.
    feed_open: bool,
}

/// Runs the sink until its queue closes and every complete step is committed.
pub async fn run(settings: KafkaSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let Some(txn) = settings.exactly_once.clone() else {
        return Ok(());
    };
    let taken = txn.ready.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut ready = match taken {
        Some(r) => r,
        // The pipeline always takes over first; a sink run alone does it here.
        None => take_over(&settings, &txn, acks.sink())
            .await
            .map_err(|e| acks.failed(e))?
            .0,
    };
    acks.connected(true);
    let mut settled = acks.settled_by_others();
    let mut held = Held {
        events: VecDeque::new(),
        steps: VecDeque::new(),
        queue_open: true,
        feed: acks.take_steps(),
        feed_open: true,
    };
    loop {
        if !held.take(&mut rx, None).await {
            // The queue closed: every step its events belong to was sent before them.
            if let Some(feed) = held.feed.as_mut() {
                while let Ok(s) = feed.try_recv() {
                    held.steps.push_back(s);
                }
            }
            commit_complete(&mut ready, &settings, &txn, &acks, &mut held, &mut settled).await?;
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + txn.linger;
        while held.events.len() < txn.max_events && held.take(&mut rx, Some(deadline)).await {}
        commit_complete(&mut ready, &settings, &txn, &acks, &mut held, &mut settled).await?;
    }
}

impl Held {
    /// Takes the next event or step; `false` when the queue has closed or `until` passed.
    async fn take(&mut self, rx: &mut QueueRx, until: Option<tokio::time::Instant>) -> bool {
        if !self.queue_open {
            return false;
        }
        let linger = async {
            match until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let step = async {
            match self.feed.as_mut() {
                Some(feed) if self.feed_open => feed.recv().await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            // What is queued already goes in before the linger can end the batch.
            biased;
            e = rx.recv() => match e {
                Some(e) => {
                    if self.feed.is_none() {
                        self.steps.push_back(Step {
                            upto: e.seq,
                            keeper_last: Some(e.seq),
                            ..Step::default()
                        });
                    }
                    self.events.push_back(e);
                }
                None => self.queue_open = false,
            },
            s = step => match s {
                Some(s) => self.steps.push_back(s),
                // The pipeline is stopping; the queue closes next. Events after this belong
                // to no step and are not committed.
                None => self.feed_open = false,
            },
            _ = linger => return false,
        }
        self.queue_open
    }
}

/// Commits every step whose own events the sink has all taken, with those events.
async fn commit_complete(
    ready: &mut Ready,
    settings: &KafkaSettings,
    txn: &TxnSettings,
    acks: &Acks,
    held: &mut Held,
    settled: &mut tokio::sync::watch::Receiver<u64>,
) -> Result<(), SinkError> {
    let taken = held
        .events
        .back()
        .map_or(ready.committed, |e| e.seq)
        .max(ready.committed);
    let complete = complete(&held.steps, taken);
    let Some(upto) = complete.checked_sub(1).map(|i| held.steps[i].upto) else {
        return Ok(());
    };
    // What is committed is never sent again after a restart, to any sink.
    if settled.wait_for(|s| *s >= upto).await.is_err() {
        // The pipeline is gone; nothing can be reported any more.
        return Ok(());
    }
    let steps: Vec<Step> = held.steps.drain(..complete).collect();
    let own = held.events.iter().take_while(|e| e.seq <= upto).count();
    let batch: Vec<Arc<Event>> = held.events.drain(..own).collect();
    let fresh: Vec<&Arc<Event>> = batch.iter().filter(|e| e.seq > ready.committed).collect();
    let mut state: HashMap<&str, Option<&[u8]>> = HashMap::new();
    for (key, value) in steps.iter().flat_map(|s| &s.states) {
        state.insert(key, value.as_deref());
    }
    // Without a pipeline, steps carry no positions: the committed ones stand.
    let positions = match (&held.feed, steps.last()) {
        (Some(_), Some(s)) => s.positions.clone(),
        _ => ready.positions.clone(),
    };
    let unmoved = fresh.is_empty()
        && state.is_empty()
        && upto <= ready.committed
        && positions == ready.positions;
    let dead = if unmoved {
        Vec::new()
    } else {
        let checkpoint = Checkpoint {
            seq: upto.max(ready.committed),
            positions: positions.clone(),
        }
        .to_bytes();
        let contents = Contents {
            events: &fresh,
            state: &state,
            checkpoint: &checkpoint,
        };
        transact(ready, settings, txn, acks, contents).await?
    };
    ready.positions = positions;
    ready.committed = upto.max(ready.committed);
    report(acks, &batch, &dead).await
}

/// How many of `steps`, from the first, are complete once the sink has taken its events up
/// to `taken`: each of its own events in them is taken.
fn complete(steps: &VecDeque<Step>, taken: u64) -> usize {
    steps
        .iter()
        .take_while(|s| s.keeper_last.is_none_or(|l| l <= taken))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_complete_once_its_last_own_event_is_taken_and_steps_complete_in_order() {
        let step = |upto, keeper_last| Step {
            upto,
            keeper_last,
            ..Step::default()
        };
        // Events 1 (own) and 2 (another sink's); a bookmark; events 4 and 5 (own).
        let steps = VecDeque::from([step(2, Some(1)), step(2, None), step(5, Some(5))]);
        assert_eq!(complete(&steps, 0), 0, "event 1 not taken yet");
        assert_eq!(complete(&steps, 1), 2, "the first step and the bookmark after it");
        assert_eq!(complete(&steps, 4), 2, "event 5 belongs to the third step");
        assert_eq!(complete(&steps, 5), 3);
        let later = VecDeque::from([step(7, None), step(8, Some(8)), step(9, None)]);
        assert_eq!(
            complete(&later, 5),
            1,
            "a later step without own events waits for the one before it"
        );
    }
}
