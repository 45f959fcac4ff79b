//! Chaos: Mosquitto is restarted while pods churn. At QoS 1 nothing is lost: kubecast
//! publishes again whatever the broker had not acknowledged, and a subscriber with a
//! persistent session gets every change. This binary restarts Mosquitto, so it holds this
//! one test.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::churn::Churn;
use support::consume::MqttSubscriber;
use support::kubecast::Kubecast;
use support::observer::{Observer, check_received};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_mosquitto_restart_during_churn_loses_nothing_at_qos_1() {
    let scene = Scene::new("chaos-mqtt").await;
    let stack = &scene.stack;
    let prefix = unique_name("kc-mqtt");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let config = scene.config(
        &format!("state:\n  dir: {}\n", scene.dir.join("state").display()),
        &[scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[])],
    );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;

    let churn = Churn::start(&scene.client, &scene.ns, 50, Duration::from_millis(20));
    kubecast.check(
        mqtt.wait_until("messages before the restart", LIMIT, |m| m.len() >= 20)
            .await,
    );
    stack.script(&["stop", "mosquitto"]);
    // The broker stays away until kubecast has noticed and started retrying.
    kubecast
        .wait_for_log("MQTT connection failed", 2, LIMIT)
        .await;
    stack.script(&["start", "mosquitto"]);
    kubecast.wait_for_log("MQTT connected", 2, LIMIT).await;
    // Churn goes on until delivery has visibly resumed.
    kubecast.check(
        mqtt.wait_for_more("delivery after the restart", 20, LIMIT)
            .await,
    );
    let ops = churn.stop().await;

    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let messages = kubecast.check(mqtt.wait_for_ids(&truth, LIMIT).await);
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("MQTT connection failed"),
        "the restart was noticed:\n{log}"
    );
    let dups = check_received(
        &truth,
        &messages.iter().map(|m| m.prop("id")).collect::<Vec<_>>(),
        "MQTT",
    );
    println!(
        "chaos_mqtt: {ops} API operations, {} changes, lost 0; {} messages, {dups} duplicates (same ids)",
        truth.len(),
        messages.len()
    );
}
