//! Every kind through the same pipeline, against the real apiserver and controllers: a
//! Deployment scaled by the real deployment and replicaset controllers arrives with its
//! ReplicaSets, Pods and the controllers' Events; a Node (cluster-scoped) is created, turns
//! not Ready and is deleted; a custom resource is waited for until its CRD exists and its
//! objects are deleted when the CRD goes; a custom resource whose watched version stops being
//! served is followed to the version still served, with no delete. Each with the event
//! contract of its kind and gapless chains per object.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use support::http::{free_port, wait_for};
use support::objects::{Objects, rv, uid};
use support::observer::Observer;
use support::scene::{InProcess, Scene, file_events, file_sink};
use support::{NO_SCHEDULER, unique_name};

const LIMIT: Duration = Duration::from_secs(90);

/// Waits until the file sink at `path` holds events that `done` accepts.
async fn events_until(
    path: &std::path::Path,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let events = file_events(path);
        if done(&events) {
            return events;
        }
        if tokio::time::Instant::now() >= deadline {
            let seen: Vec<String> = events
                .iter()
                .map(|e| format!("{} {}", e["type"], e["subject"]))
                .collect();
            panic!(
                "timed out after {LIMIT:?} waiting for {what}; events so far:\n{}",
                seen.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until kubecast has listed every resource (and its sinks are connected): changes
/// made from now on arrive as changes.
async fn ready(port: u16) {
    wait_for(port, "/readyz", LIMIT, "kubecast ready", |c, _| c == 200).await;
}

fn s<'a>(e: &'a Value, attr: &str) -> &'a str {
    e[attr].as_str().unwrap_or_default()
}

/// Events per object (by uid), in order.
fn by_object(events: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in events {
        out.entry(s(e, "k8suid").to_string()).or_default().push(e);
    }
    out
}

/// Each object's chain links: its first event has no previous version, every later one
/// names the one before, and nothing comes twice.
fn assert_gapless(events: &[Value]) {
    for (uid, chain) in by_object(events) {
        let mut last = String::new();
        for e in chain {
            assert_eq!(s(e, "k8sprevrv"), last, "a gap in the chain of {uid}: {e}");
            last = s(e, "k8srv").to_string();
        }
    }
}

/// Every event's data follows the schema its `dataschema` names (shipped in `schemas/`).
fn follow_their_schemas(events: &[Value]) {
    for e in events {
        support::schema::assert_follows(
            s(e, "dataschema"),
            &e["data"],
            &format!("{} {}", s(e, "type"), s(e, "subject")),
        );
    }
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| s(e, "type") == ty).collect()
}

#[tokio::test]
async fn a_deployment_scaled_by_the_real_controllers_arrives_with_its_replica_sets_pods_and_events()
{
    let scene = Scene::new("kinds-deploy").await;
    let ns = scene.ns.clone();
    let path = scene.dir.join("events.jsonl");
    let config = scene.config("", &[file_sink("file", &path)]).replace(
        "watch:\n",
        "watch:\n  resources: [deployments.apps, rs, pods, events]\n",
    );
    let kubecast = InProcess::start(&scene, &config);
    let objects = Objects::new(&scene.client);
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let d = objects
        .create(
            &deployments,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27",
                            "env": [{"name": "TOKEN", "value": "s3cr3t"}]}]}}}}),
        )
        .await;
    let web = format!("{deployments}/web");
    let pods_of = |n: usize| {
        move |events: &[Value]| {
            let added = of_type(events, "io.k8s.core.v1.pod.added").len();
            let deleted = of_type(events, "io.k8s.core.v1.pod.deleted").len();
            added - deleted.min(added) == n
        }
    };
    events_until(&path, "the controllers' first pod", pods_of(1)).await;
    objects.patch(&web, &json!({"spec": {"replicas": 3}})).await;
    events_until(&path, "three pods", pods_of(3)).await;
    objects.patch(&web, &json!({"spec": {"replicas": 1}})).await;
    events_until(&path, "back to one pod", pods_of(1)).await;
    objects.delete(&web).await;
    let events = events_until(
        &path,
        "the deployment, its replica sets and pods deleted",
        |ev| {
            let gone = |kind: &str| {
                let added = ev
                    .iter()
                    .filter(|e| s(e, "type") == format!("{kind}.added"))
                    .count();
                let deleted = ev
                    .iter()
                    .filter(|e| s(e, "type") == format!("{kind}.deleted"))
                    .count();
                added > 0 && added == deleted
            };
            gone("io.k8s.apps.v1.deployment")
                && gone("io.k8s.apps.v1.replicaset")
                && gone("io.k8s.core.v1.pod")
        },
    )
    .await;
    kubecast.stop(Duration::from_secs(20)).await;

    assert_gapless(&events);
    follow_their_schemas(&events);
    let deployment: Vec<&Value> = events
        .iter()
        .filter(|e| s(e, "k8suid") == uid(&d))
        .collect();
    for e in &deployment {
        assert_eq!(
            s(e, "source"),
            format!("k8s://test/apis/apps/v1/namespaces/{ns}/deployments")
        );
        assert_eq!(s(e, "subject"), format!("{ns}/web"));
        assert_eq!(
            (s(e, "k8skind"), s(e, "k8sapiversion")),
            ("Deployment", "apps/v1")
        );
        assert_eq!(
            s(e, "dataschema"),
            "urn:kubecast:schema:deployment.v1.apps-full:v1"
        );
    }
    let first = deployment.first().expect("the deployment's events");
    assert_eq!(s(first, "type"), "io.k8s.apps.v1.deployment.added");
    assert_eq!(
        first["data"]["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"], "<redacted>",
        "env values in a pod template are redacted"
    );
    assert!(first["data"]["metadata"].get("managedFields").is_none());
    assert!(
        deployment
            .iter()
            .any(|e| e["data"]["spec"]["replicas"] == 3),
        "the scale to 3 is among the deployment's changes"
    );
    let pods_created = of_type(&events, "io.k8s.core.v1.pod.added");
    assert_eq!(
        pods_created.len(),
        3,
        "the replicaset controller created three pods"
    );
    for p in pods_created {
        assert_eq!((s(p, "k8skind"), s(p, "k8sapiversion")), ("Pod", "v1"));
        assert_eq!(
            s(p, "source"),
            format!("k8s://test/api/v1/namespaces/{ns}/pods")
        );
    }
    let rs = of_type(&events, "io.k8s.apps.v1.replicaset.added");
    assert!(!rs.is_empty());
    assert_eq!(s(rs[0], "k8skind"), "ReplicaSet");
    let reasons: Vec<&str> = of_type(&events, "io.k8s.core.v1.event.added")
        .iter()
        .map(|e| e["data"]["reason"].as_str().unwrap_or_default())
        .collect();
    for reason in ["ScalingReplicaSet", "SuccessfulCreate", "SuccessfulDelete"] {
        assert!(
            reasons.contains(&reason),
            "no {reason} Event among {reasons:?}"
        );
    }
    let event = of_type(&events, "io.k8s.core.v1.event.added")[0];
    assert_eq!(
        (s(event, "k8skind"), s(event, "k8sapiversion")),
        ("Event", "v1")
    );
    assert_eq!(
        s(event, "source"),
        format!("k8s://test/api/v1/namespaces/{ns}/events")
    );
}

#[tokio::test]
async fn a_node_is_cluster_scoped_its_own_subject_and_its_ready_flip_arrives() {
    let scene = Scene::new("kinds-node").await;
    let path = scene.dir.join("events.jsonl");
    let label = unique_name("node-test");
    // Nodes are cluster-wide: this test's carry a label of its own.
    let port = free_port();
    let config = format!(
        "cluster: test\nwatch:\n  resources: [{{resource: no, label_selector: 'kubecast-test={label}'}}]\nencoding: {{data: summary}}\nmetrics: {{address: '127.0.0.1:{port}'}}\nsinks:\n{}",
        file_sink("file", &path)
    );
    let kubecast = InProcess::start(&scene, &config);
    ready(port).await;
    // The node lifecycle controller changes a Node too (its `not-ready` taint): the truth is an
    // independent watch of the test's nodes.
    let observer =
        Observer::start_cluster::<Node>(&scene.client, &format!("kubecast-test={label}")).await;
    let objects = Objects::new(&scene.client);
    let name = unique_name("node");
    let node = objects
        .create(
            "/api/v1/nodes",
            &json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubecast-test": label}},
                "spec": {"taints": [{"key": "example.com/test", "effect": "NoSchedule"}]}}),
        )
        .await;
    let at = format!("/api/v1/nodes/{name}");
    let mut not_ready_rv = String::new();
    for ready in ["True", "False"] {
        not_ready_rv = rv(&objects
            .patch(
                &format!("{at}/status"),
                &json!({"status": {"conditions": [{"type": "Ready", "status": ready,
                    "reason": if ready == "True" { "KubeletReady" } else { "KubeletNotReady" },
                    "message": "set by the test", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                    "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
            )
            .await);
    }
    objects.delete(&at).await;
    let events = events_until(&path, "the node's delete", |ev| {
        !of_type(ev, "io.k8s.core.v1.node.deleted").is_empty()
    })
    .await;
    kubecast.stop(Duration::from_secs(20)).await;

    assert_gapless(&events);
    assert!(
        events.iter().all(|e| s(e, "k8suid") == uid(&node)),
        "only this test's node"
    );
    let deleted = format!("{}:deleted", uid(&node));
    let truth = support::consume::wait_for(Duration::from_secs(30), "the node's delete", || {
        let ids: Vec<String> = observer.changes().iter().map(|c| c.id()).collect();
        ids.contains(&deleted).then_some(ids)
    })
    .await
    .expect("the observer saw the node's delete");
    let ids: Vec<&str> = events.iter().map(|e| s(e, "id")).collect();
    assert_eq!(
        ids, truth,
        "kubecast's events are the node's changes, in order"
    );
    let types: Vec<&str> = events.iter().map(|e| s(e, "type")).collect();
    assert_eq!(types.first(), Some(&"io.k8s.core.v1.node.added"));
    assert_eq!(types.last(), Some(&"io.k8s.core.v1.node.deleted"));
    for e in &events {
        assert_eq!(s(e, "source"), "k8s://test/api/v1/nodes");
        assert_eq!(s(e, "subject"), name);
        assert_eq!(s(e, "k8snamespace"), "");
        assert_eq!((s(e, "k8skind"), s(e, "k8sapiversion")), ("Node", "v1"));
        assert_eq!(s(e, "dataschema"), "urn:kubecast:schema:node-summary:v1");
    }
    let not_ready = &events
        .iter()
        .find(|e| s(e, "k8srv") == not_ready_rv)
        .expect("the event of the not Ready patch")["data"];
    assert_eq!(not_ready["conditions"][0]["status"], "False");
    assert_eq!(not_ready["conditions"][0]["reason"], "KubeletNotReady");
    assert_eq!(not_ready["capacity"]["cpu"], "4");
    assert!(
        not_ready["taints"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(|t| t["key"] == "example.com/test")),
        "{not_ready}"
    );
}

#[tokio::test]
async fn a_custom_resource_is_waited_for_watched_once_its_crd_exists_and_emptied_when_it_goes() {
    let scene = Scene::new("kinds-crd").await;
    let ns = scene.ns.clone();
    let path = scene.dir.join("events.jsonl");
    // A group of this test's own, so that runs side by side never share the CRD.
    let group = format!("{}.example.com", unique_name("t"));
    let resource = format!("widgets.{group}");
    let port = free_port();
    let config = scene
        .config(
            &format!("metrics: {{address: '127.0.0.1:{port}'}}\n"),
            &[file_sink("file", &path)],
        )
        .replace("watch:\n", &format!("watch:\n  resources: [{resource}]\n"));
    let kubecast = InProcess::start(&scene, &config);
    let (code, body) = wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness naming the missing CRD",
        |_, b| b.contains(&resource),
    )
    .await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("CustomResourceDefinition is not installed"),
        "{body}"
    );

    let objects = Objects::new(&scene.client);
    let crd_path = objects
        .create_crd(
            &group,
            json!({"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]}),
            json!({"type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
            LIMIT,
        )
        .await;
    let (code, body) = wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness once the CRD is served",
        |c, _| c == 200,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    let mut made = Vec::new();
    for name in ["a", "b"] {
        made.push(
            objects
                .create(
                    &widgets,
                    &json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                    "metadata": {"name": name}, "spec": {"size": 1}}),
                )
                .await,
        );
    }
    objects
        .patch(&format!("{widgets}/a"), &json!({"spec": {"size": 2}}))
        .await;
    objects.delete(&format!("{widgets}/b")).await;
    events_until(&path, "a's change and b's delete", |ev| {
        ev.iter()
            .any(|e| s(e, "type").ends_with(".widget.modified"))
            && ev.iter().any(|e| s(e, "type").ends_with(".widget.deleted"))
    })
    .await;
    // The CRD goes while `a` still exists: a's delete comes out, then the resource is
    // waited for again.
    objects.delete(&crd_path).await;
    let events = events_until(&path, "a's delete after the CRD went", |ev| {
        ev.iter()
            .filter(|e| s(e, "type").ends_with(".widget.deleted"))
            .count()
            == 2
    })
    .await;
    wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness naming the CRD again",
        |c, b| c == 503 && b.contains(&resource),
    )
    .await;
    kubecast.stop(Duration::from_secs(20)).await;

    assert_gapless(&events);
    let ty = |change: &str| format!("io.k8s.{group}.v1.widget.{change}");
    let types: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (s(e, "k8sname"), s(e, "type")))
        .collect();
    assert_eq!(
        types,
        [
            ("a", ty("added").as_str()),
            ("b", ty("added").as_str()),
            ("a", ty("modified").as_str()),
            ("b", ty("deleted").as_str()),
            ("a", ty("deleted").as_str()),
        ]
    );
    for e in &events {
        assert_eq!(
            s(e, "source"),
            format!("k8s://test/apis/{group}/v1/namespaces/{ns}/widgets")
        );
        assert_eq!(
            (s(e, "k8skind"), s(e, "k8sapiversion")),
            ("Widget", format!("{group}/v1").as_str())
        );
    }
    assert_eq!(events[2]["data"]["spec"]["size"], 2);
    assert_eq!(s(&events[4], "k8suid"), uid(&made[0]));
}

#[tokio::test]
async fn a_one_mib_config_map_is_dead_lettered_or_sent_as_a_flagged_reference_and_the_queue_moves_on()
 {
    use support::consume::KafkaTopic;
    let scene = Scene::new("kinds-big").await;
    let ns = scene.ns.clone();
    let (plain, reference) = (unique_name("kc-big"), unique_name("kc-big-ref"));
    let plain_topic = KafkaTopic::create(&scene.stack, &plain).await;
    let reference_topic = KafkaTopic::create(&scene.stack, &reference).await;
    let dead = scene.dir.join("dead.jsonl");
    let port = free_port();
    let config = scene
        .config(
            &format!("metrics: {{address: '127.0.0.1:{port}'}}\n"),
            &[
                scene.kafka_sink(
                    "plain",
                    &plain,
                    &[&format!("dead_letter: {{file: {}}}", dead.display())],
                ),
                scene.kafka_sink("reference", &reference, &["too_large: reference"]),
            ],
        )
        .replace("watch:\n", "watch:\n  resources: [configmaps]\n");
    let kubecast = InProcess::start(&scene, &config);
    ready(port).await;
    let objects = Objects::new(&scene.client);
    let configmaps = format!("/api/v1/namespaces/{ns}/configmaps");
    // About 1 MiB of data: a ConfigMap's limit, above Kafka's default message size.
    let big = objects
        .create(
            &configmaps,
            &json!({"metadata": {"name": "big"}, "data": {"blob": "x".repeat(1_040_000)}}),
        )
        .await;
    objects
        .create(
            &configmaps,
            &json!({"metadata": {"name": "after"}, "data": {"k": "v"}}),
        )
        .await;
    let after = |rs: &[support::consume::Record]| rs.iter().any(|r| r.ce("k8sname") == "after");
    let plain_records = plain_topic
        .wait_until("the small one after the big one", LIMIT, after)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let reference_records = reference_topic
        .wait_until("the small one after the big one", LIMIT, after)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(Duration::from_secs(20)).await;

    assert!(
        plain_records.iter().all(|r| r.ce("k8sname") != "big"),
        "the big one is not in the plain sink's topic"
    );
    let letters = file_events_raw(&dead);
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["event"]["k8sname"], "big");
    assert!(
        letters[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("max_message_bytes"),
        "{}",
        letters[0]
    );

    let flagged: Vec<_> = reference_records
        .iter()
        .filter(|r| r.ce("k8sname") == "big")
        .collect();
    assert_eq!(flagged.len(), 1);
    let r = flagged[0];
    assert_eq!(r.ce("k8struncated"), "true");
    assert_eq!(
        r.ce("id"),
        format!("{}:{}:added", uid(&big), support::objects::rv(&big))
    );
    assert_eq!(
        r.ce("dataschema"),
        "urn:kubecast:schema:configmap-reference:v1"
    );
    assert_eq!(r.json()["metadata"]["uid"], uid(&big).as_str());
    support::schema::assert_follows(r.ce("dataschema"), &r.json(), "the flagged reference");
}

/// The JSON lines of a file (a dead-letter file).
fn file_events_raw(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

#[tokio::test]
async fn routes_take_the_resources_they_name_each_with_its_own_chain() {
    let scene = Scene::new("kinds-routes").await;
    let ns = scene.ns.clone();
    let (deploys, pods) = (
        scene.dir.join("deploys.jsonl"),
        scene.dir.join("pods.jsonl"),
    );
    let port = free_port();
    let config = scene
        .config(
            &format!(
                "metrics: {{address: '127.0.0.1:{port}'}}\nroutes:\n  rollouts: {{sinks: [deploys], resources: [deploy], data: summary}}\n  pods: {{sinks: [pods], resources: [po], changes: [phase]}}\n"
            ),
            &[file_sink("deploys", &deploys), file_sink("pods", &pods)],
        )
        .replace("watch:\n", "watch:\n  resources: [deployments.apps, pods]\n");
    let kubecast = InProcess::start(&scene, &config);
    ready(port).await;
    let objects = Objects::new(&scene.client);
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    objects
        .create(
            &path,
            &json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27"}]}}}}),
        )
        .await;
    let pod = events_until(&pods, "the controllers' pod", |ev| !ev.is_empty()).await;
    let name = s(&pod[0], "k8sname").to_string();
    // The pod's labels change (not its phase: filtered out), then its phase.
    objects
        .patch(
            &format!("/api/v1/namespaces/{ns}/pods/{name}"),
            &json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    objects
        .patch(
            &format!("/api/v1/namespaces/{ns}/pods/{name}/status"),
            &json!({"status": {"phase": "Running"}}),
        )
        .await;
    let pod_events = events_until(&pods, "the pod's phase change", |ev| {
        ev.iter().any(|e| e["data"]["status"]["phase"] == "Running")
    })
    .await;
    objects.delete(&format!("{path}/web")).await;
    let deploy_events = events_until(&deploys, "the deployment's delete", |ev| {
        !of_type(ev, "io.k8s.apps.v1.deployment.deleted").is_empty()
    })
    .await;
    kubecast.stop(Duration::from_secs(20)).await;

    assert!(
        deploy_events
            .iter()
            .all(|e| s(e, "k8skind") == "Deployment"),
        "only Deployments on rollouts"
    );
    assert!(deploy_events.iter().all(|e| {
        s(e, "dataschema").ends_with("deployment.v1.apps-summary:v1")
            || e["k8sinferred"].is_boolean()
    }));
    assert_gapless(&deploy_events);
    assert!(
        pod_events.iter().all(|e| s(e, "k8skind") == "Pod"),
        "only Pods on pods"
    );
    let types: Vec<&str> = pod_events.iter().map(|e| s(e, "type")).collect();
    assert_eq!(
        types,
        ["io.k8s.core.v1.pod.added", "io.k8s.core.v1.pod.modified"],
        "the label change is filtered out by the phase predicate"
    );
    assert_gapless(&pod_events);
}

#[tokio::test]
async fn a_custom_resource_version_no_longer_served_is_followed_to_the_served_one_without_a_delete()
{
    let scene = Scene::new("kinds-versions").await;
    let ns = scene.ns.clone();
    let path = scene.dir.join("events.jsonl");
    let group = format!("{}.example.com", unique_name("v"));
    let port = free_port();
    let config = scene
        .config(
            &format!("metrics: {{address: '127.0.0.1:{port}'}}\n"),
            &[file_sink("file", &path)],
        )
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [widgets.{group}]\n"),
        );
    let objects = Objects::new(&scene.client);
    let schema = json!({"openAPIV3Schema": {"type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}});
    let version = |name: &str, served: bool, storage: bool| json!({"name": name, "served": served, "storage": storage, "schema": schema});
    let names = json!({"plural": "widgets", "singular": "widget", "kind": "Widget"});
    // v1 and v2 both served; discovery prefers v2.
    let crd_path = objects
        .create_crd_versions(
            &group,
            names,
            json!([version("v1", true, true), version("v2", true, false)]),
            LIMIT,
        )
        .await;
    let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    for name in ["a", "b", "c"] {
        objects
            .create(
                &widgets,
                &json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                    "metadata": {"name": name}, "spec": {"size": 1}}),
            )
            .await;
    }
    let kubecast = InProcess::start(&scene, &config);
    ready(port).await;
    let listed = events_until(&path, "the three widgets listed at v2", |ev| ev.len() >= 3).await;
    assert!(
        listed
            .iter()
            .all(|e| s(e, "k8sapiversion") == format!("{group}/v2")),
        "watched at the preferred version: {listed:?}"
    );

    // v2 stops being served while it is watched.
    objects
        .patch(
            &crd_path,
            &json!({"spec": {"versions": [version("v1", true, true), version("v2", false, false)]}}),
        )
        .await;
    // A change made after that arrives through v1: kubecast followed the served version.
    let a = format!("{widgets}/a");
    let followed = tokio::time::Instant::now() + LIMIT;
    let mut size = 2;
    let events = loop {
        objects.patch(&a, &json!({"spec": {"size": size}})).await;
        let moved = |ev: &[Value]| {
            ev.iter().any(|e| {
                s(e, "type") == format!("io.k8s.{group}.v1.widget.modified")
                    && e["data"]["spec"]["size"] == size
            })
        };
        let seen = wait_until_or(&path, Duration::from_secs(5), moved).await;
        if let Some(events) = seen {
            break events;
        }
        assert!(
            tokio::time::Instant::now() < followed,
            "no change of `a` arrived through v1 within {LIMIT:?}: {:?}",
            file_events(&path)
                .iter()
                .map(|e| format!("{} {}", e["type"], e["subject"]))
                .collect::<Vec<_>>()
        );
        size += 1;
    };
    assert!(
        !events.iter().any(|e| s(e, "type").ends_with(".deleted")),
        "a version no longer served deletes nothing: {events:?}"
    );
    let after: Vec<&Value> = events[3..].iter().collect();
    assert!(
        after
            .iter()
            .all(|e| s(e, "k8sname") == "a" && s(e, "type").ends_with(".widget.modified")),
        "the re-list at v1 emitted nothing for the unchanged objects: {after:?}"
    );

    // Then the CRD goes: now discovery confirms it, and each remaining widget's delete comes out.
    objects.delete(&crd_path).await;
    let events = events_until(&path, "the three deletes after the CRD went", |ev| {
        ev.iter()
            .filter(|e| s(e, "type").ends_with(".widget.deleted"))
            .count()
            == 3
    })
    .await;
    kubecast.stop(Duration::from_secs(20)).await;
    assert_gapless(&events);
}

/// The events in the file sink at `path` once `done` accepts them, or `None` after `limit`.
async fn wait_until_or(
    path: &std::path::Path,
    limit: Duration,
    done: impl Fn(&[Value]) -> bool,
) -> Option<Vec<Value>> {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        let events = file_events(path);
        if done(&events) {
            return Some(events);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
