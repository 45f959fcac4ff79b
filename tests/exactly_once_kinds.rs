//! The exactly-once Kafka sink with several kinds through `kill -9`: one replica without a
//! state directory, killed ten times at random while Pods and ConfigMaps churn. Independent
//! observers (their own watches, one per kind) record the truth; in the end a
//! `read_committed` consumer holds every change of both kinds exactly once: the checkpoint's
//! positions and known state hold every kind.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use support::churn::Churn;
use support::consume::{KafkaTopic, wait_for};
use support::kubecast::Kubecast;
use support::objects::{Objects, churn_configmaps, uid};
use support::observer::Observer;
use support::scene::{Scene, exactly_once};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const KILLS: usize = 10;
const SLOTS: usize = 20;

#[tokio::test]
async fn ten_kill_9s_leave_every_change_of_every_kind_exactly_once_for_read_committed() {
    let scene = Scene::new("eos-kinds").await;
    let (stack, ns) = (&scene.stack, scene.ns.clone());
    let topic = unique_name("kc-eos-kinds");
    let committed = KafkaTopic::create(stack, &topic).await;
    let objects = Objects::new(&scene.client);
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    for i in 0..5 {
        objects
            .create(&cms, &json!({"metadata": {"name": format!("still-{i}")}}))
            .await;
    }
    let pods_seen = Observer::start(&scene.client, &ns).await;
    let cms_seen = Observer::start_for::<ConfigMap>(&scene.client, &ns).await;
    let eos = exactly_once("eos-kinds");
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    let config = scene
        .config("", &[scene.kafka_sink("kafka", &topic, &eos)])
        .replace("watch:\n", "watch:\n  resources: [pods, configmaps]\n");
    let kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.check(
        committed
            .wait_until("the still configmaps", LIMIT, |r| r.len() >= 5)
            .await,
    );

    let pod_churn = Churn::start(&scene.client, &ns, 10, Duration::ZERO);
    let stop = Arc::new(AtomicBool::new(false));
    let cm_churn = churn_configmaps(&scene.client, &ns, SLOTS, Duration::ZERO, stop.clone());
    let (kubecast, logs) = kubecast
        .kill_at_random(
            stack,
            &scene.dir,
            &config,
            KILLS,
            "took over the exactly-once sink",
            |_, _| {},
        )
        .await;
    stop.store(true, Ordering::Relaxed);
    let _ = cm_churn.await;
    let ops = pod_churn.stop().await;

    // Markers of both kinds: once the observers saw them, they have every earlier change.
    pods_seen.catch_up(&scene.pods, LIMIT).await;
    let marker = objects
        .create(&cms, &json!({"metadata": {"name": unique_name("marker")}}))
        .await;
    let marker_uid = uid(&marker);
    let caught = wait_for(LIMIT, "the configmap observer", || {
        cms_seen
            .changes()
            .iter()
            .any(|c| c.uid == marker_uid)
            .then_some(())
    })
    .await;
    assert!(
        caught.is_some(),
        "the configmap observer never saw its marker"
    );
    let want: BTreeSet<String> = pods_seen
        .changes()
        .iter()
        .chain(cms_seen.changes().iter())
        .map(|c| c.id())
        .collect();
    let records = kubecast.check(committed.wait_for_ids(&want, LIMIT).await);
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");

    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &records {
        *times.entry(r.ce("id")).or_default() += 1;
    }
    let duplicated: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "read_committed saw these more than once: {duplicated:?}\nlogs of the killed runs:\n{}",
        logs.join("\n----\n")
    );
    let phantom: Vec<_> = times.keys().filter(|id| !want.contains(**id)).collect();
    assert!(
        phantom.is_empty(),
        "changes the apiserver never reported: {phantom:?}"
    );
    assert_eq!(times.len(), want.len(), "every observed change once");
    let kinds: BTreeSet<&str> = records.iter().map(|r| r.ce("k8skind")).collect();
    assert_eq!(kinds, BTreeSet::from(["ConfigMap", "Pod"]));
    println!(
        "exactly_once kinds: {KILLS} kills, {ops} pod operations, {} changes of Pods and ConfigMaps observed; read_committed {} records (0 duplicates, 0 lost)",
        want.len(),
        records.len()
    );
}
