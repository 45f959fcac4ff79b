//! TLS for real on every sink, against the stack's TLS listeners (certificates from its CA in
//! `target/stack/pki`): Kafka over SSL and MQTT over TLS deliver a pod's life with and without
//! a client certificate; a server certificate kubecast does not trust (the wrong CA) and a
//! client certificate the server refuses (one from another CA) stop kubecast within seconds
//! with exit 1 naming the sink and the reason, for the Kafka, MQTT and HTTP sinks alike.

mod support;

use std::time::{Duration, Instant};

use support::consume::{KafkaTopic, MqttSubscriber};
use support::kubecast::Kubecast;
use support::receiver::{GoReceiver, pki};
use support::scene::{InProcess, Scene};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);
/// How long kubecast may take to find a refused handshake and stop.
const STOP_LIMIT: Duration = Duration::from_secs(30);

fn tls(scene: &Scene, ca: &str, client: Option<&str>) -> String {
    let p = |f: &str| pki(&scene.stack, f).display().to_string();
    match client {
        None => format!("tls: {{ca_file: {}}}", p(ca)),
        Some(c) => format!(
            "tls: {{ca_file: {}, cert_file: {}, key_file: {}}}",
            p(ca),
            p(&format!("{c}.crt")),
            p(&format!("{c}.key"))
        ),
    }
}

fn kafka_sink(bootstrap: &str, topic: &str, tls: &str) -> String {
    format!("  secure:\n    type: kafka\n    brokers: {bootstrap}\n    topic: {topic}\n    {tls}\n")
}

fn mqtt_sink(url: &str, topic: &str, tls: &str) -> String {
    format!(
        "  secure:\n    type: mqtt\n    url: {url}\n    client_id: {}\n    topic: '{topic}/{{name}}'\n    {tls}\n",
        unique_name("kc-tls")
    )
}

/// A pod created, labelled and deleted.
async fn pod_life(scene: &Scene) -> String {
    let pod = scene.pods.create("p").await;
    scene.pods.label("p", "step", "2").await;
    scene.pods.delete("p").await;
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The types of a pod's events: added first, deleted last.
fn is_life(types: &[String]) -> bool {
    types.first().is_some_and(|t| t.ends_with(".added"))
        && types.last().is_some_and(|t| t.ends_with(".deleted"))
        && types.len() >= 3
}

async fn kafka_delivers(label: &str, bootstrap: impl Fn(&Scene) -> String, client: Option<&str>) {
    let scene = Scene::new(label).await;
    let topic = unique_name(label);
    let reader = KafkaTopic::create(&scene.stack, &topic).await;
    let sink = kafka_sink(&bootstrap(&scene), &topic, &tls(&scene, "ca.crt", client));
    let kubecast = InProcess::start(&scene, &scene.config("", &[sink]));
    // The first list must not fold the pod's changes: wait until the sink is up.
    let pod = scene.pods.create("first").await;
    let first = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    reader
        .wait_until("kubecast's first event over TLS", LIMIT, |r| {
            r.iter().any(|x| x.ce("k8suid") == first)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let uid = pod_life(&scene).await;
    reader
        .wait_until("the pod's life over Kafka SSL", LIMIT, |r| {
            is_life(
                &r.iter()
                    .filter(|x| x.ce("k8suid") == uid)
                    .map(|x| x.ce("type").to_string())
                    .collect::<Vec<_>>(),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
}

async fn mqtt_delivers(label: &str, url: impl Fn(&Scene) -> String, client: Option<&str>) {
    let scene = Scene::new(label).await;
    let topic = unique_name("kc");
    let subscriber = MqttSubscriber::subscribe(&scene.stack, &format!("{topic}/#")).await;
    let sink = mqtt_sink(&url(&scene), &topic, &tls(&scene, "ca.crt", client));
    let kubecast = InProcess::start(&scene, &scene.config("", &[sink]));
    let pod = scene.pods.create("first").await;
    let first = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    subscriber
        .wait_until("kubecast's first event over TLS", LIMIT, |m| {
            m.iter().any(|x| x.prop("k8suid") == first)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let uid = pod_life(&scene).await;
    subscriber
        .wait_until("the pod's life over MQTT TLS", LIMIT, |m| {
            is_life(
                &m.iter()
                    .filter(|x| x.prop("k8suid") == uid)
                    .map(|x| x.prop("type").to_string())
                    .collect::<Vec<_>>(),
            )
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
}

/// kubecast with `sink` (named `secure`) must exit 1 within [`STOP_LIMIT`], naming the sink
/// and one of `causes`.
async fn exits_naming_the_sink(scene: &Scene, sink: String, causes: &[&str]) {
    let started = Instant::now();
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &scene.config("", &[sink]));
    let (code, log) = kubecast.exited(STOP_LIMIT).await;
    assert_eq!(code, Some(1), "exit 1 for a refused TLS handshake:\n{log}");
    assert!(
        log.contains("sink `secure` failed"),
        "names the sink:\n{log}"
    );
    assert!(
        causes.iter().any(|c| log.contains(c)),
        "names the reason (one of {causes:?}):\n{log}"
    );
    println!("exited 1 after {:?}", started.elapsed());
}

#[tokio::test]
async fn kafka_over_ssl_delivers_a_pods_life() {
    kafka_delivers("tls-kafka", |s| s.stack.kafka_ssl_bootstrap.clone(), None).await;
}

#[tokio::test]
async fn kafka_over_ssl_with_a_client_certificate_delivers_a_pods_life() {
    kafka_delivers(
        "mtls-kafka",
        |s| s.stack.kafka_mtls_bootstrap.clone(),
        Some("client"),
    )
    .await;
}

#[tokio::test]
async fn mqtt_over_tls_delivers_a_pods_life() {
    mqtt_delivers("tls-mqtt", |s| s.stack.mqtt_tls_url.clone(), None).await;
}

#[tokio::test]
async fn mqtt_over_tls_with_a_client_certificate_delivers_a_pods_life() {
    mqtt_delivers(
        "mtls-mqtt",
        |s| s.stack.mqtt_mtls_url.clone(),
        Some("client"),
    )
    .await;
}

#[tokio::test]
async fn a_kafka_broker_certificate_from_another_ca_stops_kubecast_with_exit_1() {
    let scene = Scene::new("tls-kafka-ca").await;
    let sink = kafka_sink(
        &scene.stack.kafka_ssl_bootstrap,
        &unique_name("x"),
        &tls(&scene, "other-ca.crt", None),
    );
    exits_naming_the_sink(&scene, sink, &["certificate is not trusted"]).await;
}

#[tokio::test]
async fn a_client_certificate_the_kafka_broker_refuses_stops_kubecast_with_exit_1() {
    let scene = Scene::new("tls-kafka-client").await;
    let sink = kafka_sink(
        &scene.stack.kafka_mtls_bootstrap,
        &unique_name("x"),
        &tls(&scene, "ca.crt", Some("other-client")),
    );
    exits_naming_the_sink(&scene, sink, &["refused kubecast's client certificate"]).await;
}

#[tokio::test]
async fn an_mqtt_broker_certificate_from_another_ca_stops_kubecast_with_exit_1() {
    let scene = Scene::new("tls-mqtt-ca").await;
    let sink = mqtt_sink(
        &scene.stack.mqtt_tls_url,
        &unique_name("x"),
        &tls(&scene, "other-ca.crt", None),
    );
    exits_naming_the_sink(&scene, sink, &["certificate is not trusted"]).await;
}

#[tokio::test]
async fn a_client_certificate_the_mqtt_broker_refuses_stops_kubecast_with_exit_1() {
    let scene = Scene::new("tls-mqtt-client").await;
    let sink = mqtt_sink(
        &scene.stack.mqtt_mtls_url,
        &unique_name("x"),
        &tls(&scene, "ca.crt", Some("other-client")),
    );
    exits_naming_the_sink(&scene, sink, &["refused the TLS handshake"]).await;
}

#[tokio::test]
async fn an_http_receiver_certificate_from_another_ca_stops_kubecast_with_exit_1() {
    let scene = Scene::new("tls-http-ca").await;
    let receiver = GoReceiver::start_tls(&scene.stack, false).await;
    let sink = format!(
        "  secure:\n    type: http\n    url: '{}'\n    {}\n",
        receiver.url,
        tls(&scene, "other-ca.crt", None)
    );
    exits_naming_the_sink(&scene, sink, &["certificate is not trusted"]).await;
}

#[tokio::test]
async fn a_client_certificate_the_http_receiver_refuses_stops_kubecast_with_exit_1() {
    let scene = Scene::new("tls-http-client").await;
    let receiver = GoReceiver::start_tls(&scene.stack, true).await;
    let sink = format!(
        "  secure:\n    type: http\n    url: '{}'\n    {}\n",
        receiver.url,
        tls(&scene, "ca.crt", Some("other-client"))
    );
    exits_naming_the_sink(&scene, sink, &["refused the TLS handshake"]).await;
}
