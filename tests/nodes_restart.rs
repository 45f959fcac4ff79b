//! A rollout across simulated nodes while etcd is compacted and kube-apiserver restarted
//! (`scripts/stack compact`): kubecast's watches come back to `410 Gone`, it lists again and
//! emits the difference, and nothing is lost. What arrived in Kafka, replayed, is the
//! cluster's state at the end for Pods, ReplicaSets, the Deployment and Nodes; every pod a
//! poller saw on the way has its events, each one gone has its delete; `replay --verify`
//! finds every chain gapless.
//!
//! This is a test binary of its own because it restarts kube-apiserver; cargo runs test
//! binaries one after another, so no other test sees the restart.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use support::consume::{KafkaTopic, Record};
use support::kubecast::Kubecast;
use support::nodes::{POOL_LABEL, Pool};
use support::objects::{Objects, rv, uid};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(180);

/// The live objects at `path` (a list): uid to resourceVersion.
async fn live(objects: &Objects, path: &str) -> Option<BTreeMap<String, String>> {
    let list = objects.get(path).await?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .map(|o| (uid(o), rv(o)))
            .collect(),
    )
}

/// What is missing for the records to replay to `live`: a live object without an event at its
/// resourceVersion, or an object gone without its delete. Empty when nothing is.
fn missing(live: &BTreeMap<String, String>, records: &[Record]) -> Vec<String> {
    let ids: BTreeSet<&str> = records.iter().map(|r| r.ce("id")).collect();
    let uids: BTreeSet<&str> = ids.iter().filter_map(|id| id.split(':').next()).collect();
    let mut out = Vec::new();
    for (u, v) in live {
        let at = format!("{u}:{v}:");
        if !ids.iter().any(|id| id.starts_with(&at)) {
            out.push(format!("{u} at {v}"));
        }
    }
    for u in uids {
        if !live.contains_key(u) && !ids.contains(format!("{u}:deleted").as_str()) {
            out.push(format!("{u}:deleted"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_and_apiserver_restart_during_a_rollout_lose_nothing() {
    let scene = Scene::new("rollout-restart").await;
    let ns = scene.ns.clone();
    let pool_name = unique_name("restart-node");
    let prefix = unique_name("restart");
    let labels = format!("{POOL_LABEL}={pool_name}");
    let kinds = [
        ("pods", format!("/api/v1/namespaces/{ns}/pods")),
        (
            "replicasets.apps",
            format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
        ),
        (
            "deployments.apps",
            format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        ),
        ("nodes", format!("/api/v1/nodes?labelSelector={labels}")),
    ];
    let mut topics = Vec::new();
    for (resource, _) in &kinds {
        topics.push(KafkaTopic::create(&scene.stack, &format!("{prefix}.{resource}")).await);
    }
    let config = scene
        .config("", &[scene.kafka_sink("kafka", &format!("{prefix}.{{resource}}"), &[])])
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [pods, replicasets.apps, deployments.apps, {{resource: nodes, label_selector: '{labels}'}}]\n"),
        );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast
        .wait_for_log("list complete", kinds.len(), LIMIT)
        .await;
    let pool = Pool::create(&scene.client, &pool_name, 3, Duration::from_secs(5)).await;
    let objects = Objects::new(&scene.client);
    let web = format!("{}/web", kinds[2].1);
    let template = |image: &str| {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"nodeSelector": pool.node_selector(),
            "containers": [{"name": "c", "image": image}]}})
    };
    objects
        .create(
            &kinds[2].1,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}},
                "template": template("nginx:1.27")}}),
        )
        .await;
    let rolled_out = |image: &'static str| {
        let pods = kinds[0].1.clone();
        let objects = &objects;
        async move {
            let what = format!("10 Running pods of {image}");
            objects
                .wait_until(&pods, LIMIT, &what, |l| {
                    l.and_then(|l| l["items"].as_array()).is_some_and(|items| {
                        items.len() == 10
                            && items.iter().all(|p| {
                                p["spec"]["containers"][0]["image"] == image
                                    && p["status"]["phase"] == "Running"
                                    && p["metadata"]["deletionTimestamp"].is_null()
                            })
                    })
                })
                .await
        }
    };
    rolled_out("nginx:1.27").await;

    // A poller notes every pod it sees, through the restart as well.
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let poll = {
        let (seen, objects, path) = (
            seen.clone(),
            Objects::new(&scene.client),
            kinds[0].1.clone(),
        );
        tokio::spawn(async move {
            loop {
                if let Ok(list) = objects
                    .try_call("GET", &path, "application/json", None)
                    .await
                {
                    let uids = list["items"].as_array().into_iter().flatten().map(uid);
                    if let Ok(mut s) = seen.lock() {
                        s.extend(uids);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    objects
        .patch(&web, &json!({"spec": {"template": template("nginx:1.28")}}))
        .await;
    objects
        .wait_until(&web, LIMIT, "the rollout to be under way", |d| {
            d.is_some_and(|d| d["status"]["updatedReplicas"].as_u64().unwrap_or(0) >= 2)
        })
        .await;
    let revision = scene.stack.script(&["compact"]);
    eprintln!(
        "rollout-restart: compacted etcd to revision {} and restarted kube-apiserver",
        revision.trim()
    );
    rolled_out("nginx:1.28").await;
    poll.abort();

    for ((resource, path), topic) in kinds.iter().zip(&topics) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let now = live(&objects, path).await.unwrap_or_default();
            let gaps = missing(&now, &topic.records());
            if gaps.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{resource}: after {LIMIT:?}, Kafka still lacks {gaps:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let pods_seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let records = topics[0].records();
    let lost: Vec<&String> = pods_seen
        .iter()
        .filter(|u| !records.iter().any(|r| r.ce("id").starts_with(u.as_str())))
        .collect();
    assert!(
        lost.is_empty(),
        "pods the poller saw without an event in Kafka: {lost:?}"
    );
    assert!(
        kubecast.count_in_log("list complete") > kinds.len(),
        "kubecast never listed again after the compaction:\n{}",
        kubecast.log()
    );
    eprintln!(
        "rollout-restart: {} pods seen, each in Kafka",
        pods_seen.len()
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "kubecast did not stop cleanly:\n{log}");
    for (resource, _) in &kinds {
        let topic = format!("{prefix}.{resource}");
        let (code, out, err) = scene.replay(&topic, &["--verify"]);
        assert_eq!(code, Some(0), "replay --verify {topic}:\n{out}{err}");
    }
    pool.delete().await;
}
