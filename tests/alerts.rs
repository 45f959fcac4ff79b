//! The built-in alert rules against the real stack, in-process: each pod is driven through the
//! `status` subresource into one rule's condition and out again, and the file sink must hold
//! exactly one `io.kubecast.alert.firing` and one `io.kubecast.alert.resolved` for it, with
//! the right evidence and ids; the time rules (`not_ready`, `unscheduled`) fire with no
//! further update of the pod. Every episode of every rule fires at most once and every
//! firing alert resolves once its pod is deleted. Invalid routes and rules exit 2 naming the
//! entry's path.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::consume::wait_for;
use support::kubecast::{run_to_end, scratch_dir};
use support::scene::{InProcess, Scene, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(60);

const ALERTS: &str = "alerts:\n  restarts: {threshold: 2, keep_firing_for: 1s}\n  not_ready: {for: 3s, keep_firing_for: 1s}\n  unscheduled: {for: 3s}\n  oom_killed: {keep_firing_for: 1s}\n  oom_killed_gpu: {keep_firing_for: 1s}\n  crash_loop_backoff: {keep_firing_for: 1s}\n  image_pull_backoff: {keep_firing_for: 1s}\n";

/// A container status list of one container `app` in `state`, restarted `restarts` times.
fn container(state: Value, last: Value, restarts: u32) -> Value {
    json!([{
        "name": "app", "image": "registry.invalid/app:1", "imageID": "",
        "ready": state.get("running").is_some(), "restartCount": restarts,
        "state": state, "lastState": last
    }])
}

fn running() -> Value {
    json!({"running": {"startedAt": "2026-01-01T00:02:00Z"}})
}

/// Running and Ready, one container running: no rule holds.
fn healthy() -> Value {
    json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:03:00Z"}],
        "containerStatuses": container(running(), json!({}), 0)
    })
}

/// `healthy` with `containers` instead.
fn healthy_with(containers: Value) -> Value {
    let mut s = healthy();
    s["containerStatuses"] = containers;
    s
}

fn alert_events(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("io.kubecast.alert."))
        })
        .collect()
}

/// The alerts of pod `name` and rule `rule`: (status, event).
fn of<'a>(events: &'a [Value], name: &str, rule: &str) -> Vec<(&'a str, &'a Value)> {
    alert_events(events)
        .into_iter()
        .filter(|e| e["k8sname"] == name && e["data"]["rule"] == rule)
        .map(|e| (e["data"]["status"].as_str().unwrap_or_default(), e))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_builtin_rule_fires_once_and_resolves_once_with_its_evidence() {
    let scene = Scene::new("alerts").await;
    let path = scene.dir.join("events.jsonl");
    let text = scene.config(ALERTS, &[file_sink("out", &path)]);
    let kubecast = InProcess::start(&scene, &text);
    let events = || file_events(&path);
    wait_for(LIMIT, "kubecast to start", || {
        std::fs::metadata(&path).is_ok().then_some(())
    })
    .await;

    let pods = &scene.pods;
    let gpu = json!({"nvidia.com/gpu": "1"});
    for name in [
        "restarts",
        "failed",
        "not-ready",
        "oom",
        "crash",
        "image",
        "unscheduled",
    ] {
        pods.create_with(name, json!({}), json!({})).await;
    }
    pods.create_with("oom-gpu", gpu, json!({})).await;
    // Into each condition.
    let error = json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-01-01T00:01:00Z"}});
    pods.status("restarts", healthy_with(container(running(), error, 3)))
        .await;
    pods.status(
        "failed",
        json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}),
    )
    .await;
    let not_ready = pods
        .status("not-ready", json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": "2026-01-01T00:04:00Z"}],
            "containerStatuses": container(running(), json!({}), 0)
        }))
        .await;
    let oom = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:05:00Z"}});
    for name in ["oom", "oom-gpu"] {
        pods.status(name, healthy_with(container(oom.clone(), json!({}), 1)))
            .await;
    }
    let waiting = |reason: &str| json!({"waiting": {"reason": reason, "message": "back-off"}});
    pods.status(
        "crash",
        healthy_with(container(waiting("CrashLoopBackOff"), json!({}), 4)),
    )
    .await;
    pods.status(
        "image",
        healthy_with(container(waiting("ErrImagePull"), json!({}), 0)),
    )
    .await;
    let firing = [
        ("restarts", "restarts"),
        ("failed", "failed"),
        ("not-ready", "not_ready"),
        ("oom", "oom_killed"),
        ("oom-gpu", "oom_killed"),
        ("oom-gpu", "oom_killed_gpu"),
        ("crash", "crash_loop_backoff"),
        ("image", "image_pull_backoff"),
        ("unscheduled", "unscheduled"),
    ];
    let all_fired = wait_for(LIMIT, "every alert to fire", || {
        let ev = events();
        firing
            .iter()
            .all(|(pod, rule)| !of(&ev, pod, rule).is_empty())
            .then_some(ev)
    })
    .await;
    let ev = all_fired.unwrap_or_else(|| {
        let ev = events();
        let missing: Vec<_> = firing
            .iter()
            .filter(|(p, r)| of(&ev, p, r).is_empty())
            .collect();
        panic!(
            "no firing alert for {missing:?}; alerts: {:#?}",
            alert_events(&ev)
        )
    });
    // The time rule fired with no further update: its alert carries the last change's
    // resourceVersion, at least `for` after the episode began.
    let (_, nr) = of(&ev, "not-ready", "not_ready")[0];
    assert_eq!(
        nr["k8srv"], not_ready["metadata"]["resourceVersion"],
        "no update after the last one"
    );
    let began: jiff::Timestamp = nr["data"]["beganAt"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .expect("beganAt is RFC 3339");
    let fired: jiff::Timestamp = nr["time"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .expect("time is RFC 3339");
    assert!(
        fired.duration_since(began) >= jiff::SignedDuration::from_secs(3),
        "{began} -> {fired}"
    );

    // Out of each condition.
    pods.status("restarts", healthy()).await;
    pods.delete("failed").await;
    pods.status("not-ready", healthy()).await;
    for name in ["oom", "oom-gpu", "crash", "image"] {
        pods.status(name, healthy()).await;
    }
    pods.status("unscheduled", healthy()).await;
    let resolved = wait_for(LIMIT, "every alert to resolve", || {
        let ev = events();
        firing
            .iter()
            .all(|(pod, rule)| of(&ev, pod, rule).iter().any(|(s, _)| *s == "resolved"))
            .then_some(ev)
    })
    .await;
    let ev = resolved
        .unwrap_or_else(|| panic!("not every alert resolved: {:#?}", alert_events(&events())));

    for (pod, rule) in firing {
        let got = of(&ev, pod, rule);
        let states: Vec<&str> = got.iter().map(|(s, _)| *s).collect();
        assert_eq!(states, vec!["firing", "resolved"], "{pod} / {rule}");
        let (f, r) = (got[0].1, got[1].1);
        assert_eq!(
            f["data"]["alert"], r["data"]["alert"],
            "{pod} / {rule}: one episode"
        );
        let uid = f["k8suid"].as_str().unwrap_or_default();
        let began_rv = f["data"]["beganResourceVersion"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(f["id"], format!("{uid}:{began_rv}:alert:{rule}:firing"));
        assert_eq!(r["id"], format!("{uid}:{began_rv}:alert:{rule}:resolved"));
        assert_eq!(f["subject"], format!("{}/{pod}", scene.ns));
        assert_eq!(f["dataschema"], "urn:kubecast:schema:alert:v1");
        for e in [f, r] {
            support::schema::assert_follows(
                "urn:kubecast:schema:alert:v1",
                &e["data"],
                &format!("{pod} / {rule}"),
            );
        }
        assert!(
            f["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(pod)),
            "{f}"
        );
    }
    // A rule kept firing resolves when its wait ends, and says so; one that is not (the
    // deleted pod's `failed`) says nothing of the kind.
    let crash = of(&ev, "crash", "crash_loop_backoff")[1].1;
    let cleared: jiff::Timestamp = crash["data"]["evidence"]["clearedAt"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("clearedAt is RFC 3339 ({e}): {crash}"));
    let time: jiff::Timestamp = crash["time"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .expect("time is RFC 3339");
    assert_eq!(crash["data"]["evidence"]["keptFiringFor"], "1s", "{crash}");
    assert_eq!(
        time.duration_since(cleared),
        jiff::SignedDuration::from_secs(1),
        "{crash}"
    );
    let failed = of(&ev, "failed", "failed")[1].1;
    assert!(
        failed["data"]["evidence"].get("keptFiringFor").is_none(),
        "{failed}"
    );
    let evidence = |pod: &str, rule: &str| of(&ev, pod, rule)[0].1["data"].clone();
    let r = evidence("restarts", "restarts");
    assert_eq!(
        (
            r["container"].clone(),
            r["evidence"]["restartCount"].clone(),
            r["evidence"]["lastReason"].clone()
        ),
        (json!("app"), json!(3), json!("Error"))
    );
    assert_eq!(r["severity"], "warning");
    assert_eq!(
        evidence("failed", "failed")["evidence"]["reason"],
        "Evicted"
    );
    assert_eq!(evidence("failed", "failed")["severity"], "critical");
    assert_eq!(
        evidence("not-ready", "not_ready")["evidence"]["since"],
        "2026-01-01T00:04:00Z"
    );
    assert_eq!(evidence("oom", "oom_killed")["evidence"]["exitCode"], 137);
    assert_eq!(
        evidence("oom-gpu", "oom_killed_gpu")["evidence"]["gpu"],
        json!(["nvidia.com/gpu"])
    );
    assert!(
        of(&ev, "oom", "oom_killed_gpu").is_empty(),
        "no GPU, no GPU alert"
    );
    assert_eq!(
        evidence("crash", "crash_loop_backoff")["evidence"]["reason"],
        "CrashLoopBackOff"
    );
    assert_eq!(
        evidence("image", "image_pull_backoff")["evidence"]["reason"],
        "ErrImagePull"
    );

    // Once per episode everywhere, and everything that fired resolves when its pod goes.
    for name in [
        "restarts",
        "not-ready",
        "oom",
        "oom-gpu",
        "crash",
        "image",
        "unscheduled",
    ] {
        pods.delete(name).await;
    }
    let balanced = wait_for(LIMIT, "every alert to resolve", || {
        let ev = events();
        let mut open: BTreeMap<String, i32> = BTreeMap::new();
        for e in alert_events(&ev) {
            *open.entry(e["data"]["alert"].to_string()).or_default() +=
                if e["data"]["status"] == "firing" {
                    1
                } else {
                    -1
                };
        }
        open.values().all(|n| *n == 0).then_some(ev)
    })
    .await;
    let ev = balanced.unwrap_or_else(|| {
        panic!(
            "a firing alert did not resolve: {:#?}",
            alert_events(&events())
        )
    });
    let mut ids: Vec<&str> = alert_events(&ev)
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "no alert event twice");
    kubecast.stop(LIMIT).await;
}

#[test]
fn invalid_routes_and_rules_exit_2_naming_each_entry() {
    let dir = scratch_dir("badroutes");
    let cases = [
        ("routes:\n  a: {sinks: [out], colour: red}\n", "routes.a"),
        (
            "routes:\n  a: {sinks: [out], changes: ['status.colour']}\n",
            "routes.a.changes[0]",
        ),
        (
            "routes:\n  a: {sinks: [out], selector: 'app in web'}\n",
            "routes.a.selector",
        ),
        (
            "routes:\n  a: {sinks: [out, nowhere]}\n",
            "routes.a.sinks[1]",
        ),
        (
            "alerts:\n  rules:\n    r: {expr: 'status.phase == \"x\"', message: '{{ status.nothing }}'}\n",
            "alerts.rules.r.message",
        ),
        (
            "alerts:\n  rules:\n    r: {expr: 'status.phase =='}\n",
            "alerts.rules.r.expr",
        ),
        (
            "alerts:\n  not_ready: {for: soon}\n",
            "alerts.not_ready.for",
        ),
    ];
    for (i, (extra, field)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.yaml"));
        std::fs::write(
            &path,
            format!("cluster: c\n{extra}sinks:\n  out:\n    type: stdout\n"),
        )
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        let file = path.display().to_string();
        for args in [
            vec!["validate-config", file.as_str()],
            vec!["run", "--config", file.as_str()],
        ] {
            let (code, _, err) = run_to_end(&args, &[]);
            assert_eq!(code, Some(2), "{extra} ({args:?}): {err}");
            assert!(
                err.contains(field),
                "{extra} ({args:?}) names {field}: {err}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_rule_fires_with_its_template_and_labels_and_a_resync_emits_nothing_for_unchanged_pods()
 {
    let scene = Scene::new("alerts-user").await;
    let path = scene.dir.join("events.jsonl");
    let settings = concat!(
        "alerts:\n",
        "  not_ready: {enabled: false}\n  unscheduled: {enabled: false}\n",
        "  rules:\n",
        "    evicted:\n",
        "      expr: 'status.reason == \"Evicted\" and spec.containers[*].image =~ \".*:1\"'\n",
        "      severity: page\n",
        "      message: '{{ metadata.name }} evicted: {{ status.message }}'\n",
        "      labels: {team: platform}\n",
    );
    let config = scene
        .config(settings, &[file_sink("out", &path)])
        .replace("watch:\n", "watch:\n  resync_seconds: 2\n");
    let mut kubecast = support::kubecast::Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create_with("x", json!({}), json!({})).await;
    scene
        .pods
        .status(
            "x",
            json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}),
        )
        .await;
    let ev = wait_for(LIMIT, "both alerts", || {
        let ev = file_events(&path);
        (!of(&ev, "x", "evicted").is_empty() && !of(&ev, "x", "failed").is_empty()).then_some(ev)
    })
    .await
    .unwrap_or_else(|| panic!("no alerts; log:\n{}", kubecast.log()));
    let data = &of(&ev, "x", "evicted")[0].1["data"];
    assert_eq!(data["message"], "x evicted: low on memory");
    assert_eq!(data["severity"], "page");
    assert_eq!(data["labels"], json!({"team": "platform"}));
    assert_eq!(
        data["evidence"],
        json!({"status.reason": "Evicted", "spec.containers[*].image": "registry.invalid/app:1"})
    );

    // Two resyncs list everything again: nothing changed, so nothing is emitted.
    let before = file_events(&path).len();
    let lists = kubecast.count_in_log("list complete");
    kubecast.wait_for_log("resync", 2, LIMIT).await;
    kubecast
        .wait_for_log("list complete", lists + 2, LIMIT)
        .await;
    assert_eq!(
        file_events(&path).len(),
        before,
        "a resync of unchanged pods emits nothing"
    );
    // A change after the resyncs still goes out, and resolves both alerts.
    scene.pods.delete("x").await;
    let resolved = wait_for(LIMIT, "both to resolve", || {
        let ev = file_events(&path);
        ["evicted", "failed"]
            .iter()
            .all(|r| of(&ev, "x", r).iter().any(|(s, _)| *s == "resolved"))
            .then_some(())
    })
    .await;
    assert!(resolved.is_some(), "log:\n{}", kubecast.log());
    let (code, _) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0));
}
