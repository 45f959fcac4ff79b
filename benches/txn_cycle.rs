//! The exactly-once commit cycle by its parts (issue 24): N transactions shaped like the
//! exactly-once sink's (one event into a topic of 4 partitions, its state record and the
//! checkpoint into compacted one-partition topics) through kubecast's transactional producer
//! on the local stack, one after the other, paced at RATE/s (0: back to back). For each: how
//! long the sends and `commit_transaction` took, and when a `read_committed` consumer (polling
//! with `fetch.wait.max.ms` 5, as the churn bench's) first saw the event, from the start of the
//! transaction. p50, p99 and max of each. Extra `key=value` arguments are librdkafka
//! properties for the producer (`consumer.KEY=VALUE` for the consumer), to compare settings; `wait=0` commits without first awaiting
//! the records' delivery reports, as the sink did before issue 24. Prints a Markdown table;
//! nothing is asserted.
//!
//! `scripts/stack up`, then `cargo bench --bench txn_cycle -- [N [RATE [key=value...]]]`
//! (defaults 200, 100).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubecast::sinks::kafka::txn::Transactions;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use support::consume::create_topic;
use support::{Stack, unique_name};

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "{:.1} | {:.1} | {:.1}",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3
    )
}

#[tokio::main]
async fn main() {
    // librdkafka's own log (`debug=eos,protocol` among the properties) when asked for.
    if std::env::var_os("KUBECAST_BENCH_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(200);
    let rate: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let properties: Vec<(&str, &str)> = args
        .iter()
        .skip(2)
        .filter_map(|a| a.split_once('='))
        .filter(|(k, _)| *k != "wait")
        .collect();
    // `consumer.KEY=VALUE`: a property of the consumer instead.
    let (consumer_properties, properties): (Vec<_>, Vec<_>) = properties
        .into_iter()
        .partition(|(k, _)| k.starts_with("consumer."));
    let stack = Stack::load();
    let (data, state, checkpoints) = (
        unique_name("kc-txn-cycle"),
        unique_name("kc-txn-cycle-state"),
        unique_name("kc-txn-cycle-checkpoints"),
    );
    create_topic(&stack, &data, 4).await;
    create_topic(&stack, &state, 1).await;
    create_topic(&stack, &checkpoints, 1).await;

    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut consumer_config = ClientConfig::new();
    consumer_config
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("group.id", unique_name("txn-cycle"))
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "5");
    for (k, v) in &consumer_properties {
        consumer_config.set(k.trim_start_matches("consumer."), *v);
    }
    let consumer: StreamConsumer = consumer_config.create().expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..4 {
        assignment
            .add_partition_offset(&data, p, Offset::Beginning)
            .expect("an assignment");
    }
    consumer.assign(&assignment).expect("assigned");
    let arrivals = seen.clone();
    tokio::spawn(async move {
        loop {
            if let Ok(m) = consumer.recv().await
                && let Some(k) = m.key()
            {
                let key = String::from_utf8_lossy(k).into_owned();
                if let Ok(mut a) = arrivals.lock() {
                    a.entry(key).or_insert_with(Instant::now);
                }
            }
        }
    });

    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    for (k, v) in &properties {
        config.set(*k, *v);
    }
    let txns = Transactions::create(
        "bench",
        config,
        &unique_name("kc-txn-cycle"),
        Duration::from_secs(30),
    )
    .expect("a transactional producer");
    txns.init().await.expect("init_transactions");
    let payload = vec![b'x'; 9_000];
    // One transaction first, seen by the consumer before anything is timed: its start (the
    // assignment, the first fetch) is not the commit cycle's.
    txns.begin().expect("begin");
    let (record, delivery) = Transactions::record(&data);
    txns.send(record.key("warm-up").payload(&payload[..]))
        .map_err(|(e, _)| e)
        .expect("sent");
    txns.commit(vec![delivery]).await.expect("committed");
    let ready = Instant::now() + Duration::from_secs(30);
    while !seen.lock().is_ok_and(|s| s.contains_key("warm-up")) && Instant::now() < ready {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (mut sends, mut commits, mut started) = (Vec::new(), Vec::new(), HashMap::new());
    let pace = (rate > 0).then(|| Duration::from_micros(1_000_000 / rate));
    let mut next = Instant::now();
    for i in 0..n {
        if let Some(p) = pace {
            tokio::time::sleep_until(next.into()).await;
            next += p;
        }
        let key = format!("uid-{i:06}");
        let t0 = Instant::now();
        started.insert(key.clone(), t0);
        txns.begin().expect("begin");
        let mut sent = Vec::new();
        for (topic, k, v) in [
            (&data, key.as_str(), &payload[..]),
            (&state, key.as_str(), b"{\"rv\":\"1\"}".as_slice()),
            (&checkpoints, "bench/kafka", b"{\"seq\":1}".as_slice()),
        ] {
            let (record, delivery) = Transactions::record(topic);
            txns.send(record.key(k).payload(v))
                .map_err(|(e, _)| e)
                .expect("sent");
            sent.push(delivery);
        }
        let t1 = Instant::now();
        // The commit awaits the reports first, as the sink's does; without them rdkafka's
        // flush inside the commit waits 100 ms (`wait=0` shows it).
        if args.iter().any(|a| a == "wait=0") {
            sent.clear();
        }
        txns.commit(sent).await.expect("committed");
        sends.push(t1 - t0);
        commits.push(t1.elapsed());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().map(|s| s.len()).unwrap_or(0) < n + 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let visible: Vec<Duration> = started
        .iter()
        .filter_map(|(k, t0)| Some(seen.get(k)?.duration_since(*t0)))
        .collect();

    let settings = if properties.is_empty() {
        "defaults".to_string()
    } else {
        args[2..].join(" ")
    };
    println!(
        "{n} transactions at {rate}/s (0: back to back), producer {settings}; {} of {n} seen",
        visible.len()
    );
    println!();
    println!("| ms | p50 | p99 | max |");
    println!("| --- | --- | --- | --- |");
    println!("| begin + 3 sends | {} |", percentiles(sends));
    println!("| commit_transaction | {} |", percentiles(commits));
    if !visible.is_empty() {
        println!(
            "| begin to read_committed consumer | {} |",
            percentiles(visible)
        );
    }
}
