//! What alert rules and routes cost per change, in process, over a realistic Pod (the
//! fixture of `per_event`: a 9 KB apiserver object with two containers, probes, env and a
//! kubelet status). Twenty rules: the eight built-ins and twelve user rules of the kinds
//! users write (phase, readiness, restart counts, images, QoS, labels, annotations, regexes,
//! `[*]` paths). Measured: parsing the Pod (which the router does once per change), the
//! twenty rules over a parsed Pod, and the router's whole step for a `modified` change with
//! the twenty rules and three routes (selector, predicate, namespace globs). Figures go to
//! BENCHMARKS.md ("Issue 12"). Since issue 23 the built-ins of other kinds are among the
//! rules (24 in all since `warning_event`), and the router's step is measured for a realistic Node and Deployment
//! change too (each kind is judged only by its own rules).
//!
//! `cargo bench --bench rules`

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kubecast::alert::config::AlertsConfig;
use kubecast::classify::Change;
use kubecast::model::ChangeKind;
use kubecast::route::engine::Router;

#[path = "shared/routes.rs"]
mod routes;
use routes::three_routes;

const FIXTURE: &str = include_str!("fixtures/pod-watch-line.json");

const RULES: &str = r#"
restarts: {threshold: 5}
not_ready: {for: 5m}
unscheduled: {for: 5m}
rules:
  pending-long: {expr: 'status.phase == "Pending"', for: 10m}
  not-ready-container: {expr: 'status.containerStatuses[*].ready == false', for: 2m}
  many-restarts: {expr: 'status.containerStatuses[*].restartCount > 10'}
  latest-image: {expr: 'spec.containers[*].image =~ ".*:latest"', severity: info}
  best-effort-prod: {expr: 'status.qosClass == "BestEffort" and metadata.namespace =~ "prod-.*"'}
  payments-failing: {expr: 'metadata.labels.team == "payments" and (status.phase == "Failed" or status.containerStatuses[*].restartCount > 3)', severity: critical}
  no-ip: {expr: 'status.phase == "Running" and not status.podIP', for: 1m}
  terminated-error: {expr: 'status.containerStatuses[*].lastState.terminated.reason == "Error"'}
  node-pressure: {expr: 'status.reason == "Evicted" or status.reason == "NodeLost"'}
  old-version: {expr: 'metadata.labels[''app.kubernetes.io/version''] =~ "3\\..*"'}
  unscraped: {expr: 'metadata.annotations[''prometheus.io/scrape''] != "true"', severity: info}
  host-network: {expr: 'spec.hostNetwork == true', message: '{{ metadata.name }} on {{ spec.nodeName }} uses the host network'}
"#;

/// The fixture's object, and a `modified` change of it (resourceVersion `rv`).
fn change(rv: &str) -> Change {
    let line: serde_json::Value =
        serde_json::from_str(FIXTURE.trim()).expect("the fixture is JSON");
    let mut obj = line["object"].clone();
    obj["metadata"]["resourceVersion"] = rv.into();
    Change {
        kind: ChangeKind::Modified,
        resource: kubecast::kinds::Resource::pods(),
        scope: "*".into(),
        uid: obj["metadata"]["uid"].as_str().unwrap_or("u").to_string(),
        namespace: obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("ns")
            .to_string(),
        name: obj["metadata"]["name"].as_str().unwrap_or("p").to_string(),
        rv: rv.to_string(),
        prev_rv: String::new(),
        inferred: false,
        initial: false,
        object: Some(Bytes::from(obj.to_string())),
    }
}

fn rules() -> Vec<kubecast::alert::rule::Rule> {
    let c: AlertsConfig = serde_saphyr::from_str(RULES).expect("the bench's rules parse");
    let rules = c.validate().expect("the bench's rules are valid");
    assert_eq!(rules.len(), 24, "twenty rules of Pods, four of other kinds");
    rules
}

/// A Node as a kubelet keeps it (conditions, capacity, images, addresses), as a change.
fn node_change(rv: &str) -> Change {
    let images: Vec<serde_json::Value> = (0..20)
        .map(|i| serde_json::json!({"names": [format!("registry.example.com/team/app-{i}@sha256:{:064}", i), format!("registry.example.com/team/app-{i}:1.{i}")], "sizeBytes": 50_000_000 + i}))
        .collect();
    let conditions: Vec<serde_json::Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        .iter()
        .map(|t| serde_json::json!({"type": t, "status": if *t == "Ready" { "True" } else { "False" },
            "reason": format!("Kubelet{t}"), "message": "kubelet is posting ready status",
            "lastHeartbeatTime": "2026-12-04T10:00:00Z", "lastTransitionTime": "2026-12-01T10:00:00Z"}))
        .collect();
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "uid": "0b9f2c1e-0000-4000-8000-00000000000a", "resourceVersion": rv,
            "labels": {"kubernetes.io/hostname": "node-a", "node.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/zone": "eu-west-1a"}},
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": "aws:///eu-west-1a/i-0123456789abcdef0"},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}, "allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "110"},
            "conditions": conditions, "addresses": [{"type": "InternalIP", "address": "10.0.1.23"}, {"type": "Hostname", "address": "node-a"}],
            "nodeInfo": {"kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://2.1.0", "osImage": "Bottlerocket", "architecture": "amd64"},
            "images": images}});
    other_change(
        obj,
        kubecast::kinds::Resource::new("", "v1", "Node", "nodes", false),
        rv,
    )
}

/// A Deployment with its status, as a change.
fn deployment_change(rv: &str) -> Change {
    let obj = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "checkout", "namespace": "prod-eu", "uid": "0b9f2c1e-0000-4000-8000-00000000000d", "resourceVersion": rv, "generation": 7,
            "labels": {"app.kubernetes.io/name": "checkout", "team": "payments"}},
        "spec": {"replicas": 3, "progressDeadlineSeconds": 600, "selector": {"matchLabels": {"app": "checkout"}},
            "template": {"metadata": {"labels": {"app": "checkout"}}, "spec": {"containers": [{"name": "app", "image": "registry.example.com/checkout:3.4.1",
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}, "ports": [{"containerPort": 8080}]}]}}},
        "status": {"observedGeneration": 7, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}});
    other_change(
        obj,
        kubecast::kinds::Resource::new("apps", "v1", "Deployment", "deployments", true),
        rv,
    )
}

fn other_change(obj: serde_json::Value, resource: kubecast::kinds::Resource, rv: &str) -> Change {
    Change {
        kind: ChangeKind::Modified,
        resource: std::sync::Arc::new(resource),
        scope: "*".into(),
        uid: obj["metadata"]["uid"].as_str().unwrap_or("u").to_string(),
        namespace: obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        name: obj["metadata"]["name"].as_str().unwrap_or("n").to_string(),
        rv: rv.to_string(),
        prev_rv: String::new(),
        inferred: false,
        initial: false,
        object: Some(Bytes::from(obj.to_string())),
    }
}

fn bench(c: &mut Criterion) {
    let rules = rules();
    let changes = [change("1000"), change("1001")];
    let bytes = changes[0].object.clone().unwrap_or_default();
    let pod: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    let mut g = c.benchmark_group("rules");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse the pod (9 KB), whole", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(&bytes).expect("JSON"))
    });
    g.bench_function("parse the pod (9 KB), without managedFields", |b| {
        b.iter(|| kubecast::route::view::parse(&bytes).expect("JSON"))
    });
    let pod_rules: Vec<_> = rules
        .iter()
        .filter(|r| r.resource.is_pod())
        .cloned()
        .collect();
    g.bench_function("20 rules over a parsed pod", |b| {
        b.iter(|| {
            pod_rules
                .iter()
                .filter(|r| r.evaluate(&pod).is_some())
                .count()
        })
    });
    let mut router = Router::new(Vec::new(), rules.clone());
    let mut i = 0usize;
    g.bench_function("router step: 20 rules, no routes", |b| {
        b.iter(|| {
            i += 1;
            router.on_change(&changes[i % 2], 1_000).outs.len()
        })
    });
    let mut router = Router::new(three_routes(), rules.clone());
    g.bench_function("router step: 20 rules, 3 routes", |b| {
        b.iter(|| {
            i += 1;
            router.on_change(&changes[i % 2], 1_000).outs.len()
        })
    });
    let nodes = [node_change("2000"), node_change("2001")];
    let mut router = Router::new(Vec::new(), rules.clone());
    g.bench_function(
        format!(
            "router step: a Node ({} B), {} rules (1 of Nodes)",
            nodes[0].object.as_ref().map_or(0, |o| o.len()),
            rules.len()
        ),
        |b| {
            b.iter(|| {
                i += 1;
                router.on_change(&nodes[i % 2], 1_000).outs.len()
            })
        },
    );
    let deploys = [deployment_change("3000"), deployment_change("3001")];
    let mut router = Router::new(Vec::new(), rules.clone());
    g.bench_function(
        format!(
            "router step: a Deployment ({} B), {} rules (1 of Deployments)",
            deploys[0].object.as_ref().map_or(0, |o| o.len()),
            rules.len()
        ),
        |b| {
            b.iter(|| {
                i += 1;
                router.on_change(&deploys[i % 2], 1_000).outs.len()
            })
        },
    );
    let mut router = Router::new(three_routes(), Vec::new());
    g.bench_function("router step: 3 routes, no rules", |b| {
        b.iter(|| {
            i += 1;
            router.on_change(&changes[i % 2], 1_000).outs.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
