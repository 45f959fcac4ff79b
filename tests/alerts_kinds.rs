//! The built-in alert rules of other kinds against the real stack and its real controllers,
//! in-process: a Node driven through its `status` into and out of not Ready, a Deployment
//! that cannot become available (no kubelet runs its pods) then scaled to zero, and a Job
//! whose `activeDeadlineSeconds` the job controller enforces, then deleted. Each gives
//! exactly one `firing` and one `resolved` alert with its evidence, the time-based ones firing
//! with no further update, and the alert events carry the object's kind, apiVersion, subject
//! and source like its changes do.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::consume::wait_for;
use support::objects::Objects;
use support::scene::{InProcess, Scene, file_events, file_sink};
use support::{NO_SCHEDULER, unique_name};

const LIMIT: Duration = Duration::from_secs(90);

/// The alert events of object `name` and rule `rule`: (status, event).
fn of<'a>(events: &'a [Value], name: &str, rule: &str) -> Vec<(String, &'a Value)> {
    events
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("io.kubecast.alert."))
        })
        .filter(|e| e["k8sname"] == name && e["data"]["rule"] == rule)
        .map(|e| {
            (
                e["data"]["status"].as_str().unwrap_or_default().to_string(),
                e,
            )
        })
        .collect()
}

/// Waits until `name`'s `rule` has alerted with the statuses `want`, and returns them.
async fn alerts(path: &std::path::Path, name: &str, rule: &str, want: &[&str]) -> Vec<Value> {
    let found = wait_for(LIMIT, &format!("{rule} on {name}: {want:?}"), || {
        let events = file_events(path);
        let got: Vec<(String, Value)> = of(&events, name, rule)
            .into_iter()
            .map(|(s, e)| (s, e.clone()))
            .collect();
        (got.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>() == want).then_some(got)
    })
    .await;
    let Some(found) = found else {
        let events = file_events(path);
        let seen: Vec<String> = of(&events, name, rule)
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        panic!(
            "timed out after {LIMIT:?} waiting for {rule} on {name} to be {want:?}; it is {seen:?}"
        );
    };
    found.into_iter().map(|(_, e)| e).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_deployments_and_jobs_alert_once_and_resolve_once_with_their_evidence() {
    let scene = Scene::new("alerts-kinds").await;
    let ns = scene.ns.clone();
    let label = unique_name("alerts-kinds");
    let path = scene.dir.join("events.jsonl");
    let config = scene
        .config(
            "alerts:\n  node_not_ready: {for: 3s, keep_firing_for: 1s}\n  rollout_stuck: {for: 3s, keep_firing_for: 1s}\n  job_failed: {labels: {team: batch}}\n",
            &[file_sink("out", &path)],
        )
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [{{resource: nodes, label_selector: 'kubecast-test={label}'}}, deployments.apps, jobs.batch]\n"),
        );
    let kubecast = InProcess::start(&scene, &config);
    wait_for(LIMIT, "kubecast to start", || {
        std::fs::metadata(&path).is_ok().then_some(())
    })
    .await;
    let objects = Objects::new(&scene.client);
    let ready = |status: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": if status == "True" { "KubeletReady" } else { "KubeletNotReady" },
            "message": "container runtime status check", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}})
    };

    // A Node: Ready, then not Ready until the alert fires with no further update, then Ready.
    let node = unique_name("alert-node");
    objects
        .create(
            "/api/v1/nodes",
            &json!({"metadata": {"name": node, "labels": {"kubecast-test": label}}}),
        )
        .await;
    let node_status = format!("/api/v1/nodes/{node}/status");
    objects.patch(&node_status, &ready("True")).await;
    objects.patch(&node_status, &ready("False")).await;

    // A Deployment no kubelet will ever make available, with a short progress deadline.
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    objects
        .create(&deployments, &json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "progressDeadlineSeconds": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27"}]}}}}))
        .await;
    // A Job the job controller fails at its active deadline.
    let jobs = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    objects
        .create(&jobs, &json!({"metadata": {"name": "batch"}, "spec": {"activeDeadlineSeconds": 1, "backoffLimit": 0,
            "template": {"spec": {"schedulerName": NO_SCHEDULER, "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}))
        .await;

    let fired = alerts(&path, &node, "node_not_ready", &["firing"]).await;
    let e = &fired[0];
    assert_eq!(e["data"]["evidence"]["status"], "False", "{e}");
    assert_eq!(e["data"]["evidence"]["reason"], "KubeletNotReady");
    assert_eq!(
        (
            e["k8skind"].as_str(),
            e["k8sapiversion"].as_str(),
            e["subject"].as_str()
        ),
        (Some("Node"), Some("v1"), Some(node.as_str()))
    );
    assert_eq!(e["source"], "k8s://test/api/v1/nodes");
    assert_eq!(e["data"]["object"]["kind"], "Node");
    assert!(
        e["data"].get("pod").is_none(),
        "no `pod` in another kind's alert"
    );
    assert_eq!(e["data"]["severity"], "critical");
    objects.patch(&node_status, &ready("True")).await;
    alerts(&path, &node, "node_not_ready", &["firing", "resolved"]).await;

    let fired = alerts(&path, "web", "rollout_stuck", &["firing"]).await;
    let e = &fired[0];
    assert_eq!(
        (
            e["data"]["evidence"]["desired"].as_u64(),
            e["data"]["evidence"]["available"].as_u64()
        ),
        (Some(1), Some(0)),
        "{e}"
    );
    assert_eq!(
        e["source"],
        format!("k8s://test/apis/apps/v1/namespaces/{ns}/deployments")
    );
    assert_eq!(e["k8skind"], "Deployment");
    objects
        .patch(
            &format!("{deployments}/web"),
            &json!({"spec": {"replicas": 0}}),
        )
        .await;
    alerts(&path, "web", "rollout_stuck", &["firing", "resolved"]).await;

    let fired = alerts(&path, "batch", "job_failed", &["firing"]).await;
    let e = &fired[0];
    assert_eq!(e["data"]["evidence"]["reason"], "DeadlineExceeded", "{e}");
    assert_eq!(e["data"]["labels"]["team"], "batch");
    assert_eq!(e["k8skind"], "Job");
    objects.delete(&format!("{jobs}/batch")).await;
    alerts(&path, "batch", "job_failed", &["firing", "resolved"]).await;
    objects.delete(&format!("/api/v1/nodes/{node}")).await;

    // Nothing fired twice.
    let events = file_events(&path);
    for (name, rule) in [
        (node.as_str(), "node_not_ready"),
        ("web", "rollout_stuck"),
        ("batch", "job_failed"),
    ] {
        let statuses: Vec<String> = of(&events, name, rule)
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(statuses, ["firing", "resolved"], "{rule} on {name}");
    }
    kubecast.stop(LIMIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_rule_judges_a_custom_resource_and_a_path_its_schema_lacks_exits_2() {
    let scene = Scene::new("alerts-crd").await;
    let ns = scene.ns.clone();
    // A group of this test's own, so that runs side by side never share the CRD.
    let group = format!("{}.example.com", unique_name("a"));
    let resource = format!("widgets.{group}");
    let objects = Objects::new(&scene.client);
    let crd_path = objects
        .create_crd(
            &group,
            json!({"plural": "widgets", "singular": "widget", "kind": "Widget"}),
            json!({"type": "object",
                "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}),
            LIMIT,
        )
        .await;
    let watch = format!("watch:\n  resources: [{resource}]\n");

    // A path the Widget's schema does not have is refused at start, naming the rule.
    let bad = scene
        .config(
            "alerts:\n  rules:\n    colour: {resource: widget, expr: 'spec.colour == \"red\"'}\n",
            &[file_sink("out", &scene.dir.join("bad.jsonl"))],
        )
        .replace("watch:\n", &watch);
    let (code, log) = support::kubecast::Kubecast::start(&scene.stack, &scene.dir, &bad)
        .exited(Duration::from_secs(30))
        .await;
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("alerts.rules.colour") && log.contains("`colour`"),
        "{log}"
    );

    let path = scene.dir.join("events.jsonl");
    let config = scene
        .config(
            &format!("alerts:\n  rules:\n    big-widget:\n      resource: {resource}\n      expr: 'spec.size > 3'\n      message: '{{{{ metadata.name }}}} is {{{{ spec.size }}}}'\n"),
            &[file_sink("out", &path)],
        )
        .replace("watch:\n", &watch);
    let kubecast = InProcess::start(&scene, &config);
    wait_for(LIMIT, "kubecast to start", || {
        std::fs::metadata(&path).is_ok().then_some(())
    })
    .await;
    let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    objects
        .create(&widgets, &json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 2}}))
        .await;
    objects
        .patch(&format!("{widgets}/w"), &json!({"spec": {"size": 5}}))
        .await;
    let fired = alerts(&path, "w", "big-widget", &["firing"]).await;
    let e = &fired[0];
    assert_eq!(e["data"]["evidence"]["spec.size"], 5, "{e}");
    assert_eq!(e["data"]["message"], "w is 5");
    assert_eq!(
        (e["k8skind"].as_str(), e["k8sapiversion"].as_str()),
        (Some("Widget"), Some(format!("{group}/v1").as_str()))
    );
    assert_eq!(
        e["source"],
        format!("k8s://test/apis/{group}/v1/namespaces/{ns}/widgets")
    );
    objects
        .patch(&format!("{widgets}/w"), &json!({"spec": {"size": 1}}))
        .await;
    alerts(&path, "w", "big-widget", &["firing", "resolved"]).await;
    kubecast.stop(LIMIT).await;
    objects.delete(&crd_path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warning_events_alert_once_per_object_and_reason_and_resolve_when_quiet() {
    let scene = Scene::new("alerts-warn").await;
    let ns = scene.ns.clone();
    let path = scene.dir.join("events.jsonl");
    let config = scene
        .config(
            "alerts:\n  warning_event: {quiet: 4s, reasons: [FailedScheduling, BackOff]}\n",
            &[file_sink("out", &path)],
        )
        .replace("watch:\n", "watch:\n  resources: [pods, events]\n");
    let kubecast = InProcess::start(&scene, &config);
    wait_for(LIMIT, "kubecast to start", || {
        std::fs::metadata(&path).is_ok().then_some(())
    })
    .await;
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects = Objects::new(&scene.client);
    let events = format!("/api/v1/namespaces/{ns}/events");
    // Posted as a scheduler or kubelet would.
    let event = |name: &str, ty: &str, reason: &str, count: u64| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": "p", "uid": uid},
            "type": ty, "reason": reason, "message": format!("0/3 nodes are available ({name})"), "count": count,
            "firstTimestamp": "2026-12-04T10:00:00Z", "lastTimestamp": "2026-12-04T10:00:00Z",
            "source": {"component": "default-scheduler"}})
    };
    objects
        .create(&events, &event("p.1", "Warning", "FailedScheduling", 1))
        .await;
    // Not alerting: a Normal event, and a Warning of a reason not listed.
    objects
        .create(&events, &event("p.2", "Normal", "FailedScheduling", 1))
        .await;
    objects
        .create(&events, &event("p.3", "Warning", "FailedMount", 1))
        .await;
    let fired = alerts(&path, "p", "warning_event", &["firing"]).await;
    let e = &fired[0];
    assert_eq!(
        (e["k8skind"].as_str(), e["subject"].as_str()),
        (Some("Pod"), Some(format!("{ns}/p").as_str())),
        "{e}"
    );
    assert_eq!(e["k8suid"], uid.as_str(), "about the involved object");
    assert_eq!(e["data"]["evidence"]["reason"], "FailedScheduling");
    assert_eq!(e["data"]["evidence"]["event"], "p.1");
    assert!(
        e["id"]
            .as_str()
            .unwrap_or_default()
            .contains(":alert:warning_event-failedscheduling:firing"),
        "{e}"
    );
    assert_eq!(
        e["source"],
        format!("k8s://test/api/v1/namespaces/{ns}/events")
    );
    let at = |e: &Value| {
        e["time"]
            .as_str()
            .unwrap_or_default()
            .parse::<jiff::Timestamp>()
            .ok()
    };
    // The same object and reason again, through the same Event and, half the quiet time
    // later, another: no new alert, and each keeps the episode open.
    objects
        .patch(&format!("{events}/p.1"), &json!({"count": 2}))
        .await;
    let fired_at = at(e).expect("the firing's time");
    wait_for(LIMIT, "half the quiet time since the firing", || {
        (jiff::Timestamp::now() >= fired_at + jiff::SignedDuration::from_secs(2)).then_some(())
    })
    .await
    .expect("the clock moves");
    objects
        .create(&events, &event("p.4", "Warning", "FailedScheduling", 1))
        .await;
    // Then quiet: it resolves with no further update.
    let both = alerts(&path, "p", "warning_event", &["firing", "resolved"]).await;
    let resolved = &both[1];
    assert_eq!(
        resolved["k8sprevrv"], both[0]["k8srv"],
        "the resolved links to its firing"
    );
    // Quiet counts from the last matching Event kubecast saw (p.4's), not from the firing: a
    // later Event ignored would resolve it about 2 s after p.4.
    let last = file_events(&path)
        .into_iter()
        .find(|x| x["k8sname"] == "p.4" && x["type"] == "io.k8s.core.v1.event.added")
        .expect("p.4's own event");
    let quiet = at(resolved)
        .zip(at(&last))
        .map(|(r, l)| r.duration_since(l).as_millis());
    assert!(
        quiet.is_some_and(|ms| ms >= 4000),
        "resolved at least the quiet time after the last matching Event: {quiet:?} ms"
    );
    kubecast.stop(LIMIT).await;
}
