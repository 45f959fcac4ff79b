//! `shape: k8sobjects` against the Collector's own `k8sobjects` receiver (contrib v0.111.0,
//! the release the Go module proxy serves; `scripts/stack tool otelcol-k8sobjects`), both
//! watching the same namespace: for each change of a pod, kubecast's record (through the
//! stack's Collector) equals the receiver's field by field — resource, scope, Timestamp,
//! attributes, body — but for two things kubecast never sends: `metadata.managedFields`, and
//! the time it observed the change, which is each process's own.

mod support;

use std::time::Duration;

use serde_json::json;
use support::NO_SCHEDULER;
use support::objects::Objects;
use support::otlp::{CollectorFile, K8sObjectsReceiver, OtlpRecord, endpoints, otlp_sink};
use support::scene::{InProcess, Scene};

const LIMIT: Duration = Duration::from_secs(90);

/// The object's name in a k8sobjects body.
fn object_name(r: &OtlpRecord) -> &str {
    r.body["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn k8sobjects_shaped_records_equal_the_k8sobjects_receivers_field_by_field() {
    let scene = Scene::new("otlp-k8sobjects").await;
    let (http, _) = endpoints(&scene.stack);
    let receiver = K8sObjectsReceiver::start(
        &scene.stack,
        &scene.dir,
        &scene.ns,
        "watch",
        "received.jsonl",
    );
    let config = scene.config(
        "",
        &[otlp_sink(
            "objects",
            &http,
            "http/protobuf",
            "    shape: k8sobjects\n",
        )],
    );
    let kubecast = InProcess::start(&scene, &config);
    let collector = CollectorFile::stack(&scene.stack);
    let ns = scene.ns.clone();
    let ours = move |r: &OtlpRecord| r.body["object"]["metadata"]["namespace"] == *ns;

    // The receiver watches from the moment it starts: a pod created before is not seen.
    // Pods are made until one reaches both, then the measured pod's changes begin.
    let objects = Objects::new(&scene.client);
    let pods = format!("/api/v1/namespaces/{}/pods", scene.ns);
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}})
    };
    let mut ready = false;
    for i in 0..30 {
        let name = format!("ready-{i}");
        objects.create(&pods, &pod(&name)).await;
        let wait = Duration::from_secs(2);
        let has = |r: &[OtlpRecord]| r.iter().any(|x| object_name(x) == name);
        let theirs = receiver
            .file
            .wait_until(&format!("{name} added"), wait, &ours, has)
            .await
            .is_ok();
        let mine = theirs
            && collector
                .wait_until(&format!("{name} added"), wait, &ours, has)
                .await
                .is_ok();
        if mine {
            ready = true;
            break;
        }
    }
    assert!(
        ready,
        "neither a pod made in 60 s reached both the receiver and kubecast"
    );

    objects.create(&pods, &pod("p")).await;
    objects
        .patch(
            &format!("{pods}/p"),
            &json!({"metadata": {"labels": {"stage": "two"}}}),
        )
        .await;
    objects.delete(&format!("{pods}/p")).await;
    let of_p = |r: &OtlpRecord| object_name(r) == "p";
    let deleted = |r: &[OtlpRecord]| r.iter().any(|x| x.body["type"] == "DELETED");
    let theirs = receiver
        .file
        .wait_until("p deleted, from the receiver", LIMIT, of_p, deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ours_p = |r: &OtlpRecord| ours(r) && object_name(r) == "p";
    let mine = collector
        .wait_until("p deleted, from kubecast", LIMIT, ours_p, deleted)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let types = |r: &[OtlpRecord]| {
        r.iter()
            .map(|x| x.body["type"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        types(&mine),
        types(&theirs),
        "the same changes, in the same order"
    );
    assert!(
        types(&theirs).len() >= 3,
        "added, modified, deleted: {:?}",
        types(&theirs)
    );
    for (m, t) in mine.iter().zip(&theirs) {
        let mut t = t.clone();
        // kubecast leaves managedFields out of every event's data.
        if let Some(meta) = t.body["object"]["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        assert_eq!(m.resource, t.resource, "resource attributes");
        assert_eq!(m.scope, t.scope, "scope");
        assert_eq!(m.time, t.time, "Timestamp (the receiver sets none)");
        assert_eq!(
            (m.severity_number, &m.severity_text, &m.event_name),
            (t.severity_number, &t.severity_text, &t.event_name)
        );
        assert_eq!(m.attributes, t.attributes, "attributes");
        assert_eq!(m.body, t.body, "body of the {} change", t.body["type"]);
        assert!(
            m.observed > 0 && t.observed > 0,
            "both say when they observed the change"
        );
    }
    drop(receiver);
    kubecast.stop(LIMIT).await;
}

#[tokio::test]
async fn k8sobjects_needs_full_data_and_says_so() {
    let scene = Scene::new("otlp-k8sobjects-summary").await;
    let config = scene.config(
        "encoding:\n  data: summary\n",
        &[otlp_sink(
            "objects",
            "http://127.0.0.1:9",
            "http/protobuf",
            "    shape: k8sobjects\n",
        )],
    );
    let path = scene.dir.join("config.yaml");
    std::fs::write(&path, &config).expect("writing the config");
    let (code, _, err) =
        support::kubecast::run_to_end(&["validate-config", path.to_str().unwrap_or_default()], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("sinks.objects.shape") && err.contains("encoding.data: full"),
        "{err}"
    );
}
