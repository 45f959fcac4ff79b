//! The per-event path, in process: a watch line's bytes -> parsed Pod -> classified change ->
//! CloudEvent -> what the sink hands its client (Kafka: headers and value; MQTT 5: user
//! properties and payload; structured: the JSON document). The Pod is a real apiserver
//! object (benches/fixtures/pod-watch-line.json: server-side applied with two containers,
//! env, probes, managedFields, and a kubelet-like status). Each data mode, binary and
//! structured. Figures go to BENCHMARKS.md ("Per-event path").
//!
//! `cargo bench --bench per_event`

use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kubecast::classify::Classifier;
use kubecast::config::{DataMode, InitialList, RedactConfig};
use kubecast::event::{Encoder, Event};
use kubecast::sinks::kafka::headers_of;
use kubecast::watch::{WatchLine, parse_watch_line};

const FIXTURE: &str = include_str!("fixtures/pod-watch-line.json");

/// Two watch lines of the same pod with different resourceVersions, so that feeding them in
/// turn makes every line a `modified` change (the same resourceVersion twice emits nothing).
fn lines() -> [Bytes; 2] {
    let line = FIXTURE.trim();
    let rv = serde_json::from_str::<serde_json::Value>(line).expect("the fixture is JSON")
        ["object"]["metadata"]["resourceVersion"]
        .as_str()
        .expect("the fixture has a resourceVersion")
        .to_string();
    let other = line.replace(
        &format!("\"resourceVersion\":\"{rv}\""),
        &format!("\"resourceVersion\":\"{rv}0\""),
    );
    assert_ne!(
        other, line,
        "the fixture's resourceVersion was not replaced"
    );
    [Bytes::from(line.to_string()), Bytes::from(other)]
}

#[derive(Clone, Copy)]
enum Wire {
    /// Kafka binary mode: `ce_` headers, data as the value.
    KafkaBinary,
    /// MQTT 5 binary mode: user properties, data as the payload.
    MqttBinary,
    /// Structured mode (Kafka or MQTT 3.1.1): one JSON document.
    Structured,
}

/// One event through the whole path; returns the bytes handed to the client, so the work
/// is not optimised away.
fn one(line: &Bytes, classifier: &mut Classifier, encoder: &Encoder, wire: Wire) -> usize {
    let pod = match parse_watch_line(line.clone()) {
        Ok(WatchLine::Modified(pod)) => pod,
        other => panic!("the fixture is not a MODIFIED line: {other:?}"),
    };
    let change = classifier
        .applied(&kubecast::classify::Scope::all_pods(), pod)
        .expect("a new resourceVersion is a change");
    let (event, error) = encoder.encode(&change);
    assert!(error.is_none(), "{error:?}");
    wire_bytes(&event, wire)
}

fn wire_bytes(event: &Event, wire: Wire) -> usize {
    match wire {
        Wire::KafkaBinary => {
            let headers = headers_of(event);
            std::hint::black_box(&headers);
            event.data.len()
        }
        Wire::MqttBinary => {
            let properties: Vec<(String, String)> = event
                .attributes()
                .into_iter()
                .filter(|(k, _)| *k != "datacontenttype")
                .map(|(k, v)| (k.to_string(), v.into_owned()))
                .collect();
            properties.len() + event.data.len()
        }
        Wire::Structured => event.structured_json().len(),
    }
}

fn bench(c: &mut Criterion) {
    let lines = lines();
    let mut group = c.benchmark_group("per_event");
    group
        .measurement_time(Duration::from_secs(6))
        .throughput(Throughput::Elements(1));
    let cases = [
        ("full/kafka_binary", DataMode::Full, Wire::KafkaBinary),
        ("full/mqtt_binary", DataMode::Full, Wire::MqttBinary),
        ("full/structured", DataMode::Full, Wire::Structured),
        ("summary/kafka_binary", DataMode::Summary, Wire::KafkaBinary),
        ("summary/structured", DataMode::Summary, Wire::Structured),
        (
            "reference/kafka_binary",
            DataMode::Reference,
            Wire::KafkaBinary,
        ),
    ];
    for (name, mode, wire) in cases {
        let encoder = Encoder::new("bench", mode, RedactConfig::default());
        let mut classifier = Classifier::new(InitialList::Emit);
        let mut turn = 0;
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                turn ^= 1;
                one(&lines[turn], &mut classifier, &encoder, wire)
            })
        });
    }
    // The stages alone, for the profile: parsing the line, and `full` data.
    group.bench_function(BenchmarkId::from_parameter("stage/parse_watch_line"), |b| {
        b.iter(|| parse_watch_line(lines[0].clone()).expect("parses"))
    });
    let pod = match parse_watch_line(lines[0].clone()) {
        Ok(WatchLine::Modified(pod)) => pod,
        other => panic!("the fixture is not a MODIFIED line: {other:?}"),
    };
    let full = Encoder::new("bench", DataMode::Full, RedactConfig::default());
    group.bench_function(BenchmarkId::from_parameter("stage/encode_full"), |b| {
        let mut classifier = Classifier::new(InitialList::Emit);
        let change = classifier
            .applied(&kubecast::classify::Scope::all_pods(), pod.clone())
            .expect("a change");
        b.iter(|| full.encode(&change))
    });
    group.finish();
    eprintln!(
        "per_event: the fixture's watch line is {} bytes",
        lines[0].len()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
