//! End to end, side by side: kubecast and the client-go baseline (bench/baseline-go, with
//! franz-go and with the CloudEvents SDK's sarama sender) each bridge the initial list of N
//! realistic pods from the local stack's real apiserver into its real Kafka, in the same run.
//! For each: seconds until the topic holds N records (every one acknowledged by the broker),
//! events/s, CPU seconds (user + system of the process), peak and final resident memory, then
//! its idle CPU with the N objects known and nothing changing (10 s, the live threads' CPU to
//! the nanosecond) and its threads.
//! The apiserver's own time to send the list is the physical limit, measured for each way of
//! asking (`curl`, best of three): one unpaginated LIST, pages of 500 one after the other, and
//! streamed (a watch with `sendInitialEvents`). kubecast runs once per way: `streaming_list:
//! on`, paginated lists (`streaming_list: off`, 500 a page, the next asked for while one is
//! handed on) and one LIST (`page_size` above the pod count). Prints a Markdown table for
//! BENCHMARKS.md; nothing is asserted. `BENCH_LISTS` (comma-separated: default,
//! streamed, paginated, one) runs only those of kubecast's rows (another build, through
//! `KUBECAST_TEST_BINARY`, may not know every setting).
//!
//! Run through `bench/run [N]` (it builds the baseline and brings the stack up).

#[path = "bridges/mod.rs"]
mod bridges;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use support::{Stack, proc, unique_name};
use tokio::process::Child;

/// `curl` of `path` on the stack's apiserver as the admin, JSON, its output piped.
fn curl(stack: &Stack, path: &str, args: &[&str]) -> std::process::Command {
    let pki = stack.dir.join("pki");
    let server = std::fs::read_to_string(&stack.kubeconfig)
        .expect("the kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
        .expect("the kubeconfig's server");
    let mut command = std::process::Command::new("curl");
    command
        .args(args)
        // Not curl's own user agent: the apiserver pretty-prints JSON for it.
        .args(["-A", "kubecast-bench", "-H", "Accept: application/json"])
        .arg("--cacert")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .arg(format!("{server}{path}"))
        .stdout(std::process::Stdio::piped());
    command
}

/// Seconds the apiserver needs to send the whole list: `curl` to /dev/null, best of three.
fn list_seconds(stack: &Stack, ns: &str) -> f64 {
    let path = format!("/api/v1/namespaces/{ns}/pods");
    (0..3)
        .map(|_| {
            let out = curl(
                stack,
                &path,
                &[
                    "-sS",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{time_total} %{size_download}",
                ],
            )
            .output()
            .expect("running curl");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let secs: f64 = text
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN);
            eprintln!("e2e: curl of the list: {text} (seconds, bytes)");
            secs
        })
        .fold(f64::INFINITY, f64::min)
}

/// Seconds the apiserver needs to send the list in pages of `limit`, asked one after the
/// other (each page's `curl` time summed: the apiserver's time, not the reader's), best of
/// three.
fn paginated_list_seconds(stack: &Stack, ns: &str, limit: usize) -> f64 {
    let page = std::env::temp_dir().join(format!("kubecast-e2e-page-{}", std::process::id()));
    let best = (0..3)
        .map(|_| {
            let mut token: Option<String> = None;
            let mut secs = 0.0;
            let mut pages = 0;
            loop {
                // Encoded as the watch encodes its own list requests.
                let mut query = form_urlencoded::Serializer::new(String::new());
                query.append_pair("limit", &limit.to_string());
                if let Some(t) = &token {
                    query.append_pair("continue", t);
                }
                let path = format!("/api/v1/namespaces/{ns}/pods?{}", query.finish());
                let target = page.display().to_string();
                let out = curl(stack, &path, &["-sS", "-o", &target, "-w", "%{time_total}"])
                    .output()
                    .expect("running curl");
                secs += String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<f64>()
                    .unwrap_or(f64::NAN);
                pages += 1;
                let body: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&page).expect("the page"))
                        .expect("a JSON page");
                token = body["metadata"]["continue"]
                    .as_str()
                    .filter(|t| !t.is_empty())
                    .map(str::to_string);
                if token.is_none() {
                    break;
                }
            }
            eprintln!("e2e: curl of the list in {pages} pages of {limit}: {secs:.3} s");
            secs
        })
        .fold(f64::INFINITY, f64::min);
    let _ = std::fs::remove_file(page);
    best
}

/// Seconds the apiserver needs to send the same list streamed (a watch with
/// `sendInitialEvents=true`, as kubecast lists by default), up to the bookmark that ends the
/// initial events: `curl` read line by line, best of three.
fn streamed_list_seconds(stack: &Stack, ns: &str) -> f64 {
    use std::io::BufRead;
    let path = format!(
        "/api/v1/namespaces/{ns}/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=120"
    );
    (0..3)
        .map(|_| {
            let started = Instant::now();
            let mut child = curl(stack, &path, &["-sS", "-N"])
                .spawn()
                .expect("running curl");
            let out = child.stdout.take().expect("curl's output");
            let end = std::io::BufReader::with_capacity(1 << 20, out)
                .split(b'\n')
                .map_while(Result::ok)
                .any(|line| {
                    line.starts_with(br#"{"type":"BOOKMARK""#)
                        && line.windows(18).any(|w| w == b"initial-events-end")
                });
            let secs = started.elapsed().as_secs_f64();
            let _ = child.kill();
            let _ = child.wait();
            assert!(end, "the streamed list of {ns} ended without its bookmark");
            eprintln!("e2e: curl of the streamed list: {secs:.3} s");
            secs
        })
        .fold(f64::INFINITY, f64::min)
}

/// How long a bridge is watched idle after its list.
const IDLE: Duration = Duration::from_secs(10);

struct Row {
    bridge: String,
    seconds: f64,
    cpu: f64,
    rss_kib: u64,
    peak_kib: u64,
    /// CPU ms per second after the list, nothing changing.
    idle_ms_per_s: f64,
    threads: u64,
}

/// Runs one bridge until `topic` holds `n` records; returns its figures.
async fn run(
    bridge: &str,
    mut child: Child,
    stack: &Stack,
    topic: &str,
    n: usize,
    log: &Path,
) -> Row {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .set("group.id", unique_name("e2e"))
        .create()
        .expect("a Kafka consumer");
    let pid = child.id().expect("a running child");
    let started = Instant::now();
    let limit = Duration::from_secs(120 + n as u64 / 50);
    let what = format!("delivering {n} records");
    let every = Duration::from_millis(50);
    bridges::wait_while_running(bridge, &what, &mut child, log, limit, every, || {
        bridges::records(&consumer, topic) >= n as i64
    })
    .await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = proc::cpu_seconds(pid).unwrap_or(f64::NAN);
    let rss_kib = proc::status_kib(pid, "VmRSS").unwrap_or(0);
    let peak_kib = proc::status_kib(pid, "VmHWM").unwrap_or(0);
    let idle = proc::cpu_seconds_fine(pid);
    tokio::time::sleep(IDLE).await;
    let idle_ms_per_s = (proc::cpu_seconds_fine(pid) - idle) * 1000.0 / IDLE.as_secs_f64();
    let threads = proc::threads(pid).unwrap_or(0);
    bridges::stop(child).await;
    let row = Row {
        bridge: bridge.to_string(),
        seconds,
        cpu,
        rss_kib,
        peak_kib,
        idle_ms_per_s,
        threads,
    };
    eprintln!(
        "e2e: {bridge}: {n} records in {seconds:.2} s, CPU {cpu:.2} s, RSS {} KiB, peak {} KiB, idle {idle_ms_per_s:.2} ms/s, {threads} threads",
        row.rss_kib, row.peak_kib
    );
    row
}

fn main() {
    // `N [NAMESPACE]`: with a namespace, the N pods there are used (made first if it holds
    // none) and left there for the next run.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let reuse = args.get(1).cloned();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        let client = stack.kube_client().await;
        let ns = reuse.clone().unwrap_or_else(|| unique_name("e2e"));
        // A fresh namespace is populated; a reused one only when it holds fewer than n.
        let pods = bridges::populated(&client, &ns, n).await;
        eprintln!("e2e: namespace {ns}");
        let list = list_seconds(&stack, &ns);
        let paged = paginated_list_seconds(&stack, &ns, 500);
        let streamed = streamed_list_seconds(&stack, &ns);
        let dir = support::kubecast::scratch_dir("e2e");
        let mut rows = Vec::new();

        let topic = unique_name("e2e-kubecast");
        let sink = format!(
            "    type: kafka\n    brokers: {}\n    topic: {topic}\n",
            stack.kafka_bootstrap
        );
        let lists = std::env::var("BENCH_LISTS").ok();
        let wanted = |key: &str| lists.as_deref().is_none_or(|l| l.split(',').any(|k| k == key));
        if wanted("default") {
            let (child, log) = bridges::kubecast(&stack, &dir, &ns, &sink);
            rows.push(run("kubecast (default)", child, &stack, &topic, n, &log).await);
        }

        // Each way of listing, named.
        for (key, label, watch) in [
            ("streamed", "streamed", "  streaming_list: on\n"),
            ("paginated", "paginated", "  streaming_list: off\n"),
            ("one", "one LIST", "  streaming_list: off\n  page_size: 1000000\n"),
        ] {
            if !wanted(key) {
                continue;
            }
            let slug = label.replace(' ', "-");
            let topic = unique_name(&format!("e2e-kubecast-{slug}"));
            let here = dir.join(&slug);
            std::fs::create_dir_all(&here).expect("a scratch directory");
            let config = format!(
                "cluster: bench\nwatch:\n  namespaces: [{ns}]\n  initial_list: emit\n{watch}state:\n  dir: {}\n  fsync: always\nsinks:\n  out:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n",
                here.join("state").display(),
                stack.kafka_bootstrap
            );
            let (child, log) = bridges::spawn_kubecast(&stack, &here, &config, "kubecast.log");
            rows.push(run(&format!("kubecast ({label})"), child, &stack, &topic, n, &log).await);
        }

        for sender in ["franz", "sarama"] {
            let topic = unique_name(&format!("e2e-baseline-{sender}"));
            let (child, log) = bridges::baseline(&stack, &dir, &ns, &topic, sender);
            rows.push(run(&format!("baseline ({sender})"), child, &stack, &topic, n, &log).await);
        }

        println!("Initial list of {n} pods into Kafka; the apiserver sends the list in {list:.2} s in one LIST, {paged:.2} s in pages of 500, {streamed:.2} s streamed (curl, best of 3).\n");
        println!("| bridge | seconds | x one LIST | x pages of 500 | x streamed list time | events/s | CPU s | CPU ms per 1,000 events | RSS after | peak RSS | idle CPU ms/s, {n} known | threads |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for r in &rows {
            println!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.2} | {:.0} | {:.1} MiB | {:.1} MiB | {:.2} | {} |",
                r.bridge,
                r.seconds,
                r.seconds / list,
                r.seconds / paged,
                r.seconds / streamed,
                n as f64 / r.seconds,
                r.cpu,
                r.cpu * 1000.0 / (n as f64 / 1000.0),
                r.rss_kib as f64 / 1024.0,
                r.peak_kib as f64 / 1024.0,
                r.idle_ms_per_s,
                r.threads
            );
        }

        if reuse.is_some() {
            return;
        }
        support::pods::delete_each(&pods, (0..n).map(bridges::pod_name)).await;
    });
}
