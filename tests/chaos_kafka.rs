//! Chaos: the Kafka broker is stopped for 60 seconds while pods churn, then started again.
//! Nothing is lost, kubecast's queue for Kafka stays within its limit (the watch waits
//! instead), and delivery resumes on its own. A `kubecast replay --follow` of the topic runs
//! through the outage: it waits for the broker, says so, and prints every change once it is
//! back. This binary stops Kafka, so it holds this one test.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::follow::Follow;
use support::kubecast::Kubecast;
use support::observer::{Observer, check_received, has_all, peak_events};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(180);
const OUTAGE: Duration = Duration::from_secs(60);
const QUEUE: usize = 64;
const IN_FLIGHT: usize = 100;
const C_QUEUE: usize = 16;
const C_IN_FLIGHT: usize = 8;

/// Resident memory of process `pid` in KiB, from /proc.
#[tokio::test]
async fn a_kafka_outage_of_a_minute_loses_nothing_and_keeps_the_queue_bounded() {
    let scene = Scene::new("chaos-kafka").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-outage");
    let kafka = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-outage");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let kafka_extra = format!("queue: {{events: {QUEUE}}}\nin_flight: {IN_FLIGHT}");
    let config = scene.config(
        &format!("state:\n  dir: {}\n", scene.dir.join("state").display()),
        &[
            scene.kafka_sink("kafka", &topic, &[&kafka_extra]),
            scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[]),
        ],
    );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    // A second kubecast through the same outage, its Kafka sink coalescing when full.
    let topic_c = unique_name("kc-coalesce");
    let kafka_c = KafkaTopic::create(stack, &topic_c).await;
    let dir_c = scene.dir.join("coalesce");
    std::fs::create_dir_all(&dir_c).expect("creating a directory");
    let coalesce_extra =
        format!("queue: {{events: {C_QUEUE}, when_full: coalesce}}\nin_flight: {C_IN_FLIGHT}");
    let config_c = scene.config(
        &format!("state:\n  dir: {}\n", dir_c.join("state").display()),
        &[scene.kafka_sink("kafka", &topic_c, &[&coalesce_extra])],
    );
    let mut coalescing = Kubecast::start(stack, &dir_c, &config_c);
    coalescing.wait_for_log("list complete", 1, LIMIT).await;

    // A follow from the start, whose stall bound outlasts the outage.
    let mut follow = Follow::start(
        stack,
        &topic,
        &["--from-offset", "0", "--stall-seconds", "300"],
    )
    .await;
    let churn = Churn::start(&scene.client, &scene.ns, 50, Duration::from_millis(50));
    kubecast.check(
        kafka
            .wait_until("events before the outage", LIMIT, |r| r.len() >= 20)
            .await,
    );
    stack.script(&["stop", "kafka"]);
    // The outage lasts OUTAGE (the scenario asks for at least a minute); meanwhile
    // kubecast's resident memory is sampled each second for the record.
    let outage = tokio::time::Instant::now();
    let mut sampling = tokio::time::interval(Duration::from_secs(1));
    let mut rss_kib = Vec::new();
    while outage.elapsed() < OUTAGE {
        sampling.tick().await;
        rss_kib.extend(support::proc::status_kib(kubecast.pid(), "VmRSS"));
    }
    let before_restart = kubecast.count_in_log("Kafka unavailable");
    stack.script(&["start", "kafka"]);
    // Churn goes on until delivery has visibly resumed.
    kubecast.check(
        kafka
            .wait_for_more("delivery after Kafka is back", 20, LIMIT)
            .await,
    );
    let ops = churn.stop().await;

    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let records = kubecast.check(kafka.wait_for_ids(&truth, LIMIT).await);
    let messages = kubecast.check(mqtt.wait_for_ids(&truth, LIMIT).await);
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        before_restart > 0,
        "the outage was noticed and logged:\n{log}"
    );
    // The follow waited the outage out and printed every change.
    assert!(
        follow.running(),
        "replay --follow ended during the outage; it said:\n{}",
        follow.said()
    );
    let want: Vec<String> = truth.iter().cloned().collect();
    if let Err(e) = follow.wait_for_ids(&want, LIMIT).await {
        panic!("{e}");
    }
    let said = follow.said();
    assert!(
        said.contains("the brokers do not answer") && said.contains("the brokers answer again"),
        "the follow says that it waits for the brokers, and when they are back:\n{said}"
    );
    let (code, said) = follow.interrupt().await;
    assert_eq!(code, Some(0), "{said}");

    let kafka_dups = check_received(
        &truth,
        &records.iter().map(|r| r.ce("id")).collect::<Vec<_>>(),
        "Kafka",
    );
    let mqtt_dups = check_received(
        &truth,
        &messages.iter().map(|m| m.prop("id")).collect::<Vec<_>>(),
        "MQTT",
    );
    let peak = peak_events(&log, "kafka")
        .unwrap_or_else(|| panic!("no sink totals for kafka in the log:\n{log}"));
    assert!(
        peak <= QUEUE + IN_FLIGHT + 1,
        "kafka held {peak} events at most; its limit is {QUEUE} queued + {IN_FLIGHT} in flight"
    );
    // The coalescing sink: every pod ends in its right final state, with fewer events.
    let changes = observer.changes();
    let mut last: std::collections::BTreeMap<&str, String> = std::collections::BTreeMap::new();
    for c in &changes {
        last.insert(c.uid.as_str(), c.id());
    }
    let finals: BTreeSet<String> = last.values().cloned().collect();
    let got_c = coalescing.check(
        kafka_c
            .wait_until("every pod's final state", LIMIT, |r| {
                has_all(&finals, r.iter().map(|x| x.ce("id")))
            })
            .await,
    );
    let (code, log_c) = coalescing.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log_c}");
    let mut sorted = got_c.clone();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    let mut last_c: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    for r in &sorted {
        assert!(
            truth.contains(r.ce("id")),
            "coalescing: {} is a change the apiserver never reported",
            r.ce("id")
        );
        last_c.insert(r.ce("k8suid").to_string(), r.ce("id").to_string());
    }
    for (uid, id) in &last {
        assert_eq!(
            last_c.get(*uid),
            Some(id),
            "coalescing: pod {uid} ends in its final state"
        );
    }
    let peak_c = peak_events(&log_c, "kafka").unwrap_or_default();
    assert!(
        peak_c <= C_QUEUE + C_IN_FLIGHT + 1,
        "the coalescing sink held {peak_c} events at most"
    );
    let coalesced: usize = log_c
        .lines()
        .find(|l| l.contains("sink totals"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("coalesced="))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        coalesced > 0,
        "the full queue coalesced something:\n{log_c}"
    );
    println!(
        "chaos_kafka (coalesce): {} records for {} changes, {coalesced} coalesced, peak {peak_c} events (limit {}), every pod's final state right",
        got_c.len(),
        truth.len(),
        C_QUEUE + C_IN_FLIGHT + 1
    );
    let peak_bytes = log
        .lines()
        .find(|l| l.contains("sink totals") && l.contains("sink=kafka "))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("peak_bytes="))
        })
        .unwrap_or("?")
        .to_string();
    println!(
        "chaos_kafka: kubecast's resident memory during the outage: {} to {} KiB; peak data held by the Kafka sink {peak_bytes} bytes",
        rss_kib.iter().min().unwrap_or(&0),
        rss_kib.iter().max().unwrap_or(&0)
    );
    println!(
        "chaos_kafka: {}s outage, {ops} API operations, {} changes, lost 0; peak held by the Kafka sink {peak} events (limit {}); Kafka duplicates {kafka_dups}, MQTT duplicates {mqtt_dups}; relisted: {}",
        OUTAGE.as_secs(),
        truth.len(),
        QUEUE + IN_FLIGHT + 1,
        log.contains("410 Gone")
    );
}
