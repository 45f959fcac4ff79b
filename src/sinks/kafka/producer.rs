//! The Kafka sink's producer: librdkafka's producer, a delivery future per record, and a
//! task on the runtime that serves the delivery reports when librdkafka has some. Entry
//! point: [`Producer`].
//!
//! Why not rdkafka's `FutureProducer` or a polling thread: a thread blocked in `poll` is one
//! more thread to wake per delivery report (librdkafka's broker thread wakes it, it wakes the
//! sink's task), and rdkafka's own polls spin through the last millisecond of each wait
//! (about 10 ms of CPU a second with nothing to send; BENCHMARKS.md). Instead librdkafka
//! calls [`reports_waiting`] when its report queue turns non-empty, which wakes the
//! [`serve_reports`] task; it serves the queue until it is empty, on the runtime's thread,
//! where the sink's task the reports wake also runs. With nothing to report nothing wakes.

use std::ffi::c_void;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::bindings as rdsys;
use rdkafka::client::Client;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _, ProducerContext};
use tokio::sync::{Notify, oneshot};

use super::context::Context;

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

/// The producer and the task serving its delivery reports. Cheap to clone.
#[derive(Clone)]
pub struct Producer {
    shared: Arc<Shared>,
}

struct Shared {
    producer: Option<Arc<BaseProducer<Context>>>,
    /// librdkafka's handle on the producer's report queue, with [`reports_waiting`] set on it.
    queue: Option<ReportQueue>,
    serve: tokio::task::JoinHandle<()>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.serve.abort();
        // librdkafka wants its queue handles released before the producer is destroyed.
        drop(self.queue.take());
        // librdkafka's destroy joins its threads: off the runtime's thread when there is one.
        if let Some(producer) = self.producer.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn_blocking(move || drop(producer));
        }
    }
}

/// The producer's report queue (librdkafka's main queue) and the wake-up its callback
/// holds. The callback is removed and the handle released when this is dropped, which
/// [`Shared`] does before it lets the producer go.
struct ReportQueue {
    queue: *mut rdsys::rd_kafka_queue_t,
    /// The callback's opaque points here: held, never read.
    _wake: Arc<Notify>,
}

// SAFETY: librdkafka's queue handles may be used from any thread (its queues lock
// themselves); the pointer is only passed to librdkafka.
unsafe impl Send for ReportQueue {}
// SAFETY: as for `Send`: `length` takes librdkafka's lock.
unsafe impl Sync for ReportQueue {}

impl ReportQueue {
    /// Sets [`reports_waiting`] on `producer`'s report queue, to wake `wake`.
    fn enable(producer: &BaseProducer<Context>, wake: Arc<Notify>) -> ReportQueue {
        // SAFETY: the producer's handle is valid while `producer` lives, and the queue handle
        // we get holds its own reference on the queue until `rd_kafka_queue_destroy`. The
        // opaque is the `Notify` this struct keeps alive until the callback is removed in
        // `drop`.
        unsafe {
            let queue = rdsys::rd_kafka_queue_get_main(producer.client().native_ptr());
            let opaque = Arc::as_ptr(&wake) as *mut c_void;
            rdsys::rd_kafka_queue_cb_event_enable(queue, Some(reports_waiting), opaque);
            ReportQueue { queue, _wake: wake }
        }
    }

    /// The reports (and errors) waiting to be served.
    fn length(&self) -> usize {
        // SAFETY: the handle is valid until `drop`.
        unsafe { rdsys::rd_kafka_queue_length(self.queue) }
    }
}

impl Drop for ReportQueue {
    fn drop(&mut self) {
        // SAFETY: the handle is valid; once the callback is removed (under the queue's lock)
        // librdkafka no longer touches the opaque, so `wake` may go.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue, None, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(self.queue);
        }
    }
}

/// Called by librdkafka (on its own thread, holding the queue's lock) when the report
/// queue turns non-empty: wakes [`serve_reports`]. It may not call librdkafka.
unsafe extern "C" fn reports_waiting(_rk: *mut rdsys::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Notify` of a live `ReportQueue` (the callback is removed
    // before it is dropped).
    let wake = unsafe { &*(opaque as *const Notify) };
    wake.notify_one();
}

/// Serves the producer's delivery reports (and global errors, to the context) each time
/// librdkafka says some are waiting, until the producer is gone.
async fn serve_reports(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        loop {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let (Some(producer), Some(queue)) = (shared.producer.as_deref(), &shared.queue)
            else {
                return;
            };
            // `poll` serves one event (a batch of reports) at a time.
            let mut served = 0;
            while served < SERVE_AT_ONCE && queue.length() > 0 {
                producer.poll(Duration::ZERO);
                served += 1;
            }
            if served < SERVE_AT_ONCE {
                break;
            }
            // More keep coming: the tasks sharing the thread (the sinks these reports wake,
            // the event loop) get their turn first.
            drop(shared);
            tokio::task::yield_now().await;
        }
    }
}

/// How many report events [`serve_reports`] serves before it lets the other tasks of its
/// thread run.
const SERVE_AT_ONCE: usize = 64;

impl Producer {
    /// Creates the producer from `config` and starts the task serving its reports (on the
    /// current tokio runtime).
    pub fn create(config: &ClientConfig, context: Context) -> KafkaResult<Producer> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            KafkaError::ClientCreation(format!("serving its delivery reports needs a runtime: {e}"))
        })?;
        let producer: Arc<BaseProducer<Context>> = Arc::new(config.create_with_context(context)?);
        let wake = Arc::new(Notify::new());
        let queue = ReportQueue::enable(&producer, wake.clone());
        // librdkafka calls back only when the queue turns non-empty: what it already holds
        // (an error raised while the producer started) is served at once.
        wake.notify_one();
        let shared = Arc::new_cyclic(|me: &Weak<Shared>| Shared {
            serve: runtime.spawn(serve_reports(me.clone(), wake)),
            queue: Some(queue),
            producer: Some(producer),
        });
        Ok(Producer { shared })
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
        self.producer().send(record)
    }

    /// librdkafka's producer itself, for transactional calls.
    pub fn base(&self) -> &BaseProducer<Context> {
        self.producer()
    }

    fn producer(&self) -> &BaseProducer<Context> {
        // Only `Shared`'s drop takes it.
        self.shared
            .producer
            .as_deref()
            .expect("the producer lives as long as its handle")
    }

    /// The client, for metadata requests.
    pub fn client(&self) -> &Client<Context> {
        self.producer().client()
    }

    /// Waits (blocking) until librdkafka has sent everything, up to `timeout`.
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        self.producer().flush(timeout)
    }
}
