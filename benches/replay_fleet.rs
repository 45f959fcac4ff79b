//! `kubecast replay` over a fleet, against the local stack's real Kafka.
//!
//! - `read [N]`: four clusters' topics of N events each (default 100,000; the fixture Pod in
//!   `full` mode, 1,000 pods per cluster with linked chains, 4 partitions each) read through
//!   one pattern, against one topic holding the same 4 × N events: wall time, events/s and
//!   peak resident memory for JSON lines and `--verify`.
//! - `follow [RATE [SECONDS]]`: `kubecast replay --follow --format json` on a topic whose
//!   records carry the broker's append time (`message.timestamp.type=LogAppendTime`), fed
//!   RATE events/s (default 200) for SECONDS (default 15): the delay from each record's
//!   append to its line arriving on the follower's stdout, p50, p99 and the largest.
//!
//! Prints Markdown; nothing asserted. Run through `bench/run replay-fleet [N]` and
//! `bench/run replay-follow [RATE [SECONDS]]`.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "shared/replay.rs"]
mod shared;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use shared::{Row, append, events, replay, write};
use support::consume::{create_topic, create_topic_with};
use support::kubecast::replay_command;
use support::{Stack, unique_name};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let number =
        |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let stack = Stack::load();
    match args.first().map(String::as_str) {
        Some("follow") => follow(&stack, number(1, 200), number(2, 15)),
        _ => read(&stack, number(1, 100_000) as usize),
    }
}

/// Four topics through a pattern against one topic of the same events.
fn read(stack: &Stack, n: usize) {
    let fleet = unique_name("fleet-bench");
    let one = format!("{fleet}-all");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        create_topic(stack, &one, 4).await;
        for i in 0..4 {
            let cluster = format!("c{i}");
            let events = events(n, &cluster);
            write(stack, &format!("{fleet}-{cluster}"), "binary", &events).await;
            append(stack, &one, "binary", &events).await;
        }
    });
    let pattern = format!("^{fleet}-c[0-9]$");
    let rows = [
        replay("one topic of 4 × N → JSON lines", stack, &one, &[]),
        replay("4 topics × N by pattern → JSON lines", stack, &pattern, &[]),
        replay("one topic of 4 × N, --verify", stack, &one, &["--verify"]),
        replay(
            "4 topics × N by pattern, --verify",
            stack,
            &pattern,
            &["--verify"],
        ),
    ];
    println!(
        "4 × {n} events of the fixture Pod (4 clusters of 1,000 pods), 4 partitions per topic.\n"
    );
    table(&rows, 4 * n);
}

fn table(rows: &[Row], events: usize) {
    println!("| replay | seconds | events/s | peak RSS MiB |");
    println!("| --- | --- | --- | --- |");
    for r in rows {
        println!(
            "| {} | {:.2} | {:.0} | {:.0} |",
            r.label,
            r.seconds,
            events as f64 / r.seconds,
            r.peak_mib
        );
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The delay from a record's append to `--follow` printing it.
fn follow(stack: &Stack, rate: u64, seconds: u64) {
    let topic = unique_name("follow-bench");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(create_topic_with(
        stack,
        &topic,
        4,
        &[("message.timestamp.type", "LogAppendTime")],
    ));
    let mut child = replay_command(stack, &topic)
        .args(["--follow", "--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubecast replay --follow");
    let printed: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let lines = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let into = printed.clone();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            let at = now_ms();
            let id = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v["id"].as_str().map(str::to_string));
            if let (Some(id), Ok(mut p)) = (id, into.lock()) {
                p.insert(id, at);
            }
        }
    });
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut said = String::new();
    while !said.contains("following") {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("kubecast replay --follow ended: {said}");
        }
        said.push_str(&line);
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("linger.ms", "0")
        .create()
        .expect("a Kafka producer");
    let total = rate * seconds;
    let started = Instant::now();
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            // Pacing the producer, not waiting for anything.
            std::thread::sleep(wait);
        }
        let (uid, rv) = (format!("uid-{}", i % 100), format!("{}", 1000 + i));
        let prev = if i >= 100 {
            format!("{}", 1000 + i - 100)
        } else {
            String::new()
        };
        let id = format!("{uid}:{rv}:modified");
        let data = format!(
            r#"{{"metadata":{{"name":"p{}","uid":"{uid}","resourceVersion":"{rv}"}},"status":{{"n":{i}}}}}"#,
            i % 100
        );
        let time = jiff::Timestamp::now().to_string();
        let name = format!("p{}", i % 100);
        let headers = [
            ("ce_specversion", "1.0"),
            ("ce_id", id.as_str()),
            ("ce_source", "k8s://bench/api/v1/namespaces/ns/pods"),
            ("ce_type", "io.k8s.core.v1.pod.modified"),
            ("ce_time", time.as_str()),
            ("ce_k8suid", uid.as_str()),
            ("ce_k8srv", rv.as_str()),
            ("ce_k8sprevrv", prev.as_str()),
            ("ce_k8snamespace", "ns"),
            ("ce_k8sname", name.as_str()),
            ("content-type", "application/json"),
        ]
        .into_iter()
        .fold(OwnedHeaders::new(), |h, (key, value)| {
            h.insert(Header {
                key,
                value: Some(value),
            })
        });
        let record = BaseRecord::to(&topic)
            .key(&uid)
            .payload(&data)
            .headers(headers);
        producer
            .send(record)
            .map_err(|(e, _)| e)
            .expect("sending a record");
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("flushing the producer");
    let deadline = Instant::now() + Duration::from_secs(60);
    while printed.lock().map_or(0, |p| p.len()) < total as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: a signal to the child this spawned.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let _ = child.wait();
    let appended = append_times(stack, &topic);
    let printed = printed.lock().map(|p| p.clone()).unwrap_or_default();
    let mut delays: Vec<i64> = printed
        .iter()
        .filter_map(|(id, at)| appended.get(id).map(|t| at - t))
        .collect();
    delays.sort_unstable();
    let pct = |q: f64| {
        delays
            .get(((delays.len() as f64 * q) as usize).min(delays.len().saturating_sub(1)))
            .copied()
            .unwrap_or(-1)
    };
    println!(
        "`kubecast replay --follow --format json`, {rate} events/s for {seconds} s over 4 partitions: {} of {total} printed.\n",
        printed.len()
    );
    println!("| append → printed line | ms |");
    println!("| --- | --- |");
    println!("| p50 | {} |", pct(0.50));
    println!("| p99 | {} |", pct(0.99));
    println!("| largest | {} |", delays.last().copied().unwrap_or(-1));
}

/// Each record's append time (the broker's, milliseconds), by its `ce_id`.
fn append_times(stack: &Stack, topic: &str) -> HashMap<String, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("group.id", unique_name("follow-bench-reader"))
        .set("enable.partition.eof", "true")
        .create()
        .expect("a Kafka consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..4 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("a partition");
    }
    consumer.assign(&tpl).expect("assigning");
    let mut times = HashMap::new();
    let mut ended = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended < 4 && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                let id = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "ce_id")
                        .and_then(|h| h.value.map(|v| String::from_utf8_lossy(v).into_owned()))
                });
                if let (Some(id), Some(t)) = (id, m.timestamp().to_millis()) {
                    times.insert(id, t);
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => ended += 1,
            _ => {}
        }
    }
    times
}
