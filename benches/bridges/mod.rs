//! What the end-to-end benchmarks share (`benches/e2e.rs`, `benches/churn.rs`): the
//! realistic pods they populate, the bridges they start (this build's kubecast and the
//! client-go baseline of `bench/baseline-go`), and reading Kafka's high watermarks.

#![allow(dead_code)] // Each harness uses a different part of this module.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::support::{Stack, repo};

pub mod churn;

/// The fixture's Pod and status (benches/fixtures), for N copies.
pub fn templates() -> (Value, Value) {
    let pod: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("benches/fixtures/pod.yaml")).expect("pod.yaml"),
    )
    .expect("pod.yaml is YAML");
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("benches/fixtures/status.json")).expect("status.json"),
    )
    .expect("status.json is JSON");
    (pod, status)
}

/// The name of pod `i` of a populated namespace.
pub fn pod_name(i: usize) -> String {
    format!("checkout-{i:06}")
}

/// The pods of namespace `ns`, holding at least `n` populated pods: the namespace is made
/// and populated when it holds fewer (a namespace to reuse keeps them for the next run).
pub async fn populated(client: &kube::Client, ns: &str, n: usize) -> Api<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let have = pods
        .list_metadata(&Default::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    if have < n {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        if matches!(namespaces.get_opt(ns).await, Ok(None)) {
            crate::support::pods::namespace(client, ns).await;
        }
        populate(&pods, ns, n).await;
    }
    pods
}

/// Applies N pods server-side (as a controller would) and patches a kubelet-like status in.
pub async fn populate(pods: &Api<Pod>, ns: &str, n: usize) {
    let (template, status) = templates();
    let started = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (mut pod, status) = (template.clone(), status.clone());
            async move {
                let name = pod_name(i);
                pod["metadata"]["name"] = name.clone().into();
                pod["metadata"]["namespace"] = ns.into();
                let apply = PatchParams::apply("deployment-controller").force();
                pods.patch(&name, &apply, &Patch::Apply(&pod))
                    .await
                    .unwrap_or_else(|e| panic!("applying {name}: {e}"));
                let kubelet = PatchParams {
                    field_manager: Some("kubelet".into()),
                    ..Default::default()
                };
                pods.patch_status(&name, &kubelet, &Patch::Merge(&status))
                    .await
                    .unwrap_or_else(|e| panic!("patching the status of {name}: {e}"));
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    eprintln!(
        "bench: {n} pods applied with status in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Starts `program` with stderr to `log`.
pub fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    let err = std::fs::File::create(log).expect("a log file");
    Command::new(program)
        .args(args)
        .env("RUST_LOG", "info")
        // kubecast reads every KUBECAST_* variable as a config override.
        .env_remove("KUBECAST_BENCH_BASELINE")
        .env_remove("KUBECAST_TEST_BINARY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()))
}

/// This build's kubecast on namespace `ns` with a state directory under `dir` (the default
/// `log`, `fsync: always`), `initial_list: emit`, and `sink` (YAML of one sink named `out`,
/// indented by four spaces). Its metrics are served on 127.0.0.1:19465.
pub fn kubecast(stack: &Stack, dir: &Path, ns: &str, sink: &str) -> (Child, PathBuf) {
    let state = format!(
        "state:\n  dir: {}\n  fsync: always\n",
        dir.join("state").display()
    );
    start_kubecast(stack, dir, ns, &state, sink)
}

/// [`kubecast`] with `log: always`: every change written and synced before any sink sees it.
pub fn kubecast_log_always(stack: &Stack, dir: &Path, ns: &str, sink: &str) -> (Child, PathBuf) {
    let state = format!(
        "state:\n  dir: {}\n  log: always\n  fsync: always\n",
        dir.join("state").display()
    );
    start_kubecast(stack, dir, ns, &state, sink)
}

/// [`kubecast`] without a state directory (nothing durable but the broker's acks).
pub fn kubecast_without_state(stack: &Stack, dir: &Path, ns: &str, sink: &str) -> (Child, PathBuf) {
    start_kubecast(stack, dir, ns, "", sink)
}

/// [`kubecast`] with an exactly-once Kafka sink into `topic` (transactions cut after
/// `max_ms`, or the default) and no state directory.
pub fn kubecast_exactly_once(
    stack: &Stack,
    dir: &Path,
    ns: &str,
    topic: &str,
    max_ms: Option<u64>,
) -> (Child, PathBuf) {
    let max_ms = max_ms.map(|m| format!(", max_ms: {m}")).unwrap_or_default();
    let sink = format!(
        "    type: kafka\n    brokers: {}\n    topic: {topic}\n    exactly_once: true\n    create_topics: {{}}\n    transactions: {{id: {topic}-txn, checkpoint_topic: {topic}-checkpoints, state_topic: {topic}-state{max_ms}}}\n",
        stack.kafka_bootstrap
    );
    start_kubecast(stack, dir, ns, "", &sink)
}

fn start_kubecast(
    stack: &Stack,
    dir: &Path,
    ns: &str,
    state: &str,
    sink: &str,
) -> (Child, PathBuf) {
    let config = format!(
        "cluster: bench\nwatch:\n  namespaces: [{ns}]\n  initial_list: emit\n{state}metrics:\n  address: 127.0.0.1:19465\nsinks:\n  out:\n{sink}",
    );
    spawn_kubecast(stack, dir, &config, "kubecast.log")
}

/// This build's kubecast (or `KUBECAST_TEST_BINARY`'s, another build to compare) with
/// `config` (written into `dir`), logging to `dir/log`.
pub fn spawn_kubecast(stack: &Stack, dir: &Path, config: &str, log: &str) -> (Child, PathBuf) {
    let config_path = dir.join("kubecast.yaml");
    std::fs::write(&config_path, config).expect("writing the config");
    let log = dir.join(log);
    let child = spawn(
        &crate::support::kubecast::binary(),
        &[
            "run".into(),
            "--config".into(),
            config_path.display().to_string(),
            "--kubeconfig".into(),
            stack.kubeconfig.display().to_string(),
        ],
        &log,
    );
    (child, log)
}

/// The client-go baseline (`KUBECAST_BENCH_BASELINE`, built by bench/run) on `ns` into
/// `topic` with `sender` (franz or sarama).
pub fn baseline(
    stack: &Stack,
    dir: &Path,
    ns: &str,
    topic: &str,
    sender: &str,
) -> (Child, PathBuf) {
    let program = std::env::var("KUBECAST_BENCH_BASELINE")
        .expect("KUBECAST_BENCH_BASELINE (the baseline's binary): run through bench/run");
    let log = dir.join(format!("baseline-{sender}.log"));
    let child = spawn(
        Path::new(&program),
        &[
            "-kubeconfig".into(),
            stack.kubeconfig.display().to_string(),
            "-namespace".into(),
            ns.into(),
            "-brokers".into(),
            stack.kafka_bootstrap.clone(),
            "-topic".into(),
            topic.into(),
            "-sender".into(),
            sender.into(),
        ],
        &log,
    );
    (child, log)
}

/// A consumer of every partition of each of `topics` (created here with 4 partitions each)
/// from the beginning, fetching every 5 ms: the benches' stamp of when an event arrived.
pub async fn reader(stack: &Stack, topics: &[&str]) -> rdkafka::consumer::StreamConsumer {
    let mut assignment = rdkafka::TopicPartitionList::new();
    for t in topics {
        crate::support::consume::create_topic(stack, t, 4).await;
        for p in 0..4 {
            assignment
                .add_partition_offset(t, p, rdkafka::Offset::Beginning)
                .expect("a partition offset");
        }
    }
    let consumer: rdkafka::consumer::StreamConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("group.id", crate::support::unique_name("bench-reader"))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()
        .expect("a Kafka consumer");
    consumer.assign(&assignment).expect("assigning partitions");
    consumer
}

/// Records in `topic` (the sum of its partitions' high watermarks; 0 before it exists).
pub fn records(consumer: &BaseConsumer, topic: &str) -> i64 {
    let Ok(meta) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) else {
        return 0;
    };
    let Some(t) = meta.topics().first() else {
        return 0;
    };
    t.partitions()
        .iter()
        .filter_map(|p| {
            consumer
                .fetch_watermarks(topic, p.id(), Duration::from_secs(5))
                .ok()
        })
        .map(|(_, high)| high)
        .sum()
}

/// Polls `done` every `every` until it holds, while `child` (the bridge `bridge`, logging to
/// `log`) runs: fails with the log if the bridge exits first, or when `limit` passes.
pub async fn wait_while_running(
    bridge: &str,
    what: &str,
    child: &mut Child,
    log: &Path,
    limit: Duration,
    every: Duration,
    mut done: impl FnMut() -> bool,
) {
    let started = Instant::now();
    while !done() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{bridge} exited ({status}) before {what}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < limit,
            "{bridge}: no {what} within {limit:?}; log in {}",
            log.display()
        );
        tokio::time::sleep(every).await;
    }
}

/// Sends SIGTERM to `child` and waits up to 30 s for it to exit.
pub async fn stop(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
}
