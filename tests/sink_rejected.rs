//! A sink that cannot work stops kubecast at once, even in a quiet cluster: a Kafka sink
//! whose SASL password the broker rejects and an MQTT sink whose password Mosquitto rejects
//! make `kubecast run` exit 1 within seconds, with no pod changing, naming the sink and the
//! cause. The same sinks with the right password deliver, so the failure is the credentials'.

mod support;

use std::time::{Duration, Instant};

use support::consume::{KafkaTopic, MqttSubscriber};
use support::kubecast::Kubecast;
use support::scene::Scene;
use support::unique_name;

/// How long kubecast may take to notice a rejected login and stop.
const STOP_LIMIT: Duration = Duration::from_secs(30);
const LIMIT: Duration = Duration::from_secs(60);

fn kafka_sasl_sink(scene: &Scene, name: &str, topic: &str, password: &str) -> String {
    format!(
        "  {name}:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n    sasl: {{mechanism: PLAIN, username: {}, password: {password}}}\n",
        scene.stack.kafka_sasl_bootstrap, scene.stack.user
    )
}

fn mqtt_auth_sink(scene: &Scene, name: &str, topic: &str, password: &str) -> String {
    format!(
        "  {name}:\n    type: mqtt\n    url: mqtt://{}:{}\n    client_id: {}\n    topic: '{topic}/{{name}}'\n    username: {}\n    password: {password}\n",
        scene.stack.mqtt_host,
        scene.stack.mqtt_auth_port,
        unique_name("kc-auth"),
        scene.stack.user
    )
}

/// Starts kubecast with `sink` and no pod changing; it must exit 1 naming `name` and one of
/// `causes`, within [`STOP_LIMIT`].
async fn exits_naming_the_sink(scene: &Scene, sink: String, name: &str, causes: &[&str]) {
    let started = Instant::now();
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &scene.config("", &[sink]));
    let (code, log) = kubecast.exited(STOP_LIMIT).await;
    let took = started.elapsed();
    assert_eq!(
        code,
        Some(1),
        "exit code 1 for a sink that cannot work:\n{log}"
    );
    assert!(
        log.contains(&format!("sink `{name}` failed")),
        "names the sink:\n{log}"
    );
    assert!(
        causes.iter().any(|c| log.contains(c)),
        "names the cause (one of {causes:?}):\n{log}"
    );
    println!("sink {name}: kubecast exited 1 {took:?} after it started");
}

#[tokio::test]
async fn a_kafka_sink_whose_sasl_password_is_rejected_stops_kubecast_with_exit_1() {
    let scene = Scene::new("sasl-bad").await;
    let topic = unique_name("sasl-bad");
    let sink = kafka_sasl_sink(&scene, "audit", &topic, "not-the-password");
    exits_naming_the_sink(&scene, sink, "audit", &["Authentication", "SASL"]).await;
}

#[tokio::test]
async fn a_kafka_sink_with_the_right_sasl_password_delivers() {
    let scene = Scene::new("sasl-ok").await;
    let topic = unique_name("sasl-ok");
    let reader = KafkaTopic::create(&scene.stack, &topic).await;
    let sink = kafka_sasl_sink(&scene, "audit", &topic, &scene.stack.password);
    delivers(&scene, sink, |uid| async move {
        reader
            .wait_until("the pod's added event", LIMIT, |r| {
                r.iter().any(|x| x.ce("k8suid") == uid)
            })
            .await
            .map(drop)
    })
    .await;
}

#[tokio::test]
async fn an_mqtt_sink_whose_password_is_rejected_stops_kubecast_with_exit_1() {
    let scene = Scene::new("mqtt-bad").await;
    let sink = mqtt_auth_sink(&scene, "edge", &unique_name("kc"), "not-the-password");
    exits_naming_the_sink(&scene, sink, "edge", &["refused the connection"]).await;
}

#[tokio::test]
async fn an_mqtt_sink_with_the_right_password_delivers() {
    let scene = Scene::new("mqtt-ok").await;
    let topic = unique_name("kc");
    let subscriber = MqttSubscriber::subscribe(&scene.stack, &format!("{topic}/#")).await;
    let sink = mqtt_auth_sink(&scene, "edge", &topic, &scene.stack.password);
    delivers(&scene, sink, |uid| async move {
        subscriber
            .wait_until("the pod's added event", LIMIT, |m| {
                m.iter().any(|x| x.prop("k8suid") == uid)
            })
            .await
            .map(drop)
    })
    .await;
}

/// Runs kubecast with `sink`, creates a pod, waits until `arrived(uid)` finds its event at
/// the destination, and stops kubecast cleanly.
async fn delivers<F: std::future::Future<Output = Result<(), String>>>(
    scene: &Scene,
    sink: String,
    arrived: impl FnOnce(String) -> F,
) {
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &scene.config("", &[sink]));
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    kubecast.check(arrived(uid).await);
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}
