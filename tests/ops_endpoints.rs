//! The operations endpoint against the real stack: `/metrics` passes `promtool check
//! metrics` and its counters match the events kubecast wrote; `/readyz` is 503 with the
//! reason before the initial list and while a sink is down, 200 otherwise; `/healthz` is 200
//! throughout; SIGTERM during churn exits 0 within the grace period, and a restart loses
//! nothing.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::churn::Churn;
use support::consume::KafkaTopic;
use support::http::{free_port, get, wait_for};
use support::kubecast::{Kubecast, scratch_dir};
use support::observer::{Observer, check_received};
use support::scene::{Scene, file_events, file_sink};
use support::{Stack, unique_name};

const LIMIT: Duration = Duration::from_secs(60);

/// The value of the sample `name{labels}` in a text exposition (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    support::http::sample(text, series).unwrap_or(0.0)
}

fn promtool_accepts(text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running promtool (Debian's prometheus package; scripts/test installs it)");
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool ran");
    assert!(
        out.status.success(),
        "promtool check metrics refused the output:\n{}{}\n--- the output:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn metrics_pass_promtool_and_count_exactly_the_events_written() {
    let scene = Scene::new("ops-metrics").await;
    let port = free_port();
    let out = scene.dir.join("events.jsonl");
    let config = scene.config("", &[file_sink("out", &out)]);
    let address = format!("127.0.0.1:{port}");
    let kubecast = Kubecast::start_with(
        &scene.stack,
        &scene.dir,
        &config,
        &["--metrics-address", &address],
    );
    wait_for(port, "/readyz", LIMIT, "readiness", |code, _| code == 200).await;
    for name in ["a", "b", "c"] {
        scene.pods.create(name).await;
    }
    scene.pods.label("a", "tier", "web").await;
    scene.pods.delete("b").await;
    // Settled: the last change (b's removal) is written, every event written to the file is
    // counted as delivered, nothing held; no pod changes after this, so the file is final.
    let (_, text) = wait_for(
        port,
        "/metrics",
        LIMIT,
        "every event delivered",
        |_, body| {
            let events = file_events(&out);
            let lines = events.len() as f64;
            events
                .iter()
                .any(|e| e["type"] == "io.k8s.core.v1.pod.deleted")
                && sample(
                    body,
                    "kubecast_sink_events_total{sink=\"out\",outcome=\"delivered\"}",
                ) == lines
                && sample(body, "kubecast_sink_held_events{sink=\"out\"}") == 0.0
        },
    )
    .await;
    promtool_accepts(&text);
    let mut by_type: BTreeMap<String, f64> = BTreeMap::new();
    for e in file_events(&out) {
        let t = e["type"]
            .as_str()
            .unwrap_or_default()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_string();
        *by_type.entry(t).or_default() += 1.0;
    }
    for kind in ["added", "modified", "deleted"] {
        assert_eq!(
            sample(
                &text,
                &format!("kubecast_events_observed_total{{type=\"{kind}\"}}")
            ),
            by_type.get(kind).copied().unwrap_or(0.0),
            "{kind} events: the file has {by_type:?}; the metrics say:\n{text}"
        );
    }
    assert_eq!(by_type.get("added"), Some(&3.0), "{by_type:?}");
    assert_eq!(
        sample(&text, "kubecast_sink_connected{sink=\"out\"}"),
        1.0,
        "{text}"
    );
    assert!(
        sample(&text, "kubecast_delivery_delay_seconds_count{sink=\"out\"}") >= 5.0,
        "{text}"
    );
    assert!(text.contains("kubecast_build_info{version=\""), "{text}");
    assert_eq!(get(port, "/healthz").await, Ok((200, "ok\n".to_string())));
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

/// A kubeconfig for an apiserver that is not there.
fn unreachable_kubeconfig(stack: &Stack, dir: &std::path::Path) -> String {
    let path = dir.join("unreachable.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        free_port(),
        stack.dir.join("pki/ca.crt").display()
    );
    std::fs::write(&path, text).expect("writing a kubeconfig");
    path.display().to_string()
}

#[tokio::test]
async fn readyz_waits_for_the_initial_list_and_says_why() {
    let stack = Stack::load();
    let dir = scratch_dir("ops-list");
    let port = free_port();
    let config = format!(
        "cluster: c\nkubernetes:\n  kubeconfig: {}\nmetrics:\n  address: 127.0.0.1:{port}\nsinks:\n  out:\n    type: file\n    path: {}\n",
        unreachable_kubeconfig(&stack, &dir),
        dir.join("out.jsonl").display()
    );
    let kubecast = Kubecast::start(&stack, &dir, &config);
    wait_for(port, "/healthz", LIMIT, "liveness", |code, _| code == 200).await;
    let (code, body) = kubecast.check(get(port, "/readyz").await);
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("initial list of pods in all namespaces is not done"),
        "{body}"
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn readyz_is_503_naming_a_sink_while_it_is_down_and_200_when_it_is_back() {
    let scene = Scene::new("ops-ready").await;
    let port = free_port();
    let prefix = unique_name("kc-ready");
    let config = scene.config(
        &format!("metrics:\n  address: 127.0.0.1:{port}\n"),
        &[scene.mqtt_sink("edge", &prefix, &format!("{prefix}/{{name}}"), &[])],
    );
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    wait_for(port, "/readyz", LIMIT, "readiness", |code, _| code == 200).await;
    scene.stack.script(&["stop", "mosquitto"]);
    let (_, body) = wait_for(
        port,
        "/readyz",
        LIMIT,
        "unreadiness with Mosquitto down",
        |code, _| code == 503,
    )
    .await;
    assert!(body.contains("sink `edge` is not connected"), "{body}");
    let (_, metrics) = kubecast.check(get(port, "/metrics").await);
    assert_eq!(
        sample(&metrics, "kubecast_sink_connected{sink=\"edge\"}"),
        0.0,
        "{metrics}"
    );
    scene.stack.script(&["start", "mosquitto"]);
    wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness after Mosquitto is back",
        |code, _| code == 200,
    )
    .await;
    assert_eq!(kubecast.check(get(port, "/healthz").await).0, 200);
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn sigterm_during_churn_exits_0_within_the_grace_period_and_a_restart_loses_nothing() {
    let scene = Scene::new("ops-term").await;
    let topic = unique_name("kc-term");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let grace = 5;
    let config = scene.config(
        &format!(
            "state:\n  dir: {}\nshutdown:\n  grace_seconds: {grace}\n",
            scene.dir.join("state").display()
        ),
        &[scene.kafka_sink("kafka", &topic, &[])],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let churn = Churn::start(&scene.client, &scene.ns, 20, Duration::from_millis(20));
    kubecast.check(
        kafka
            .wait_until("events during churn", LIMIT, |r| r.len() >= 30)
            .await,
    );
    let stopping = Instant::now();
    let (code, log) = kubecast.stop(Duration::from_secs(grace + 10)).await;
    let took = stopping.elapsed();
    assert_eq!(code, Some(0), "a clean exit on SIGTERM:\n{log}");
    assert!(
        took < Duration::from_secs(grace + 5),
        "exited {took:?} after SIGTERM; the grace period is {grace} s:\n{log}"
    );
    // Churn goes on while kubecast is away; the restart brings everything.
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let ops = churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: std::collections::BTreeSet<String> =
        observer.changes().iter().map(|c| c.id()).collect();
    let records = kubecast.check(kafka.wait_for_ids(&truth, LIMIT).await);
    let dups = check_received(
        &truth,
        &records.iter().map(|r| r.ce("id")).collect::<Vec<_>>(),
        "Kafka",
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    println!(
        "ops: SIGTERM exit after {took:?} (grace {grace} s); {ops} API operations, {} changes, lost 0, {dups} duplicates (same ids)",
        truth.len()
    );
}
