//! The bridge end to end against the real stack: a pod's whole life (create, Running, a label
//! change, a container restart, delete) arrives in Kafka and in MQTT as exactly the events
//! of the contract, with deterministic ids, a complete resourceVersion chain, the Kafka
//! binding's headers, MQTT 5 user properties, and the apiserver's object as data (minus
//! managedFields, secrets redacted), valid against the shipped JSON Schema.

mod support;

use std::time::Duration;

use support::consume::{KafkaTopic, MqttMessage, MqttSubscriber, Record};
use support::kubecast::Kubecast;
use support::pods::{Pod, expected_full_data};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

fn rv(p: &Pod) -> String {
    p["metadata"]["resourceVersion"]
        .as_str()
        .expect("the apiserver sets resourceVersion")
        .to_string()
}

/// The attributes every event of this pod must carry.
fn check_common(get: &dyn Fn(&str) -> String, ns: &str, name: &str, uid: &str) {
    assert_eq!(get("specversion"), "1.0");
    assert_eq!(
        get("source"),
        format!("k8s://test/api/v1/namespaces/{ns}/pods")
    );
    assert_eq!(get("subject"), format!("{ns}/{name}"));
    assert_eq!(get("partitionkey"), uid);
    assert_eq!(get("k8suid"), uid);
    assert_eq!(get("k8snamespace"), ns);
    assert_eq!(get("k8sname"), name);
    let time = get("time");
    assert!(
        time.ends_with('Z') && time.parse::<jiff::Timestamp>().is_ok(),
        "time {time} is not RFC 3339 UTC"
    );
}

#[tokio::test]
async fn a_pods_whole_life_arrives_in_kafka_and_mqtt_as_the_contract_says() {
    let scene = Scene::new("life").await;
    let ns = scene.ns.clone();
    let topic = unique_name("kc-life");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let prefix = unique_name("kc-life");
    let mqtt = MqttSubscriber::subscribe(&scene.stack, &format!("{prefix}/#")).await;
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            scene.mqtt_sink(
                "mqtt",
                &prefix,
                &format!("{prefix}/{{namespace}}/{{name}}"),
                &[],
            ),
        ],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;

    let pods = &scene.pods;
    let name = "web-1";
    let created = pods.create(name).await;
    let running = pods.running(name, 0).await;
    let labelled = pods.label(name, "version", "2").await;
    let restarted = pods.running(name, 1).await;
    let deleted = pods
        .delete(name)
        .await
        .expect("the apiserver answers a delete with the object");
    let uid = created["metadata"]["uid"]
        .as_str()
        .expect("the apiserver sets uid")
        .to_string();
    let states = [&created, &running, &labelled, &restarted];

    let records = kubecast.check(
        kafka
            .wait_until("the pod's 6 events", LIMIT, |r| r.len() >= 6)
            .await,
    );
    let messages = kubecast.check(
        mqtt.wait_until("the pod's 6 messages", LIMIT, |m| m.len() >= 6)
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(
        code,
        Some(0),
        "kubecast exits cleanly on SIGTERM; its log:\n{log}"
    );
    let listing: Vec<String> = records
        .iter()
        .map(|r| format!("{} {} prev={}", r.ce("type"), r.ce("id"), r.ce("k8sprevrv")))
        .collect();
    assert_eq!(
        records.len(),
        6,
        "exactly six events in Kafka: {listing:#?}"
    );
    assert_eq!(messages.len(), 6, "exactly six events in MQTT");

    // The delete is two changes: `deletionTimestamp` set (modified), then the removal.
    let types = [
        "added", "modified", "modified", "modified", "modified", "deleted",
    ];
    let mut prev = String::new();
    for (i, r) in records.iter().enumerate() {
        let get = |a: &str| r.ce(a).to_string();
        check_common(&get, &ns, name, &uid);
        assert_eq!(
            get("type"),
            format!("io.k8s.core.v1.pod.{}", types[i]),
            "event {i}"
        );
        assert_eq!(
            r.key.as_deref(),
            Some(uid.as_str()),
            "the record key is the partition key"
        );
        assert_eq!(
            r.headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        assert!(
            !r.headers.contains_key("ce_datacontenttype"),
            "binary mode maps datacontenttype to content-type"
        );
        assert_eq!(get("dataschema"), "urn:kubecast:schema:pod-full:v1");
        assert_eq!(
            get("k8sprevrv"),
            prev,
            "event {i} links to the previous one"
        );
        let data = r.json();
        support::schema::assert_follows(&get("dataschema"), &data, &format!("event {i}"));
        if i < 4 {
            let want_rv = rv(states[i]);
            assert_eq!(get("id"), format!("{uid}:{want_rv}:{}", types[i]));
            assert_eq!(get("k8srv"), want_rv);
            assert_eq!(
                data,
                expected_full_data(states[i]),
                "event {i}'s data is the apiserver's object, redacted"
            );
        } else if i == 4 {
            assert_eq!(get("id"), format!("{uid}:{}:modified", get("k8srv")));
            assert!(
                data["metadata"]["deletionTimestamp"].is_string(),
                "the delete starts with deletionTimestamp set"
            );
        } else {
            assert_eq!(get("id"), format!("{uid}:deleted"));
            assert_eq!(
                data,
                expected_full_data(&deleted),
                "the deleted event carries the removed object"
            );
            assert_eq!(
                get("k8sinferred"),
                "false",
                "a delete seen on the watch is not inferred"
            );
            assert_eq!(
                get("k8srv"),
                data["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
            );
        }
        if i == 0 {
            assert_eq!(
                get("k8sinitial"),
                "false",
                "the pod was created after the initial list"
            );
        }
        prev = get("k8srv");
    }
    let one_partition = records.iter().all(|r| r.partition == records[0].partition);
    assert!(one_partition, "all events of one pod go to one partition");
    let data = records[0].json();
    let env = &data["spec"]["containers"][0]["env"];
    assert_eq!(env[0]["value"], "<redacted>", "env var values are redacted");
    assert_eq!(
        env[1]["valueFrom"]["secretKeyRef"]["key"], "token",
        "references to secrets are kept"
    );
    assert_eq!(data["metadata"]["annotations"]["team"], "platform");
    assert!(!String::from_utf8_lossy(&records[0].payload).contains("hunter2"));

    check_mqtt(&messages, &records, &prefix, &ns, name);
}

/// The MQTT messages carry the same events as the Kafka records, as MQTT 5 binary mode.
fn check_mqtt(messages: &[MqttMessage], records: &[Record], prefix: &str, ns: &str, name: &str) {
    for (i, (m, r)) in messages.iter().zip(records).enumerate() {
        assert_eq!(m.topic, format!("{prefix}/{ns}/{name}"), "message {i}");
        assert_eq!(
            m.content_type.as_deref(),
            Some("application/json"),
            "message {i}: datacontenttype is the Content Type"
        );
        assert_eq!(
            m.payload, r.payload,
            "message {i}: the same data as in Kafka"
        );
        assert!(!m.retain, "message {i}: not retained unless configured");
        let mut from_kafka: Vec<(String, String)> = r
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("ce_")?.to_string(), v.clone())))
            .collect();
        let mut from_mqtt = m.user_properties.clone();
        from_kafka.sort();
        from_mqtt.sort();
        assert_eq!(
            from_mqtt, from_kafka,
            "message {i}: every attribute as a user property"
        );
    }
}
