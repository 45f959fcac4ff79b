//! Producing events and turning delivery reports into acks. Entry point: [`run`], the
//! [`Sink`] of a validated [`KafkaSettings`].
//!
//! Records are keyed by the pod uid, so one pod's events share a partition; the idempotent
//! producer with an unlimited delivery timeout keeps their order through broker outages. An
//! event is reported delivered only when its delivery report arrives, and reports are
//! settled in send order ([`InFlight`]).

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use tokio::sync::Notify;

use super::inflight::InFlight;
use super::producer::{Delivered, Delivery, Producer};
use super::{KafkaSettings, Mode};
use crate::event::{Event, STRUCTURED_CONTENT_TYPE};
use crate::sinks::queue::QueueRx;
use super::take_over::TxnKeeper;
use crate::sinks::{Acks, DeadLetter, Keeper, Sink, SinkError};

/// Why the Kafka sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum KafkaSinkError {
    #[error("creating the Kafka producer")]
    Create(#[source] KafkaError),
    /// Fatal: rejected credentials or authorization, or the idempotent producer's own fatal
    /// error (it can no longer guarantee order).
    #[error("Kafka rejected kubecast: {reason}")]
    Rejected {
        reason: String,
        #[source]
        source: KafkaError,
    },
    #[error("the Kafka producer stopped before reporting a delivery")]
    ProducerGone,
}

/// Why one record can never be sent: the event is dead-lettered with this as the reason.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unsendable {
    #[error("record of {size} bytes exceeds max_message_bytes {max}")]
    TooLarge { size: usize, max: usize },
    #[error("Kafka refused the record: {0}")]
    Refused(#[source] KafkaError),
}

impl Sink for KafkaSettings {
    fn run(self: Box<Self>, rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        if self.exactly_once.is_some() {
            Box::pin(super::exactly_once::run(*self, rx, acks))
        } else {
            Box::pin(run(*self, rx, acks))
        }
    }

    fn keeper(&self) -> Option<Arc<dyn Keeper>> {
        let sink = self.exactly_once.as_ref()?.sink.as_str().into();
        Some(Arc::new(TxnKeeper::new(self.clone(), sink)))
    }
}

/// Receives librdkafka's global errors: logs the retriable ones, keeps the first fatal one
/// where the sink's loop sees it; its delivery reports go to each record's future
/// (`producer.rs`).
pub(super) struct Context {
    sink: Arc<str>,
    shared: Arc<Fatal>,
}

impl Context {
    /// A context for sink `sink` whose fatal errors nobody waits for but the log (the
    /// transactional producer sees them in its calls' results).
    pub(super) fn new(sink: &str) -> Context {
        Context {
            sink: sink.into(),
            shared: Arc::default(),
        }
    }
}

/// The first fatal error, and a wake-up for the sink's loop.
#[derive(Default)]
struct Fatal {
    error: Mutex<Option<(KafkaError, String)>>,
    wake: Notify,
    /// The brokers answered once: a refused TLS handshake is retried from then on (a
    /// certificate being rotated) instead of stopping the sink.
    connected: std::sync::atomic::AtomicBool,
}

impl Fatal {
    /// The fatal error reported so far, if any.
    fn take(&self) -> Option<KafkaSinkError> {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.take()
            .map(|(source, reason)| KafkaSinkError::Rejected { reason, source })
    }
}

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        // `Fatal`: the idempotent producer can no longer guarantee order or exactly-once.
        let fatal = matches!(
            code,
            Some(
                RDKafkaErrorCode::Fatal
                    | RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
            )
        );
        let fenced = matches!(
            code,
            Some(RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::Fenced)
        ) || reason.contains("fenced");
        if fenced {
            // A newer replica of this exactly-once sink took over: expected at a failover;
            // the transactional calls report it to the sink.
            tracing::warn!(sink = %self.sink, reason, "fenced: another kubecast took over this sink's transactional.id");
        } else if let Some(why) = tls_refusal(reason) {
            if self.shared.connected.load(std::sync::atomic::Ordering::Relaxed) {
                tracing::error!(sink = %self.sink, error = %error, reason, "Kafka's TLS handshake refused; retrying");
            } else {
                tracing::error!(sink = %self.sink, error = %error, reason, "Kafka's TLS handshake refused");
                let mut slot = self.shared.error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| (error.clone(), format!("{why}: {reason}")));
                self.shared.wake.notify_one();
            }
        } else if fatal {
            tracing::error!(sink = %self.sink, error = %error, reason, "Kafka rejected kubecast");
            let mut slot = self.shared.error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| (error.clone(), reason.to_string()));
            self.shared.wake.notify_one();
        } else {
            // Brokers down, connection refused: librdkafka reconnects with backoff itself.
            tracing::warn!(sink = %self.sink, error = %error, reason, "Kafka unavailable, retrying");
        }
    }
}

/// What a librdkafka error text says was refused in a TLS handshake (OpenSSL's words): the
/// broker's certificate, or kubecast's client certificate.
fn tls_refusal(reason: &str) -> Option<&'static str> {
    if reason.contains("certificate verify failed") {
        Some("the broker's certificate is not trusted; check tls.ca_file")
    } else if [
        "alert bad certificate",
        "alert certificate required",
        "alert unknown ca",
        "alert certificate unknown",
        "alert handshake failure",
    ]
    .iter()
    .any(|a| reason.contains(a))
    {
        Some("the broker refused kubecast's client certificate; check tls.cert_file and tls.key_file")
    } else {
        None
    }
}

/// The `ce_` headers and `content-type` of binary mode.
pub fn headers_of(event: &Event) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(16);
    for (name, value) in event.attributes() {
        headers = headers.insert(Header {
            key: &header_name(name),
            value: Some(value.as_bytes()),
        });
    }
    headers
}

/// The Kafka header of attribute `name`: `ce_{name}`, or `content-type` for
/// `datacontenttype`. Spelled out for the attributes kubecast sends, so that building the
/// headers of an event allocates no names.
fn header_name(name: &'static str) -> Cow<'static, str> {
    Cow::Borrowed(match name {
        "datacontenttype" => "content-type",
        "specversion" => "ce_specversion",
        "id" => "ce_id",
        "source" => "ce_source",
        "type" => "ce_type",
        "subject" => "ce_subject",
        "time" => "ce_time",
        "dataschema" => "ce_dataschema",
        "partitionkey" => "ce_partitionkey",
        "k8suid" => "ce_k8suid",
        "k8snamespace" => "ce_k8snamespace",
        "k8sname" => "ce_k8sname",
        "k8srv" => "ce_k8srv",
        "k8sprevrv" => "ce_k8sprevrv",
        "k8sinitial" => "ce_k8sinitial",
        "k8sinferred" => "ce_k8sinferred",
        "k8skind" => "ce_k8skind",
        "k8sapiversion" => "ce_k8sapiversion",
        "k8struncated" => "ce_k8struncated",
        other => return Cow::Owned(format!("ce_{other}")),
    })
}

/// An event on its way to Kafka, or (with the reason) its dead letter on its way to the
/// dead-letter topic.
struct Pending {
    event: Arc<Event>,
    dead: Option<String>,
}

type Outstanding = InFlight<Pending, Delivery>;

/// Runs the sink until its queue closes, then waits for the outstanding reports.
pub async fn run(settings: KafkaSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let fatal = Arc::new(Fatal::default());
    let context = Context {
        sink: acks.sink().clone(),
        shared: fatal.clone(),
    };
    let mut config = ClientConfig::new();
    for (k, v) in &settings.properties {
        config.set(k, &v.0);
    }
    let producer = Producer::create(&config, context)
        .map_err(|e| acks.failed(KafkaSinkError::Create(e)))?;
    let probe = tokio::spawn(probe(producer.clone(), acks.clone(), fatal.clone()));
    let mut inflight: Outstanding = InFlight::new();
    let mut open = true;
    while open || !inflight.is_empty() {
        if let Some(e) = fatal.take() {
            probe.abort();
            return Err(acks.failed(e));
        }
        let room = inflight.len() < settings.in_flight;
        tokio::select! {
            biased;
            _ = fatal.wake.notified() => continue,
            (Pending { event, dead }, done) = inflight.next() => {
                settle(&producer, &settings, &acks, event, dead, done, &mut inflight).await?;
            }
            next = rx.recv(), if open && room => match next {
                Some(event) => submit(&producer, &settings, &acks, event, &mut inflight).await?,
                None => open = false,
            },
        }
    }
    probe.abort();
    // Everything was reported, so librdkafka's queue is empty; its flush still blocks its
    // caller, so it runs off the runtime's workers.
    let _ = tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(5))).await;
    Ok(())
}

/// Whether the brokers answer, for readiness: librdkafka connects and reconnects by itself
/// and says nothing when it succeeds, so a metadata request is made every few seconds (on
/// the blocking pool: it blocks its caller).
async fn probe(producer: Producer, acks: Acks, fatal: Arc<Fatal>) {
    let mut up = None;
    loop {
        let p = producer.clone();
        let answered = tokio::task::spawn_blocking(move || {
            p.client().fetch_metadata(None, Duration::from_secs(3)).is_ok()
        })
        .await
        .unwrap_or(false);
        if answered {
            fatal.connected.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if up != Some(answered) {
            acks.connected(answered);
            up = Some(answered);
        }
        tokio::time::sleep(Duration::from_secs(if answered { 5 } else { 1 })).await;
    }
}

/// Sends `event` (or its dead letter, when `dead` holds the reason), dead-lettering it if
/// Kafka refuses it outright.
async fn submit(
    producer: &Producer,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    match enqueue(producer, settings, acks.sink(), &event, None).await {
        Ok(delivery) => {
            inflight.push(Pending { event, dead: None }, delivery);
            Ok(())
        }
        Err(why) => dead_letter(producer, settings, acks, event, why.to_string(), inflight).await,
    }
}

/// The topic, payload and headers of `event`'s record (of its dead letter, with the
/// reason).
fn record_of<'e>(
    settings: &KafkaSettings,
    sink: &str,
    event: &'e Event,
    dead: Option<&'e str>,
) -> (String, Cow<'e, [u8]>, OwnedHeaders) {
    match dead {
        None => {
            let topic = settings.topic.render(event);
            match settings.mode {
                // The data as it is: librdkafka copies the payload itself.
                Mode::Binary => (topic, Cow::Borrowed(&event.data[..]), headers_of(event)),
                Mode::Structured => (
                    topic,
                    Cow::Owned(event.structured_json()),
                    OwnedHeaders::new().insert(Header {
                        key: "content-type",
                        value: Some(STRUCTURED_CONTENT_TYPE),
                    }),
                ),
            }
        }
        Some(reason) => {
            let topic = settings.dead_letter_topic.clone().unwrap_or_default();
            let mut line = DeadLetter::line(sink, event, reason, true);
            if line.len() > settings.max_message_bytes {
                line = DeadLetter::line(sink, event, reason, false);
            }
            line.pop(); // the newline
            (
                topic,
                Cow::Owned(line),
                OwnedHeaders::new().insert(Header {
                    key: "kubecast_reason",
                    value: Some(reason),
                }),
            )
        }
    }
}

/// Hands one record to librdkafka, waiting for room while its queue is full. The error is
/// the reason the record can never be sent.
pub(super) async fn enqueue(
    producer: &Producer,
    settings: &KafkaSettings,
    sink: &str,
    event: &Event,
    dead: Option<&str>,
) -> Result<Delivery, Unsendable> {
    // Declared first: the reference form, when it replaces the event, outlives the record.
    let small: Event;
    let (mut topic, mut payload, mut headers) = record_of(settings, sink, event, dead);
    if dead.is_none() && settings.too_large_reference && payload.len() > settings.max_message_bytes {
        tracing::warn!(sink, id = %event.id, subject = %event.subject(),
            "event too large for max_message_bytes: sent as reference data (k8struncated)");
        small = event.as_reference();
        (topic, payload, headers) = record_of(settings, sink, &small, dead);
    }
    if payload.len() > settings.max_message_bytes {
        return Err(Unsendable::TooLarge {
            size: payload.len(),
            max: settings.max_message_bytes,
        });
    }
    let (record, delivery) = Producer::record(&topic);
    let mut record = record
        .key(event.uid.as_str())
        .payload(payload.as_ref())
        .headers(headers);
    let mut wait = Duration::from_millis(1);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                // librdkafka's own queue is full (in_flight above its limits): its
                // background thread drains it; retry shortly.
                record = back;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(100));
            }
            Err((e, _)) => return Err(Unsendable::Refused(e)),
        }
    }
}

/// Sends `event`'s dead letter to the dead-letter topic, or writes it to the file / log.
async fn dead_letter(
    producer: &Producer,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    reason: String,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    if settings.dead_letter_topic.is_none() {
        return acks.dead_letter(&event, reason).await;
    }
    match enqueue(producer, settings, acks.sink(), &event, Some(&reason)).await {
        Ok(delivery) => {
            inflight.push(
                Pending {
                    event,
                    dead: Some(reason),
                },
                delivery,
            );
            Ok(())
        }
        Err(e) => {
            acks.dead_letter(
                &event,
                format!("{reason}; the dead-letter topic refused it too: {e}"),
            )
            .await
        }
    }
}

/// Turns one delivery report into an ack or a dead letter.
async fn settle(
    producer: &Producer,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    dead: Option<String>,
    done: Delivered,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    match (done, dead) {
        (Ok(Ok(_)), None) => {
            acks.delivered(event.seq);
            Ok(())
        }
        (Ok(Ok(_)), Some(reason)) => {
            tracing::error!(sink = %acks.sink(), id = %event.id, reason, "event dead-lettered to Kafka");
            acks.reported_dead(event.seq, reason);
            Ok(())
        }
        (Ok(Err(e)), None) => {
            let reason = format!("Kafka did not accept the record: {e}");
            dead_letter(producer, settings, acks, event, reason, inflight).await
        }
        (Ok(Err(e)), Some(reason)) => {
            acks.dead_letter(
                &event,
                format!("{reason}; the dead-letter topic refused it too: {e}"),
            )
            .await
        }
        (Err(_canceled), _) => Err(acks.failed(KafkaSinkError::ProducerGone)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ChangeKind;

    #[test]
    fn every_attribute_becomes_its_ce_header_and_datacontenttype_the_content_type() {
        for kind in [ChangeKind::Added, ChangeKind::Modified, ChangeKind::Deleted] {
            let event = Event {
                id: "id".into(),
                dataschema: "urn:x".into(),
                prev_rv: "1".into(),
                inferred: false,
                initial: true,
                data: bytes::Bytes::new(),
                ..crate::store::record_tests_event(1, "u", "2", kind)
            };
            for (name, _) in event.attributes() {
                let expected = if name == "datacontenttype" {
                    "content-type".to_string()
                } else {
                    format!("ce_{name}")
                };
                assert_eq!(header_name(name), expected, "the header of `{name}`");
            }
        }
        assert_eq!(header_name("future"), "ce_future");
    }
}
