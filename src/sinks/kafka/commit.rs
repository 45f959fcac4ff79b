//! One exactly-once transaction: the events, their state records and the checkpoint, sent
//! and committed as one unit, sent again after an abort. Entry points: [`transact`],
//! [`report`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::KafkaSettings;
use super::hold::STALL;
use super::producer::Delivery;
use super::record::{Unsendable, enqueue, topic_of};
use super::refusal::{Operation, Refusal, Resource, missing, refused};
use super::topics::{Kind, TopicError};
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
/// errors end the sink, as does a refusal before the first commit (after it, a refusal is
/// held: readiness names it and the transaction is sent again until Kafka takes it).
pub(super) async fn transact(
    ready: &mut Ready,
    settings: &KafkaSettings,
    txn: &TxnSettings,
    acks: &Acks,
    contents: Contents<'_>,
) -> Result<Vec<(u64, String)>, SinkError> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    loop {
        let outcome = {
            let attempt = attempt(ready, settings, txn, acks, &contents);
            tokio::pin!(attempt);
            tokio::select! {
                out = &mut attempt => out,
                _ = tokio::time::sleep(STALL) => {
                    let topic = contents.events.first().map_or(txn.checkpoint_topic.clone(), |e| topic_of(settings, e, false));
                    stalled(acks, &topic);
                    attempt.await
                }
            }
        };
        // A refusal that left the producer in a fatal state cannot be held: it stops the sink.
        let fatal = matches!(outcome, Err(TxnError::Fatal(_)));
        let outcome = outcome.map_err(|e| match ready.txns.refusal(&e) {
            Some(r) => TxnError::Refused(r),
            None => e,
        });
        let wait = match outcome {
            Ok(dead) => {
                ready.hold.delivered(acks);
                acks.connected(true);
                return Ok(dead);
            }
            Err(e @ (TxnError::Fenced(_) | TxnError::Fatal(_))) => {
                acks.connected(false);
                return Err(ExactlyOnceError::of(&txn.id, e).for_sink(acks.sink().clone()));
            }
            Err(TxnError::Topic(TopicError::Refused(r)) | TxnError::Refused(r)) if ready.hold.delivered_once && !fatal => {
                let _ = ready.txns.abort().await;
                ready.hold.refused(acks, r.to_string())
            }
            Err(e @ (TxnError::Topic(TopicError::Missing { .. } | TopicError::Create { .. } | TopicError::Refused(_)) | TxnError::Refused(_))) => {
                let _ = ready.txns.abort().await;
                tracing::error!(sink = %acks.sink(), error = %e, "cannot write the transaction");
                acks.down_because(e.to_string());
                return Err(ExactlyOnceError::of(&txn.id, e).for_sink(acks.sink().clone()));
            }
            Err(e) => {
                acks.down_because(format!("a Kafka transaction was not committed: {}", crate::error_chain(&e)));
                tracing::warn!(sink = %acks.sink(), error = %crate::error_chain(&e), "transaction not committed, sending it again");
                // An abort may fail when there was nothing open; the next begin says more.
                let _ = ready.txns.abort().await;
                backoff.next_delay()
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// A transaction has waited [`STALL`] for Kafka: readiness says so while it goes on.
fn stalled(acks: &Acks, topic: &str) {
    let why = format!(
        "a Kafka transaction has waited {}s for its records' acknowledgements (topic `{topic}`): a partition leader or the transaction coordinator is unreachable, or fewer replicas are in sync than min.insync.replicas",
        STALL.as_secs()
    );
    tracing::warn!(sink = %acks.sink(), reason = %why, "the sink is not ready");
    acks.down_because(why);
}

/// One transaction: the events, their state records, the checkpoint. Returns the events
/// that could not be sent (too large) and have no dead-letter topic, with the reason.
async fn attempt(
    ready: &mut Ready,
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
    // Each event's topic, rendered once for the lookup, the record and its report.
    let topics: Vec<String> = events.iter().map(|e| topic_of(settings, e, false)).collect();
    for topic in &topics {
        ready.guard.ensure(topic, Kind::Events, Some(ready.txns.producer())).await?;
    }
    let txns = &ready.txns;
    txns.begin()?;
    let mut dead = Vec::new();
    // The delivery reports of everything the transaction carries, with each record's topic.
    let mut sent: Vec<(String, Delivery)> = Vec::with_capacity(events.len() + state.len() + 1);
    for (e, topic) in events.iter().zip(topics) {
        match enqueue(txns.producer(), settings, acks.sink(), (e, &topic), None).await {
            Ok(delivery) => sent.push((topic, delivery)),
            Err(Unsendable::TooLarge { size, max }) => {
                let reason = format!("record of {size} bytes exceeds max_message_bytes {max}");
                match settings.dead_letter_topic.is_some() {
                    true => match enqueue(txns.producer(), settings, acks.sink(), (e, &topic_of(settings, e, true)), Some(&reason)).await {
                        Ok(delivery) => sent.push((topic_of(settings, e, true), delivery)),
                        Err(_) => dead.push((e.seq, reason)),
                    },
                    false => dead.push((e.seq, reason)),
                }
            }
            // librdkafka refuses at once a record for a topic whose metadata Kafka refused.
            Err(Unsendable::Refused(e)) => match e.rdkafka_error_code().filter(|c| refused(*c) || missing(*c)) {
                Some(code) => return Err(Refusal::new(Operation::Write, Resource::Topic, &topic, code).into()),
                None => return Err(TxnError::of(e)),
            },
        }
    }
    for (uid, value) in state.iter() {
        let (record, delivery) = Transactions::record(&txn.state_topic);
        sent.push((txn.state_topic.clone(), delivery));
        let record = record.key(*uid);
        let record = match value {
            Some(v) => record.payload(*v),
            None => record,
        };
        txns.send(record).map_err(|(e, _)| e)?;
    }
    let (record, delivery) = Transactions::record(&txn.checkpoint_topic);
    sent.push((txn.checkpoint_topic.clone(), delivery));
    txns.send(record.key(txn.checkpoint_key.as_str()).payload(checkpoint))
        .map_err(|(e, _)| e)?;
    // A record Kafka refused for a permission or a missing topic aborts the transaction,
    // named by the ACL that grants it (the commit would only say the transaction failed).
    let (topics, reports): (Vec<String>, Vec<Delivery>) = sent.into_iter().unzip();
    for (topic, report) in topics.iter().zip(futures::future::join_all(reports).await) {
        if let Ok(Err(e)) = report
            && let Some(code) = e.rdkafka_error_code().filter(|c| refused(*c) || missing(*c))
        {
            let _ = txns.abort().await;
            return Err(Refusal::new(Operation::Write, Resource::Topic, topic, code).into());
        }
    }
    txns.commit(Vec::new()).await?;
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
