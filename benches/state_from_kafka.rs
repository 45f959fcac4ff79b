//! How long rebuilding the known state from Kafka takes (issue 11: a restart without a state
//! directory): N state records (a 36-character uid -> a resourceVersion) are committed to a
//! compacted-style topic of 4 partitions in transactions of 1,000, plus a tombstone for every
//! tenth pod, then `checkpoint::read_known` reads them back with `read_committed` and the
//! pipeline decodes them. Prints the seconds for each N; nothing is asserted.
//!
//! `scripts/stack up`, then `cargo bench --bench state_from_kafka -- 10000 100000`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use kubecast::pipeline::kept::StateRecord;
use kubecast::sinks::kafka::checkpoint::read_known;
use kubecast::sinks::kafka::txn::Transactions;
use rdkafka::ClientConfig;
use support::{Stack, unique_name};

async fn write(stack: &Stack, topic: &str, n: usize) {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    let t = Transactions::create(
        "bench",
        config,
        &unique_name("kubecast-bench"),
        Duration::from_secs(60),
    )
    .expect("a transactional producer");
    t.init().await.expect("init_transactions");
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        t.begin().expect("begin");
        let mut deliveries = Vec::new();
        for &i in chunk {
            let uid = format!("{i:08x}-7c1e-4b7a-9f2d-000000000000");
            let rv = StateRecord {
                resource: String::new(),
                namespace: "bench".to_string(),
                name: format!("pod-{i}"),
                rv: format!("{}", 100_000 + i),
                ..StateRecord::default()
            }
            .to_bytes();
            let (record, delivery) = Transactions::record(topic);
            let record = if i % 10 == 9 {
                record.key(uid.as_str())
            } else {
                record.key(uid.as_str()).payload(&rv[..])
            };
            t.send(record)
                .map_err(|(e, _)| e)
                .expect("librdkafka takes it");
            deliveries.push(delivery);
        }
        // A record that failed fails the commit.
        t.commit(deliveries).await.expect("commit");
    }
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![10_000, 100_000]
    } else {
        counts
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        println!("| known pods (records) | live after tombstones | read_known seconds |");
        println!("| --- | --- | --- |");
        for n in counts {
            let topic = unique_name("bench-state");
            support::consume::create_topic(&stack, &topic, 4).await;
            let started = Instant::now();
            write(&stack, &topic, n).await;
            eprintln!(
                "state_from_kafka: wrote {n} records in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            let mut config = ClientConfig::new();
            config.set("bootstrap.servers", &stack.kafka_bootstrap);
            let started = Instant::now();
            let t = topic.clone();
            // Read and decoded, as a take-over does.
            let known = tokio::task::spawn_blocking(move || {
                let read = read_known(&config, &t, Duration::from_secs(600)).expect("read_known");
                kubecast::pipeline::kept::decode(&read)
                    .expect("the states decode")
                    .0
            })
            .await
            .expect("the reader");
            let secs = started.elapsed().as_secs_f64();
            println!("| {n} | {} | {secs:.2} |", known.len());
        }
    });
}
