//! Shards end to end: 1, 2 and 4 kubecast replicas share 4 shards of the same N realistic
//! pods (default 10,000) on the local stack's real apiserver, into an exactly-once Kafka
//! sink (the same Lease settings as the tests: 2 s, renewed every 250 ms), after one
//! replica without shards (leader election alone, the reference "one replica"). For each
//! run: the time until a `read_committed` consumer holds every listed pod's event;
//! each replica's CPU seconds, peak and final resident memory and known objects over the
//! list; the apiserver's CPU and resident memory over the list; status churn at RATE/s for
//! SECONDS with every change's delay from its write to the consumer (p50, p99); then, with
//! two or more replicas, `kill -9` of one while the churn goes on, and for each shard it
//! held the time until a change written after the kill arrived from its new holder (the
//! slowest shard is the figure). Prints a Markdown table for BENCHMARKS.md; nothing is
//! asserted.
//!
//! Run through `bench/run shards [N [NAMESPACE [RATE [SECONDS [RUNS]]]]]` (defaults 10000, a
//! fresh namespace, 100, 20, and RUNS `1x1,1x4,2x4,4x4`: replicas x shards).

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use rdkafka::Message;
use serde::Deserialize;
use support::{Stack, proc, unique_name};
use tokio::process::Child;

const SHARDS: u32 = 4;

/// When each change (by resourceVersion) arrived, and its object's shard.
type Arrivals = Arc<Mutex<HashMap<u64, (Instant, u32)>>>;

/// The resourceVersion and uid in an event's data (the Pod).
fn identity(payload: &[u8]) -> Option<(u64, String)> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        rv: String,
        uid: String,
    }
    #[derive(Deserialize)]
    struct Object {
        metadata: Meta,
    }
    let m = serde_json::from_slice::<Object>(payload).ok()?.metadata;
    Some((m.rv.parse().ok()?, m.uid))
}

/// The shard of `uid` among [`SHARDS`].
fn shard_of(uid: &str) -> u32 {
    (0..SHARDS)
        .find(|i| kubecast::model::Shard::new(*i, SHARDS).is_some_and(|s| s.contains(uid)))
        .unwrap_or(0)
}

/// Reads `topic` (created here) with `read_committed`, stamping each change's arrival.
async fn consumer(stack: &Stack, topic: &str, arrivals: Arrivals) -> tokio::task::JoinHandle<()> {
    let consumer = bridges::reader(stack, &[topic]).await;
    tokio::spawn(async move {
        loop {
            match consumer.recv().await {
                Ok(m) => {
                    if let Some((rv, uid)) = m.payload().and_then(identity) {
                        let at = (Instant::now(), shard_of(&uid));
                        arrivals.lock().expect("arrivals").entry(rv).or_insert(at);
                    }
                }
                Err(e) => eprintln!("shards: consumer: {e}"),
            }
        }
    })
}

/// One replica: its process, log and metrics port.
struct Replica {
    child: Child,
    pid: u32,
    log: PathBuf,
    port: u16,
}

/// `GET http://127.0.0.1:port{path}`'s body (empty when it does not answer).
fn get(port: u16, path: &str) -> String {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "3",
            &format!("http://127.0.0.1:{port}{path}"),
        ])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default()
}

/// A metric's value in `/metrics` text (the first line naming it).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The shards a replica holds, from its `/readyz`.
fn held(port: u16) -> Vec<u32> {
    get(port, "/readyz")
        .lines()
        .find_map(|l| l.strip_prefix("shards held: "))
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

struct Row {
    replicas: usize,
    shards: u32,
    list_s: f64,
    cpu: Vec<f64>,
    peak_mib: Vec<f64>,
    known: Vec<f64>,
    api_cpu: f64,
    api_mib: f64,
    churn_cpu: Vec<f64>,
    p50_ms: f64,
    p99_ms: f64,
    takeover_s: Option<f64>,
}

#[allow(clippy::too_many_arguments)]
async fn run(
    stack: &Stack,
    api: &Api<Pod>,
    ns: &str,
    n: usize,
    replicas: usize,
    shards: u32,
    rate: f64,
    seconds: f64,
    base: usize,
) -> Row {
    let topic = unique_name("shards-bench");
    let arrivals: Arrivals = Arc::default();
    let reader = consumer(stack, &topic, arrivals.clone()).await;
    let lease = unique_name("shards-bench");
    let api_pid: u32 = std::fs::read_to_string(stack.dir.join("kube-apiserver/pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("the stack's kube-apiserver pid");
    let api_cpu0 = proc::cpu_seconds(api_pid).unwrap_or(f64::NAN);
    let started = Instant::now();
    let mut procs: Vec<Replica> = (0..replicas)
        .map(|i| {
            let dir = support::kubecast::scratch_dir(&format!("shards-{replicas}-{shards}-{i}"));
            let port = 19480 + i as u16;
            let config = format!(
                "cluster: bench\nwatch:\n  namespaces: [{ns}]\n  initial_list: emit\nmetrics:\n  address: 127.0.0.1:{port}\nleader_election:\n  enabled: true\n  lease: {lease}\n  namespace: {ns}\n  identity: replica-{i}\n  lease_duration_ms: 2000\n  retry_period_ms: 250\nsharding:\n  shards: {shards}\nsinks:\n  out:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n    exactly_once: true\n    create_topics: {{}}\n    transactions: {{id: {topic}-txn, checkpoint_topic: {topic}-checkpoints, state_topic: {topic}-state}}\n",
                stack.kafka_bootstrap
            );
            let (child, log) = bridges::spawn_kubecast(stack, &dir, &config, "kubecast.log");
            let pid = child.id().expect("a running replica");
            Replica { child, pid, log, port }
        })
        .collect();
    let limit = Duration::from_secs(120 + n as u64 / 50);
    let every = Duration::from_millis(50);
    let what = format!("delivering {n} listed pods");
    let first = procs.first_mut().expect("one replica at least");
    let (log, bridge) = (first.log.clone(), format!("{replicas} replicas"));
    bridges::wait_while_running(&bridge, &what, &mut first.child, &log, limit, every, || {
        arrivals.lock().expect("arrivals").len() >= n
    })
    .await;
    let list_s = started.elapsed().as_secs_f64();
    let api_cpu = proc::cpu_seconds(api_pid).unwrap_or(f64::NAN) - api_cpu0;
    let api_mib = proc::status_kib(api_pid, "VmRSS").unwrap_or(0) as f64 / 1024.0;
    let cpu: Vec<f64> = procs
        .iter()
        .map(|r| proc::cpu_seconds(r.pid).unwrap_or(f64::NAN))
        .collect();
    let peak_mib = procs
        .iter()
        .map(|r| proc::status_kib(r.pid, "VmHWM").unwrap_or(0) as f64 / 1024.0)
        .collect();
    let known = procs
        .iter()
        .map(|r| {
            metric(
                &get(r.port, "/metrics"),
                "kubecast_known_objects{resource=\"pods\"}",
            )
        })
        .collect();

    let sent = bridges::churn::churn(api, n, Some(rate), seconds, base).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let all_arrived = || {
        let a = arrivals.lock().expect("arrivals");
        sent.keys().all(|rv| a.contains_key(rv))
    };
    while Instant::now() < deadline && !all_arrived() {
        tokio::time::sleep(every).await;
    }
    let churn_cpu = procs
        .iter()
        .zip(&cpu)
        .map(|(r, before)| proc::cpu_seconds(r.pid).unwrap_or(f64::NAN) - before)
        .collect();
    let mut delays: Vec<f64> = {
        let a = arrivals.lock().expect("arrivals");
        sent.iter()
            .filter_map(|(rv, at)| {
                a.get(rv)
                    .map(|(got, _)| got.duration_since(*at).as_secs_f64() * 1000.0)
            })
            .collect()
    };
    delays.sort_by(f64::total_cmp);
    if delays.len() < sent.len() {
        eprintln!(
            "shards: {} of {} changes never arrived",
            sent.len() - delays.len(),
            sent.len()
        );
    }

    let takeover_s = if replicas > 1 {
        let victim = procs.remove(0);
        let theirs = held(victim.port);
        let killed = Instant::now();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &victim.pid.to_string()])
            .status();
        let after =
            bridges::churn::churn(api, n, Some(rate), 10.0, base + (rate * seconds) as usize).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let a = arrivals.lock().expect("arrivals");
        let firsts: Vec<Option<f64>> = theirs
            .iter()
            .map(|s| {
                after
                    .iter()
                    .filter(|(_, at)| **at > killed)
                    .filter_map(|(rv, _)| a.get(rv))
                    .filter(|(_, shard)| shard == s)
                    .map(|(got, _)| got.duration_since(killed).as_secs_f64())
                    .min_by(f64::total_cmp)
            })
            .collect();
        let written = after.values().filter(|at| **at > killed).count();
        eprintln!(
            "shards: {replicas} replicas: kill -9 of one holding shards {theirs:?}: {written} changes written after it, first arrivals of its shards after {firsts:?} s"
        );
        firsts
            .into_iter()
            .collect::<Option<Vec<f64>>>()
            .and_then(|f| f.into_iter().max_by(f64::total_cmp))
    } else {
        None
    };
    for r in procs {
        bridges::stop(r.child).await;
    }
    reader.abort();
    let row = Row {
        replicas,
        shards,
        list_s,
        cpu,
        peak_mib,
        known,
        api_cpu,
        api_mib,
        churn_cpu,
        p50_ms: percentile(&delays, 0.5),
        p99_ms: percentile(&delays, 0.99),
        takeover_s,
    };
    eprintln!(
        "shards: {replicas} replicas, {shards} shards: list {:.2} s, CPU {:?} s, peak {:?} MiB, known {:?}, apiserver {:.2} s CPU {:.0} MiB; churn CPU {:?} s, delay p50 {:.1} ms p99 {:.1} ms; take-over {:?} s",
        row.list_s,
        row.cpu,
        row.peak_mib,
        row.known,
        row.api_cpu,
        row.api_mib,
        row.churn_cpu,
        row.p50_ms,
        row.p99_ms,
        row.takeover_s
    );
    row
}

fn list(v: &[f64], digits: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let reuse = args.get(1).filter(|a| !a.is_empty()).cloned();
    let rate: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100.0);
    let seconds: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(20.0);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        let client = stack.kube_client().await;
        let ns = reuse.clone().unwrap_or_else(|| unique_name("shards"));
        let pods = bridges::populated(&client, &ns, n).await;
        eprintln!("shards: namespace {ns}, {n} pods, {SHARDS} shards");
        let mut rows = Vec::new();
        // `REPLICASxSHARDS,...` picks some runs; default all four.
        let runs: Vec<(usize, u32)> = args
            .get(4)
            .map(|spec| {
                spec.split(',')
                    .filter_map(|r| r.split_once('x'))
                    .filter_map(|(r, s)| Some((r.parse().ok()?, s.parse().ok()?)))
                    .collect()
            })
            .unwrap_or_else(|| vec![(1, 1), (1, SHARDS), (2, SHARDS), (4, SHARDS)]);
        // The writes' numbers are new in every run (each writes its number into the Pod's
        // status): a write that repeated an earlier run's would change nothing.
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as usize);
        for (k, (replicas, shards)) in runs.into_iter().enumerate() {
            let base = epoch * 100_000 + k * 10_000;
            rows.push(run(&stack, &pods, &ns, n, replicas, shards, rate, seconds, base).await);
        }
        println!("| replicas | shards | list s | CPU s per replica (list) | peak RSS MiB per replica | known pods per replica | apiserver CPU s / RSS MiB (list) | CPU s per replica (churn {rate}/s, {seconds} s) | delay p50 / p99 ms | kill -9 to its shards publishing elsewhere |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in rows {
            println!(
                "| {} | {} | {:.2} | {} | {} | {} | {:.2} / {:.0} | {} | {:.1} / {:.1} | {} |",
                r.replicas,
                r.shards,
                r.list_s,
                list(&r.cpu, 2),
                list(&r.peak_mib, 0),
                list(&r.known, 0),
                r.api_cpu,
                r.api_mib,
                list(&r.churn_cpu, 2),
                r.p50_ms,
                r.p99_ms,
                r.takeover_s.map_or("—".to_string(), |s| format!("{s:.2} s")),
            );
        }
        if reuse.is_none() {
            support::pods::delete_each(&pods, (0..n).map(bridges::pod_name)).await;
        }
    });
}
