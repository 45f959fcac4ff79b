//! How fast `kubecast replay` reads a large topic, against the local stack's real Kafka: N
//! `full` events of the fixture Pod (5 KB of data each; 1,000 pods with 100 linked changes
//! each at the default N) are written through kubecast's own Kafka sink, once in binary
//! and once in structured mode, then this build's binary replays them: JSON lines to
//! /dev/null, `--verify`, `--state-at`, `--html` (the report's size, and how long headless
//! Chromium takes to open it when it is installed), and with `--no-dedup`. Wall time,
//! events/s and peak resident memory (VmHWM, sampled until exit) per run. Each event's data
//! carries its own name, uid and resourceVersion, so consecutive versions of a pod differ as
//! status churn does in its resourceVersion. Prints a Markdown table; nothing asserted.
//!
//! Run through `bench/run replay [N]` (default 100000).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubecast::event::{Event, event_id};
use kubecast::model::ChangeKind;
use support::consume::create_topic;
use support::{Stack, deliver, proc, unique_name};

const PODS: usize = 1000;

/// N events of the fixture Pod over 1,000 pods, each pod's chain linked (`added`, then
/// `modified` events whose previous version is the one before).
fn events(n: usize) -> Vec<Arc<Event>> {
    let template = deliver::fixture_event();
    let data = String::from_utf8_lossy(&template.data).into_owned();
    let fixture: serde_json::Value = serde_json::from_str(&data).expect("the fixture is JSON");
    let field = |name: &str| {
        let value = fixture["metadata"][name]
            .as_str()
            .expect("the fixture's metadata");
        format!("\"{name}\":\"{value}\"")
    };
    let (rv_field, name_field, uid_field) = (field("resourceVersion"), field("name"), field("uid"));
    (0..n)
        .map(|i| {
            let mut e = template.clone();
            let pod = i % PODS;
            e.seq = i as u64 + 1;
            e.object.uid = format!("00000000-0000-0000-0000-{pod:012}");
            e.object.name = format!("checkout-{pod:06}");
            e.rv = format!("{}", 1_000_000 + i);
            e.prev_rv = if i < PODS {
                String::new()
            } else {
                format!("{}", 1_000_000 + i - PODS)
            };
            e.kind = if i < PODS {
                ChangeKind::Added
            } else {
                ChangeKind::Modified
            };
            e.id = event_id(&e.object.uid, &e.rv, e.kind);
            e.data = data
                .replace(&rv_field, &format!("\"resourceVersion\":\"{}\"", e.rv))
                .replace(&name_field, &format!("\"name\":\"{}\"", e.object.name))
                .replace(&uid_field, &format!("\"uid\":\"{}\"", e.object.uid))
                .into();
            Arc::new(e)
        })
        .collect()
}

/// Writes `events` to `topic` through kubecast's Kafka sink in `mode`.
async fn write(stack: &Stack, topic: &str, mode: &str, events: &[Arc<Event>]) {
    create_topic(stack, topic, 4).await;
    let text = format!(
        "cluster: bench\nsinks:\n  out:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n    mode: {mode}\n",
        stack.kafka_bootstrap
    );
    deliver::through_sink(topic, &text, events).await;
}

struct Row {
    label: String,
    seconds: f64,
    peak_mib: f64,
}

/// Runs `kubecast replay` with `args`, output to /dev/null.
fn replay(label: &str, stack: &Stack, topic: &str, args: &[&str]) -> Row {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubecast"))
        .args([
            "replay",
            "--brokers",
            &stack.kafka_bootstrap,
            "--topic",
            topic,
        ])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubecast replay");
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = proc::status_kib(child.id(), "VmHWM") {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("waiting for kubecast replay") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let seconds = started.elapsed().as_secs_f64();
    let err = child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    // `--verify` exits 0 here: the chains are complete.
    assert!(status.success(), "{label}: {status}: {err}");
    eprintln!("replay: {label}: {seconds:.2} s; {}", err.trim());
    Row {
        label: label.to_string(),
        seconds,
        peak_mib: peak as f64 / 1024.0,
    }
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let events = events(n);
    let stack = Stack::load();
    let binary = unique_name("replay-bench-bin");
    let structured = unique_name("replay-bench-str");
    let report = support::kubecast::scratch_dir("replay-bench").join("report.html");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        write(&stack, &binary, "binary", &events).await;
        write(&stack, &structured, "structured", &events).await;
    });
    let rows = [
        replay("binary mode → JSON lines", &stack, &binary, &[]),
        replay("structured mode → JSON lines", &stack, &structured, &[]),
        replay(
            "binary mode → JSON lines, --no-dedup",
            &stack,
            &binary,
            &["--no-dedup"],
        ),
        replay("binary mode, --verify", &stack, &binary, &["--verify"]),
        replay(
            "binary mode, --state-at now",
            &stack,
            &binary,
            &["--state-at", "0s"],
        ),
        replay(
            "binary mode, --html",
            &stack,
            &binary,
            &["--html", &report.display().to_string()],
        ),
    ];
    let size = std::fs::metadata(&report).map_or(0, |m| m.len());
    let opened = open_in_chromium(&report);
    println!(
        "{n} events of {} bytes of data each ({PODS} pods), 4 partitions, replayed by this build's binary.\n",
        events[0].data.len()
    );
    println!("| replay | seconds | events/s | peak RSS MiB |");
    println!("| --- | --- | --- | --- |");
    for r in &rows {
        println!(
            "| {} | {:.2} | {:.0} | {:.0} |",
            r.label,
            r.seconds,
            n as f64 / r.seconds,
            r.peak_mib
        );
    }
    println!(
        "\nThe `--html` report: {:.1} MB ({:.0} bytes per event); {}.",
        size as f64 / 1e6,
        size as f64 / n as f64,
        match opened {
            Some(seconds) => format!("headless Chromium loads and draws it in {seconds:.1} s"),
            None => "Chromium is not installed, not opened".to_string(),
        }
    );
}

/// Seconds headless Chromium takes to load `report` and run its script (`--dump-dom`
/// returns once the page has loaded); `None` without Chromium.
fn open_in_chromium(report: &std::path::Path) -> Option<f64> {
    let profile = report.with_extension("profile");
    let started = Instant::now();
    let url = format!("file://{}", report.display());
    let out = support::browser::chromium(&profile, &["--dump-dom"], &url).ok()?;
    let seconds = started.elapsed().as_secs_f64();
    let drawn = String::from_utf8_lossy(&out.stdout).contains("data-ready=\"true\"");
    assert!(
        drawn,
        "Chromium did not draw the report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(seconds)
}
