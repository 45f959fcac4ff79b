//! How fast each sink delivers on its own, against the local stack's real Kafka and
//! Mosquitto: N `full` events of the fixture Pod (5 KB of data each, one topic per pod for
//! MQTT, 1,000 pods) are pushed into a sink's queue as fast as it takes them, and the clock
//! stops when the sink has reported the last one delivered (Kafka: its delivery report;
//! MQTT: its PUBACK). The apiserver is not involved: this isolates the sink, which the
//! end-to-end runs cannot (there the apiserver sends at most a few thousand pods a second).
//! Also CPU seconds of this process over the run (the sink's tasks and librdkafka's threads;
//! the events are built before the clock starts). Prints a Markdown table; nothing asserted.
//!
//! Run through `bench/run sinks [N]` (default 50000).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use kubecast::event::Event;
use support::{Stack, deliver, proc, unique_name};

/// N events of the fixture Pod in `full` mode, numbered 1..=N, over 1,000 pod names.
fn events(n: usize) -> Vec<Arc<Event>> {
    let template = deliver::fixture_event();
    (1..=n)
        .map(|i| {
            let mut e = template.clone();
            e.seq = i as u64;
            e.rv = format!("{}", 1_000_000 + i);
            e.id = format!("{}-{}", e.object.uid, e.rv);
            e.object.name = format!("checkout-{:06}", i % 1000);
            Arc::new(e)
        })
        .collect()
}

struct Row {
    sink: String,
    seconds: f64,
    cpu: f64,
}

/// Pushes `events` through the sink described by `sink` (YAML of one sink named `out`,
/// indented by four spaces) and waits for the last report.
async fn run(label: &str, sink: &str, events: &[Arc<Event>]) -> Row {
    let text = format!("cluster: bench\nsinks:\n  out:\n{sink}");
    let pid = std::process::id();
    let cpu0 = proc::cpu_seconds(pid).unwrap_or(f64::NAN);
    let seconds = deliver::through_sink(label, &text, events)
        .await
        .as_secs_f64();
    let cpu = proc::cpu_seconds(pid).unwrap_or(f64::NAN) - cpu0;
    eprintln!(
        "sink_rate: {label}: {} events in {seconds:.2} s ({:.0}/s), CPU {cpu:.2} s",
        events.len(),
        events.len() as f64 / seconds
    );
    Row {
        sink: label.to_string(),
        seconds,
        cpu,
    }
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
        let mqtt = format!(
            "    type: mqtt\n    url: mqtt://{}:{}\n",
            stack.mqtt_host, stack.mqtt_port
        );
        let kafka = |topic: &str| {
            format!(
                "    type: kafka\n    brokers: {}\n    topic: {topic}\n",
                stack.kafka_bootstrap
            )
        };
        let cases = [
            (
                "Kafka (defaults)".to_string(),
                kafka(&unique_name("sink-rate")),
            ),
            (
                "MQTT 5 at QoS 1 (defaults: in_flight 100)".to_string(),
                mqtt.clone(),
            ),
            (
                "MQTT 5 at QoS 1, in_flight 1000".to_string(),
                format!("{mqtt}    in_flight: 1000\n"),
            ),
            (
                "MQTT 3.1.1 at QoS 1 (structured)".to_string(),
                format!("{mqtt}    protocol: v311\n"),
            ),
        ];
        let mut rows = Vec::new();
        for (label, sink) in &cases {
            rows.push(run(label, sink, &events).await);
        }
        println!(
            "{n} events of {} bytes of data each, pushed straight into one sink.\n",
            events[0].data.len()
        );
        println!("| sink | seconds | events/s | CPU s | CPU µs per event |");
        println!("| --- | --- | --- | --- | --- |");
        for r in &rows {
            println!(
                "| {} | {:.2} | {:.0} | {:.2} | {:.0} |",
                r.sink,
                r.seconds,
                n as f64 / r.seconds,
                r.cpu,
                r.cpu * 1e6 / n as f64
            );
        }
    });
}
