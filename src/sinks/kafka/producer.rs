//! The Kafka sink's producer: librdkafka's producer, a delivery future per record, and a
//! polling thread of its own that serves the delivery reports. Entry point: [`Producer`].
//!
//! Why not rdkafka's `FutureProducer`: its polling thread polls 100 ms at a time and spins
//! through the last millisecond of each poll (rdkafka 0.39 rounds the time left down to
//! whole milliseconds and polls again with 0 until the deadline has passed): about 10 ms of
//! CPU per second with nothing to send, the whole of kubecast's idle cost with a Kafka sink
//! (BENCHMARKS.md). This thread polls a second at a time, so the same spin comes a tenth as
//! often; it ends within a second of the last clone of the [`Producer`] being dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::client::Client;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use tokio::sync::oneshot;

use super::context::Context;

/// How long one poll of the delivery reports waits (see the module docs).
const POLL: Duration = Duration::from_secs(1);

/// What a record's delivery future gives: `Ok` when the broker acknowledged it, librdkafka's
/// error when it gave up, `Err(RecvError)` when the producer went away first.
pub type Delivered = Result<Result<(), KafkaError>, oneshot::error::RecvError>;

/// A record's delivery report, to await.
pub type Delivery = oneshot::Receiver<Result<(), KafkaError>>;

/// A record to send, with the sender of its delivery report as librdkafka's opaque.
pub type Record<'a> = BaseRecord<'a, str, [u8], Box<oneshot::Sender<Result<(), KafkaError>>>>;

impl ProducerContext for Context {
    type DeliveryOpaque = Box<oneshot::Sender<Result<(), KafkaError>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, report: Self::DeliveryOpaque) {
        // Nobody waits any more when the sink has stopped; then there is nothing to tell.
        let _ = report.send(result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone()));
    }
}

/// The producer and its polling thread. Cheap to clone.
#[derive(Clone)]
pub struct Producer {
    shared: Arc<Shared>,
}

struct Shared {
    producer: Arc<BaseProducer<Context>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The thread sees it after its current poll and drops its handle on the producer,
        // the last one.
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Producer {
    /// Creates the producer from `config` and starts its polling thread.
    pub fn create(config: &ClientConfig, context: Context) -> KafkaResult<Producer> {
        let producer: Arc<BaseProducer<Context>> = Arc::new(config.create_with_context(context)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (producer.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kafka delivery".to_string())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    p.poll(POLL);
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("starting its polling thread: {e}")))?;
        Ok(Producer {
            shared: Arc::new(Shared { producer, stop }),
        })
    }

    /// A record for `topic` whose delivery report comes through the returned [`Delivery`].
    pub fn record(topic: &str) -> (Record<'_>, Delivery) {
        let (tx, rx) = oneshot::channel();
        (BaseRecord::with_opaque_to(topic, Box::new(tx)), rx)
    }

    /// Hands `record` to librdkafka; gives it back with the error when librdkafka refuses it
    /// (its queue full, or for good).
    #[allow(clippy::result_large_err)] // the record comes back to be sent again
    pub fn send<'a>(&self, record: Record<'a>) -> Result<(), (KafkaError, Record<'a>)> {
        self.shared.producer.send(record)
    }

    /// librdkafka's producer itself, for transactional calls.
    pub fn base(&self) -> &BaseProducer<Context> {
        &self.shared.producer
    }

    /// The client, for metadata requests.
    pub fn client(&self) -> &Client<Context> {
        self.shared.producer.client()
    }

    /// Waits (blocking) until librdkafka has sent everything, up to `timeout`.
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        self.shared.producer.flush(timeout)
    }
}
