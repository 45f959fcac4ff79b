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

#[path = "shared/replay.rs"]
mod shared;

use std::time::Instant;

use shared::{PODS, events, replay, write};
use support::{Stack, unique_name};

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let events = events(n, "bench");
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
