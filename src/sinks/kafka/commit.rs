//! One exactly-once transaction: the events, their state records and the checkpoint, sent
//! and committed as one unit, sent again after an abort. Entry points: [`transact`],
//! [`report`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::KafkaSettings;
use super::record::{Unsendable, enqueue};
use super::take_over::ExactlyOnceError;
use super::txn::Ready;
use super::txn::{Transactions, TxnError};
use super::txn_config::TxnSettings;
use crate::backoff::Backoff;
use crate::event::Event;
use crate::sinks::{Acks, SinkError};

/// What one transaction carries.
pub(super) struct Contents<'a> {
    /// The events (the sink's own).
    pub events: &'a [&'a Arc<Event>],
    /// Per object uid, its state record (`None`: a tombstone).
    pub state: &'a HashMap<&'a str, Option<&'a [u8]>>,
    /// The checkpoint record's value.
    pub checkpoint: &'a [u8],
}

/// Runs one transaction to its commit, sending it again after an abort; fencing and fatal
/// errors end the sink.
pub(super) async fn transact(
    ready: &Ready,
    settings: &KafkaSettings,
    txn: &TxnSettings,
    acks: &Acks,
    contents: Contents<'_>,
) -> Result<Vec<(u64, String)>, SinkError> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        match attempt(ready, settings, txn, acks, &contents).await {
            Ok(dead) => {
                acks.connected(true);
                return Ok(dead);
            }
            Err(e @ (TxnError::Fenced(_) | TxnError::Fatal(_))) => {
                acks.connected(false);
                return Err(ExactlyOnceError::of(&txn.id, e).for_sink(acks.sink().clone()));
            }
            Err(e) => {
                acks.connected(false);
                tracing::warn!(sink = %acks.sink(), error = %crate::error_chain(&e), "transaction not committed, sending it again");
                // An abort may fail when there was nothing open; the next begin says more.
                let _ = ready.txns.abort().await;
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// One transaction: the events, their state records, the checkpoint. Returns the events
/// that could not be sent (too large) and have no dead-letter topic, with the reason.
async fn attempt(
    ready: &Ready,
    settings: &KafkaSettings,
    txn: &TxnSettings,
    acks: &Acks,
    contents: &Contents<'_>,
) -> Result<Vec<(u64, String)>, TxnError> {
    let Contents {
        events,
        state,
        checkpoint,
    } = contents;
    let txns = &ready.txns;
    txns.begin()?;
    let mut dead = Vec::new();
    // The delivery reports of everything the transaction carries.
    let mut sent = Vec::with_capacity(events.len() + state.len() + 1);
    for e in events.iter() {
        match enqueue(txns.producer(), settings, acks.sink(), e, None).await {
            Ok(delivery) => sent.push(delivery),
            Err(Unsendable::TooLarge { size, max }) => {
                let reason = format!("record of {size} bytes exceeds max_message_bytes {max}");
                match settings.dead_letter_topic.is_some() {
                    true => match enqueue(txns.producer(), settings, acks.sink(), e, Some(&reason)).await {
                        Ok(delivery) => sent.push(delivery),
                        Err(_) => dead.push((e.seq, reason)),
                    },
                    false => dead.push((e.seq, reason)),
                }
            }
            Err(Unsendable::Refused(e)) => return Err(TxnError::of(e)),
        }
    }
    for (uid, value) in state.iter() {
        let (record, delivery) = Transactions::record(&txn.state_topic);
        sent.push(delivery);
        let record = record.key(*uid);
        let record = match value {
            Some(v) => record.payload(*v),
            None => record,
        };
        txns.send(record).map_err(|(e, _)| e)?;
    }
    let (record, delivery) = Transactions::record(&txn.checkpoint_topic);
    sent.push(delivery);
    txns.send(record.key(txn.checkpoint_key.as_str()).payload(checkpoint))
        .map_err(|(e, _)| e)?;
    txns.commit(sent).await?;
    Ok(dead)
}

/// Reports `batch` in order: each event delivered, or dead-lettered with its reason.
pub(super) async fn report(acks: &Acks, batch: &[Arc<Event>], dead: &[(u64, String)]) -> Result<(), SinkError> {
    let dead: HashMap<u64, &str> = dead.iter().map(|(s, r)| (*s, r.as_str())).collect();
    for e in batch {
        match dead.get(&e.seq) {
            Some(reason) => acks.dead_letter(e, reason.to_string()).await?,
            None => acks.delivered(e.seq),
        }
    }
    Ok(())
}
