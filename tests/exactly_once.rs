//! The exactly-once Kafka sink through `kill -9`: one replica without a state directory,
//! killed twenty times at random moments while 50 pods churn (and 10 sit still). An
//! independent observer (its own watch) records the truth; in the end a `read_committed`
//! consumer holds every change it saw exactly once, a `read_uncommitted` one may hold more,
//! and the MQTT sink beside it lost nothing (its duplicates keep their ids).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber, Record};
use support::kubecast::Kubecast;
use support::observer::Observer;
use support::scene::{Scene, exactly_once};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const STABLE: usize = 10;
const CHURNING: usize = 50;
const KILLS: usize = 20;

#[tokio::test]
async fn twenty_kill_9s_leave_every_change_exactly_once_for_read_committed_consumers() {
    let scene = Scene::new("eos-kill").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-eos");
    let committed = KafkaTopic::create(stack, &topic).await;
    let uncommitted = KafkaTopic::read(stack, &topic, "read_uncommitted");
    let prefix = unique_name("kc-eos");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let stable_uids = scene.pods.create_each("stable", STABLE).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let eos = exactly_once("eos-kill");
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    // No state directory: the state lives in Kafka.
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("kafka", &topic, &eos),
            scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[]),
        ],
    );
    let kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.check(
        committed
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
            "took over the exactly-once sink",
            |round, k| {
                assert_eq!(
                    k.count_in_log("committed_seq=0"),
                    0,
                    "round {round}: the checkpoint was read:\n{}",
                    k.log()
                );
            },
        )
        .await;
    kubecast.check(
        committed
            .wait_for_more("delivery after the last restart", 20, LIMIT)
            .await,
    );
    let ops = churn.stop().await;

    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let records = kubecast.check(committed.wait_for_ids(&want, LIMIT).await);
    let messages = kubecast.check(mqtt.wait_for_ids(&want, LIMIT).await);
    // The uncommitted reader holds at least what the committed one does.
    let everything = kubecast.check(
        uncommitted
            .wait_until("the uncommitted reader to catch up", LIMIT, |r| {
                r.len() >= records.len()
            })
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");

    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &records {
        *times.entry(r.ce("id")).or_default() += 1;
    }
    let duplicated: Vec<(&&str, &usize)> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "read_committed saw these more than once: {duplicated:?}\nlogs of the killed runs:\n{}",
        logs.join("\n----\n")
    );
    let phantom: Vec<&&str> = times.keys().filter(|id| !want.contains(**id)).collect();
    assert!(
        phantom.is_empty(),
        "changes the apiserver never reported: {phantom:?}"
    );
    assert_eq!(times.len(), want.len(), "every observed change once");
    for uid in &stable_uids {
        let n = records.iter().filter(|r| r.ce("k8suid") == uid).count();
        assert_eq!(n, 1, "stable pod {uid} was emitted {n} times");
    }
    for m in &messages {
        assert!(
            want.contains(m.prop("id")),
            "MQTT carried {}, never reported",
            m.prop("id")
        );
    }
    let mqtt_dups = messages.len()
        - messages
            .iter()
            .map(|m| m.prop("id"))
            .collect::<BTreeSet<_>>()
            .len();
    println!(
        "exactly_once kill: {KILLS} kills, {ops} API operations, {} changes observed; read_committed {} records (0 duplicates, 0 lost); read_uncommitted {} records ({} from aborted transactions, {} of them duplicates of committed ids); MQTT {} messages ({mqtt_dups} duplicates, 0 lost)",
        want.len(),
        records.len(),
        everything.len(),
        everything.len() - records.len(),
        uncommitted_duplicates(&everything),
        messages.len(),
    );
}

/// How many records beyond the first carry an id already seen.
fn uncommitted_duplicates(records: &[Record]) -> usize {
    records.len()
        - records
            .iter()
            .map(|r| r.ce("id"))
            .collect::<BTreeSet<_>>()
            .len()
}

#[tokio::test]
async fn unreachable_brokers_are_waited_for_at_take_over_and_sigterm_still_stops_it() {
    let scene = Scene::new("eos-unreachable").await;
    let eos = exactly_once("eos-unreachable");
    let mut lines = vec![
        "type: kafka".to_string(),
        "brokers: 127.0.0.1:1".to_string(),
        "topic: nowhere".to_string(),
    ];
    lines.extend(eos);
    let sink = format!(
        "  kafka:\n{}",
        lines
            .iter()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    let config = scene.config("", &[sink]);
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast
        .wait_for_log("Kafka not reachable yet, retrying", 1, LIMIT)
        .await;
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(
        code,
        Some(0),
        "SIGTERM during the take-over stops it cleanly:\n{log}"
    );
}
