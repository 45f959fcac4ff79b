//! Fencing transactional ids other than the sink's own before it reads its checkpoints: those
//! of another shard count whose checkpoints it is about to continue from, and the id an
//! earlier release gave its shard. `init_transactions` under each id, on a producer of its
//! own, aborts what the id left open (or waits until a commit the coordinator already took
//! completes) and raises the id's epoch, so that a commit still in flight under it (a shard's
//! task aborted while its `commit_transaction` ran on the blocking pool, a request slow on
//! the network) is refused when it arrives. After the fence nothing under those ids can
//! change what the sink reads. Entry point: [`fence`].

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use rdkafka::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;

use super::take_over::{CALL_TIMEOUT, ExactlyOnceError, is_code};
use super::txn::{Transactions, TxnError};
use crate::backoff::Backoff;

/// How many ids are fenced at once (each on a librdkafka producer of its own).
const AT_ONCE: usize = 8;

/// Fences every id of `ids` with the producer settings `config`, each within `limit`;
/// returns how many were fenced (an id Kafka refuses this principal is skipped: a producer
/// of the same principal cannot commit under it either).
pub(super) async fn fence(
    sink: &str,
    config: &ClientConfig,
    ids: Vec<String>,
    limit: Duration,
) -> Result<usize, ExactlyOnceError> {
    let results: Vec<Result<bool, ExactlyOnceError>> = futures::stream::iter(ids)
        .map(|id| fence_one(sink, config.clone(), id, limit))
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let mut fenced = 0;
    for r in results {
        fenced += usize::from(r?);
    }
    Ok(fenced)
}

/// Fences `id`: `true` once fenced, `false` when Kafka refused this principal the id.
async fn fence_one(
    sink: &str,
    config: ClientConfig,
    id: String,
    limit: Duration,
) -> Result<bool, ExactlyOnceError> {
    let started = Instant::now();
    let txns = Transactions::create(sink, config, &id, CALL_TIMEOUT)
        .map_err(|e| ExactlyOnceError::of(&id, e))?;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        match txns.init().await {
            // Fenced: a newer producer of the id fenced it already, which is as good.
            Ok(()) | Err(TxnError::Fenced(_)) => return Ok(true),
            Err(TxnError::Fatal(e))
                if is_code(&e, RDKafkaErrorCode::TransactionalIdAuthorizationFailed) =>
            {
                tracing::info!(
                    sink,
                    transactional_id = %id,
                    "not fencing a transactional id Kafka refuses this principal (Write on TransactionalId): no producer of this principal can commit under it"
                );
                return Ok(false);
            }
            Err(TxnError::Retriable(e)) => {
                let wait = backoff.next_delay();
                if started.elapsed() + wait >= limit {
                    let e = ExactlyOnceError::Unfenced {
                        id: id.clone(),
                        limit,
                        source: TxnError::Retriable(e),
                    };
                    tracing::error!(sink, error = %crate::error_chain(&e), "cannot take the shard over");
                    return Err(e);
                }
                tracing::warn!(sink, transactional_id = %id, error = %e, "fencing a transactional id: the transaction coordinator did not answer yet, retrying");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(ExactlyOnceError::of(&id, e)),
        }
    }
}
