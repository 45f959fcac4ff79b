//! The local Kafka broker is the real thing: a record produced with headers by an idempotent
//! `acks=all` producer is acknowledged by a delivery report and read back, key, payload and
//! headers intact.

mod support;

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use support::{Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(30);

fn config(stack: &Stack) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    config
}

#[tokio::test]
async fn produces_and_consumes_a_record_with_headers() {
    let stack = Stack::load();
    let topic = unique_name("stack-kafka");

    support::consume::create_topic(&stack, &topic, 3).await;

    let producer: FutureProducer = config(&stack)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .expect("producer");
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "ce_id",
            value: Some("uid-1:42:modified"),
        })
        .insert(Header {
            key: "ce_type",
            value: Some("io.k8s.core.v1.pod.modified"),
        })
        .insert(Header {
            key: "content-type",
            value: Some("application/json"),
        });
    let payload = br#"{"metadata":{"name":"web"}}"#;
    let (partition, offset) = within(LIMIT, "the delivery report", async {
        producer
            .send(
                FutureRecord::to(&topic)
                    .key("uid-1")
                    .payload(&payload[..])
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map(|delivery| (delivery.partition, delivery.offset))
            .unwrap_or_else(|(e, _)| panic!("delivery failed: {e}"))
    })
    .await;

    let consumer: StreamConsumer = config(&stack)
        .set("group.id", unique_name("stack-kafka-group"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, partition, Offset::Offset(offset))
        .expect("partition offset");
    consumer.assign(&assignment).expect("assign");
    let message = within(LIMIT, "the record to come back", consumer.recv())
        .await
        .expect("receiving the record");

    assert_eq!(message.key(), Some(&b"uid-1"[..]));
    assert_eq!(message.payload(), Some(&payload[..]));
    assert_eq!((message.partition(), message.offset()), (partition, offset));
    let got: Vec<(String, Option<String>)> = message
        .headers()
        .expect("the record has headers")
        .iter()
        .map(|h| {
            (
                h.key.to_string(),
                h.value.map(|v| String::from_utf8_lossy(v).into_owned()),
            )
        })
        .collect();
    let want = [
        ("ce_id", "uid-1:42:modified"),
        ("ce_type", "io.k8s.core.v1.pod.modified"),
        ("content-type", "application/json"),
    ]
    .map(|(k, v)| (k.to_string(), Some(v.to_string())));
    assert_eq!(got, want);
}
