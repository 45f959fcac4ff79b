//! Per-pod order under concurrency: many pods changing at once, and each pod's events still
//! arrive complete and in order, in one Kafka partition and on one MQTT topic, with an
//! unbroken resourceVersion chain. Also: MQTT retained state follows the pod and an empty
//! retained message clears it on delete.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::kubecast::Kubecast;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(90);
const PODS: usize = 12;
const LABEL_CHANGES: usize = 6;

/// (type suffix, rv, prev rv) per event, as a chain check needs them.
type Chain = Vec<(String, String, String)>;

fn check_chain(who: &str, chain: &Chain) {
    let kinds: Vec<&str> = chain
        .iter()
        .map(|(t, _, _)| t.rsplit('.').next().unwrap_or_default())
        .collect();
    let mut want = vec!["added"];
    // The label changes, Running, and deletionTimestamp set.
    want.extend(std::iter::repeat_n("modified", LABEL_CHANGES + 2));
    want.push("deleted");
    assert_eq!(kinds, want, "{who}: every change, in order");
    for w in chain.windows(2) {
        assert_eq!(
            w[1].2, w[0].1,
            "{who}: each event names the previous one's resourceVersion"
        );
    }
}

#[tokio::test]
async fn each_pods_events_keep_their_order_while_many_pods_change_at_once() {
    let scene = Scene::new("order").await;
    let topic = unique_name("kc-order");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let prefix = unique_name("kc-order");
    let mqtt = MqttSubscriber::subscribe(&scene.stack, &format!("{prefix}/#")).await;
    let config = scene.config(
        "encoding:\n  data: summary\n",
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[]),
        ],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;

    let pods = &scene.pods;
    let names: Vec<String> = (0..PODS).map(|i| format!("p{i}")).collect();
    join_all(names.iter().map(|name| {
        let pods = &pods;
        async move {
            pods.create(name).await;
            for i in 0..LABEL_CHANGES {
                pods.label(name, "step", &i.to_string()).await;
            }
            pods.running(name, 0).await;
            pods.delete(name).await;
        }
    }))
    .await;

    // Per pod: added, the label changes, Running, deletionTimestamp set, deleted.
    let per_pod = LABEL_CHANGES + 4;
    let total = PODS * per_pod;
    let records = kubecast.check(
        kafka
            .wait_until("every pod's events", LIMIT, |r| r.len() >= total)
            .await,
    );
    let messages = kubecast.check(
        mqtt.wait_until("every pod's messages", LIMIT, |m| m.len() >= total)
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(records.len(), total, "no duplicates in Kafka");
    assert_eq!(messages.len(), total, "no duplicates over MQTT");

    // Kafka: per partition in offset order, then per pod.
    let mut sorted = records.clone();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut kafka_chains: BTreeMap<String, (i32, Chain)> = BTreeMap::new();
    for r in &sorted {
        let entry = kafka_chains
            .entry(r.ce("k8sname").to_string())
            .or_insert((r.partition, Vec::new()));
        assert_eq!(
            entry.0,
            r.partition,
            "pod {}: all events in one partition",
            r.ce("k8sname")
        );
        entry.1.push((
            r.ce("type").into(),
            r.ce("k8srv").into(),
            r.ce("k8sprevrv").into(),
        ));
        assert_eq!(r.ce("dataschema"), "urn:kubecast:schema:pod-summary:v1");
        support::schema::assert_follows(
            r.ce("dataschema"),
            &r.json(),
            &format!("record {}/{}", r.partition, r.offset),
        );
    }
    assert_eq!(kafka_chains.len(), PODS);
    for (name, (_, chain)) in &kafka_chains {
        check_chain(&format!("Kafka, pod {name}"), chain);
    }
    let partitions: std::collections::BTreeSet<i32> =
        kafka_chains.values().map(|(p, _)| *p).collect();
    assert!(
        partitions.len() > 1,
        "{PODS} pods spread over more than one partition: {partitions:?}"
    );

    // MQTT: in arrival order per topic.
    let mut mqtt_chains: BTreeMap<String, Chain> = BTreeMap::new();
    for m in &messages {
        let chain = mqtt_chains.entry(m.topic.clone()).or_default();
        chain.push((
            m.prop("type").into(),
            m.prop("k8srv").into(),
            m.prop("k8sprevrv").into(),
        ));
    }
    assert_eq!(mqtt_chains.len(), PODS);
    for (topic, chain) in &mqtt_chains {
        check_chain(&format!("MQTT, topic {topic}"), chain);
    }
}

#[tokio::test]
async fn retained_mqtt_state_follows_the_pod_and_is_cleared_on_delete() {
    let scene = Scene::new("retain").await;
    let stack = &scene.stack;
    let prefix = unique_name("kc-retain");
    let live = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let config = scene.config(
        "",
        &[scene.mqtt_sink(
            "mqtt",
            &prefix,
            &format!("{prefix}/{{namespace}}/{{name}}"),
            &["retain: true"],
        )],
    );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let pods = &scene.pods;
    pods.create("r1").await;
    let labelled = pods.label("r1", "stage", "two").await;
    kubecast.check(live.wait_until("two events", LIMIT, |m| m.len() >= 2).await);

    // A subscriber that arrives later gets the latest state, retained.
    let late = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let got = kubecast.check(
        late.wait_until("the retained state", LIMIT, |m| !m.is_empty())
            .await,
    );
    assert!(got[0].retain, "delivered as a retained message");
    assert_eq!(
        got[0].prop("k8srv"),
        labelled["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
    );

    pods.delete("r1").await;
    // added, modified, deletionTimestamp, deleted, and the empty retained message.
    let all = kubecast.check(
        live.wait_until("the delete and the clearing message", LIMIT, |m| {
            m.len() >= 5
        })
        .await,
    );
    assert_eq!(all[3].prop("type"), "io.k8s.core.v1.pod.deleted");
    assert!(
        all[4].payload.is_empty(),
        "an empty message clears the retained state"
    );
    let after = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    // The broker sends retained messages right after the SUBACK; a marker published after
    // subscribing proves that nothing retained came before it.
    let marker = format!("{prefix}/marker");
    support::consume::publish_marker(stack, &marker).await;
    let seen = kubecast.check(
        after
            .wait_until("the marker", LIMIT, |m| m.iter().any(|x| x.topic == marker))
            .await,
    );
    assert_eq!(
        seen.len(),
        1,
        "no retained pod state is left after the delete: {:?}",
        seen.iter().map(|m| &m.topic).collect::<Vec<_>>()
    );
    kubecast.stop(LIMIT).await;
}
