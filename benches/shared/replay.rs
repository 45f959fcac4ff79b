//! What the replay benches share: a topic of N linked events of the fixture Pod written
//! through kubecast's own Kafka sink, and one `kubecast replay` run timed with its peak
//! memory.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubecast::event::{Event, event_id};
use kubecast::model::ChangeKind;

use super::support::consume::create_topic;
use super::support::kubecast::replay_command;
use super::support::{Stack, deliver, proc};

pub const PODS: usize = 1000;

/// N events of the fixture Pod over 1,000 pods of cluster `cluster`, each pod's chain
/// linked (`added`, then `modified` events whose previous version is the one before).
pub fn events(n: usize, cluster: &str) -> Vec<Arc<Event>> {
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
            e.source = e
                .source
                .replacen("k8s://bench/", &format!("k8s://{cluster}/"), 1);
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
pub async fn write(stack: &Stack, topic: &str, mode: &str, events: &[Arc<Event>]) {
    create_topic(stack, topic, 4).await;
    append(stack, topic, mode, events).await;
}

/// Writes `events` to the existing `topic` through kubecast's Kafka sink in `mode`.
pub async fn append(stack: &Stack, topic: &str, mode: &str, events: &[Arc<Event>]) {
    let text = format!(
        "cluster: bench\nsinks:\n  out:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n    mode: {mode}\n",
        stack.kafka_bootstrap
    );
    deliver::through_sink(topic, &text, events).await;
}

pub struct Row {
    pub label: String,
    pub seconds: f64,
    pub peak_mib: f64,
}

/// Runs `kubecast replay` on `topic` (a name or a pattern) with `args`, output to
/// /dev/null: wall time and peak resident memory.
pub fn replay(label: &str, stack: &Stack, topic: &str, args: &[&str]) -> Row {
    let started = Instant::now();
    let mut child = replay_command(stack, topic)
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
