//! Producing events and turning delivery reports into acks.
//!
//! Records are keyed by the pod uid, so one pod's events share a partition; the idempotent
//! producer with an unlimited delivery timeout keeps their order through broker outages. An
//! event is reported delivered only when its delivery report arrives, and reports are
//! awaited in send order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tokio::sync::Notify;

use super::{KafkaSettings, Mode};
use crate::event::{Event, STRUCTURED_CONTENT_TYPE};
use crate::sinks::DeadLetter;
use crate::sinks::runner::{Acks, SinkError};

/// Receives librdkafka's global errors: logs the retriable ones, keeps the first fatal one
/// where the sink's loop sees it (rdkafka's future producer does not give its context back).
struct Context {
    sink: Arc<str>,
    shared: Arc<Fatal>,
}

/// The first fatal error, and a wake-up for the sink's loop.
#[derive(Default)]
struct Fatal {
    reason: Mutex<Option<String>>,
    wake: Notify,
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
        if fatal {
            tracing::error!(sink = %self.sink, error = %error, reason, "Kafka rejected kubecast");
            if let Ok(mut slot) = self.shared.reason.lock() {
                slot.get_or_insert_with(|| format!("{error}: {reason}"));
            }
            self.shared.wake.notify_one();
        } else {
            // Brokers down, connection refused: librdkafka reconnects with backoff itself.
            tracing::warn!(sink = %self.sink, error = %error, reason, "Kafka unavailable, retrying");
        }
    }
}

/// The `ce_` headers and `content-type` of binary mode.
pub fn headers_of(event: &Event) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(16);
    for (name, value) in event.attributes() {
        let key = if name == "datacontenttype" {
            "content-type".to_string()
        } else {
            format!("ce_{name}")
        };
        headers = headers.insert(Header {
            key: &key,
            value: Some(value.as_bytes()),
        });
    }
    headers
}

/// An event on its way to Kafka, or its dead letter on its way to the dead-letter topic.
struct Pending {
    event: Arc<Event>,
    /// The dead-letter reason, when this record is the event's dead letter.
    dead: Option<String>,
    delivery: DeliveryFuture,
}

/// Runs the sink until its queue closes, then waits for the outstanding reports.
pub async fn run(
    settings: KafkaSettings,
    mut rx: crate::sinks::queue::QueueRx,
    acks: Acks,
) -> Result<(), SinkError> {
    let fatal = Arc::new(Fatal::default());
    let context = Context {
        sink: acks.sink.clone(),
        shared: fatal.clone(),
    };
    let mut config = ClientConfig::new();
    for (k, v) in &settings.properties {
        config.set(k, &v.0);
    }
    let producer: FutureProducer<Context> = config
        .create_with_context(context)
        .map_err(|e| acks.fatal(format!("creating the Kafka producer: {e}")))?;
    let mut inflight: VecDeque<Pending> = VecDeque::new();
    let mut open = true;
    while open || !inflight.is_empty() {
        if let Some(reason) = fatal.reason.lock().ok().and_then(|s| s.clone()) {
            return Err(acks.fatal(reason));
        }
        let room = inflight.len() < settings.in_flight;
        tokio::select! {
            biased;
            _ = fatal.wake.notified() => continue,
            done = async { (&mut inflight.front_mut().expect("guarded: not empty").delivery).await }, if !inflight.is_empty() => {
                // The branch guard ensures there is a front element.
                let Pending { event, dead, .. } = inflight.pop_front().expect("guarded: not empty");
                settle(&producer, &settings, &acks, event, dead, done, &mut inflight).await?;
            }
            next = rx.recv(), if open && room => match next {
                Some(event) => submit(&producer, &settings, &acks, event, &mut inflight).await?,
                None => open = false,
            },
        }
    }
    // Everything was reported; nothing is left in librdkafka's queue.
    let _ = producer.flush(Duration::from_secs(5));
    Ok(())
}

/// Sends `event` (or its dead letter, when `dead` holds the reason), dead-lettering it if
/// Kafka refuses it outright.
async fn submit(
    producer: &FutureProducer<Context>,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    inflight: &mut VecDeque<Pending>,
) -> Result<(), SinkError> {
    match enqueue(producer, settings, &acks.sink, &event, None).await {
        Ok(delivery) => {
            inflight.push_back(Pending {
                event,
                dead: None,
                delivery,
            });
            Ok(())
        }
        Err(reason) => dead_letter(producer, settings, acks, event, reason, inflight).await,
    }
}

/// Hands one record to librdkafka, waiting for room while its queue is full. The error is
/// the reason the record can never be sent.
async fn enqueue(
    producer: &FutureProducer<Context>,
    settings: &KafkaSettings,
    sink: &str,
    event: &Event,
    dead: Option<&str>,
) -> Result<DeliveryFuture, String> {
    let (topic, payload, headers) = match dead {
        None => {
            let topic = settings
                .topic
                .render(event.cluster(), &event.namespace, &event.name);
            match settings.mode {
                Mode::Binary => (topic, event.data.to_vec(), headers_of(event)),
                Mode::Structured => (
                    topic,
                    event.structured_json(),
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
                line,
                OwnedHeaders::new().insert(Header {
                    key: "kubecast_reason",
                    value: Some(reason),
                }),
            )
        }
    };
    if payload.len() > settings.max_message_bytes {
        return Err(format!(
            "record of {} bytes exceeds max_message_bytes {}",
            payload.len(),
            settings.max_message_bytes
        ));
    }
    let mut record = FutureRecord::to(&topic)
        .key(event.uid.as_str())
        .payload(&payload)
        .headers(headers);
    let mut wait = Duration::from_millis(1);
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                // librdkafka's own queue is full (in_flight above its limits): its
                // background thread drains it; retry shortly.
                record = back;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(100));
            }
            Err((e, _)) => return Err(format!("Kafka refused the record: {e}")),
        }
    }
}

/// Sends `event`'s dead letter to the dead-letter topic, or writes it to the file / log.
async fn dead_letter(
    producer: &FutureProducer<Context>,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    reason: String,
    inflight: &mut VecDeque<Pending>,
) -> Result<(), SinkError> {
    if settings.dead_letter_topic.is_none() {
        return acks.dead_letter(&event, reason).await;
    }
    match enqueue(producer, settings, &acks.sink, &event, Some(&reason)).await {
        Ok(delivery) => {
            inflight.push_back(Pending {
                event,
                dead: Some(reason),
                delivery,
            });
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
    producer: &FutureProducer<Context>,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    dead: Option<String>,
    done: <DeliveryFuture as std::future::Future>::Output,
    inflight: &mut VecDeque<Pending>,
) -> Result<(), SinkError> {
    match (done, dead) {
        (Ok(Ok(_)), None) => {
            acks.delivered(event.seq);
            Ok(())
        }
        (Ok(Ok(_)), Some(reason)) => {
            tracing::error!(sink = %acks.sink, id = %event.id, reason, "event dead-lettered to Kafka");
            acks.reported_dead(event.seq, reason);
            Ok(())
        }
        (Ok(Err((e, _))), None) => {
            let reason = format!("Kafka did not accept the record: {e}");
            dead_letter(producer, settings, acks, event, reason, inflight).await
        }
        (Ok(Err((e, _))), Some(reason)) => {
            acks.dead_letter(
                &event,
                format!("{reason}; the dead-letter topic refused it too: {e}"),
            )
            .await
        }
        (Err(_canceled), _) => {
            Err(acks.fatal("the Kafka producer stopped before reporting a delivery".to_string()))
        }
    }
}
