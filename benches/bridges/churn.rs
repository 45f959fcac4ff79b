//! Status churn and its arrivals, shared by `benches/churn.rs` and `benches/shards.rs`:
//! scripted status writes on the bench's pods, and a Kafka consumer that stamps when each
//! change (by the Pod's resourceVersion) first arrived.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use rdkafka::Message;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::support::Stack;

/// When each change (by resourceVersion) first reached the consumer.
pub type Arrivals = Arc<Mutex<HashMap<u64, Instant>>>;

/// The resourceVersion in an event's data (the Pod, from either bridge).
pub fn rv_of(payload: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        rv: String,
    }
    #[derive(Deserialize)]
    struct Object {
        metadata: Meta,
    }
    serde_json::from_slice::<Object>(payload)
        .ok()?
        .metadata
        .rv
        .parse()
        .ok()
}

pub fn arrived(arrivals: &Arrivals, payload: Option<&[u8]>) {
    if let Some(rv) = payload.and_then(rv_of) {
        let now = Instant::now();
        arrivals.lock().expect("arrivals").entry(rv).or_insert(now);
    }
}

/// Reads every partition of `topic` (created here, 4 partitions) from the beginning.
pub async fn kafka_consumer(stack: &Stack, topic: &str, arrivals: Arrivals) -> JoinHandle<()> {
    let consumer = super::reader(stack, &[topic]).await;
    spawn_consumer(consumer, arrivals)
}

/// Reads `partitions` partitions of `topic` with `consumer` from the beginning, recording
/// each change's arrival (a cluster's topic, read with its own login).
pub fn consume(
    consumer: rdkafka::consumer::StreamConsumer,
    topic: &str,
    partitions: i32,
    arrivals: Arrivals,
) -> JoinHandle<()> {
    use rdkafka::consumer::Consumer as _;
    let mut assignment = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .expect("a partition offset");
    }
    consumer.assign(&assignment).expect("assigning partitions");
    spawn_consumer(consumer, arrivals)
}

fn spawn_consumer(
    consumer: rdkafka::consumer::StreamConsumer,
    arrivals: Arrivals,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match consumer.recv().await {
                Ok(m) => arrived(&arrivals, m.payload()),
                Err(e) => eprintln!("churn: consumer: {e}"),
            }
        }
    })
}

/// Writes status changes round-robin over `pods` pods, `rate` per second (or as fast as
/// the apiserver answers 64 writes in flight), for `seconds`. Every write changes the Ready
/// condition's status and message, so each one is a new resourceVersion. `base` numbers the
/// writes across phases. Returns when each change's write was sent, by resourceVersion.
pub async fn churn(
    api: &Api<Pod>,
    pods: usize,
    rate: Option<f64>,
    seconds: f64,
    base: usize,
) -> HashMap<u64, Instant> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let total = rate.map_or(usize::MAX, |r| (r * seconds) as usize);
    let kubelet = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    let kubelet = &kubelet;
    stream::iter(0..total)
        .take_while(|_| futures::future::ready(Instant::now() < deadline))
        .map(|k| async move {
            if let Some(rate) = rate {
                tokio::time::sleep_until(
                    (started + Duration::from_secs_f64(k as f64 / rate)).into(),
                )
                .await;
            }
            let n = base + k;
            let name = super::pod_name(n % pods);
            let ready = if (n / pods).is_multiple_of(2) {
                "False"
            } else {
                "True"
            };
            let patch = serde_json::json!({"status": {"conditions": [
                {"type": "Ready", "status": ready, "message": format!("probe {n}")}
            ]}});
            let sent = Instant::now();
            match api
                .patch_status(&name, kubelet, &Patch::Strategic(&patch))
                .await
            {
                Ok(pod) => pod
                    .metadata
                    .resource_version
                    .and_then(|rv| rv.parse::<u64>().ok())
                    .map(|rv| (rv, sent)),
                Err(e) => {
                    eprintln!("churn: writing {name}: {e}");
                    None
                }
            }
        })
        .buffer_unordered(64)
        .filter_map(futures::future::ready)
        .collect()
        .await
}
