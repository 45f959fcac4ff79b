//! Chaos: `kill -9` of kubecast ten times at random moments while 50 pods churn (and 10 sit
//! still). An independent observer (its own watch) records the truth; in the end Kafka and MQTT hold
//! every change it saw, every duplicate carries the original's id, and pods that did not
//! change are never emitted again after a restart.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::kubecast::Kubecast;
use support::observer::Observer;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const STABLE: usize = 10;
const CHURNING: usize = 50;
const KILLS: usize = 10;

#[tokio::test]
async fn every_change_arrives_through_ten_kill_9s_and_duplicates_keep_their_ids() {
    let scene = Scene::new("chaos-kill").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-chaos");
    let kafka = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-chaos");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let stable_uids = scene.pods.create_each("stable", STABLE).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let state = scene.dir.join("state");
    let config = scene.config(
        &format!("state:\n  dir: {}\n", state.display()),
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[]),
        ],
    );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    kubecast.check(
        kafka
            .wait_until("the stable pods' events", LIMIT, |r| r.len() >= STABLE)
            .await,
    );

    let churn = Churn::start(&scene.client, &scene.ns, CHURNING, Duration::ZERO);

    let (kubecast, logs) = kubecast
        .kill_at_random(
            stack,
            &scene.dir,
            &config,
            KILLS,
            "state restored",
            |round, k| {
                assert!(
                    k.count_in_log("fresh=false") == 1,
                    "round {round}: the state was restored:\n{}",
                    k.log()
                );
            },
        )
        .await;
    // Churn goes on until the last restart has visibly resumed delivery.
    kubecast.check(
        kafka
            .wait_for_more("delivery after the last restart", 20, LIMIT)
            .await,
    );
    let ops = churn.stop().await;

    // The truth, once the observer has caught up with the last change: every change as an id.
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth = observer.changes();
    let want: BTreeSet<String> = truth.iter().map(|c| c.id()).collect();
    let got_all = |ids: &mut dyn Iterator<Item = String>| {
        let have: BTreeSet<String> = ids.collect();
        want.is_subset(&have)
    };
    let records = kubecast.check(
        kafka
            .wait_until("every change in Kafka", LIMIT, |r| {
                got_all(&mut r.iter().map(|x| x.ce("id").to_string()))
            })
            .await,
    );
    let messages = kubecast.check(
        mqtt.wait_until("every change over MQTT", LIMIT, |m| {
            got_all(&mut m.iter().map(|x| x.prop("id").to_string()))
        })
        .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");

    // Every record is a change the observer saw, and the same change always has one id.
    let mut ids_of_change: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for r in &records {
        let id = r.ce("id").to_string();
        if !want.contains(&id) {
            let uid = r.ce("k8suid");
            let seen: Vec<String> = truth
                .iter()
                .filter(|c| c.uid == uid)
                .map(|c| format!("{} {}", c.kind, c.rv))
                .collect();
            let sent: Vec<String> = records
                .iter()
                .filter(|x| x.ce("k8suid") == uid)
                .map(|x| format!("{} prev={}", x.ce("id"), x.ce("k8sprevrv")))
                .collect();
            panic!(
                "Kafka holds {id}, a change the apiserver never reported.\nthe observer saw for this pod: {seen:?}\nKafka holds for it: {sent:?}\nlogs of the killed runs:\n{}",
                logs.join("\n----\n")
            );
        }
        let kind = r
            .ce("type")
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_string();
        let rv = if kind == "deleted" {
            String::new()
        } else {
            r.ce("k8srv").to_string()
        };
        ids_of_change
            .entry((r.ce("k8suid").to_string(), rv, kind))
            .or_default()
            .insert(id);
    }
    for (change, ids) in &ids_of_change {
        assert_eq!(
            ids.len(),
            1,
            "{change:?} was sent under several ids: {ids:?}"
        );
    }
    for m in &messages {
        assert!(
            want.contains(m.prop("id")),
            "MQTT carried {}, a change the apiserver never reported",
            m.prop("id")
        );
    }
    // Pods that never changed were emitted once (redeliveries of that one event aside).
    for uid in &stable_uids {
        let ids: BTreeSet<&str> = records
            .iter()
            .filter(|r| r.ce("k8suid") == uid)
            .map(|r| r.ce("id"))
            .collect();
        assert_eq!(ids.len(), 1, "stable pod {uid} was emitted as {ids:?}");
    }
    let kafka_dups = records.len()
        - records
            .iter()
            .map(|r| r.ce("id"))
            .collect::<BTreeSet<_>>()
            .len();
    let mqtt_dups = messages.len()
        - messages
            .iter()
            .map(|m| m.prop("id"))
            .collect::<BTreeSet<_>>()
            .len();
    println!(
        "chaos_kill: {} kills, {} API operations, {} changes observed, lost 0; Kafka {} records ({} duplicates, all with the original id), MQTT {} messages ({} duplicates)",
        KILLS,
        ops,
        want.len(),
        records.len(),
        kafka_dups,
        messages.len(),
        mqtt_dups
    );
}
