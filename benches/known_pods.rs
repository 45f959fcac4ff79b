//! Memory per known pod, end to end: kubecast (this build's binary) against the local stack's
//! real apiserver and Kafka, with the production shape of config (state directory, metrics,
//! initial list emitted to Kafka). For each pod count it creates pods up to that count in a
//! namespace of its own, starts a fresh kubecast watching that namespace, waits (via
//! /metrics) until every pod is known and every event delivered, then samples its resident
//! memory for a few seconds. Prints a Markdown table for BENCHMARKS.md ("Memory per known
//! pod"); nothing is asserted.
//!
//! `scripts/stack up`, then `cargo bench --bench known_pods -- 1000 10000 100000`
//! (default: 0 1000 10000). The pods stay Pending (no kubelet); each is ~2.9 KiB of JSON.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::kubecast::{Kubecast, scratch_dir};
use support::{Stack, http, proc, unique_name};

/// A Pending pod shaped like a typical workload's: labels and annotations as controllers and
/// tooling leave them, an app and a sidecar container with env, resources, probes and mounts.
fn pod(name: &str) -> Pod {
    let env: Vec<_> = (0..6)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}-of-some-length")}))
        .collect();
    let container = |cname: &str, image: &str| {
        json!({
            "name": cname,
            "image": image,
            "ports": [{"name": "http", "containerPort": 8080}],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, {"name": "cache", "mountPath": "/cache"}]
        })
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "checkout",
                "app.kubernetes.io/instance": "checkout-prod",
                "app.kubernetes.io/version": "4.12.1",
                "pod-template-hash": "7d9f8b6c5d",
                "team": "payments"
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
                "kubectl.kubernetes.io/restartedAt": "2026-11-30T08:00:00Z"
            }
        },
        "spec": {
            "containers": [
                container("app", "registry.invalid/payments/checkout:4.12.1"),
                container("proxy", "registry.invalid/mesh/proxy:1.23.0")
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "checkout"}},
                {"name": "cache", "emptyDir": {}}
            ],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "payments", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 30
        }
    }))
    .expect("a pod literal")
}

/// Creates pods `from..to` in `pods`' namespace, 32 requests at a time.
async fn create_pods(pods: &Api<Pod>, from: usize, to: usize) {
    let started = Instant::now();
    stream::iter(from..to)
        .map(|i| async move {
            let p = pod(&format!("p{i:06}"));
            pods.create(&PostParams::default(), &p)
                .await
                .unwrap_or_else(|e| panic!("creating pod p{i:06}: {e}"));
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    eprintln!(
        "known_pods: created pods {from}..{to} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The value of the sample `name` (with its labels, as printed) in a /metrics answer.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

struct Row {
    pods: usize,
    ready_s: f64,
    rss_kib: u64,
    peak_kib: u64,
}

/// Runs kubecast over the namespace holding `n` pods; returns its memory once all is delivered.
async fn measure(stack: &Stack, ns: &str, n: usize) -> Row {
    let dir = scratch_dir("known-pods");
    let port = http::free_port();
    let config = format!(
        "cluster: bench\nwatch:\n  namespaces: [{ns}]\n  initial_list: emit\nstate:\n  dir: {}\n  fsync: interval\nmetrics:\n  address: 127.0.0.1:{port}\nsinks:\n  kafka:\n    type: kafka\n    brokers: {}\n    topic: {}\n",
        dir.join("state").display(),
        stack.kafka_bootstrap,
        unique_name("known-pods"),
    );
    let started = Instant::now();
    let kubecast = Kubecast::start(stack, &dir, &config);
    let delivered = "kubecast_sink_events_total{sink=\"kafka\",outcome=\"delivered\"}";
    let limit = Duration::from_secs(60 + n as u64 / 200);
    loop {
        if let Ok((200, body)) = http::get(port, "/metrics").await {
            let known = sample(&body, "kubecast_known_pods").unwrap_or(-1.0);
            let done = sample(&body, delivered).unwrap_or(0.0);
            if known == n as f64 && done >= n as f64 {
                break;
            }
        }
        assert!(
            started.elapsed() < limit,
            "kubecast did not know and deliver {n} pods within {limit:?}:\n{}",
            kubecast.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready_s = started.elapsed().as_secs_f64();
    // Resident memory settles after the initial burst (allocator, librdkafka's buffers): the
    // figure is the highest of 5 s of samples taken after everything was delivered.
    let mut rss_kib = 0;
    let mut peak_kib = 0;
    for _ in 0..25 {
        let pid = kubecast.pid();
        rss_kib = rss_kib.max(proc::status_kib(pid, "VmRSS").unwrap_or(0));
        peak_kib = peak_kib.max(proc::status_kib(pid, "VmHWM").unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, log) = kubecast.stop(Duration::from_secs(30)).await;
    assert_eq!(code, Some(0), "kubecast did not stop cleanly:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
    Row {
        pods: n,
        ready_s,
        rss_kib,
        peak_kib,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; every other argument is a pod count.
    let mut counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if counts.is_empty() {
        counts = vec![0, 1_000, 10_000];
    }
    counts.sort_unstable();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        let client = stack.kube_client().await;
        let ns = unique_name("known-pods");
        support::pods::namespace(&client, &ns).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let sample = serde_json::to_vec(&pod("p000000")).map(|v| v.len()).unwrap_or(0);
        eprintln!("known_pods: namespace {ns}; one pod's JSON as created: {sample} bytes");
        let mut rows = Vec::new();
        let mut have = 0;
        for n in counts {
            create_pods(&pods, have, n).await;
            have = n;
            let row = measure(&stack, &ns, n).await;
            eprintln!(
                "known_pods: {n} pods: ready in {:.1} s, RSS {} KiB, peak {} KiB",
                row.ready_s, row.rss_kib, row.peak_kib
            );
            rows.push(row);
        }
        let base = rows.first().map(|r| r.rss_kib).unwrap_or(0);
        let base_pods = rows.first().map(|r| r.pods).unwrap_or(0);
        println!("| known pods | known and delivered after | RSS | peak RSS (VmHWM) | RSS above the first row, per 1,000 pods |");
        println!("| --- | --- | --- | --- | --- |");
        for r in &rows {
            let per_1000 = if r.pods > base_pods {
                format!(
                    "{:.2} MiB",
                    (r.rss_kib as f64 - base as f64) / 1024.0 / (r.pods - base_pods) as f64
                        * 1000.0
                )
            } else {
                "-".to_string()
            };
            println!(
                "| {} | {:.1} s | {:.1} MiB | {:.1} MiB | {per_1000} |",
                r.pods,
                r.ready_s,
                r.rss_kib as f64 / 1024.0,
                r.peak_kib as f64 / 1024.0
            );
        }
        let started = Instant::now();
        support::pods::delete_each(&pods, (0..have).map(|i| format!("p{i:06}"))).await;
        eprintln!(
            "known_pods: deleted {have} pods in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    });
}
