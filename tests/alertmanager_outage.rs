//! An outage of every Alertmanager holds back nothing but alerts: with no routes (every
//! change goes to every sink) and an alert firing while both of the test's own Alertmanagers
//! are stopped, 12,000 pod changes later every one of them is in Kafka (more than the
//! Alertmanager sink's window of 10,000 unconfirmed events and its queue together), and the
//! alert reaches both Alertmanagers once they are back.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::alertmanager::{Alertmanager, Webhook, sink};
use support::consume::KafkaTopic;
use support::kubecast::Kubecast;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);
/// Pods changed side by side, and label changes of each: 12,000 changes.
const PODS: usize = 24;
const CHANGES_PER_POD: usize = 500;
/// How long Kafka may receive nothing new while changes are missing before the test calls
/// delivery stalled.
const STALL: Duration = Duration::from_secs(30);

/// Every built-in rule off; `bad` fires while a pod is labelled `state=bad`.
fn bad_rule() -> String {
    let off = [
        "restarts",
        "failed",
        "not_ready",
        "oom_killed",
        "oom_killed_gpu",
        "crash_loop_backoff",
        "image_pull_backoff",
        "unscheduled",
    ]
    .map(|r| format!("  {r}: {{enabled: false}}\n"))
    .concat();
    format!(
        "alerts:\n{off}  rules:\n    bad:\n      expr: 'metadata.labels.state == \"bad\"'\n      severity: critical\n"
    )
}

/// The id kubecast gives the change the apiserver answered with (`pod`).
fn change_id(pod: &serde_json::Value, kind: &str) -> String {
    format!(
        "{}:{}:{kind}",
        pod["metadata"]["uid"].as_str().unwrap_or_default(),
        pod["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
    )
}

/// Waits until every id of `truth` was read from `kafka`; fails when nothing new arrived for
/// [`STALL`] or `limit` passed, saying how many had arrived.
async fn every_change_in_kafka(kafka: &KafkaTopic, truth: &BTreeSet<String>, limit: Duration) {
    let started = Instant::now();
    let (mut seen, mut last_progress) = (0, Instant::now());
    loop {
        let records = kafka.records();
        let ids: BTreeSet<&str> = records.iter().map(|r| r.ce("id")).collect();
        let found = truth.iter().filter(|t| ids.contains(t.as_str())).count();
        if found == truth.len() {
            eprintln!(
                "all {found} changes in Kafka {:?} after the last one was made",
                started.elapsed()
            );
            return;
        }
        if found > seen {
            (seen, last_progress) = (found, Instant::now());
        }
        assert!(
            last_progress.elapsed() < STALL && started.elapsed() < limit,
            "delivery to Kafka stalled: {found} of {} changes arrived ({} records), none more for {:?}",
            truth.len(),
            records.len(),
            last_progress.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_alertmanager_down_and_an_alert_firing_twelve_thousand_changes_all_reach_kafka_and_the_alert_arrives_once_they_are_back()
 {
    let scene = Scene::new("am-outage").await;
    let hook = Webhook::start(&scene.dir).await;
    let mut am1 = Alertmanager::start(&scene.stack, &scene.dir, "am1", &hook, &[]).await;
    let mut am2 = Alertmanager::start(&scene.stack, &scene.dir, "am2", &hook, &[]).await;
    let topic = unique_name("am-outage");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let config = scene.config(
        &format!(
            "encoding: {{data: reference}}\nstate: {{dir: {}}}\n{}",
            scene.dir.join("state").display(),
            bad_rule()
        ),
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            sink("am", &[&am1, &am2], "2s"),
        ],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;

    // Both away, then an alert fires: the sink holds it unconfirmed.
    am1.stop().await;
    am2.stop().await;
    scene.pods.create("bad").await;
    scene.pods.label("bad", "state", "bad").await;
    let firing = kafka
        .wait_until("the firing alert in Kafka", LIMIT, |r| {
            r.iter().any(|r| r.ce("type") == "io.kubecast.alert.firing")
        })
        .await;
    kubecast.check(firing);

    let mut truth = BTreeSet::new();
    for i in 0..PODS {
        let pod = scene.pods.create(&format!("churn-{i}")).await;
        truth.insert(change_id(&pod, "added"));
    }
    let started = Instant::now();
    let changes = futures::future::join_all((0..PODS).map(|i| {
        let pods = &scene.pods;
        async move {
            let mut ids = Vec::with_capacity(CHANGES_PER_POD);
            for step in 0..CHANGES_PER_POD {
                let pod = pods
                    .label(&format!("churn-{i}"), "step", &step.to_string())
                    .await;
                ids.push(change_id(&pod, "modified"));
            }
            ids
        }
    }))
    .await;
    truth.extend(changes.into_iter().flatten());
    eprintln!(
        "{} label changes made in {:?}",
        PODS * CHANGES_PER_POD,
        started.elapsed()
    );
    assert_eq!(
        truth.len(),
        PODS + PODS * CHANGES_PER_POD,
        "distinct changes"
    );
    every_change_in_kafka(&kafka, &truth, Duration::from_secs(600)).await;
    assert!(kubecast.running(), "kubecast is still running");

    // Back: the alert that waited reaches both.
    am1.start_again().await;
    am2.start_again().await;
    for am in [&am1, &am2] {
        let held = am
            .wait_until("the alert that fired while it was away", LIMIT, |a| {
                a.iter().any(|a| a["labels"]["alertname"] == "bad")
            })
            .await;
        let bad: Vec<_> = held
            .iter()
            .filter(|a| a["labels"]["alertname"] == "bad")
            .collect();
        assert_eq!(bad.len(), 1, "{held:#?}");
        assert_eq!(bad[0]["labels"]["pod"], "bad");
    }
    drop(kubecast);
}
