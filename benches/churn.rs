//! Status churn end to end, side by side: kubecast (into Kafka, and into Mosquitto at QoS 1)
//! and the client-go baseline (bench/baseline-go, franz-go and the CloudEvents SDK's sarama
//! sender) each bridge the same scripted churn of pod status writes on the local stack's real
//! apiserver, one bridge at a time. Two phases per bridge: writes paced at a fixed rate
//! (default 100/s: on 2 cores kube-apiserver takes 150 to 260 status writes/s of these 9 KB
//! pods, so a higher pace only queues writes in it), then as fast as the apiserver takes them
//! (64 writes in flight).
//!
//! For each phase: the write rate reached, CPU ms per 1,000 events (user + system of the
//! bridge's process over the phase and its catch-up; and with nothing changing, per second),
//! the bridge's context switches per change (its live threads', with a line per thread on
//! stderr) and its threads,
//! for Kafka bridges the broker's CPU over the same span and the bytes the topic's log grew by
//! per change (the broker shares the machine, so compression is judged on all three),
//! how many written changes had not yet reached the consumer when the writes stopped and how
//! long it took to catch up, and the
//! delay of every change from the moment its write was sent to the moment a consumer (an
//! rdkafka consumer polling every 5 ms, or an MQTT subscriber) received it: p50, p99, max.
//! Changes are matched by the Pod's resourceVersion, which both bridges carry in the data.
//! Prints a Markdown table for BENCHMARKS.md; nothing is asserted.
//!
//! Run through `bench/run churn [PODS [SECONDS [RATE [BRIDGES]]]]` (defaults 200, 20, 100,
//! and every bridge; BRIDGES picks some, comma-separated: kubecast,eos,eos10,franz,sarama,
//! mqtt; eos is the exactly-once sink with its default `max_ms`, eosN with N, e.g. eos10).
//! Only when named: nostate (kubecast without a state directory), always (`log: always`,
//! every change synced before it is sent) and gzip, snappy, lz4,
//! zstd (kubecast with its state directory and that `compression`).

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use bridges::churn::{Arrivals, arrived, churn, kafka_consumer};
use rumqttc::v5::AsyncClient;
use support::{Stack, proc, unique_name};

/// Subscribes to `filter` at QoS 1 (returns once the broker confirmed it); keep the client.
async fn mqtt_subscriber(stack: &Stack, filter: &str, arrivals: Arrivals) -> AsyncClient {
    support::consume::subscribe_each(stack, filter, move |p| arrived(&arrivals, Some(&p.payload)))
        .await
}

struct Row {
    bridge: String,
    /// CPU ms per second of the bridge with nothing changing (5 s before the phases).
    idle_ms_per_s: f64,
    phase: &'static str,
    writes: usize,
    write_rate: f64,
    cpu_ms_per_1000: f64,
    behind_at_stop: usize,
    caught_up: f64,
    p50: f64,
    p99: f64,
    max: f64,
    /// The bridge's context switches per change over the phase (its live threads').
    switches_per_change: f64,
    /// The bridge's threads at the end of the phase.
    threads: u64,
    /// The broker's CPU ms per 1,000 events over the same span (Kafka bridges).
    broker_ms_per_1000: f64,
    /// What the topic's log on the broker's disk grew by, per change (Kafka bridges).
    disk_bytes_per_event: f64,
}

/// Where the broker measures a Kafka bridge: its process and the topic's log directories.
struct Broker<'a> {
    pid: Option<u32>,
    data: std::path::PathBuf,
    topic: Option<&'a str>,
}

impl Broker<'_> {
    fn cpu(&self) -> f64 {
        self.pid.and_then(proc::cpu_seconds).unwrap_or(f64::NAN)
    }

    /// The bytes of the topic's partitions on disk (NaN for an MQTT bridge).
    fn topic_bytes(&self) -> f64 {
        let Some(topic) = self.topic else {
            return f64::NAN;
        };
        let Ok(dirs) = std::fs::read_dir(&self.data) else {
            return f64::NAN;
        };
        let prefix = format!("{topic}-");
        let mut total = 0;
        for dir in dirs.flatten() {
            let name = dir.file_name().to_string_lossy().to_string();
            let partition = name.strip_prefix(&prefix);
            if partition.is_none_or(|p| p.parse::<u32>().is_err()) {
                continue;
            }
            for f in std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if f.file_name().to_string_lossy().ends_with(".log") {
                    total += f.metadata().map_or(0, |m| m.len());
                }
            }
        }
        total as f64
    }
}

/// Per thread name, the context switches per change between two readings (threads that
/// started during the phase count from zero), most first.
fn switches_by_thread(
    before: &[(String, u64, u64)],
    after: &[(String, u64, u64)],
    changes: usize,
) -> Vec<(String, f64)> {
    let mut by: HashMap<String, u64> = HashMap::new();
    for (name, s, _) in after {
        *by.entry(name.clone()).or_default() += s;
    }
    for (name, s, _) in before {
        if let Some(n) = by.get_mut(name) {
            *n = n.saturating_sub(*s);
        }
    }
    let mut out: Vec<(String, f64)> = by
        .into_iter()
        .map(|(n, s)| (n, s as f64 / changes.max(1) as f64))
        .filter(|(_, s)| *s >= 0.005)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// One phase of churn against a running bridge.
#[allow(clippy::too_many_arguments)]
async fn phase(
    bridge: &str,
    phase: &'static str,
    pid: u32,
    api: &Api<Pod>,
    pods: usize,
    rate: Option<f64>,
    seconds: f64,
    base: usize,
    arrivals: &Arrivals,
    broker: &Broker<'_>,
) -> Row {
    let cpu0 = proc::cpu_seconds(pid).unwrap_or(f64::NAN);
    let threads0 = proc::thread_counts(pid);
    let (broker_cpu0, bytes0) = (broker.cpu(), broker.topic_bytes());
    let started = Instant::now();
    let sent = churn(api, pods, rate, seconds, base).await;
    let stopped = Instant::now();
    let missing = |a: &HashMap<u64, Instant>| sent.keys().filter(|rv| !a.contains_key(rv)).count();
    let behind_at_stop = missing(&arrivals.lock().expect("arrivals"));
    let limit = Duration::from_secs(180);
    loop {
        let left = missing(&arrivals.lock().expect("arrivals"));
        if left == 0 {
            break;
        }
        assert!(
            stopped.elapsed() < limit,
            "{bridge}: {left} of {} changes did not arrive within {limit:?} after the churn stopped",
            sent.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let caught_up = stopped.elapsed().as_secs_f64();
    let cpu = proc::cpu_seconds(pid).unwrap_or(f64::NAN) - cpu0;
    let threads1 = proc::thread_counts(pid);
    let switches = switches_by_thread(&threads0, &threads1, sent.len());
    eprintln!("churn: {bridge} {phase}: context switches per change by thread: {switches:?}");
    let broker_cpu = broker.cpu() - broker_cpu0;
    let disk = broker.topic_bytes() - bytes0;
    let arrivals = arrivals.lock().expect("arrivals");
    let mut delays: Vec<f64> = sent
        .iter()
        .map(|(rv, at)| arrivals[rv].saturating_duration_since(*at).as_secs_f64() * 1000.0)
        .collect();
    delays.sort_by(f64::total_cmp);
    let pct = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
    let row = Row {
        bridge: bridge.to_string(),
        idle_ms_per_s: f64::NAN,
        phase,
        writes: sent.len(),
        write_rate: sent.len() as f64 / (stopped - started).as_secs_f64(),
        cpu_ms_per_1000: cpu * 1000.0 / (sent.len() as f64 / 1000.0),
        behind_at_stop,
        caught_up,
        p50: pct(0.5),
        p99: pct(0.99),
        max: pct(1.0),
        switches_per_change: switches.iter().map(|(_, s)| s).sum(),
        threads: proc::threads(pid).unwrap_or(0),
        broker_ms_per_1000: broker_cpu * 1000.0 / (sent.len() as f64 / 1000.0),
        disk_bytes_per_event: disk / sent.len() as f64,
    };
    eprintln!(
        "churn: {bridge} {phase}: {} writes at {:.0}/s, CPU {:.0} ms per 1,000, {} behind at the stop, caught up after {:.2} s, delay p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
        row.writes,
        row.write_rate,
        row.cpu_ms_per_1000,
        row.behind_at_stop,
        row.caught_up,
        row.p50,
        row.p99,
        row.max
    );
    row
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let arg = |i: usize, default: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (pods, seconds, rate) = (arg(0, 200.0) as usize, arg(1, 20.0), arg(2, 100.0));
    let only: Vec<String> = args
        .get(3)
        .map(|a| a.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        let client = stack.kube_client().await;
        let ns = unique_name("churn");
        support::pods::namespace(&client, &ns).await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        bridges::populate(&api, &ns, pods).await;
        let dir = support::kubecast::scratch_dir("churn");
        let mut rows = Vec::new();
        let mut base = 0;
        let mut all: Vec<(String, String)> = [
            ("kubecast", "kubecast"),
            ("eos", "kubecast (exactly-once)"),
            ("eos10", "kubecast (exactly-once, max_ms 10)"),
            ("franz", "baseline (franz)"),
            ("sarama", "baseline (sarama)"),
            ("mqtt", "kubecast (MQTT)"),
        ]
        .iter()
        .map(|(k, b)| (k.to_string(), b.to_string()))
        .collect();
        // Only when named.
        for (k, b) in [
            ("kubecast-cluster", "kubecast (3 brokers, RF 3)"),
            ("eos-cluster", "kubecast (exactly-once, 3 brokers, RF 3)"),
            ("nostate", "kubecast (no state directory)"),
            ("always", "kubecast (log always)"),
            ("gzip", "kubecast (gzip)"),
            ("snappy", "kubecast (snappy)"),
            ("lz4", "kubecast (lz4)"),
            ("zstd", "kubecast (zstd)"),
        ] {
            if only.iter().any(|o| o == k) {
                all.push((k.to_string(), b.to_string()));
            }
        }
        // Any other `eosN`: the exactly-once sink with `max_ms` N.
        for o in &only {
            if let Some(n) = o.strip_prefix("eos").and_then(|n| n.parse::<u64>().ok())
                && !all.iter().any(|(k, _)| k == o)
            {
                all.push((o.clone(), format!("kubecast (exactly-once, max_ms {n})")));
            }
        }
        for (key, bridge) in &all {
            let (key, bridge) = (key.as_str(), bridge.as_str());
            if !only.is_empty() && !only.iter().any(|o| o == key) {
                continue;
            }
            let arrivals: Arrivals = Arc::default();
            let slug = bridge.replace(['(', ')', ' ', ','], "");
            let topic = unique_name(&format!("churn-{slug}"));
            let bridge_dir = dir.join(&slug);
            std::fs::create_dir_all(&bridge_dir).expect("a scratch directory");
            let (consumer, _subscriber) = match bridge {
                "kubecast (MQTT)" => {
                    let filter = format!("kubecast/bench/{ns}/#");
                    (None, Some(mqtt_subscriber(&stack, &filter, arrivals.clone()).await))
                }
                b if b.contains("3 brokers") => {
                    let cluster = support::kafka_cluster::Cluster::up(&stack);
                    cluster.create_topic(&topic, 4).await;
                    let mut config = cluster.admin_config();
                    let consumer: rdkafka::consumer::StreamConsumer = config
                        .set("group.id", unique_name("bench-reader"))
                        .set("enable.auto.commit", "false")
                        .set("fetch.wait.max.ms", "5")
                        .create()
                        .expect("a Kafka consumer");
                    (Some(bridges::churn::consume(consumer, &topic, 4, arrivals.clone())), None)
                }
                _ => (Some(kafka_consumer(&stack, &topic, arrivals.clone()).await), None),
            };
            let kafka_sink = if bridge.contains("3 brokers") {
                let cluster = support::kafka_cluster::Cluster::up(&stack);
                format!(
                    "    type: kafka\n    brokers: {}\n    topic: {topic}\n    {}\n    create_topics: {{}}\n",
                    cluster.bootstrap,
                    cluster.admin_sasl()
                )
            } else {
                format!("    type: kafka\n    brokers: {}\n    topic: {topic}\n", stack.kafka_bootstrap)
            };
            let (mut child, log) = match bridge {
                "kubecast" => bridges::kubecast(&stack, &bridge_dir, &ns, &kafka_sink),
                "kubecast (no state directory)" => {
                    bridges::kubecast_without_state(&stack, &bridge_dir, &ns, &kafka_sink)
                }
                "kubecast (log always)" => {
                    bridges::kubecast_log_always(&stack, &bridge_dir, &ns, &kafka_sink)
                }
                "kubecast (gzip)" | "kubecast (snappy)" | "kubecast (lz4)" | "kubecast (zstd)" => {
                    let sink = format!("{kafka_sink}    compression: {key}\n");
                    bridges::kubecast(&stack, &bridge_dir, &ns, &sink)
                }
                "kubecast (exactly-once)" => {
                    bridges::kubecast_exactly_once(&stack, &bridge_dir, &ns, &topic, None)
                }
                "kubecast (3 brokers, RF 3)" => bridges::kubecast(&stack, &bridge_dir, &ns, &kafka_sink),
                "kubecast (exactly-once, 3 brokers, RF 3)" => {
                    let sink = format!(
                        "{kafka_sink}    exactly_once: true\n    transactions: {{id: {topic}-txn, checkpoint_topic: {topic}-checkpoints, state_topic: {topic}-state}}\n"
                    );
                    bridges::kubecast_without_state(&stack, &bridge_dir, &ns, &sink)
                }
                eos if eos.starts_with("kubecast (exactly-once, max_ms ") => {
                    let n = key.trim_start_matches("eos").parse().ok();
                    bridges::kubecast_exactly_once(&stack, &bridge_dir, &ns, &topic, n)
                }
                "kubecast (MQTT)" => bridges::kubecast(
                    &stack,
                    &bridge_dir,
                    &ns,
                    &format!("    type: mqtt\n    url: mqtt://{}:{}\n", stack.mqtt_host, stack.mqtt_port),
                ),
                "baseline (franz)" => bridges::baseline(&stack, &bridge_dir, &ns, &topic, "franz"),
                _ => bridges::baseline(&stack, &bridge_dir, &ns, &topic, "sarama"),
            };
            // The bridge's initial list.
            let what = format!("the initial list of {pods} pods arrived");
            let (limit, every) = (Duration::from_secs(120), Duration::from_millis(20));
            bridges::wait_while_running(bridge, &what, &mut child, &log, limit, every, || {
                arrivals.lock().expect("arrivals").len() >= pods
            })
            .await;
            let pid = child.id().expect("a running bridge");
            // Nothing changes for these 5 s; the live threads' CPU to the nanosecond.
            let idle = proc::cpu_seconds_fine(pid);
            tokio::time::sleep(Duration::from_secs(5)).await;
            let idle = (proc::cpu_seconds_fine(pid) - idle) * 1000.0 / 5.0;
            let broker = Broker {
                pid: std::fs::read_to_string(stack.dir.join("kafka/pid"))
                    .ok()
                    .and_then(|p| p.trim().parse().ok()),
                data: stack.dir.join("kafka/data"),
                topic: consumer.is_some().then_some(topic.as_str()),
            };
            for (name, rate) in [("paced", Some(rate)), ("as fast as possible", None)] {
                let mut row = phase(
                    bridge, name, pid, &api, pods, rate, seconds, base, &arrivals, &broker,
                )
                .await;
                row.idle_ms_per_s = idle;
                base += row.writes + pods;
                rows.push(row);
            }
            bridges::stop(child).await;
            if let Some(consumer) = consumer {
                consumer.abort();
            }
        }

        println!("Status churn over {pods} pods, {seconds} s per phase; paced at {rate}/s, then 64 writes in flight.\n");
        println!("| bridge | phase | writes/s | CPU ms per 1,000 events | idle CPU ms/s | context switches per change | threads | behind when the writes stopped | caught up after | delay p50 | p99 | max | broker CPU ms per 1,000 | topic bytes on disk per change |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in &rows {
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {} | {} | {:.2} s | {:.1} ms | {:.1} ms | {:.1} ms | {:.0} | {:.0} |",
                r.bridge, r.phase, r.write_rate, r.cpu_ms_per_1000, r.idle_ms_per_s, r.switches_per_change, r.threads, r.behind_at_stop, r.caught_up, r.p50, r.p99, r.max, r.broker_ms_per_1000, r.disk_bytes_per_event
            );
        }
        support::pods::delete_each(&api, (0..pods).map(bridges::pod_name)).await;
    });
}
