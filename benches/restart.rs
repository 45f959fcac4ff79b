//! Restart cost: how long kubecast takes, after `kill -9`, from its start to the first
//! event published, with N known pods, once with a state directory (at-least-once Kafka sink)
//! and once without one (exactly-once Kafka sink: the known state and the resume point come
//! from Kafka). For each N it applies N realistic pods (benches/fixtures) in a namespace of
//! its own; per mode, a fresh kubecast bridges them into a topic of its own, is killed once
//! the list is delivered (and, exactly-once, its position committed), one pod's status
//! changes while it is down, and the clock runs from the new process's start until the
//! topic grows. Prints a Markdown table for BENCHMARKS.md ("Restart cost"); nothing is
//! asserted.
//!
//! `bench/run restart [N...]` (default 10000 100000).

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use rdkafka::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use serde_json::json;
use support::kubecast::scratch_dir;
use support::{Stack, unique_name};
use tokio::process::Child;

const LIMIT: Duration = Duration::from_secs(900);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    StateDir,
    ExactlyOnce,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::StateDir => "state directory, at-least-once",
            Mode::ExactlyOnce => "no state directory, exactly-once",
        }
    }
}

/// Starts kubecast on `ns` into `topic` in `mode`; the config and log go to `dir`.
fn start(
    stack: &Stack,
    dir: &Path,
    ns: &str,
    topic: &str,
    mode: Mode,
    run: usize,
) -> (Child, std::path::PathBuf) {
    let (state, eos) = match mode {
        Mode::StateDir => (
            format!(
                "state:\n  dir: {}\n  fsync: always\n",
                dir.join("state").display()
            ),
            String::new(),
        ),
        Mode::ExactlyOnce => (
            String::new(),
            format!(
                "    exactly_once: true\n    create_topics: {{}}\n    transactions: {{id: {topic}-txn, checkpoint_topic: {topic}-checkpoints, state_topic: {topic}-state}}\n"
            ),
        ),
    };
    let config = format!(
        "cluster: bench\nwatch:\n  namespaces: [{ns}]\n  initial_list: emit\n{state}sinks:\n  out:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n{eos}",
        stack.kafka_bootstrap
    );
    bridges::spawn_kubecast(stack, dir, &config, &format!("kubecast-{run}.log"))
}

/// The value of `key=` in the first log line containing `needle`.
fn logged(log: &Path, needle: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains(needle))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    Some(line[at..].split_whitespace().next()?.to_string())
}

async fn measure(stack: &Stack, client: &kube::Client, ns: &str, n: usize, mode: Mode) -> String {
    let dir = scratch_dir("bench-restart");
    let topic = unique_name("bench-restart");
    support::consume::create_topic(stack, &topic, 4).await;
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    let consumer: BaseConsumer = config.create().expect("a Kafka client");
    let (mut child, log) = start(stack, &dir, ns, &topic, mode, 1);
    bridges::wait_while_running(
        "kubecast",
        "the initial list delivered",
        &mut child,
        &log,
        LIMIT,
        Duration::from_millis(200),
        || bridges::records(&consumer, &topic) >= n as i64,
    )
    .await;
    if mode == Mode::ExactlyOnce {
        // The list's resume point is committed right after its last events.
        let key = "bench/out".to_string();
        let checkpoints = format!("{topic}-checkpoints");
        bridges::wait_while_running(
            "kubecast",
            "the list's position committed",
            &mut child,
            &log,
            LIMIT,
            Duration::from_millis(200),
            || {
                kubecast::sinks::kafka::checkpoint::read_latest(
                    &config,
                    &checkpoints,
                    &key,
                    Duration::from_secs(10),
                )
                .ok()
                .flatten()
                .is_some_and(|c| c.positions.contains_key(ns))
            },
        )
        .await;
    }
    child.start_kill().expect("kill -9");
    let _ = child.wait().await;
    // A change while kubecast is down: the first event the restart publishes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "message": unique_name("restart")}]}});
    pods.patch_status(
        &bridges::pod_name(0),
        &PatchParams::default(),
        &Patch::Strategic(&status),
    )
    .await
    .expect("changing a pod");
    let before = bridges::records(&consumer, &topic);
    let started = Instant::now();
    let (mut child, log) = start(stack, &dir, ns, &topic, mode, 2);
    bridges::wait_while_running(
        "kubecast",
        "the first event after the restart",
        &mut child,
        &log,
        LIMIT,
        Duration::from_millis(10),
        || bridges::records(&consumer, &topic) > before,
    )
    .await;
    let first = started.elapsed().as_secs_f64();
    let detail = match mode {
        Mode::StateDir => format!(
            "state restored ({} known pods)",
            logged(&log, "state restored", "known_objects").unwrap_or_default()
        ),
        Mode::ExactlyOnce => format!(
            "fence {} ms, read checkpoint + {} state records {} ms",
            logged(&log, "took over", "fence_ms").unwrap_or_default(),
            logged(&log, "took over", "known_pods").unwrap_or_default(),
            logged(&log, "took over", "read_ms").unwrap_or_default(),
        ),
    };
    bridges::stop(child).await;
    format!("| {n} | {} | {first:.2} | {detail} |", mode.label())
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
        let client = stack.kube_client().await;
        let mut rows = Vec::new();
        for n in counts {
            let ns = unique_name("bench-restart");
            support::pods::namespace(&client, &ns).await;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            bridges::populate(&pods, &ns, n).await;
            for mode in [Mode::StateDir, Mode::ExactlyOnce] {
                let row = measure(&stack, &client, &ns, n, mode).await;
                eprintln!("{row}");
                rows.push(row);
            }
            support::pods::delete_each(&pods, (0..n).map(bridges::pod_name)).await;
        }
        println!("| known pods | mode | start to first event after kill -9 (s) | of which |");
        println!("| --- | --- | --- | --- |");
        for r in rows {
            println!("{r}");
        }
    });
}
