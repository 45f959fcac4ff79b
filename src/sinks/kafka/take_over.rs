//! Taking the exactly-once sink over: look the compacted topics up (create them with
//! `create_topics`, else a missing one stops kubecast naming it), fence every
//! other producer of the `transactional.id` (`init_transactions`, which also aborts what a
//! crashed predecessor left open), then read the committed checkpoint and known state, once
//! every transaction open in the checkpoint topic is decided (a checkpoint in a commit on
//! its way is invisible until then). When
//! the checkpoints read say another shard count committed after this sink's own, the ids of
//! that count are fenced too (`fence`) and the rest read after. Only after the fences is the
//! checkpoint final. Entry point: [`TxnKeeper`], the sink's [`Keeper`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::KafkaSettings;
use super::checkpoint::CheckpointError;
use super::fence::fence;
use super::hold::Hold;
use super::refusal::{Operation, Refusal, Resource};
use super::state_reader::{ReadError, StateReader};
use super::topics::{Kind, TopicError, TopicGuard};
use super::txn::{Ready, Transactions, TxnError};
use super::txn_config::TxnSettings;
use crate::backoff::Backoff;
use crate::sinks::{Keeper, Kept, SinkError};

/// How long one blocking transactional call or one read of a topic may take.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the exactly-once sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExactlyOnceError {
    /// Another replica took over (its producer fenced this one): nothing this one sent since
    /// becomes visible. Under leader election this replica becomes a standby.
    #[error("another kubecast took over transactional.id `{id}` (this one is fenced)")]
    Fenced {
        id: String,
        #[source]
        source: TxnError,
    },
    #[error("the transactional producer of transactional.id `{id}` failed")]
    Producer {
        id: String,
        #[source]
        source: TxnError,
    },
    #[error("creating the Kafka client")]
    Client(#[source] rdkafka::error::KafkaError),
    #[error(transparent)]
    Topic(#[from] TopicError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A transactional id of another shard count (or of an earlier release) could not be
    /// fenced in time: a commit under it might still land after this sink read its
    /// checkpoints, so the sink does not take over.
    #[error(
        "transactional.id `{id}` was not fenced within {limit:?}: a commit under it might still land after this shard read its checkpoints"
    )]
    Unfenced {
        id: String,
        limit: Duration,
        #[source]
        source: TxnError,
    },
}

impl ExactlyOnceError {
    pub(super) fn of(id: &str, e: TxnError) -> ExactlyOnceError {
        match e {
            TxnError::Fenced(_) => ExactlyOnceError::Fenced {
                id: id.to_string(),
                source: e,
            },
            _ => ExactlyOnceError::Producer {
                id: id.to_string(),
                source: e,
            },
        }
    }

    /// The sink's fatal error, marked [`SinkError::fenced`] when another replica fenced it.
    pub(super) fn for_sink(self, sink: Arc<str>) -> SinkError {
        let fenced = matches!(self, ExactlyOnceError::Fenced { .. });
        let e = SinkError::new(sink, self);
        if fenced { e.fenced() } else { e }
    }
}

/// How long a standby's reader stays resumable without reading (module docs of
/// `state_reader`: far below the topics' tombstone retention).
const WARM_FOR: Duration = Duration::from_secs(60);

/// How often a standby reads what the leader committed.
const WARM_EVERY: Duration = Duration::from_secs(1);

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The slot holds a whole value or none; a panic elsewhere does not spoil it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The [`Keeper`] of an exactly-once sink.
pub struct TxnKeeper {
    settings: KafkaSettings,
    sink: Arc<str>,
}

impl TxnKeeper {
    pub fn new(settings: KafkaSettings, sink: Arc<str>) -> TxnKeeper {
        TxnKeeper { settings, sink }
    }
}

impl Keeper for TxnKeeper {
    fn take_over(&self) -> BoxFuture<'static, Result<Option<Kept>, SinkError>> {
        let (settings, sink) = (self.settings.clone(), self.sink.clone());
        Box::pin(async move {
            let failed = |e: ExactlyOnceError| e.for_sink(sink.clone());
            let Some(txn) = settings.exactly_once.clone() else {
                return Ok(None);
            };
            let (ready, kept) = take_over(&settings, &txn, &sink).await.map_err(failed)?;
            *lock(&txn.ready) = Some(ready);
            Ok(kept)
        })
    }

    fn keep_warm(&self) -> BoxFuture<'static, ()> {
        let Some(txn) = self.settings.exactly_once.clone() else {
            return Box::pin(std::future::pending());
        };
        let (mut config, sink) = (client_config(&self.settings), self.sink.clone());
        config.set("group.id", txn.reader_group());
        Box::pin(async move {
            let mut caught_up = false;
            loop {
                let mut slot = txn.warm.clone().lock_owned().await;
                let mut reader = slot
                    .take()
                    .filter(|r| r.fresh(WARM_FOR))
                    .unwrap_or_else(|| {
                        StateReader::new(
                            &txn.checkpoint_topic,
                            &txn.state_topic,
                            &txn.checkpoint_base,
                            txn.shard,
                        )
                    });
                let config = config.clone();
                // The reader goes back into the slot inside the blocking call, before the slot
                // is unlocked: when the leadership comes during a read, this future is dropped
                // while the read goes on, and the take-over waiting for the slot must still
                // find the reader.
                let read = tokio::task::spawn_blocking(move || {
                    let read = reader.read(&config, CALL_TIMEOUT);
                    if read.is_ok() {
                        // Only a reader that read to the ends goes back: a take-over resumes it.
                        *slot = Some(reader);
                    }
                    read
                })
                .await;
                match read {
                    Ok(Ok(())) => {
                        if !std::mem::replace(&mut caught_up, true) {
                            tracing::debug!(%sink, "standby: read the committed state; a take-over reads only what follows");
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%sink, error = %crate::error_chain(&e), "standby: reading the committed state failed; the take-over reads it whole")
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(WARM_EVERY).await;
            }
        })
    }
}

/// The client settings (brokers, TLS, SASL, the user's properties).
fn client_config(settings: &KafkaSettings) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (k, v) in &settings.properties {
        config.set(k, &v.0);
    }
    config
}

/// Creates the compacted topics if missing, fences every other producer of the
/// `transactional.id`, then reads the committed checkpoint and known state.
pub(super) async fn take_over(
    settings: &KafkaSettings,
    txn: &TxnSettings,
    sink: &str,
) -> Result<(Ready, Option<Kept>), ExactlyOnceError> {
    let started = std::time::Instant::now();
    let config = client_config(settings);
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut guard = TopicGuard::new(&settings.at, settings.create_topics.clone(), &config);
    for topic in [&txn.checkpoint_topic, &txn.state_topic] {
        // Brokers not reachable yet are waited for, as every sink does.
        loop {
            match guard.ensure(topic, Kind::Compacted, None).await {
                Ok(()) => break,
                Err(TopicError::Unanswered { source, .. }) => {
                    tracing::warn!(sink, topic, error = %source, "Kafka not reachable yet, retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(e) => {
                    tracing::error!(sink, error = %e, "cannot use the exactly-once sink's topic");
                    return Err(e.into());
                }
            }
        }
    }
    let mut producer = config.clone();
    // A transaction's records may not outlive it; librdkafka requires this order, and a
    // request timeout no longer than the transaction's.
    let txn_ms = txn.timeout.as_millis();
    let socket_ms = producer
        .get("socket.timeout.ms")
        .and_then(|v| v.parse::<u128>().ok())
        .map_or(txn_ms, |ms| ms.min(txn_ms));
    producer
        .set("transaction.timeout.ms", txn_ms.to_string())
        .set("message.timeout.ms", txn_ms.to_string())
        .set("socket.timeout.ms", socket_ms.to_string());
    // The sink makes its batches itself (`max_ms`, `max_events`) and awaits their delivery
    // reports before the commit: librdkafka's own linger (5 ms) would only be added to every
    // transaction's time. A `linger.ms` under `librdkafka` still wins.
    if producer.get("linger.ms").is_none() {
        producer.set("linger.ms", "0");
    }
    let txns = Transactions::create(sink, producer.clone(), &txn.id, CALL_TIMEOUT)
        .map_err(|e| ExactlyOnceError::of(&txn.id, e))?;
    // An open transaction of another count ends within its transaction timeout (its
    // coordinator aborts it); a fence may wait that long and one call more.
    let fence_limit = txn.timeout + CALL_TIMEOUT;
    // The id an earlier release gave this shard (`{id}-{i}`, without the count) is fenced
    // with this one's: a holder of that release may still be committing.
    let legacy: Vec<String> = txn
        .shard
        .filter(|s| s.count > 1)
        .map(|s| format!("{}-{}", txn.base_id, s.index))
        .into_iter()
        .collect();
    let (own, legacy) = tokio::join!(
        init(&txns, txn, sink),
        fence(sink, &producer, legacy, fence_limit)
    );
    own?;
    legacy?;
    let fenced = started.elapsed();
    // Only now, with every other producer fenced, is the checkpoint final. A standby's
    // reader has only what was committed since its last read left to read.
    let warm = txn.warm.lock().await.take().filter(|r| r.fresh(WARM_FOR));
    let was_warm = warm.is_some();
    let reader = warm.unwrap_or_else(|| {
        StateReader::new(
            &txn.checkpoint_topic,
            &txn.state_topic,
            &txn.checkpoint_base,
            txn.shard,
        )
    });
    let mut config = config;
    config.set("group.id", txn.reader_group());
    // The first read waits until every transaction open in the checkpoint topic now is
    // decided (committed, or aborted by the broker after its timeout): a checkpoint of
    // another count in a commit still on its way is invisible to a read_committed reader,
    // and that count would go unfenced; the commit would land after this shard read.
    let mut reader = read(reader, &config, sink, Some(fence_limit)).await?;
    // Another count committed after this sink's own checkpoint: its ids are fenced before the
    // rest is read, and again for a count that only the rest shows. After a fence nothing of
    // the fenced count is open, so the rest is read without waiting.
    let mut done: Vec<u32> = Vec::new();
    loop {
        let counts: Vec<u32> = reader
            .counts_to_fence()
            .into_iter()
            .filter(|c| !done.contains(c))
            .collect();
        if counts.is_empty() {
            break;
        }
        let at = std::time::Instant::now();
        let ids: Vec<String> = counts.iter().flat_map(|c| txn.ids_of(*c)).collect();
        let n = fence(sink, &producer, ids, fence_limit).await?;
        tracing::info!(
            sink,
            counts = ?counts,
            fenced = n,
            fence_ms = at.elapsed().as_millis() as u64,
            "fenced the transactional ids of another shard count before reading its checkpoints"
        );
        done.extend(counts);
        reader = read(reader, &config, sink, None).await?;
    }
    let kept = reader.kept();
    tracing::info!(
        sink,
        transactional_id = %txn.id,
        committed_seq = kept.as_ref().map_or(0, |k| k.seq),
        known_objects = kept.as_ref().map_or(0, |k| k.states.len()),
        fence_ms = fenced.as_millis() as u64,
        read_ms = (started.elapsed() - fenced).as_millis() as u64,
        warm = was_warm,
        records_read = reader.last_read,
        "took over the exactly-once sink"
    );
    let ready = Ready {
        txns,
        guard,
        hold: Hold::new(),
        positions: kept
            .as_ref()
            .map(|k| k.positions.clone())
            .unwrap_or_default(),
        committed: kept.as_ref().map_or(0, |k| k.seq),
    };
    Ok((ready, kept))
}

/// Reads `reader` on to the topics' ends, on the blocking pool; with `settle`, once every
/// transaction open in the checkpoint topic is decided, waiting up to that long for it
/// ([`StateReader::read_settled`]).
async fn read(
    mut reader: StateReader,
    config: &ClientConfig,
    sink: &str,
    settle: Option<Duration>,
) -> Result<StateReader, ExactlyOnceError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || -> Result<_, ReadError> {
        match settle {
            Some(settle) => reader.read_settled(&config, CALL_TIMEOUT * 10, settle)?,
            None => reader.read(&config, CALL_TIMEOUT * 10)?,
        }
        Ok(reader)
    })
    .await
    .map_err(|_| ExactlyOnceError::Client(KafkaError::Canceled))?
    .inspect_err(|e| {
        tracing::error!(sink, error = %crate::error_chain(e), "cannot read the exactly-once sink's committed state");
    })
    .map_err(ExactlyOnceError::from)
}

/// Registers the sink's own producer with the transaction coordinator, fencing every other
/// producer of its id; waits while the coordinator is unreachable.
async fn init(txns: &Transactions, txn: &TxnSettings, sink: &str) -> Result<(), ExactlyOnceError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        match txns.init().await {
            Ok(()) => return Ok(()),
            Err(TxnError::Retriable(e)) => {
                tracing::warn!(sink, error = %e, "Kafka transaction coordinator not reachable yet, retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            Err(TxnError::Fatal(e))
                if is_code(&e, RDKafkaErrorCode::TransactionalIdAuthorizationFailed) =>
            {
                let r = Refusal::new(
                    Operation::Write,
                    Resource::TransactionalId,
                    &txn.id,
                    RDKafkaErrorCode::TransactionalIdAuthorizationFailed,
                );
                tracing::error!(sink, error = %r, "Kafka refused the exactly-once sink's transactional id");
                return Err(r.into());
            }
            Err(e) => return Err(ExactlyOnceError::of(&txn.id, e)),
        }
    }
}

/// Whether `e` carries librdkafka's `code` (a transactional call's error included).
pub(super) fn is_code(e: &KafkaError, code: RDKafkaErrorCode) -> bool {
    match e {
        KafkaError::Transaction(r) => r.code() == code,
        _ => e.rdkafka_error_code() == Some(code),
    }
}
