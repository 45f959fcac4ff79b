//! The leak hunt: on the real stack, a namespace holds a Secret applied the way `kubectl apply`
//! writes it (its data copied into the last-applied annotation, `stringData` in plain text), a
//! Pod and a ReplicationController with env values (the Pod's copied into its own last-applied
//! annotation), a custom resource with a pod template holding env values, and an annotation and
//! a label of the user's own that `encoding.redact` names, on a Pod's own metadata and on the
//! templates' metadata (a CronJob's job and pod templates, the custom resource's pod template,
//! and their last-applied copies); two user alert rules read secret fields. kubecast sends to every kind of sink: Kafka, a second Kafka sink whose small limit
//! sends events to a dead-letter topic, MQTT 5, and the CloudEvents Go SDK's HTTP receiver at
//! a URL holding a token and a password. Every byte that leaves kubecast — the topics, the
//! dead letters, the MQTT payloads and user properties, the HTTP events (ce- attributes and
//! data), its log, its `/metrics` and `/readyz`, and `kubecast replay --html` of the topic —
//! is searched for each secret, plain and base64 (the HTTP sink's credentials also as the
//! `user:password` pair an `Authorization: Basic` header would carry), and holds none.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::consume::{KafkaTopic, MqttSubscriber};
use support::http::{free_port, get};
use support::kubecast::Kubecast;
use support::objects::Objects;
use support::receiver::GoReceiver;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Standard base64 with padding.
fn base64(raw: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ABC[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

/// `obj` with a last-applied annotation holding a copy of itself, as `kubectl apply` writes it.
fn applied(mut obj: Value) -> Value {
    let copy = obj.to_string();
    obj["metadata"]["annotations"][LAST_APPLIED] = json!(copy);
    obj
}

fn containers(value: &str) -> Value {
    json!([{"name": "app", "image": "registry.invalid/app:1",
        "env": [{"name": "TOKEN", "value": value}, {"name": "PLAIN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaves_kubecast_through_any_sink_log_metric_or_report() {
    let scene = Scene::new("leak-hunt").await;
    let ns = scene.ns.clone();
    let stack = &scene.stack;
    let objects = Objects::new(&scene.client);
    let group = format!("{}.example.com", unique_name("leak"));
    objects
        .create_crd(
            &group,
            json!({"plural": "rollouts", "singular": "rollout", "kind": "Rollout"}),
            json!({"type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
            LIMIT,
        )
        .await;
    let secrets = [
        "s3cr3t-secret-value",
        "s3cr3t-string-data",
        "s3cr3t-pod-env",
        "s3cr3t-rc-env",
        "s3cr3t-cr-env",
        "s3cr3t-own-annotation",
        "s3cr3t-cronjob-template",
        "s3cr3t-cronjob-pod-template",
        "s3cr3t-cr-template",
        "s3cr3t-template-label",
        "t0k3n-leak",
        "pa55-leak",
    ];
    let mut needles: Vec<String> = secrets
        .iter()
        .flat_map(|s| [s.to_string(), base64(s.as_bytes())])
        .collect();
    // What an `Authorization: Basic` header of the URL's credentials would carry.
    needles.push(base64(b"user:pa55-leak"));

    let (topic, small, dlq) = (
        unique_name("leak"),
        unique_name("leak-small"),
        unique_name("leak-dlq"),
    );
    let kafka = KafkaTopic::create(stack, &topic).await;
    KafkaTopic::create(stack, &small).await;
    let dead = KafkaTopic::create(stack, &dlq).await;
    let mqtt_prefix = unique_name("leak");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{mqtt_prefix}/#")).await;
    let receiver = GoReceiver::start(stack).await;
    let url = format!(
        "{}?token=t0k3n-leak",
        receiver.url.replace("http://", "http://user:pa55-leak@")
    );
    let port = free_port();
    let settings = format!(
        "metrics: {{address: '127.0.0.1:{port}'}}\n\
         encoding:\n  redact: {{annotations: [example.com/own], labels: [example.com/own-label]}}\n\
         alerts:\n  rules:\n\
         \x20   secret_field: {{resource: secrets, expr: 'data.password == \"{}\"', message: 'password {{{{ data.password }}}}'}}\n\
         \x20   env_field: {{expr: 'spec.containers[*].env[*].value == \"s3cr3t-pod-env\"', message: 'env {{{{ spec.containers[*].env[*].value }}}}'}}\n",
        base64(b"s3cr3t-secret-value")
    );
    let config = scene
        .config(
            &settings,
            &[
                scene.kafka_sink("kafka", &topic, &[]),
                scene.kafka_sink("small", &small, &["max_message_bytes: 1024", &format!("dead_letter: {{topic: {dlq}}}")]),
                scene.mqtt_sink("edge", &mqtt_prefix, &format!("{mqtt_prefix}/{{name}}"), &[]),
                format!("  web:\n    type: http\n    url: '{url}'\n"),
            ],
        )
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [pods, replicationcontrollers, cronjobs.batch, {{resource: secrets, allow_secrets: true}}, rollouts.{group}]\n"),
        );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 5, LIMIT).await;

    let api = format!("/api/v1/namespaces/{ns}");
    objects
        .create(
            &format!("{api}/secrets"),
            &applied(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "leaky-secret"},
                "data": {"password": base64(b"s3cr3t-secret-value")}, "stringData": {"token": "s3cr3t-string-data"}})),
        )
        .await;
    let pod = applied(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "leaky-pod", "annotations": {"example.com/own": "s3cr3t-own-annotation"}},
        "spec": {"containers": containers("s3cr3t-pod-env")}}));
    objects.create(&format!("{api}/pods"), &pod).await;
    objects
        .create(
            &format!("{api}/replicationcontrollers"),
            &json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "leaky-rc"},
                "spec": {"replicas": 1, "selector": {"app": "leaky-rc"},
                    "template": {"metadata": {"labels": {"app": "leaky-rc"}}, "spec": {"containers": containers("s3cr3t-rc-env")}}}}),
        )
        .await;
    // Templates' metadata: the configured annotation and label are as secret there as on the
    // object's own (a suspended CronJob creates no Job).
    let template = |annotation: &str| {
        json!({"annotations": {"example.com/own": annotation, "keep": "k"},
            "labels": {"example.com/own-label": "s3cr3t-template-label", "app": "leaky"}})
    };
    objects
        .create(
            &format!("/apis/batch/v1/namespaces/{ns}/cronjobs"),
            &applied(json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "leaky-cronjob", "annotations": {"example.com/own": "s3cr3t-own-annotation"}},
                "spec": {"schedule": "0 0 1 1 *", "suspend": true, "jobTemplate": {
                    "metadata": template("s3cr3t-cronjob-template"),
                    "spec": {"template": {"metadata": template("s3cr3t-cronjob-pod-template"),
                        "spec": {"restartPolicy": "Never", "containers": containers("s3cr3t-pod-env")}}}}}})),
        )
        .await;
    objects
        .create(
            &format!("/apis/{group}/v1/namespaces/{ns}/rollouts"),
            &applied(json!({"apiVersion": format!("{group}/v1"), "kind": "Rollout", "metadata": {"name": "leaky-cr"},
                "spec": {"replicas": 2, "template": {"metadata": template("s3cr3t-cr-template"),
                    "spec": {"containers": containers("s3cr3t-cr-env")}}}})),
        )
        .await;
    let marker = scene.pods.create("marker").await;
    let marker_uid = marker["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // Everything has left kubecast: each object and both alerts in Kafka, and the marker
    // (created last) through every other sink.
    let records = kafka
        .wait_until("every object and both alerts", LIMIT, |r| {
            let named = |n: &str| r.iter().any(|x| x.ce("k8sname") == n);
            let fired = r
                .iter()
                .filter(|x| x.ce("type") == "io.kubecast.alert.firing")
                .count();
            [
                "leaky-secret",
                "leaky-pod",
                "leaky-rc",
                "leaky-cronjob",
                "leaky-cr",
                "marker",
            ]
            .iter()
            .all(|n| named(n))
                && fired >= 2
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nkubecast's log:\n{}", kubecast.log()));
    kubecast.check(
        mqtt.wait_until("the marker over MQTT", LIMIT, |m| {
            m.iter().any(|x| x.prop("k8suid") == marker_uid)
        })
        .await
        .map(|_| ()),
    );
    let http = kubecast.check(
        receiver
            .wait_until("the marker over HTTP", LIMIT, |e| {
                e.iter().any(|x| x.attr("k8suid") == marker_uid)
            })
            .await,
    );
    let dead_letters = kubecast.check(
        dead.wait_until("dead letters", LIMIT, |r| !r.is_empty())
            .await,
    );
    let (_, metrics) = get(port, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, readyz) = get(port, "/readyz").await.unwrap_or_else(|e| panic!("{e}"));
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    let report = scene.dir.join("leak.html");
    let (code, out, err) = scene.replay(&topic, &["--html", &report.display().to_string()]);
    assert_eq!(code, Some(0), "{out}{err}");
    let html = std::fs::read_to_string(&report).expect("the report");

    // The alerts fired on the real values; what they show is redacted.
    let alerts: Vec<Value> = records
        .iter()
        .filter(|x| x.ce("type") == "io.kubecast.alert.firing")
        .map(|x| x.json())
        .collect();
    for a in &alerts {
        assert!(
            a["message"]
                .as_str()
                .unwrap_or_default()
                .contains("<redacted>"),
            "{a}"
        );
    }

    // The templates' metadata came out with only the configured values replaced.
    let cronjob = records
        .iter()
        .rev()
        .find(|r| r.ce("k8sname") == "leaky-cronjob")
        .expect("the CronJob's event")
        .json();
    for at in [
        "/spec/jobTemplate/metadata",
        "/spec/jobTemplate/spec/template/metadata",
    ] {
        let meta = cronjob.pointer(at).unwrap_or(&Value::Null);
        assert_eq!(
            meta["annotations"]["example.com/own"], "<redacted>",
            "{at}: {meta}"
        );
        assert_eq!(
            meta["labels"]["example.com/own-label"], "<redacted>",
            "{at}: {meta}"
        );
        assert_eq!(
            (&meta["annotations"]["keep"], &meta["labels"]["app"]),
            (&json!("k"), &json!("leaky")),
            "{at}: {meta}"
        );
    }

    let record_text = |r: &support::consume::Record| {
        let mut text = String::from_utf8_lossy(&r.payload).into_owned();
        for (k, v) in &r.headers {
            text.push_str(&format!("\n{k}: {v}"));
        }
        text
    };
    let mut outputs: Vec<(String, String)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        outputs.push((
            format!("Kafka record {i} ({} {})", r.ce("type"), r.ce("k8sname")),
            record_text(r),
        ));
    }
    for (i, r) in dead_letters.iter().enumerate() {
        outputs.push((format!("dead letter {i}"), record_text(r)));
    }
    for (i, m) in mqtt.messages().iter().enumerate() {
        let mut text = String::from_utf8_lossy(&m.payload).into_owned();
        for (k, v) in &m.user_properties {
            text.push_str(&format!("\n{k}: {v}"));
        }
        outputs.push((format!("MQTT message {i} on {}", m.topic), text));
    }
    for (i, e) in http.iter().enumerate() {
        outputs.push((format!("HTTP event {i}"), e.event.to_string()));
    }
    outputs.push(("kubecast's log".into(), log));
    outputs.push(("/metrics".into(), metrics));
    outputs.push(("/readyz".into(), readyz));
    outputs.push(("replay --html".into(), html));
    let mut leaks = Vec::new();
    for (what, text) in &outputs {
        for needle in &needles {
            if text.contains(needle.as_str()) {
                leaks.push(format!("{what} holds `{needle}`"));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "{} leaks:\n{}",
        leaks.len(),
        leaks.join("\n")
    );
    // The search covered what it names: each kind of output is there.
    for (what, n) in [
        ("Kafka records", records.len()),
        ("dead letters", dead_letters.len()),
        ("MQTT messages", mqtt.messages().len()),
        ("HTTP events", http.len()),
        ("alerts", alerts.len()),
    ] {
        assert!(n > 0, "no {what} were searched");
    }
    println!(
        "{} outputs searched for {} needles: no leak",
        outputs.len(),
        needles.len()
    );
}
