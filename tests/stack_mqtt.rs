//! The local Mosquitto is the real thing: an MQTT 5 publish at QoS 1 with user properties and
//! a content type is acknowledged by a PUBACK for its packet id, and a subscriber receives it
//! with the properties intact. Two kubecasts with one client id, over MQTT 5 and 3.1.1: the
//! broker hands the session from one to the other; each says so and backs off.

mod support;

use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use support::{Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(30);

fn client(stack: &Stack, id: &str) -> (AsyncClient, EventLoop) {
    let mut options = MqttOptions::new(id, &stack.mqtt_host, stack.mqtt_port);
    options.set_keep_alive(Duration::from_secs(10));
    AsyncClient::new(options, 16)
}

/// Polls the event loop until `pick` returns a value; connection errors fail the test.
async fn next_matching<T>(events: &mut EventLoop, mut pick: impl FnMut(&Event) -> Option<T>) -> T {
    loop {
        let event = events.poll().await.expect("MQTT connection");
        if let Some(found) = pick(&event) {
            return found;
        }
    }
}

#[tokio::test]
async fn publishes_at_qos1_with_user_properties_and_a_subscriber_receives_them() {
    let stack = Stack::load();
    let topic = format!("kubecast-test/{}/pod", unique_name("mqtt"));

    let (subscriber, mut sub_events) = client(&stack, &unique_name("sub"));
    subscriber
        .subscribe(&topic, QoS::AtLeastOnce)
        .await
        .expect("queueing SUBSCRIBE");
    within(
        LIMIT,
        "the SUBACK",
        next_matching(&mut sub_events, |e| {
            matches!(e, Event::Incoming(Packet::SubAck(_))).then_some(())
        }),
    )
    .await;

    let (publisher, mut pub_events) = client(&stack, &unique_name("pub"));
    let properties = PublishProperties {
        content_type: Some("application/json".into()),
        user_properties: vec![
            ("specversion".into(), "1.0".into()),
            ("id".into(), "uid-1:42:modified".into()),
        ],
        ..Default::default()
    };
    let payload = Bytes::from_static(br#"{"metadata":{"name":"web"}}"#);
    publisher
        .publish_with_properties(
            &topic,
            QoS::AtLeastOnce,
            false,
            payload.clone(),
            properties.clone(),
        )
        .await
        .expect("queueing PUBLISH");
    // The PUBACK must answer the packet id the publish went out with.
    let pkid = within(
        LIMIT,
        "the PUBLISH to go out",
        next_matching(&mut pub_events, |e| match e {
            Event::Outgoing(rumqttc::Outgoing::Publish(pkid)) => Some(*pkid),
            _ => None,
        }),
    )
    .await;
    assert_ne!(pkid, 0, "a QoS 1 publish has a packet id");
    within(
        LIMIT,
        "the PUBACK for the publish",
        next_matching(&mut pub_events, |e| match e {
            Event::Incoming(Packet::PubAck(ack)) if ack.pkid == pkid => Some(()),
            _ => None,
        }),
    )
    .await;

    let received: Publish = within(
        LIMIT,
        "the message at the subscriber",
        next_matching(&mut sub_events, |e| match e {
            Event::Incoming(Packet::Publish(p)) => Some(p.clone()),
            _ => None,
        }),
    )
    .await;
    assert_eq!(received.topic, topic.as_bytes());
    assert_eq!(received.payload, payload);
    assert_eq!(received.qos, QoS::AtLeastOnce);
    let got = received.properties.expect("MQTT 5 properties");
    assert_eq!(got.content_type, properties.content_type);
    assert_eq!(got.user_properties, properties.user_properties);
}

/// Two kubecasts with one `client_id` (the same cluster name, say): each connection takes the
/// other's session. Each names the client id at ERROR, readiness says why, and the reconnects
/// back off instead of trading the session every few milliseconds.
async fn two_kubecasts_sharing_a_client_id_back_off(protocol: &str) {
    use support::http::{free_port, get};
    use support::kubecast::Kubecast;
    use support::scene::Scene;
    let scene = Scene::new(&format!("mqtt-takeover-{protocol}")).await;
    let id = unique_name("kc-same");
    let ports = [free_port(), free_port()];
    let mut kubecasts: Vec<Kubecast> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let config = scene.config(
                &format!("metrics: {{address: '127.0.0.1:{port}'}}\n"),
                &[scene.mqtt_sink(
                    "edge",
                    &id,
                    &format!("{id}/{{name}}"),
                    &[&format!("protocol: {protocol}")],
                )],
            );
            let dir = scene.dir.join(format!("k{i}"));
            std::fs::create_dir_all(&dir).expect("a directory of its own");
            Kubecast::start(&scene.stack, &dir, &config)
        })
        .collect();
    let needle = format!("the MQTT session of client_id `{id}` was taken over");
    // Whichever connected first loses its session to the other, and says so.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut said = None;
    while said.is_none() {
        for (k, port) in kubecasts.iter().zip(ports) {
            if let Ok((503, body)) = get(port, "/readyz").await
                && body.contains(&needle)
            {
                said = Some(k.count_in_log(&needle));
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no kubecast's readiness named the taken-over session within 60 s; their logs:\n{}\n---\n{}",
            kubecasts[0].log(),
            kubecasts[1].log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        kubecasts.iter().any(|k| k
            .log()
            .lines()
            .any(|l| l.contains(&needle) && l.contains("ERROR"))),
        "an ERROR names the client id"
    );
    // Twenty seconds of the two fighting: a reconnect every few hundred milliseconds at most
    // at first, then further and further apart (a fixed 100 ms would be about 200 connects).
    let before: usize = kubecasts
        .iter()
        .map(|k| k.count_in_log("MQTT connected"))
        .sum();
    let watched = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < watched {
        for (i, k) in kubecasts.iter_mut().enumerate() {
            assert!(
                k.running(),
                "kubecast {i} exited while the two fought for the session; its log:\n{}",
                k.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after: usize = kubecasts
        .iter()
        .map(|k| k.count_in_log("MQTT connected"))
        .sum();
    assert!(
        after - before <= 16,
        "{} connects in 20 s: the backoff did not grow; logs:\n{}\n---\n{}",
        after - before,
        kubecasts[0].log(),
        kubecasts[1].log()
    );
    for (i, k) in kubecasts.into_iter().enumerate() {
        let (code, log) = k.stop(LIMIT).await;
        assert_eq!(
            code,
            Some(0),
            "kubecast {i} did not stop cleanly; its log:\n{log}"
        );
    }
}

#[tokio::test]
async fn two_kubecasts_sharing_a_client_id_over_mqtt_5_say_so_and_back_off() {
    two_kubecasts_sharing_a_client_id_back_off("v5").await;
}

#[tokio::test]
async fn two_kubecasts_sharing_a_client_id_over_mqtt_3_1_1_say_so_and_back_off() {
    two_kubecasts_sharing_a_client_id_back_off("v311").await;
}
