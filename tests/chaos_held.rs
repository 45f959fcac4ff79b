//! Chaos: `kill -9` of kubecast while changes are held only in memory (`state.log:
//! when_behind`): one sink (Kafka) acknowledged them, the other (an HTTP receiver slow to
//! answer) has not, and the bound after which they would be written has not passed. The state
//! directory's log does not grow while they are made; after the restart every change the
//! independent observer saw reaches the HTTP sink's receiver, with its original id, and
//! nothing made up.
//!
//! The slow receiver is [`FakeReceiver`], named as the fake it is: no real receiver holds its
//! answers on demand. After the restart the sink points at the CloudEvents Go SDK's receiver.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use support::consume::KafkaTopic;
use support::kubecast::Kubecast;
use support::observer::{Observer, check_received};
use support::receiver::{FakeReceiver, GoReceiver, Script};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

/// Bytes of the state directory's log segments.
fn log_bytes(state: &Path) -> u64 {
    std::fs::read_dir(state.join("log"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn config(scene: &Scene, state: &Path, topic: &str, url: &str) -> String {
    scene.config(
        // Held for ten minutes and no periodic snapshot meanwhile: within the test, the
        // changes the receiver has not answered are only in memory.
        &format!(
            "state:\n  dir: {}\n  behind_ms: 600000\n  snapshot_interval_seconds: 600\n",
            state.display()
        ),
        &[
            scene.kafka_sink("kafka", topic, &[]),
            format!("  web:\n    type: http\n    url: '{url}'\n"),
        ],
    )
}

#[tokio::test]
async fn kill_9_while_changes_are_only_in_memory_loses_none_of_them() {
    let scene = Scene::new("chaos-held").await;
    let topic = unique_name("kc-held");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    // Answers after ten minutes: nothing it takes is acknowledged before the kill.
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], String::new()));
    let slow = FakeReceiver::start(Duration::from_secs(600), script).await;
    let state = scene.dir.join("state");
    let text = config(&scene, &state, &topic, &slow.url);
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    // The list's snapshot is written; what follows is held.
    let snapshot = state.join("snapshot.json");
    support::consume::wait_for(LIMIT, "the list's snapshot", || {
        snapshot.exists().then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no snapshot after the list:\n{}", kubecast.log()));
    let logged = log_bytes(&state);

    let names: Vec<String> = (0..8).map(|i| format!("held-{i}")).collect();
    for name in &names {
        scene.pods.create(name).await;
    }
    for name in &names {
        scene.pods.label(name, "step", "1").await;
    }
    scene.pods.delete(&names[0]).await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    // Kafka acknowledged every change: kubecast has them all, held for the slow receiver.
    kubecast.check(kafka.wait_for_ids(&truth, LIMIT).await);
    assert!(
        slow.accepted().is_empty(),
        "the slow receiver answered nothing"
    );
    assert_eq!(
        log_bytes(&state),
        logged,
        "the changes the receiver has not answered were not written:\n{}",
        kubecast.log()
    );
    let killed_log = kubecast.kill().await;

    let mut receiver = GoReceiver::start(&scene.stack).await;
    let text = config(&scene, &state, &topic, &receiver.url);
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    let events = kubecast.check(
        receiver
            .wait_until("every change at the receiver", LIMIT, |e| {
                let ids: BTreeSet<&str> = e.iter().map(|x| x.attr("id")).collect();
                truth.iter().all(|t| ids.contains(t.as_str()))
            })
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}\nbefore the kill:\n{killed_log}");
    // Only the namespace's pods: the observer's truth covers them all.
    let ids: Vec<&str> = events.iter().map(|e| e.attr("id")).collect();
    let dups = check_received(&truth, &ids, "the receiver");
    receiver.stop().await;
    println!(
        "chaos_held: {} changes held in memory at the kill, all delivered after it ({dups} duplicates, same ids)",
        truth.len()
    );
}
