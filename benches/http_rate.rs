//! How fast the HTTP sink delivers on its own into the CloudEvents Go SDK's receiver on
//! loopback (`scripts/go/ce-receiver -quiet`, which validates nothing and prints only a
//! count): N `full` events of a 9 KB pod (the fixture Pod with a 4 KB annotation), 1,000
//! objects, pushed into the sink's queue as fast as it takes them; the clock stops at the
//! last event's 2xx. Binary mode with `in_flight` 1, 16 and 64, structured, batch and batch
//! with gzip. CPU seconds of this process (the sink) and of the receiver over each run.
//! Prints a Markdown table; nothing asserted.
//!
//! Run through `bench/run http [N]` (default 50000).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use kubecast::event::Event;
use support::receiver::GoReceiver;
use support::{Stack, deliver, proc};

/// N events of a 9 KB pod in `full` mode, numbered 1..=N, over 1,000 objects.
fn events(n: usize) -> Vec<Arc<Event>> {
    let template = deliver::fixture_event();
    let mut data: serde_json::Value =
        serde_json::from_slice(&template.data).expect("the fixture's data is JSON");
    data["metadata"]["annotations"]["example.com/notes"] =
        serde_json::Value::String("n".repeat(4096));
    let data = bytes::Bytes::from(serde_json::to_vec(&data).expect("JSON"));
    (1..=n)
        .map(|i| {
            let mut e = template.clone();
            e.seq = i as u64;
            e.object.uid = format!("00000000-0000-0000-0000-{:012}", i % 1000);
            e.rv = format!("{}", 1_000_000 + i);
            e.id = format!("{}:{}:modified", e.object.uid, e.rv);
            e.object.name = format!("checkout-{:06}", i % 1000);
            e.data = data.clone();
            Arc::new(e)
        })
        .collect()
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(50_000);
    let events = events(n);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let stack = Stack::load();
        let receiver = GoReceiver::start_quiet(&stack).await;
        let rpid = receiver.pid();
        let http = |extra: &str| format!("    type: http\n    url: '{}'\n{extra}", receiver.url);
        let cases = [
            ("binary, in_flight 1", http("    in_flight: 1\n")),
            ("binary, in_flight 16 (default)", http("")),
            ("binary, in_flight 64", http("    in_flight: 64\n")),
            ("structured, in_flight 16", http("    mode: structured\n")),
            ("batch (100 events, 1 MiB), in_flight 16", http("    mode: batch\n")),
            ("batch, gzip", http("    mode: batch\n    compression: gzip\n")),
        ];
        println!("{n} events of {} bytes of data each, 1,000 objects, into the Go SDK receiver.\n", events[0].data.len());
        println!("| mode | seconds | events/s | sink CPU s | sink CPU ms per 1,000 events | receiver CPU s |");
        println!("| --- | --- | --- | --- | --- | --- |");
        for (label, sink) in &cases {
            let text = format!("cluster: bench\nsinks:\n  out:\n{sink}");
            let (cpu0, r0) = (proc::cpu_seconds(std::process::id()).unwrap_or(f64::NAN), proc::cpu_seconds(rpid).unwrap_or(f64::NAN));
            let seconds = deliver::through_sink(label, &text, &events).await.as_secs_f64();
            let cpu = proc::cpu_seconds(std::process::id()).unwrap_or(f64::NAN) - cpu0;
            let rcpu = proc::cpu_seconds(rpid).unwrap_or(f64::NAN) - r0;
            eprintln!("http_rate: {label}: {n} events in {seconds:.2} s");
            println!(
                "| {label} | {seconds:.2} | {:.0} | {cpu:.2} | {:.0} | {rcpu:.2} |",
                n as f64 / seconds,
                cpu * 1e6 / n as f64
            );
        }
    });
}
