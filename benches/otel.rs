//! Side by side: kubecast's OTLP sink (`shape: k8sobjects`, http/protobuf into a Collector of
//! the stack's build, which writes a file) and the Collector's own `k8sobjects` receiver
//! (contrib v0.111.0, writing its file directly), on one namespace of N realistic pods.
//!
//! 1. The initial list: kubecast (`initial_list: emit`) until the Collector wrote N records;
//!    the receiver in pull mode (its only mode that sends what exists) until it wrote N.
//!    Seconds, CPU seconds, peak resident memory of each process.
//! 2. Churn (status writes at RATE/s for SECONDS) with both watching: CPU per change.
//! 3. The same churn with each restarted half way — kubecast by kill -9 and started again
//!    with its state directory, the receiver by SIGTERM and started again (a rolling update)
//!    — then what each delivered of the changes written: missing, and duplicates.
//!
//! Prints a Markdown table for BENCHMARKS.md; nothing is asserted. Run through
//! `bench/run otel [N [NAMESPACE [SECONDS [RATE]]]]`.

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use support::otlp::{Collector, CollectorFile, K8sObjectsReceiver};
use support::{Stack, proc, unique_name};

/// Records in a file so far: occurrences of the k8sobjects attribute every record has,
/// counted in whole lines (each line is one request) from where the last count stopped.
struct Count {
    path: std::path::PathBuf,
    offset: u64,
    n: usize,
}

impl Count {
    fn of(file: &CollectorFile) -> Count {
        Count {
            path: file.path.clone(),
            offset: 0,
            n: 0,
        }
    }

    fn now(&mut self) -> usize {
        use std::io::{Read, Seek};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return self.n;
        };
        let mut buf = Vec::new();
        if f.seek(std::io::SeekFrom::Start(self.offset)).is_ok() && f.read_to_end(&mut buf).is_ok()
        {
            let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            self.n += memchr::memmem::find_iter(&buf[..whole], b"\"k8s.resource.name\"").count();
            self.offset += whole as u64;
        }
        self.n
    }
}

/// The resourceVersions of the pod records in a file, each as often as it was written.
fn versions(file: &CollectorFile) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for r in file.records() {
        if let Some(rv) = r.body["object"]["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
        {
            *out.entry(rv).or_default() += 1;
        }
    }
    out
}

/// Waits until `count` reaches `n`, or `limit`; the seconds it took.
async fn reach(count: &mut Count, n: usize, limit: Duration, what: &str) -> f64 {
    let started = Instant::now();
    while count.now() < n {
        assert!(
            started.elapsed() < limit,
            "{what}: {} of {n} records within {limit:?}",
            count.n
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed().as_secs_f64()
}

struct List {
    who: &'static str,
    seconds: f64,
    cpu: f64,
    peak_mib: f64,
}

fn kubecast_config(ns: &str, dir: &Path, endpoint: &str) -> String {
    format!(
        "cluster: bench\nwatch:\n  namespaces: [{ns}]\n  initial_list: emit\nstate:\n  dir: {}\nsinks:\n  out:\n    type: otlp\n    endpoint: {endpoint}\n    shape: k8sobjects\n",
        dir.join("state").display()
    )
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let reuse = args.get(1).cloned().filter(|a| a != "-");
    let seconds: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20.0);
    let rate: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(100.0);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        let client = stack.kube_client().await;
        let ns = reuse.unwrap_or_else(|| unique_name("otel"));
        let pods = bridges::populated(&client, &ns, n).await;
        eprintln!("otel: namespace {ns}");
        let dir = support::kubecast::scratch_dir("otel");
        let collector = Collector::start(&stack, &dir).await;
        let limit = Duration::from_secs(120 + n as u64 / 50);

        // 1. The initial list.
        let config = kubecast_config(&ns, &dir, &collector.http);
        let (mut kubecast, log) = bridges::spawn_kubecast(&stack, &dir, &config, "kubecast.log");
        let kpid = kubecast.id().expect("kubecast runs");
        let mut ours = Count::of(&collector.file);
        let took = reach(&mut ours, n, limit, "kubecast's list").await;
        let mut lists = vec![List { who: "kubecast (OTLP sink)", seconds: took, cpu: proc::cpu_seconds(kpid).unwrap_or(f64::NAN), peak_mib: peak(kpid) }];
        let pull = K8sObjectsReceiver::start(&stack, &dir, &ns, "pull", "pull.jsonl");
        let ppid = pull.pid();
        let took = reach(&mut Count::of(&pull.file), n, limit, "the receiver's pull").await;
        lists.push(List { who: "k8sobjects receiver (pull)", seconds: took, cpu: proc::cpu_seconds(ppid).unwrap_or(f64::NAN), peak_mib: peak(ppid) });
        drop(pull);

        // 2. Churn with both watching. The receiver watches from when it starts: writes
        // go until one reaches it.
        let watch = K8sObjectsReceiver::start(&stack, &dir, &ns, "watch", "watch.jsonl");
        let mut theirs = Count::of(&watch.file);
        let mut base = 0;
        let watch_started = Instant::now();
        while theirs.now() == 0 {
            base += bridges::churn::churn(&pods, 1, Some(4.0), 0.25, base).await.len().max(1);
        }
        let watch_ready = watch_started.elapsed().as_secs_f64();
        let wpid = watch.pid();
        let watch_start_peak = peak(wpid);
        reach(&mut ours, n + base, limit, "kubecast: the writes that reached the receiver").await;
        let (k0, w0) = (proc::cpu_seconds_fine(kpid), proc::cpu_seconds_fine(wpid));
        let (o0, t0) = (ours.now(), theirs.now());
        let written = bridges::churn::churn(&pods, 200, Some(rate), seconds, base).await.len();
        base += written;
        reach(&mut ours, o0 + written, limit, "kubecast's churn").await;
        reach(&mut theirs, t0 + written, limit, "the receiver's churn").await;
        let per_change = |cpu: f64| cpu * 1e6 / written as f64;
        let (k_us, w_us) = (per_change(proc::cpu_seconds_fine(kpid) - k0), per_change(proc::cpu_seconds_fine(wpid) - w0));
        let (k_peak, w_peak) = (peak(kpid), peak(wpid));

        // 3. Churn across a restart of each.
        let churn = {
            let pods = pods.clone();
            tokio::spawn(async move { bridges::churn::churn(&pods, 200, Some(rate), seconds, base).await })
        };
        tokio::time::sleep(Duration::from_secs_f64(seconds / 2.0)).await;
        let _ = kubecast.start_kill();
        let _ = kubecast.wait().await;
        let (kubecast, _) = bridges::spawn_kubecast(&stack, &dir, &config, "kubecast-2.log");
        let restarted_at = Instant::now();
        watch.stop();
        let watch = K8sObjectsReceiver::start(&stack, &dir, &ns, "watch", "watch.jsonl");
        let receiver_gap = restarted_at.elapsed().as_secs_f64();
        let truth: BTreeSet<u64> = churn.await.expect("the churn").into_keys().collect();
        // kubecast is done when it delivered every change; the receiver gets 10 s more.
        let started = Instant::now();
        while !{
            let v = versions(&collector.file);
            truth.iter().all(|rv| v.contains_key(rv))
        } && started.elapsed() < limit
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let delivered = |file: &CollectorFile| {
            let v = versions(file);
            let missing = truth.iter().filter(|rv| !v.contains_key(rv)).count();
            let dups: usize = truth.iter().filter_map(|rv| v.get(rv)).map(|n| n - 1).sum();
            (missing, dups)
        };
        let (k_missing, k_dups) = delivered(&collector.file);
        let (w_missing, w_dups) = delivered(&watch.file);
        bridges::stop(kubecast).await;
        drop(watch);
        eprintln!("otel: logs in {} ({})", dir.display(), log.display());

        println!("Initial list of {n} pods; churn of {written} status writes at {rate}/s over 200 pods.\n");
        println!("| who | list: seconds | list: CPU s | list: peak RSS | churn: CPU µs per change | churn: peak RSS |");
        println!("| --- | --- | --- | --- | --- | --- |");
        println!("| {} | {:.2} | {:.2} | {:.1} MiB | {k_us:.0} | {k_peak:.1} MiB |", lists[0].who, lists[0].seconds, lists[0].cpu, lists[0].peak_mib);
        println!("| {} | {:.2} | {:.2} | {:.1} MiB | — | — |", lists[1].who, lists[1].seconds, lists[1].cpu, lists[1].peak_mib);
        println!("| k8sobjects receiver (watch) | watching after {watch_ready:.2} (it lists everything for a resourceVersion and sends nothing) | — | {watch_start_peak:.1} MiB by then | {w_us:.0} | {w_peak:.1} MiB |");
        println!("\nAcross a restart during churn ({} changes written):\n", truth.len());
        println!("| who | restart | missing | duplicates |");
        println!("| --- | --- | --- | --- |");
        println!("| kubecast (OTLP sink, state directory) | kill -9, started again | {k_missing} | {k_dups} |");
        println!("| k8sobjects receiver (watch) | SIGTERM, started again ({receiver_gap:.1} s) | {w_missing} | {w_dups} |");
    });
}

fn peak(pid: u32) -> f64 {
    proc::status_kib(pid, "VmHWM").unwrap_or(0) as f64 / 1024.0
}
