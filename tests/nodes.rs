//! kubecast on a cluster that behaves like production: simulated nodes (the stack's kwok
//! plays their kubelets), the real kube-scheduler binding pods to them, and the real
//! controllers, node lifecycle and taint eviction among them. Each test has a pool of nodes
//! of its own (support::nodes), so they run side by side.
//!
//! - A Deployment rolled out across the nodes and deleted arrives complete for Pods,
//!   ReplicaSets, the Deployment, Nodes and core Events, each against an independent watch,
//!   and `kubecast replay --verify` finds every chain gapless.
//! - A node whose kubelet stops heartbeating goes `Unknown`; `node_not_ready` fires at its
//!   `for`, the node's pods are evicted and rescheduled, and once the node is back their
//!   deletes arrive and the alert resolves.
//! - A route whose change predicate leaves out heartbeat times passes every real change of a
//!   node and none of its heartbeats (README, "Nodes without their heartbeats").

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use serde_json::{Value, json};
use support::consume::{KafkaTopic, wait_for};
use support::kubecast::Kubecast;
use support::nodes::{Pool, ready};
use support::objects::{Objects, uid};
use support::observer::{Observer, check_received};
use support::scene::{Scene, file_events, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

/// A Deployment of `replicas` pods of `image` on `pool`'s nodes, evicted 5 s after their node
/// becomes unreachable (instead of the default 300 s).
fn deployment(pool: &Pool, replicas: u32, image: &str) -> Value {
    let toleration = |key: &str| json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "nodeSelector": pool.node_selector(),
                "tolerations": [toleration("node.kubernetes.io/unreachable"), toleration("node.kubernetes.io/not-ready")],
                "containers": [{"name": "c", "image": image, "env": [{"name": "TOKEN", "value": "s3cr3t"}]}]}}}})
}

/// Waits until the Deployment at `path` has rolled out: every replica updated and available,
/// and no pod of an older template left.
async fn rolled_out(objects: &Objects, path: &str, replicas: u64) {
    let what = format!("{path} to roll out {replicas} replicas");
    objects
        .wait_until(path, LIMIT, &what, |d| {
            d.is_some_and(|d| {
                let s = &d["status"];
                s["observedGeneration"] == d["metadata"]["generation"]
                    && s["updatedReplicas"].as_u64() == Some(replicas)
                    && s["availableReplicas"].as_u64() == Some(replicas)
                    && s["replicas"].as_u64() == Some(replicas)
            })
        })
        .await;
}

/// The pods of namespace `ns` as the apiserver has them now.
async fn pods(objects: &Objects, ns: &str) -> Vec<Value> {
    let list = objects.get(&format!("/api/v1/namespaces/{ns}/pods")).await;
    list.and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn ids(observer: &Observer) -> BTreeSet<String> {
    observer.changes().iter().map(|c| c.id()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_across_simulated_nodes_arrives_complete_for_every_kind_with_gapless_chains() {
    let scene = Scene::new("rollout").await;
    let ns = scene.ns.clone();
    let pool_name = unique_name("rollout-node");
    let prefix = unique_name("rollout");
    let kinds = [
        ("pods", "pods"),
        ("replicasets.apps", "replicasets"),
        ("deployments.apps", "deployments"),
        ("events", "events"),
        ("nodes", "nodes"),
    ];
    let mut topics = Vec::new();
    for (resource, _) in kinds {
        topics.push(KafkaTopic::create(&scene.stack, &format!("{prefix}.{resource}")).await);
    }
    let labels = format!("{}={pool_name}", support::nodes::POOL_LABEL);
    let config = scene
        .config(
            "encoding: {data: full}\n",
            &[scene.kafka_sink("kafka", &format!("{prefix}.{{resource}}"), &[])],
        )
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [pods, replicasets.apps, deployments.apps, events, {{resource: nodes, label_selector: '{labels}'}}]\n"),
        );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast
        .wait_for_log("list complete", kinds.len(), LIMIT)
        .await;
    let observers = [
        Observer::start_for::<Pod>(&scene.client, &ns).await,
        Observer::start_for::<ReplicaSet>(&scene.client, &ns).await,
        Observer::start_for::<Deployment>(&scene.client, &ns).await,
        Observer::start_for::<Event>(&scene.client, &ns).await,
        Observer::start_cluster::<Node>(&scene.client, &labels).await,
    ];

    // Three nodes heartbeating every 5 s, so Nodes change all through the rollout.
    let pool = Pool::create(&scene.client, &pool_name, 3, Duration::from_secs(5)).await;
    let objects = Objects::new(&scene.client);
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let web = format!("{deployments}/web");
    objects
        .create(&deployments, &deployment(&pool, 6, "nginx:1.27"))
        .await;
    rolled_out(&objects, &web, 6).await;
    let running = pods(&objects, &ns).await;
    let nodes: BTreeSet<&str> = running
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str())
        .collect();
    assert!(
        running.iter().all(|p| p["status"]["phase"] == "Running") && nodes.len() > 1,
        "the scheduler spreads 6 Running pods over the pool: {nodes:?}"
    );
    objects
        .patch(&web, &json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.28"}]}}}}))
        .await;
    rolled_out(&objects, &web, 6).await;
    let pods_path = format!("/api/v1/namespaces/{ns}/pods");
    objects
        .wait_until(&pods_path, LIMIT, "the old pods to be gone", |l| {
            l.and_then(|l| l["items"].as_array()).is_some_and(|items| {
                items.len() == 6
                    && items
                        .iter()
                        .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.28")
            })
        })
        .await;
    objects.delete(&web).await;
    objects
        .wait_until(&pods_path, LIMIT, "every pod to be gone", |l| {
            l.and_then(|l| l["items"].as_array())
                .is_some_and(Vec::is_empty)
        })
        .await;

    // Every change each independent watch saw arrived, and nothing else did.
    for (((resource, kind), topic), observer) in kinds.iter().zip(&topics).zip(&observers) {
        let truth = ids(observer);
        assert!(truth.len() > 2, "the observer of {kind} saw only {truth:?}");
        let records = kubecast.check(topic.wait_for_ids(&truth, LIMIT).await);
        let received: Vec<String> = records.iter().map(|r| r.ce("id").to_string()).collect();
        let seen = wait_for(
            LIMIT,
            &format!("the observer of {kind} to see what Kafka holds"),
            || {
                let now = ids(observer);
                received.iter().all(|id| now.contains(id)).then_some(now)
            },
        )
        .await
        .unwrap_or_else(|| ids(observer));
        let refs: Vec<&str> = received.iter().map(String::as_str).collect();
        check_received(&seen, &refs, &format!("topic {prefix}.{resource}"));
        eprintln!(
            "rollout: {resource}: {} changes, every one in Kafka",
            truth.len()
        );
    }
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "kubecast did not stop cleanly:\n{log}");
    for (resource, _) in kinds {
        let topic = format!("{prefix}.{resource}");
        let (code, out, err) = scene.replay(&topic, &["--verify"]);
        assert_eq!(code, Some(0), "replay --verify {topic}:\n{out}{err}");
    }
    pool.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_heartbeating_fires_node_not_ready_at_its_for_and_its_evicted_pods_deletes_arrive()
 {
    let scene = Scene::new("node-down").await;
    let ns = scene.ns.clone();
    let pool_name = unique_name("down-node");
    let path = scene.dir.join("events.jsonl");
    let labels = format!("{}={pool_name}", support::nodes::POOL_LABEL);
    let config = scene
        .config(
            "alerts:\n  node_not_ready: {for: 20s, keep_firing_for: 2s}\n",
            &[file_sink("file", &path)],
        )
        .replace(
            "watch:\n",
            &format!(
                "watch:\n  resources: [pods, {{resource: nodes, label_selector: '{labels}'}}]\n"
            ),
        );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 2, LIMIT).await;
    let pool = Pool::create(&scene.client, &pool_name, 2, Duration::from_secs(10)).await;
    let objects = Objects::new(&scene.client);
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let web = format!("{deployments}/web");
    objects
        .create(&deployments, &deployment(&pool, 4, "nginx:1.27"))
        .await;
    rolled_out(&objects, &web, 4).await;
    let before = pods(&objects, &ns).await;
    let victim = before[0]["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let evicted: Vec<String> = before
        .iter()
        .filter(|p| p["spec"]["nodeName"] == victim.as_str())
        .map(uid)
        .collect();

    // The kubelet stops: the node lifecycle controller marks the node Unknown after its grace
    // period, the alert fires `for` later, and taint eviction evicts the node's pods.
    pool.heartbeat(&victim, false).await;
    pool.wait_node(&victim, "Unknown", LIMIT, |n| ready(n) == Some("Unknown"))
        .await;
    let node = objects
        .get(&format!("/api/v1/nodes/{victim}"))
        .await
        .unwrap_or_default();
    let since = node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or_default()
        .to_string();
    let alert = |status: &'static str| {
        let path = path.clone();
        let victim = victim.clone();
        move || {
            file_events(&path).into_iter().find(|e| {
                e["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("io.kubecast.alert."))
                    && e["k8sname"] == victim.as_str()
                    && e["data"]["rule"] == "node_not_ready"
                    && e["data"]["status"] == status
            })
        }
    };
    let fired = wait_for(LIMIT, "node_not_ready to fire", alert("firing"))
        .await
        .unwrap_or_else(|| panic!("node_not_ready did not fire for {victim} within {LIMIT:?}"));
    let at = |t: &str| -> jiff::Timestamp { t.parse().unwrap_or_else(|e| panic!("time {t}: {e}")) };
    let after = at(fired["time"].as_str().unwrap_or_default()).duration_since(at(&since));
    assert!(
        after >= jiff::SignedDuration::from_secs(19)
            && after <= jiff::SignedDuration::from_secs(35),
        "node_not_ready fired {after:?} after the node went Unknown at {since}; its `for` is 20s"
    );
    rolled_out(&objects, &web, 4).await;

    // The kubelet comes back: the evicted pods finish terminating and their deletes arrive.
    pool.heartbeat(&victim, true).await;
    let deletes: BTreeSet<String> = evicted.iter().map(|u| format!("{u}:deleted")).collect();
    let arrived = wait_for(LIMIT, "the evicted pods' deletes", || {
        let have: BTreeSet<String> = file_events(&path)
            .iter()
            .filter_map(|e| e["id"].as_str().map(str::to_string))
            .collect();
        deletes.is_subset(&have).then_some(())
    })
    .await;
    assert!(
        arrived.is_some(),
        "the deletes of the pods evicted from {victim} ({deletes:?}) did not arrive"
    );
    wait_for(LIMIT, "node_not_ready to resolve", alert("resolved"))
        .await
        .unwrap_or_else(|| panic!("node_not_ready did not resolve for {victim} within {LIMIT:?}"));
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "kubecast did not stop cleanly:\n{log}");
    pool.delete().await;
}

/// A node's status without what changes on every heartbeat: its conditions' heartbeat times
/// and the resourceVersion.
fn without_heartbeat(node: &Value) -> Value {
    let mut n = node.clone();
    n["metadata"]["resourceVersion"] = Value::Null;
    for c in n["status"]["conditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        c["lastHeartbeatTime"] = Value::Null;
    }
    n
}

/// How many of `events`' node changes differ from the version before them only in
/// heartbeat times.
fn heartbeats_in(events: &[Value]) -> usize {
    let data: std::collections::HashMap<&str, Value> = events
        .iter()
        .filter_map(|e| Some((e["k8srv"].as_str()?, without_heartbeat(&e["data"]))))
        .collect();
    events
        .iter()
        .filter(|e| e["type"] == "io.k8s.core.v1.node.modified")
        .filter(|e| {
            let prev = data.get(e["k8sprevrv"].as_str().unwrap_or_default());
            prev.is_some_and(|p| *p == without_heartbeat(&e["data"]))
        })
        .count()
}

/// The route of README's "Nodes without their heartbeats".
const NO_HEARTBEATS: &str = "[spec, labels, annotations, conditions, status.capacity, status.allocatable, status.addresses, status.nodeInfo]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_node_heartbeats_passes_every_real_change_of_a_node_and_no_heartbeat() {
    let scene = Scene::new("heartbeats").await;
    let pool_name = unique_name("beat-node");
    let labels = format!("{}={pool_name}", support::nodes::POOL_LABEL);
    let (all, quiet) = (scene.dir.join("all.jsonl"), scene.dir.join("quiet.jsonl"));
    let config = scene
        .config(
            &format!("encoding: {{data: full}}\nroutes:\n  all: {{sinks: [all]}}\n  quiet: {{sinks: [quiet], changes: {NO_HEARTBEATS}}}\n"),
            &[file_sink("all", &all), file_sink("quiet", &quiet)],
        )
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [{{resource: nodes, label_selector: '{labels}'}}]\n"),
        );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    // One node reporting its status every second, as 300 kubelets' 5-minute reports would.
    let pool = Pool::create(&scene.client, &pool_name, 1, Duration::from_secs(1)).await;
    let node = pool.nodes[0].clone();
    let modified = |path: &std::path::Path| {
        file_events(path)
            .into_iter()
            .filter(|e| e["type"] == "io.k8s.core.v1.node.modified")
            .collect::<Vec<_>>()
    };
    // Ten versions that differ from the one before only in heartbeat times (a node's first
    // changes, until it is Ready, are real ones).
    wait_for(LIMIT, "ten heartbeats", || {
        (heartbeats_in(&file_events(&all)) >= 10).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("node {node} did not heartbeat ten times within {LIMIT:?}"));
    // A real change among the heartbeats: a label.
    let objects = Objects::new(&scene.client);
    let labelled = objects
        .patch(
            &format!("/api/v1/nodes/{node}"),
            &json!({"metadata": {"labels": {"tier": "edge"}}}),
        )
        .await;
    let rv = labelled["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    wait_for(LIMIT, "the label change on the quiet route", || {
        modified(&quiet)
            .iter()
            .any(|e| e["k8srv"] == rv.as_str())
            .then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the quiet route never passed the label change at {rv}"));

    // Every version the quiet route passed differs from the one before it (in the unfiltered
    // sink) in more than heartbeat times; every version it dropped differs in nothing else.
    let every = modified(&all);
    let versions: std::collections::HashMap<String, Value> = file_events(&all)
        .iter()
        .filter_map(|e| {
            Some((
                e["k8srv"].as_str()?.to_string(),
                without_heartbeat(&e["data"]),
            ))
        })
        .collect();
    let by_rv = |rv: &str| versions.get(rv);
    let passed: BTreeSet<String> = modified(&quiet)
        .iter()
        .filter_map(|e| e["k8srv"].as_str().map(str::to_string))
        .collect();
    let mut heartbeats = 0;
    for e in &every {
        let prev = by_rv(e["k8sprevrv"].as_str().unwrap_or_default());
        let real = prev.is_none_or(|p| *p != without_heartbeat(&e["data"]));
        let rv = e["k8srv"].as_str().unwrap_or_default();
        assert_eq!(
            passed.contains(rv),
            real,
            "version {rv} of {node}: real change {real}, passed by the route {}",
            passed.contains(rv)
        );
        heartbeats += usize::from(!real);
    }
    assert!(
        heartbeats >= 10,
        "only {heartbeats} heartbeats among {} changes",
        every.len()
    );
    eprintln!(
        "heartbeats: {} node changes, {heartbeats} of them heartbeats only, {} passed the route",
        every.len(),
        passed.len()
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "kubecast did not stop cleanly:\n{log}");
    pool.delete().await;
}
