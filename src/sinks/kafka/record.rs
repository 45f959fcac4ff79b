//! One event as a Kafka record: its topic, key, payload and headers (binary or structured
//! mode, or its dead letter), and handing it to librdkafka. Shared by the at-least-once
//! sink and the exactly-once one. Entry points: [`enqueue`], [`headers_of`].

use std::borrow::Cow;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};

use super::producer::{Delivery, Producer};
use super::{KafkaSettings, Mode};
use crate::event::{Event, STRUCTURED_CONTENT_TYPE};
use crate::sinks::DeadLetter;

/// Why one record can never be sent: the event is dead-lettered with this as the reason.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unsendable {
    #[error("record of {size} bytes exceeds max_message_bytes {max}")]
    TooLarge { size: usize, max: usize },
    #[error("Kafka refused the record: {0}")]
    Refused(#[source] KafkaError),
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

/// The topic of `event`'s record (of its dead letter, with `dead`).
pub(super) fn topic_of(settings: &KafkaSettings, event: &Event, dead: bool) -> String {
    if dead {
        settings.dead_letter_topic.clone().unwrap_or_default()
    } else {
        settings.topic.render(event)
    }
}

/// The payload and headers of `event`'s record (of its dead letter, with the reason).
fn record_of<'e>(
    settings: &KafkaSettings,
    sink: &str,
    event: &'e Event,
    dead: Option<&'e str>,
) -> (Cow<'e, [u8]>, OwnedHeaders) {
    match dead {
        None => {
            match settings.mode {
                // The data as it is: librdkafka copies the payload itself.
                Mode::Binary => (Cow::Borrowed(&event.data[..]), headers_of(event)),
                Mode::Structured => (
                    Cow::Owned(event.structured_json()),
                    OwnedHeaders::new().insert(Header {
                        key: "content-type",
                        value: Some(STRUCTURED_CONTENT_TYPE),
                    }),
                ),
            }
        }
        Some(reason) => {
            let mut line = DeadLetter::line(sink, event, reason, true);
            if line.len() > settings.max_message_bytes {
                line = DeadLetter::line(sink, event, reason, false);
            }
            line.pop(); // the newline
            (
                Cow::Owned(line),
                OwnedHeaders::new().insert(Header {
                    key: "kubecast_reason",
                    value: Some(reason),
                }),
            )
        }
    }
}

/// Hands one record to librdkafka, to `topic` (the caller's [`topic_of`] the event), waiting
/// for room while its queue is full. The error is the reason the record can never be sent.
pub(super) async fn enqueue(
    producer: &Producer,
    settings: &KafkaSettings,
    sink: &str,
    (event, topic): (&Event, &str),
    dead: Option<&str>,
) -> Result<Delivery, Unsendable> {
    // Declared first: the reference form, when it replaces the event, outlives the record.
    let small: Event;
    let (mut payload, mut headers) = record_of(settings, sink, event, dead);
    if dead.is_none() && settings.too_large_reference && payload.len() > settings.max_message_bytes {
        tracing::warn!(sink, id = %event.id, subject = %event.subject(),
            "event too large for max_message_bytes: sent as reference data (k8struncated)");
        small = event.as_reference();
        (payload, headers) = record_of(settings, sink, &small, dead);
    }
    if payload.len() > settings.max_message_bytes {
        return Err(Unsendable::TooLarge {
            size: payload.len(),
            max: settings.max_message_bytes,
        });
    }
    let (record, delivery) = Producer::record(topic);
    let mut record = record
        .key(event.object.uid.as_str())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;

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
