//! Memory per known pod, end to end: kubecast (this build's binary) against the local stack's
//! real apiserver and Kafka, with the production shape of config (state directory, metrics,
//! initial list emitted to Kafka). For each pod count it creates pods up to that count in a
//! namespace of its own, starts a fresh kubecast watching that namespace, waits (via
//! /metrics) until every pod is known and every event delivered, then samples its resident
//! memory for a few seconds. Then it forces a full re-list (kubecast frozen, one pod created
//! behind its back, etcd compacted and kube-apiserver restarted, kubecast thawed: its watch
//! gets `410 Gone`) and samples resident memory every 50 ms until the re-list is over. With
//! the client-go baseline built (`KUBECAST_BENCH_BASELINE`, as bench/run does), the baseline
//! (franz-go) bridges the same pods and its resident memory is sampled the same way. Prints a
//! Markdown table for BENCHMARKS.md ("Memory per known pod"); nothing is asserted.
//!
//! `bench/run memory [N...]` (default 0 10000 100000). The pods stay Pending (no kubelet);
//! each is ~2.2 KiB of JSON as created.

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use rdkafka::ClientConfig;
use rdkafka::consumer::BaseConsumer;
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
            // A scheduler that does not run: nothing but the bench changes these pods.
            "schedulerName": "kubecast-by-hand",
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

/// The sum of every sample of `name` (any labels) in a /metrics answer.
fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Events the sinks delivered, by /metrics.
fn delivered(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("kubecast_sink_events_total{") && l.contains("outcome=\"delivered\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

struct Row {
    pods: usize,
    ready_s: f64,
    rss_kib: u64,
    peak_kib: u64,
    /// Highest resident memory during the forced re-list, and how long it took.
    relist: Option<(u64, f64)>,
    /// The baseline's resident memory with the same pods known.
    baseline_kib: Option<u64>,
}

/// The highest of 5 s of resident-memory samples of `pid` (resident memory settles after a
/// burst: the allocator, librdkafka's buffers), and its VmHWM.
async fn settled_rss(pid: u32) -> (u64, u64) {
    let (mut rss, mut peak) = (0, 0);
    for _ in 0..25 {
        rss = rss.max(proc::status_kib(pid, "VmRSS").unwrap_or(0));
        peak = peak.max(proc::status_kib(pid, "VmHWM").unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (rss, peak)
}

/// Runs kubecast over the namespace holding `n` pods; returns its memory once all is
/// delivered, and through a forced re-list when `n` > 0.
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
    let limit = Duration::from_secs(60 + n as u64 / 200);
    let metrics = async || match http::get(port, "/metrics").await {
        Ok((200, body)) => body,
        _ => String::new(),
    };
    loop {
        let body = metrics().await;
        let known = sample(&body, "kubecast_known_pods").unwrap_or(-1.0);
        let done = delivered(&body);
        if known == n as f64 && done >= n {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "kubecast did not know and deliver {n} pods within {limit:?}:\n{}",
            kubecast.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready_s = started.elapsed().as_secs_f64();
    let (rss_kib, peak_kib) = settled_rss(kubecast.pid()).await;
    let relist = if n > 0 {
        Some(relist(stack, ns, &kubecast, &metrics, n, limit).await)
    } else {
        None
    };
    let (code, log) = kubecast.stop(Duration::from_secs(30)).await;
    assert_eq!(code, Some(0), "kubecast did not stop cleanly:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
    Row {
        pods: n,
        ready_s,
        rss_kib,
        peak_kib,
        relist,
        baseline_kib: None,
    }
}

/// Forces a full re-list of the `n` pods (plus the one created here) and samples kubecast's
/// resident memory every 50 ms until it is over: when a pod created after the re-list began
/// was delivered, since the watch that sees it starts after the list ended.
async fn relist(
    stack: &Stack,
    ns: &str,
    kubecast: &Kubecast,
    metrics: &impl AsyncFn() -> String,
    n: usize,
    limit: Duration,
) -> (u64, f64) {
    let pid = kubecast.pid();
    kubecast.signal("STOP");
    let pods: Api<Pod> = Api::namespaced(stack.kube_client().await, ns);
    create_named(&pods, "relist-while-away").await;
    stack.script(&["compact"]);
    // A client of its own: the old one's connections died with the apiserver.
    let pods: Api<Pod> = Api::namespaced(stack.kube_client().await, ns);
    kubecast.signal("CONT");
    let started = Instant::now();
    let (mut peak, mut sentinel, mut polled) = (0, false, Instant::now());
    loop {
        peak = peak.max(proc::status_kib(pid, "VmRSS").unwrap_or(0));
        if polled.elapsed() > Duration::from_millis(250) {
            polled = Instant::now();
            let body = metrics().await;
            let lists = total(&body, "kubecast_watch_lists_total");
            let done = delivered(&body);
            if done >= n + 2 {
                break;
            }
            if lists >= 2.0 && done > n && !sentinel {
                create_named(&pods, "relist-sentinel").await;
                sentinel = true;
            }
        }
        assert!(
            started.elapsed() < limit,
            "the re-list of {n} pods was not over within {limit:?}:\n{}",
            kubecast.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    for _ in 0..20 {
        peak = peak.max(proc::status_kib(pid, "VmRSS").unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::pods::delete_each(
        &pods,
        ["relist-while-away", "relist-sentinel"].map(String::from),
    )
    .await;
    (peak, seconds)
}

async fn create_named(pods: &Api<Pod>, name: &str) {
    pods.create(&PostParams::default(), &pod(name))
        .await
        .unwrap_or_else(|e| panic!("creating pod {name}: {e}"));
}

/// The baseline (franz-go) over the namespace holding `n` pods: its resident memory once its
/// topic holds `n` records.
async fn baseline(stack: &Stack, ns: &str, n: usize) -> u64 {
    let dir = scratch_dir("known-pods-baseline");
    let topic = unique_name("known-pods-baseline");
    let (mut child, log) = bridges::baseline(stack, &dir, ns, &topic, "franz");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .create()
        .expect("a Kafka client");
    let limit = Duration::from_secs(60 + n as u64 / 200);
    let what = format!("delivering {n} records");
    let every = Duration::from_millis(200);
    bridges::wait_while_running(
        "the baseline",
        &what,
        &mut child,
        &log,
        limit,
        every,
        || bridges::records(&consumer, &topic) as usize >= n,
    )
    .await;
    let (rss, _) = settled_rss(child.id().expect("a running baseline")).await;
    bridges::stop(child).await;
    let _ = std::fs::remove_dir_all(&dir);
    rss
}

fn main() {
    // `cargo bench` passes `--bench`; every other argument is a pod count.
    let mut counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if counts.is_empty() {
        counts = vec![0, 10_000, 100_000];
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
            let mut row = measure(&stack, &ns, n).await;
            if std::env::var_os("KUBECAST_BENCH_BASELINE").is_some() {
                row.baseline_kib = Some(baseline(&stack, &ns, n).await);
            }
            eprintln!(
                "known_pods: {n} pods: ready in {:.1} s, RSS {} KiB, peak {} KiB, re-list {:?}, baseline {:?} KiB",
                row.ready_s, row.rss_kib, row.peak_kib, row.relist, row.baseline_kib
            );
            rows.push(row);
        }
        let first = rows.first().map(|r| (r.pods, r.rss_kib, r.baseline_kib));
        let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
        // Bytes per pod: resident memory above the first row's, over the pods above its count.
        let per_pod = |pods: usize, kib: Option<u64>, first_kib: Option<u64>| match (first, kib, first_kib) {
            (Some((p0, _, _)), Some(k), Some(k0)) if pods > p0 => {
                format!("{:.0} B", (k as f64 - k0 as f64) * 1024.0 / (pods - p0) as f64)
            }
            _ => "-".to_string(),
        };
        println!("| known pods | known and delivered after | RSS | peak RSS (VmHWM) | per pod above the first row | full re-list: peak RSS, × steady, seconds | baseline (franz-go) RSS | baseline per pod |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in &rows {
            let relist = r.relist.map_or("-".to_string(), |(peak, secs)| {
                format!("{}, {:.2}×, {secs:.1} s", mib(peak), peak as f64 / r.rss_kib as f64)
            });
            println!(
                "| {} | {:.1} s | {} | {} | {} | {relist} | {} | {} |",
                r.pods,
                r.ready_s,
                mib(r.rss_kib),
                mib(r.peak_kib),
                per_pod(r.pods, Some(r.rss_kib), first.map(|f| f.1)),
                r.baseline_kib.map_or("-".to_string(), mib),
                per_pod(r.pods, r.baseline_kib, first.and_then(|f| f.2)),
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
