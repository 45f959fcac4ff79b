//! A cluster of production size going through a rollout, side by side: kubecast (into Kafka,
//! with its state directory) and the client-go baseline (bench/baseline-go, franz-go) watch
//! Pods, Nodes, Deployments, ReplicaSets and core Events cluster-wide on the local stack while
//! NODES simulated nodes (kwok) take PODS pods (Deployments of 50, scheduled by the real
//! kube-scheduler) through five phases: the nodes made, the Deployments created until every
//! pod runs, every Deployment rolled once, all scaled to zero, all deleted.
//!
//! Per phase: the changes per second the cluster made (an independent watch per resource
//! stamps each change's arrival) and kubecast delivered (a Kafka reader stamps each event's),
//! the delay between the two, p50/p99/max, each bridge's CPU per 1,000 changes and resident
//! memory (peak over the phase, and at its end), and the apiserver's CPU. At the peak, each
//! bridge starts afresh once, alone, and its initial list is measured: how long, its own CPU
//! and memory, the apiserver's CPU and peak memory meanwhile, the LIST and WATCH requests it
//! made (`apiserver_request_total`) and whether its list was streamed (WatchList). After the
//! run: every change the independent watches saw is in kubecast's topics (0 lost), and
//! `kubecast replay --verify` passes on each. Prints Markdown for BENCHMARKS.md; nothing is
//! asserted but that nothing was lost.
//!
//! Run through `bench/run scale [NODES [PODS]]` (default 1000 30000).

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "scale/cluster.rs"]
mod cluster;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "scale/watch.rs"]
mod watch;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::ApiResource;
use support::{Stack, proc, unique_name};
use tokio::process::{Child, Command};
use watch::{Arrivals, Peaks, Truth, now_ms};

/// The resources watched: kubecast's name and the baseline's.
const RESOURCES: [(&str, &str); 5] = [
    ("pods", "pods"),
    ("nodes", "nodes"),
    ("deployments.apps", "deployments"),
    ("replicasets.apps", "replicasets"),
    ("events", "events"),
];
/// How long one phase may take.
const PHASE_LIMIT: Duration = Duration::from_secs(3600);

/// The processes whose CPU and memory a phase reports.
struct Procs {
    kubecast: u32,
    baseline: u32,
    apiserver: u32,
}

/// One phase's figures.
struct Phase {
    name: &'static str,
    secs: f64,
    made: usize,
    delivered: usize,
    delay_ms: [f64; 3],
    /// CPU seconds of kubecast, the baseline, the apiserver.
    cpu: [f64; 3],
    /// Peak and end resident memory (MiB) of kubecast and the baseline.
    rss: [(f64, f64); 2],
}

fn cpu(pid: u32) -> f64 {
    proc::cpu_seconds(pid).unwrap_or(f64::NAN)
}

fn rss(pid: u32) -> f64 {
    proc::status_kib(pid, "VmRSS").map_or(f64::NAN, |k| k as f64 / 1024.0)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64
}

/// Runs `drive` as phase `name` and measures it once the changes it made have arrived.
async fn phase<F: std::future::Future<Output = ()>>(
    name: &'static str,
    procs: &Procs,
    peaks: &Peaks,
    truths: &[Truth],
    arrivals: &Arrivals,
    drive: F,
) -> Phase {
    let cpu0 = [
        cpu(procs.kubecast),
        cpu(procs.baseline),
        cpu(procs.apiserver),
    ];
    for pid in [procs.kubecast, procs.baseline] {
        peaks.take(pid);
    }
    let (start, started) = (now_ms(), Instant::now());
    drive.await;
    let end = now_ms();
    let secs = started.elapsed().as_secs_f64();
    // The phase's changes: what the independent watches saw during it.
    let changes: Vec<(String, u64)> = truths
        .iter()
        .flat_map(|t| t.lock().map(|s| s.changes.clone()).unwrap_or_default())
        .filter(|(_, at)| (start..=end).contains(at))
        .collect();
    let delivered = caught_up(arrivals, &changes).await;
    let a = arrivals.lock().map(|a| a.clone()).unwrap_or_default();
    let mut delays: Vec<u64> = changes
        .iter()
        .filter_map(|(id, at)| a.get(id).map(|got| got.saturating_sub(*at)))
        .collect();
    delays.sort_unstable();
    let p = Phase {
        name,
        secs,
        made: changes.len(),
        delivered,
        delay_ms: [
            percentile(&delays, 0.5),
            percentile(&delays, 0.99),
            percentile(&delays, 1.0),
        ],
        cpu: [
            cpu(procs.kubecast) - cpu0[0],
            cpu(procs.baseline) - cpu0[1],
            cpu(procs.apiserver) - cpu0[2],
        ],
        rss: [
            (peaks.take(procs.kubecast), rss(procs.kubecast)),
            (peaks.take(procs.baseline), rss(procs.baseline)),
        ],
    };
    eprintln!(
        "scale: {name}: {} changes in {secs:.0} s, delivered {}, delay p99 {} ms",
        p.made, p.delivered, p.delay_ms[1]
    );
    p
}

/// Waits (up to 10 minutes) until every change of `changes` has arrived; returns how many did.
async fn caught_up(arrivals: &Arrivals, changes: &[(String, u64)]) -> usize {
    let started = Instant::now();
    loop {
        let got = arrivals
            .lock()
            .map(|a| changes.iter().filter(|(id, _)| a.contains_key(id)).count())
            .unwrap_or(0);
        if got == changes.len() || started.elapsed() > Duration::from_secs(600) {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts the baseline on every resource into `{prefix}.{resource}`, its output to `dir`.
fn baseline(stack: &Stack, dir: &Path, prefix: &str) -> (Child, std::path::PathBuf) {
    let program = std::env::var("KUBECAST_BENCH_BASELINE")
        .expect("KUBECAST_BENCH_BASELINE (the baseline's binary): run through bench/run");
    let out = dir.join(format!("{prefix}.out"));
    let file = |p: &Path| std::fs::File::create(p).expect("a log file");
    let resources: Vec<&str> = RESOURCES.iter().map(|(_, b)| *b).collect();
    let child = Command::new(program)
        .args(["-kubeconfig", &stack.kubeconfig.display().to_string()])
        .args(["-brokers", &stack.kafka_bootstrap, "-sender", "franz"])
        .args([
            "-topic",
            &format!("{prefix}.{{resource}}"),
            "-resources",
            &resources.join(","),
        ])
        .stdin(Stdio::null())
        .stdout(file(&out))
        .stderr(file(&dir.join(format!("{prefix}.log"))))
        .kill_on_drop(true)
        .spawn()
        .expect("starting the baseline");
    (child, out)
}

/// kubecast on every resource, cluster-wide (or as `watch` says: more lines of its `watch`
/// section), with a state directory, into `{prefix}.{resource}`.
fn kubecast(stack: &Stack, dir: &Path, prefix: &str, watch: &str) -> (Child, std::path::PathBuf) {
    let names: Vec<&str> = RESOURCES.iter().map(|(k, _)| *k).collect();
    let config = format!(
        "cluster: bench\nwatch:\n  resources: [{}]\n  initial_list: emit\n{watch}state:\n  dir: {}\nsinks:\n  out:\n    type: kafka\n    brokers: {}\n    topic: '{prefix}.{{resource}}'\n",
        names.join(", "),
        dir.join(format!("{prefix}-state")).display(),
        stack.kafka_bootstrap
    );
    std::fs::create_dir_all(dir.join(prefix)).expect("a directory");
    bridges::spawn_kubecast(stack, &dir.join(prefix), &config, "kubecast.log")
}

/// Waits until `file` holds `needle` `n` times.
async fn wait_for_text(file: &Path, needle: &str, n: usize, child: &mut Child) {
    bridges::wait_while_running(
        "the bridge",
        needle,
        child,
        file,
        PHASE_LIMIT,
        Duration::from_millis(50),
        || {
            std::fs::read_to_string(file)
                .unwrap_or_default()
                .matches(needle)
                .count()
                >= n
        },
    )
    .await;
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(1000);
    let pods = args.get(1).copied().unwrap_or(30000);
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(run(nodes, pods));
}

async fn run(nodes: usize, pods: usize) {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    let dir = support::kubecast::scratch_dir("scale");
    let prefix = unique_name("scale");
    let apiserver: u32 = std::fs::read_to_string(stack.dir.join("kube-apiserver/pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("kube-apiserver's pid (target/stack/kube-apiserver/pid)");
    // The nodes phase makes every node: none are left from an earlier run.
    stack.script(&["nodes", "0"]);
    let ars = [
        ApiResource::erase::<Pod>(&()),
        ApiResource::erase::<Node>(&()),
        ApiResource::erase::<Deployment>(&()),
        ApiResource::erase::<ReplicaSet>(&()),
        ApiResource::erase::<Event>(&()),
    ];
    let mut truths = Vec::new();
    for ar in &ars {
        truths.push(watch::watch(&client, ar).await);
    }
    let topics: Vec<String> = RESOURCES
        .iter()
        .map(|(r, _)| format!("{prefix}.{r}"))
        .collect();
    let arrivals = watch::read(&stack, &topics).await;
    let (mut kc, kc_log) = kubecast(&stack, &dir, &prefix, "");
    wait_for_text(&kc_log, "list complete", RESOURCES.len(), &mut kc).await;
    let (mut bl, bl_out) = baseline(&stack, &dir, &format!("{prefix}-baseline"));
    wait_for_text(&bl_out, "synced", 1, &mut bl).await;
    let procs = Procs {
        kubecast: kc.id().expect("kubecast's pid"),
        baseline: bl.id().expect("the baseline's pid"),
        apiserver,
    };
    let peaks = Peaks::start();
    for pid in [procs.kubecast, procs.baseline, procs.apiserver] {
        peaks.watch(pid);
    }
    let pod_counts = || {
        truths[0]
            .lock()
            .map(|s| (s.live.values().filter(|r| **r).count(), s.live.len()))
            .unwrap_or_default()
    };
    let cluster = cluster::Cluster::new(&client, &prefix, 10, pods).await;
    let mut phases = Vec::new();
    phases.push(
        phase("nodes made", &procs, &peaks, &truths, &arrivals, async {
            stack.script(&["nodes", &nodes.to_string()]);
        })
        .await,
    );
    phases.push(
        phase(
            "Deployments created",
            &procs,
            &peaks,
            &truths,
            &arrivals,
            async {
                cluster.create().await;
                cluster.settled(pods, PHASE_LIMIT, pod_counts).await;
            },
        )
        .await,
    );
    let namespaces: Vec<&str> = cluster
        .deployments
        .iter()
        .map(|(ns, _, _)| ns.as_str())
        .collect();
    let lists = lists::measure(
        &stack,
        &client,
        &dir,
        &prefix,
        &peaks,
        apiserver,
        &namespaces,
    )
    .await;
    phases.push(
        phase("rolled", &procs, &peaks, &truths, &arrivals, async {
            cluster.roll().await;
            cluster.settled(pods, PHASE_LIMIT, pod_counts).await;
        })
        .await,
    );
    phases.push(
        phase(
            "scaled to zero",
            &procs,
            &peaks,
            &truths,
            &arrivals,
            async {
                cluster.scale_to_zero().await;
                cluster.settled(0, PHASE_LIMIT, pod_counts).await;
            },
        )
        .await,
    );
    let owners_left = || {
        truths[2..4]
            .iter()
            .map(|t| t.lock().map(|s| s.live.len()).unwrap_or(usize::MAX))
            .sum::<usize>()
    };
    phases.push(
        phase("deleted", &procs, &peaks, &truths, &arrivals, async {
            cluster.delete().await;
            let started = Instant::now();
            while owners_left() > 0 {
                assert!(
                    started.elapsed() < PHASE_LIMIT,
                    "Deployments and ReplicaSets left: {}",
                    owners_left()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await,
    );
    report::print(nodes, pods, &phases, &lists);
    report::check(&stack, &topics, &truths, &arrivals).await;
    bridges::stop(kc).await;
    bridges::stop(bl).await;
}

#[path = "scale/lists.rs"]
mod lists;
#[path = "scale/report.rs"]
mod report;
