//! Kafka transactions, the ground of the exactly-once sink: a transactional producer whose
//! `transactional.id` every replica of a sink shares, so that the newest one to call
//! [`Transactions::init`] fences the others. Entry point: [`Transactions`].
//!
//! What a `read_committed` consumer sees is exactly what [`Transactions::commit`] returned
//! `Ok` for. A producer that was fenced gets [`TxnError::Fenced`] from its next call and can
//! never commit again; nothing it sent after the fence becomes visible. librdkafka's
//! transactional calls block their caller, so each runs on tokio's blocking pool.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;

use super::producer::{Delivery, Producer, Record};
use super::context::Context;

/// How a transactional call failed, classified where it happened.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// Another producer with the same `transactional.id` initialised after this one: this
    /// one is done (step down); nothing it sent since is visible to `read_committed`.
    #[error("fenced by a newer producer with the same transactional.id")]
    Fenced(#[source] KafkaError),
    /// The transaction was aborted (an abortable error): nothing of it is visible; the same
    /// records may be sent again in a new transaction.
    #[error("the transaction was aborted")]
    Aborted(#[source] KafkaError),
    /// A timeout or another error the same call may be retried after.
    #[error("a transactional call failed and may be retried")]
    Retriable(#[source] KafkaError),
    /// The producer cannot go on (misconfiguration, authorization, a fatal broker error).
    #[error("the transactional producer failed")]
    Fatal(#[source] KafkaError),
    /// Kafka refused a permission (or a topic is missing), named as the ACL that grants it;
    /// nothing of the transaction is visible.
    #[error(transparent)]
    Refused(#[from] super::refusal::Refusal),
    /// A topic of the transaction cannot be written (or not looked up yet).
    #[error(transparent)]
    Topic(#[from] super::topics::TopicError),
}

impl TxnError {
    pub(super) fn of(e: KafkaError) -> TxnError {
        let fenced = |code| {
            matches!(
                code,
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            )
        };
        match &e {
            KafkaError::Transaction(r) if fenced(r.code()) => TxnError::Fenced(e),
            KafkaError::Transaction(r) if r.is_fatal() => TxnError::Fatal(e),
            KafkaError::Transaction(r) if r.txn_requires_abort() => TxnError::Aborted(e),
            KafkaError::Transaction(r) if r.is_retriable() => TxnError::Retriable(e),
            _ if e.rdkafka_error_code().is_some_and(fenced) => TxnError::Fenced(e),
            _ => TxnError::Fatal(e),
        }
    }
}

/// The producer that took over and the position it continues from.
pub(crate) struct Ready {
    pub(super) txns: Transactions,
    /// The topics seen to exist.
    pub(super) guard: super::topics::TopicGuard,
    /// Refusals and long waits, and whether this producer committed yet.
    pub(super) hold: super::hold::Hold,
    /// Per scope, the watch position as of the last committed event.
    pub(super) positions: BTreeMap<String, String>,
    /// The last committed event's sequence number.
    pub(super) committed: u64,
}

/// A transactional producer.
pub struct Transactions {
    producer: Producer,
    timeout: Duration,
    /// What its client context learnt (the topic a transaction was refused).
    heard: std::sync::Arc<super::context::Fatal>,
}

impl Transactions {
    /// A producer for `brokers` with `transactional_id`; `timeout` bounds each blocking call.
    /// `config` may add client settings (TLS, SASL); delivery settings are set here.
    pub fn create(
        sink: &str,
        mut config: ClientConfig,
        transactional_id: &str,
        timeout: Duration,
    ) -> Result<Transactions, TxnError> {
        config
            .set("transactional.id", transactional_id)
            .set("enable.idempotence", "true")
            .set("acks", "all");
        let heard = std::sync::Arc::new(super::context::Fatal::default());
        let context = Context::with_fatal(sink.into(), heard.clone());
        let producer = Producer::create(&config, context).map_err(TxnError::Fatal)?;
        Ok(Transactions { producer, timeout, heard })
    }

    /// Registers with the transaction coordinator, fencing every older producer with the
    /// same `transactional.id` and aborting what it left open.
    pub async fn init(&self) -> Result<(), TxnError> {
        self.blocking(|p, t| p.base().init_transactions(t))
            .await
    }

    /// Starts a transaction: what is sent until [`Transactions::commit`] is one unit.
    pub fn begin(&self) -> Result<(), TxnError> {
        self.producer
            .base()
            .begin_transaction()
            .map_err(TxnError::of)
    }

    /// Sends one record within the open transaction.
    #[allow(clippy::result_large_err)] // the record comes back to be sent again
    pub fn send<'a>(&self, record: Record<'a>) -> Result<(), (TxnError, Record<'a>)> {
        self.producer
            .send(record)
            .map_err(|(e, r)| (TxnError::of(e), r))
    }

    /// The producer, to send records built elsewhere within the open transaction.
    pub(super) fn producer(&self) -> &Producer {
        &self.producer
    }

    /// A record for `topic` with its delivery report, for [`Transactions::send`].
    pub fn record(topic: &str) -> (Record<'_>, Delivery) {
        Producer::record(topic)
    }

    /// Commits the open transaction once `sent` (the delivery reports of what it carries,
    /// or of what the caller has not awaited yet) are in. On an abortable error the
    /// transaction is aborted and [`TxnError::Aborted`] returned.
    ///
    /// Why the reports first: rdkafka's `commit_transaction` flushes before it commits, and
    /// its flush polls the report queue up to 100 ms at a time while the producer's own
    /// thread takes the reports from under it, so a commit with reports outstanding took
    /// 100 ms longer than the broker needed (BENCHMARKS.md, issue 24). With every report in,
    /// the flush finds nothing in flight. A record that failed fails the commit (abortable),
    /// so the reports' outcomes need no look here.
    pub async fn commit(&self, sent: Vec<Delivery>) -> Result<(), TxnError> {
        futures::future::join_all(sent).await;
        match self
            .blocking(|p, t| p.base().commit_transaction(t))
            .await
        {
            Err(TxnError::Aborted(e)) => {
                self.abort().await?;
                Err(TxnError::Aborted(e))
            }
            other => other,
        }
    }

    /// When `e` is Kafka refusing a topic of the transaction (an abort for an authorization
    /// failure), that refusal, naming the topic when librdkafka did.
    pub fn refusal(&self, e: &TxnError) -> Option<super::refusal::Refusal> {
        use super::refusal::{Operation, Refusal, Resource, refused};
        match e {
            TxnError::Aborted(KafkaError::Transaction(r)) if refused(r.code()) => {
                let topic = self
                    .heard
                    .refused_topic()
                    .unwrap_or_else(|| "(one of the transaction's topics)".to_string());
                Some(Refusal::new(Operation::Write, Resource::Topic, &topic, r.code()))
            }
            // The broker may answer the abort of a refused transaction with a fatal invalid
            // state; the refusal heard just before is what went wrong.
            TxnError::Fatal(_) => self.heard.refused_topic().map(|topic| {
                Refusal::new(
                    Operation::Write,
                    Resource::Topic,
                    &topic,
                    rdkafka::error::RDKafkaErrorCode::TopicAuthorizationFailed,
                )
            }),
            _ => None,
        }
    }

    /// Aborts the open transaction: nothing sent in it becomes visible.
    pub async fn abort(&self) -> Result<(), TxnError> {
        self.blocking(|p, t| p.base().abort_transaction(t))
            .await
    }

    async fn blocking(
        &self,
        call: impl FnOnce(&Producer, Duration) -> Result<(), KafkaError> + Send + 'static,
    ) -> Result<(), TxnError> {
        let (producer, timeout) = (self.producer.clone(), self.timeout);
        tokio::task::spawn_blocking(move || call(&producer, timeout))
            .await
            .map_err(|_| TxnError::Fatal(KafkaError::Canceled))
            .and_then(|r| r.map_err(TxnError::of))
    }
}
