//! Independent consumers of what kubecast published: every record of a Kafka topic and every
//! MQTT message under a topic prefix, kept in arrival order for the checks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

use super::{Stack, unique_name, within};

/// Partitions of the topics the tests create, as the broker's auto-created ones have.
pub const PARTITIONS: i32 = 4;

/// One Kafka record as a consumer sees it.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
    /// When the consumer received it.
    pub at: std::time::Instant,
}

impl Record {
    /// A `ce_` header (binary mode), by attribute name.
    pub fn ce(&self, attr: &str) -> &str {
        self.headers
            .get(&format!("ce_{attr}"))
            .map(String::as_str)
            .unwrap_or_default()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload)
            .unwrap_or_else(|e| panic!("record payload is not JSON: {e}"))
    }
}

/// Copies `records` to partition 0 of `topic` (headers, key and value as they were), for
/// topics written by hand (a record with a hole in it).
pub fn copy_records(stack: &Stack, topic: &str, records: &[&Record]) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let p: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .create()
        .expect("Kafka producer");
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        let key = r.key.clone().unwrap_or_default();
        p.send(
            BaseRecord::to(topic)
                .partition(0)
                .key(&key)
                .payload(&r.payload)
                .headers(headers),
        )
        .map_err(|(e, _)| e)
        .expect("queueing a record");
    }
    p.flush(std::time::Duration::from_secs(30))
        .expect("flushing the copies");
}

/// Creates `topic` with `partitions` partitions on the stack's broker.
pub async fn create_topic(stack: &Stack, topic: &str, partitions: i32) {
    create_topic_with(stack, topic, partitions, &[]).await;
}

/// [`create_topic`] with topic configs (`message.timestamp.type`, ...).
pub async fn create_topic_with(
    stack: &Stack,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    create_topic_through(config, topic, partitions, 1, configs).await;
}

/// Creates `topic` through a client with `config` (brokers, login), with `partitions`
/// partitions of `replicas` replicas and topic configs.
pub async fn create_topic_through(
    config: ClientConfig,
    topic: &str,
    partitions: i32,
    replicas: i32,
    configs: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = config.create().expect("Kafka admin client");
    let created = within(Duration::from_secs(30), "creating a Kafka topic", async {
        admin
            .create_topics(
                &[configs.iter().fold(
                    NewTopic::new(topic, partitions, TopicReplication::Fixed(replicas)),
                    |t, (k, v)| t.set(k, v),
                )],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(20))),
            )
            .await
            .expect("create_topics request")
    })
    .await;
    assert!(
        created.iter().all(|r| r.is_ok()),
        "creating {topic}: {created:?}"
    );
}

/// Every record of one topic, read from the beginning of each partition.
pub struct KafkaTopic {
    pub topic: String,
    records: Arc<Mutex<Vec<Record>>>,
}

impl KafkaTopic {
    /// Creates `topic` with [`PARTITIONS`] partitions and starts reading it
    /// (`read_committed`, librdkafka's default).
    pub async fn create(stack: &Stack, topic: &str) -> KafkaTopic {
        create_topic(stack, topic, PARTITIONS).await;
        KafkaTopic::read(stack, topic, "read_committed")
    }

    /// Starts reading the existing `topic` with `isolation` (`read_committed` or
    /// `read_uncommitted`).
    pub fn read(stack: &Stack, topic: &str, isolation: &str) -> KafkaTopic {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &stack.kafka_bootstrap);
        KafkaTopic::read_with(config, topic, PARTITIONS, isolation)
    }

    /// [`KafkaTopic::read`] through a client with `config` (brokers, SASL), of a topic with
    /// `partitions` partitions.
    pub fn read_with(
        mut config: ClientConfig,
        topic: &str,
        partitions: i32,
        isolation: &str,
    ) -> KafkaTopic {
        let consumer: StreamConsumer = config
            .set("group.id", unique_name("test-reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", isolation)
            .create()
            .expect("Kafka consumer");
        let mut assignment = TopicPartitionList::new();
        for p in 0..partitions {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .expect("partition offset");
        }
        consumer.assign(&assignment).expect("assigning partitions");
        let records = Arc::new(Mutex::new(Vec::new()));
        let out = records.clone();
        tokio::spawn(async move {
            loop {
                let Ok(m) = consumer.recv().await else {
                    continue;
                };
                let headers = m
                    .headers()
                    .map(|hs| {
                        hs.iter()
                            .map(|h| {
                                (
                                    h.key.to_string(),
                                    String::from_utf8_lossy(h.value.unwrap_or_default())
                                        .into_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let r = Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    headers,
                    payload: m.payload().unwrap_or_default().to_vec(),
                    at: std::time::Instant::now(),
                };
                if let Ok(mut v) = out.lock() {
                    v.push(r);
                }
            }
        });
        KafkaTopic {
            topic: topic.to_string(),
            records,
        }
    }

    pub fn records(&self) -> Vec<Record> {
        self.records.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Waits until `done` holds for the records read so far; returns them, or says what
    /// was there when `limit` passed.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Record]) -> bool,
    ) -> Result<Vec<Record>, String> {
        wait_for(limit, what, || {
            let r = self.records();
            done(&r).then_some(r)
        })
        .await
        .ok_or_else(|| {
            format!(
                "Kafka topic {}: timed out after {limit:?} waiting for {what}; got:\n{}",
                self.topic,
                describe_records(&self.records())
            )
        })
    }
}

fn describe_records(rs: &[Record]) -> String {
    rs.iter()
        .map(|r| {
            format!(
                "  p{} @{} {} {} prev={}",
                r.partition,
                r.offset,
                r.ce("type"),
                r.ce("id"),
                r.ce("k8sprevrv")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One MQTT message as a subscriber sees it.
#[derive(Debug, Clone)]
pub struct MqttMessage {
    pub topic: String,
    pub payload: Vec<u8>,
    pub retain: bool,
    pub content_type: Option<String>,
    pub user_properties: Vec<(String, String)>,
}

impl MqttMessage {
    pub fn prop(&self, name: &str) -> &str {
        self.user_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }
}

/// Every message under a topic filter, received by an MQTT 5 subscriber at QoS 1.
pub struct MqttSubscriber {
    pub filter: String,
    messages: Arc<Mutex<Vec<MqttMessage>>>,
    _client: AsyncClient,
}

impl MqttSubscriber {
    /// Subscribes to `filter` and returns once the broker confirmed the subscription; see
    /// [`subscribe_each`].
    pub async fn subscribe(stack: &Stack, filter: &str) -> MqttSubscriber {
        let messages = Arc::new(Mutex::new(Vec::new()));
        let out = messages.clone();
        let client = subscribe_each(stack, filter, move |p| {
            let props = p.properties.clone().unwrap_or_default();
            let m = MqttMessage {
                topic: String::from_utf8_lossy(&p.topic).into_owned(),
                payload: p.payload.to_vec(),
                retain: p.retain,
                content_type: props.content_type,
                user_properties: props.user_properties,
            };
            if let Ok(mut v) = out.lock() {
                v.push(m);
            }
        })
        .await;
        MqttSubscriber {
            filter: filter.to_string(),
            messages,
            _client: client,
        }
    }

    pub fn messages(&self) -> Vec<MqttMessage> {
        self.messages.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Waits until `done` holds for the messages received so far; returns them, or says
    /// what was there when `limit` passed.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[MqttMessage]) -> bool,
    ) -> Result<Vec<MqttMessage>, String> {
        wait_for(limit, what, || {
            let m = self.messages();
            done(&m).then_some(m)
        })
        .await
        .ok_or_else(|| {
            let got: Vec<String> = self
                .messages()
                .iter()
                .map(|m| format!("  {} {} {}", m.topic, m.prop("type"), m.prop("id")))
                .collect();
            format!(
                "MQTT {}: timed out after {limit:?} waiting for {what}; got:\n{}",
                self.filter,
                got.join("\n")
            )
        })
    }
}

/// Subscribes to `filter` at QoS 1, calls `each` with every message received, and returns
/// once the broker confirmed the subscription. The session is persistent: if the connection
/// drops (a broker restart, a missed keep-alive on a loaded machine), the subscriber
/// reconnects and the broker delivers what it kept meanwhile, so the subscriber itself never
/// loses a message. Keep the returned client for as long as messages are wanted.
pub async fn subscribe_each(
    stack: &Stack,
    filter: &str,
    mut each: impl FnMut(&Publish) + Send + 'static,
) -> AsyncClient {
    let mut options = MqttOptions::new(unique_name("test-sub"), &stack.mqtt_host, stack.mqtt_port);
    options
        .set_keep_alive(Duration::from_secs(10))
        .set_max_packet_size(Some(64 * 1024 * 1024));
    options
        .set_clean_start(false)
        .set_session_expiry_interval(Some(600));
    let (client, mut events) = AsyncClient::new(options, 1024);
    client
        .subscribe(filter, QoS::AtLeastOnce)
        .await
        .expect("queueing SUBSCRIBE");
    let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut subscribed_tx = Some(subscribed_tx);
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(tx) = subscribed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => each(&p),
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    within(Duration::from_secs(30), "the MQTT SUBACK", subscribed)
        .await
        .expect("subscriber task");
    client
}

/// Polls `check` every 50 ms until it returns a value or `limit` passes (then `None`).
pub async fn wait_for<T>(
    limit: Duration,
    _what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes one small, non-retained message at QoS 1 and waits for its PUBACK.
pub async fn publish_marker(stack: &Stack, topic: &str) {
    let options = MqttOptions::new(
        unique_name("test-marker"),
        &stack.mqtt_host,
        stack.mqtt_port,
    );
    let (client, mut events) = AsyncClient::new(options, 8);
    client
        .publish(topic, QoS::AtLeastOnce, false, "marker")
        .await
        .expect("queueing the marker");
    within(Duration::from_secs(30), "the marker's PUBACK", async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => return,
                Ok(_) => {}
                Err(e) => panic!("publishing the marker: {e}"),
            }
        }
    })
    .await;
}

impl KafkaTopic {
    /// Waits until `more` records beyond those read so far have arrived.
    pub async fn wait_for_more(
        &self,
        what: &str,
        more: usize,
        limit: Duration,
    ) -> Result<Vec<Record>, String> {
        let so_far = self.records().len();
        self.wait_until(what, limit, |r| r.len() >= so_far + more)
            .await
    }

    /// Waits until every id in `truth` was read; returns all records.
    pub async fn wait_for_ids(
        &self,
        truth: &std::collections::BTreeSet<String>,
        limit: Duration,
    ) -> Result<Vec<Record>, String> {
        let have_all = |r: &[Record]| super::observer::has_all(truth, r.iter().map(|x| x.ce("id")));
        self.wait_until("every change in Kafka", limit, have_all)
            .await
    }
}

impl MqttSubscriber {
    /// Waits until `more` messages beyond those received so far have arrived.
    pub async fn wait_for_more(
        &self,
        what: &str,
        more: usize,
        limit: Duration,
    ) -> Result<Vec<MqttMessage>, String> {
        let so_far = self.messages().len();
        self.wait_until(what, limit, |m| m.len() >= so_far + more)
            .await
    }

    /// Waits until every id in `truth` was received; returns all messages.
    pub async fn wait_for_ids(
        &self,
        truth: &std::collections::BTreeSet<String>,
        limit: Duration,
    ) -> Result<Vec<MqttMessage>, String> {
        let have_all =
            |m: &[MqttMessage]| super::observer::has_all(truth, m.iter().map(|x| x.prop("id")));
        self.wait_until("every change over MQTT", limit, have_all)
            .await
    }
}
