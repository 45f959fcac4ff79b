//! The exactly-once Kafka sink (`exactly_once: true`): events go out in Kafka transactions,
//! each carrying a batch of events, the known state they leave behind (state topic, keyed by
//! pod uid, a tombstone on delete) and the sink's checkpoint (the last event's sequence
//! number and the watch positions as of it) — the way Kafka Connect's exactly-once source
//! tasks commit their offsets with their records. A `read_committed` consumer sees each
//! change once: a restart starts from the committed checkpoint, so what a crash left
//! uncommitted is aborted and sent again, and nothing committed is sent twice.
//!
//! Entry points: [`super::take_over::TxnKeeper`] (at the pipeline's start: fence the other
//! replicas, read the checkpoint and the state) and [`run`] (the sink's loop). A transaction
//! is cut at `max_events` or `max_ms` after its first event, and commits nothing the other
//! sinks have not settled yet ([`crate::sinks::Acks::settled_by_others`]), so that a restart
//! from the checkpoint resends them whatever they had not acknowledged.

use std::collections::HashMap;
use std::sync::Arc;

use super::KafkaSettings;
use super::checkpoint::{Checkpoint, StateRecord};
use super::commit::{Contents, report, transact};
use super::take_over::take_over;
use super::txn::Ready;
use super::txn_config::TxnSettings;
use crate::event::Event;
use crate::model::ChangeKind;
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, Positions, SinkError};

/// Runs the sink until its queue closes and everything taken is committed.
pub async fn run(settings: KafkaSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let Some(txn) = settings.exactly_once.clone() else {
        return Ok(());
    };
    let taken = txn.ready.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut ready = match taken {
        Some(r) => r,
        // The pipeline always takes over first; a sink run alone does it here.
        None => take_over(&settings, &txn, acks.sink(), false)
            .await
            .map_err(|e| acks.failed(e))?
            .0,
    };
    acks.connected(true);
    if let Some(steps) = acks.take_steps() {
        return super::steps::run(&mut ready, &settings, &txn, rx, &acks, steps).await;
    }
    let mut settled = acks.settled_by_others();
    let mut moved = acks.positions();
    let mut feed_open = true;
    loop {
        let first = tokio::select! {
            next = rx.recv() => match next {
                Some(e) => e,
                None => return Ok(()),
            },
            changed = moved.changed(), if feed_open => {
                feed_open = changed.is_ok();
                let p = moved.borrow_and_update().clone();
                advance(&mut ready, &settings, &txn, &acks, p).await?;
                continue;
            }
        };
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + txn.linger;
        while batch.len() < txn.max_events {
            tokio::select! {
                // What is queued already goes in before the linger can end the batch.
                biased;
                next = rx.recv() => match next {
                    Some(e) => batch.push(e),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        let last = batch.last().map_or(0, |e| e.seq);
        // What is committed is never sent again after a restart, to any sink: so it waits
        // until the other sinks have it.
        if settled.wait_for(|s| *s >= last).await.is_err() {
            // The pipeline is gone; nothing can be reported any more.
            return Ok(());
        }
        commit(&mut ready, &settings, &txn, &acks, &batch).await?;
        let p = moved.borrow().clone();
        advance(&mut ready, &settings, &txn, &acks, p).await?;
    }
}

/// Commits the watch positions alone when they moved past the last committed event without
/// an event (a list completed, a bookmark): a restart then resumes there.
async fn advance(
    ready: &mut Ready,
    settings: &KafkaSettings,
    txn: &TxnSettings,
    acks: &Acks,
    moved: Positions,
) -> Result<(), SinkError> {
    if moved.seq != ready.committed || moved.positions == ready.positions {
        return Ok(());
    }
    let checkpoint = Checkpoint {
        seq: ready.committed,
        positions: moved.positions.clone(),
    }
    .to_bytes();
    let contents = Contents {
        events: &[],
        state: &HashMap::new(),
        checkpoint: &checkpoint,
    };
    transact(ready, settings, txn, acks, contents).await?;
    ready.positions = moved.positions;
    Ok(())
}

/// Commits `batch` (retrying aborted transactions), then reports it.
async fn commit(
    ready: &mut Ready,
    settings: &KafkaSettings,
    txn: &TxnSettings,
    acks: &Acks,
    batch: &[Arc<Event>],
) -> Result<(), SinkError> {
    let fresh: Vec<&Arc<Event>> = batch.iter().filter(|e| e.seq > ready.committed).collect();
    let Some(last) = fresh.last().map(|e| e.seq) else {
        // Committed before the restart: settled already.
        report(acks, batch, &[]).await?;
        return Ok(());
    };
    let mut positions = ready.positions.clone();
    let mut state: HashMap<&str, Option<Vec<u8>>> = HashMap::new();
    for e in &fresh {
        let scope = e.scope_label(ready.per_namespace);
        if e.from_watch {
            positions.insert(scope.to_string(), e.rv.clone());
        } else {
            // Part of a list: a restart lists again (and diffs against the state).
            positions.remove(scope);
        }
        let value = (e.kind != ChangeKind::Deleted).then(|| {
            StateRecord {
                resource: if &*e.resource == "pods" {
                    String::new()
                } else {
                    e.resource.to_string()
                },
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                rv: e.rv.clone(),
                ..StateRecord::default()
            }
            .to_bytes()
        });
        state.insert(&e.uid, value);
    }
    let checkpoint = Checkpoint {
        seq: last,
        positions: positions.clone(),
    }
    .to_bytes();
    let contents = Contents {
        events: &fresh,
        state: &state,
        checkpoint: &checkpoint,
    };
    let dead = transact(ready, settings, txn, acks, contents).await?;
    ready.positions = positions;
    ready.committed = last;
    report(acks, batch, &dead).await
}
