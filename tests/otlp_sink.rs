//! The OTLP sink against the stack's OpenTelemetry Collector (its OTLP receiver and file
//! exporter, not written here): a pod's life and an alert about it arrive over
//! http/protobuf, http/json (gzip'd) and gRPC as log records with the CloudEvent type as
//! `EventName`, the semantic conventions' attributes, the event's data as the body, one
//! `ResourceLogs` per cluster and namespace, each equal to what the file sink wrote for the
//! same change; an endpoint given as the signal's full URL (`…/v1/logs`) is used as it is.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use support::otlp::{Collector, CollectorFile, OtlpRecord, endpoints, otlp_sink};
use support::scene::{InProcess, Scene, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_pods_life_and_its_alert_reach_the_collector_over_every_protocol_with_the_mapping() {
    let scene = Scene::new("otlp-life").await;
    let (http, grpc) = endpoints(&scene.stack);
    let file = scene.dir.join("events.jsonl");
    let sinks = [
        file_sink("file", &file),
        otlp_sink("protobuf", &http, "http/protobuf", ""),
        otlp_sink("json", &http, "http/json", "    compression: gzip\n"),
        otlp_sink("grpc", &grpc, "grpc", "    batch: {max_records: 2}\n"),
    ];
    let rules = "alerts:\n  rules:\n    marked:\n      expr: 'metadata.labels.stage == \"two\"'\n      severity: critical\n      message: '{{ metadata.name }} is marked'\n";
    let config = scene.config(rules, &sinks);
    let kubecast = InProcess::start(&scene, &config);
    let collector = CollectorFile::stack(&scene.stack);
    let ours = |r: &OtlpRecord| {
        r.resource.get("k8s.namespace.name").and_then(Value::as_str) == Some(&*scene.ns)
    };

    // Changes made before the first list would fold into it: wait for the sinks to be ready.
    let pod = scene.pods.create("p").await;
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    scene.pods.label(&name, "stage", "two").await;
    scene.pods.delete(&name).await;

    // Done when the file sink has the pod's delete and the alert's resolve, and each of its
    // events reached the Collector from each of the three sinks.
    let file_done = || {
        let events = file_events(&file);
        let has = |t: &str| events.iter().any(|e| e["type"] == t);
        let done = has("io.k8s.core.v1.pod.deleted") && has("io.kubecast.alert.resolved");
        Some(events).filter(|_| done)
    };
    let count = |r: &[OtlpRecord], id: &str| {
        r.iter()
            .filter(|x| x.attr("cloudevents.event_id") == id)
            .count()
    };
    let got = collector
        .wait_until(
            "each of the pod's events and its alert's from three sinks",
            LIMIT,
            ours,
            |r| {
                file_done().is_some_and(|events| {
                    events
                        .iter()
                        .all(|e| count(r, e["id"].as_str().unwrap_or_default()) >= 3)
                })
            },
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}; the file sink has {:?}",
                file_events(&file)
                    .iter()
                    .map(|e| e["id"].clone())
                    .collect::<Vec<_>>()
            )
        });
    let events = file_events(&file);
    let types: std::collections::BTreeSet<&str> =
        events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types.len(),
        5,
        "added, modified, deleted, firing and resolved: {types:?}"
    );
    let by_id: BTreeMap<&str, &Value> = events
        .iter()
        .map(|e| (e["id"].as_str().unwrap_or_default(), e))
        .collect();

    let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
    for r in &got {
        let id = r.attr("cloudevents.event_id");
        let e = by_id
            .get(id)
            .unwrap_or_else(|| panic!("record {id} is no event the file sink wrote: {r:?}"));
        *per_id.entry(id.to_string()).or_default() += 1;
        assert_eq!(r.event_name, e["type"], "EventName is the CloudEvent type");
        assert_eq!(r.body, e["data"], "{id}: the body is the event's data");
        assert_eq!(r.scope, "kubecast");
        assert_eq!(
            r.resource.get("k8s.cluster.name"),
            Some(&Value::from("test"))
        );
        let time: jiff::Timestamp = e["time"]
            .as_str()
            .unwrap_or_default()
            .parse()
            .expect("a time");
        assert_eq!(
            r.time as i128,
            time.as_nanosecond(),
            "{id}: Timestamp is the event's time"
        );
        assert_eq!(r.observed, r.time);
        for (attr, field) in [
            ("cloudevents.event_source", "source"),
            ("cloudevents.event_type", "type"),
            ("cloudevents.event_subject", "subject"),
            ("k8s.object.kind", "k8skind"),
            ("k8s.object.api_version", "k8sapiversion"),
            ("k8s.object.uid", "k8suid"),
            ("k8s.object.name", "k8sname"),
            ("k8s.object.resource_version", "k8srv"),
        ] {
            assert_eq!(
                r.attr(attr),
                e[field].as_str().unwrap_or_default(),
                "{id}: {attr}"
            );
        }
        assert_eq!(r.attr("cloudevents.event_spec_version"), "1.0");
        assert_eq!(r.attr("k8s.pod.name"), name);
        assert_eq!(
            r.attr("k8s.pod.uid"),
            pod["metadata"]["uid"].as_str().unwrap_or_default()
        );
        if r.event_name.starts_with("io.kubecast.alert") {
            assert_eq!(
                (r.severity_number, r.severity_text.as_str()),
                (21, "critical"),
                "an alert's severity"
            );
        } else {
            assert_eq!(r.severity_number, 0, "a change has no severity");
        }
    }
    for e in &events {
        let id = e["id"].as_str().unwrap_or_default();
        assert_eq!(
            per_id.get(id),
            Some(&3),
            "{id} reached the Collector once from each sink"
        );
    }
    kubecast.stop(LIMIT).await;
}

#[tokio::test]
async fn an_endpoint_that_already_ends_in_v1_logs_delivers_there() {
    let scene = Scene::new("otlp-logs-path").await;
    let (http, _) = endpoints(&scene.stack);
    // What `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` holds: the signal's full URL.
    let endpoint = format!("{}/v1/logs", http.trim_end_matches('/'));
    let sinks = [otlp_sink("logs", &endpoint, "http/protobuf", "")];
    let kubecast = InProcess::start(&scene, &scene.config("", &sinks));
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ns = scene.ns.clone();
    let ours = move |r: &OtlpRecord| {
        r.resource.get("k8s.namespace.name").and_then(Value::as_str) == Some(&*ns)
    };
    CollectorFile::stack(&scene.stack)
        .wait_until(
            &format!("the pod's add sent to {endpoint}"),
            LIMIT,
            ours,
            |r| r.iter().any(|x| x.attr("k8s.pod.uid") == uid),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
}

/// A sink's `tls:` line trusting the stack's CA and presenting the stack's certificate
/// `client` (`client`, or `other-client` of another CA).
fn tls_lines(scene: &Scene, client: &str) -> String {
    let pki = |f: &str| scene.stack.pki.join(f).display().to_string();
    format!(
        "    tls: {{ca_file: '{}', cert_file: '{}', key_file: '{}'}}\n",
        pki("ca.crt"),
        pki(&format!("{client}.crt")),
        pki(&format!("{client}.key"))
    )
}

#[tokio::test]
async fn mutual_tls_to_a_collector_over_grpc_and_http_with_the_stacks_ca() {
    let scene = Scene::new("otlp-mtls").await;
    let collector = Collector::start_mtls(&scene.stack, &scene.dir).await;
    let tls = tls_lines(&scene, "client");
    let sinks = [
        otlp_sink(
            "grpc",
            &collector.grpc,
            "grpc",
            &format!("{tls}    compression: gzip\n"),
        ),
        otlp_sink("http", &collector.http, "http/protobuf", &tls),
    ];
    let kubecast = InProcess::start(&scene, &scene.config("", &sinks));
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ns = scene.ns.clone();
    let ours = move |r: &OtlpRecord| {
        r.resource.get("k8s.namespace.name").and_then(Value::as_str) == Some(&*ns)
    };
    collector
        .file
        .wait_until("the pod's add over both protocols", LIMIT, ours, |r| {
            r.iter().filter(|x| x.attr("k8s.pod.uid") == uid).count() >= 2
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
}

#[tokio::test]
async fn a_collector_refusing_kubecasts_client_certificate_stops_the_sink_naming_it() {
    let scene = Scene::new("otlp-mtls-refused").await;
    let collector = Collector::start_mtls(&scene.stack, &scene.dir).await;
    // A client certificate of another CA: the Collector refuses the handshake.
    let tls = tls_lines(&scene, "other-client");
    let config = scene.config(
        "",
        &[otlp_sink("otel", &collector.http, "http/protobuf", &tls)],
    );
    let mut kubecast = support::kubecast::Kubecast::start(&scene.stack, &scene.dir, &config);
    let (code, log) = tokio::time::timeout(LIMIT, async {
        while kubecast.running() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        kubecast.exited(LIMIT).await
    })
    .await
    .expect("kubecast stopped within the limit");
    assert_eq!(code, Some(1), "{log}");
    let fatal = log
        .lines()
        .find(|l| l.contains("sink `otel` failed"))
        .unwrap_or_else(|| panic!("no fatal line naming the sink: {log}"));
    assert!(
        fatal.to_lowercase().contains("certificate"),
        "the fatal line names the cause: {fatal}"
    );
}
