//! The local Mosquitto is the real thing: an MQTT 5 publish at QoS 1 with user properties and
//! a content type is acknowledged by a PUBACK for its packet id, and a subscriber receives it
//! with the properties intact.

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
