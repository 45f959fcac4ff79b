//! Routes and alerts under high availability: two replicas elect a leader, with routes (a
//! change predicate into one Kafka topic, alerts into another, everything to MQTT) and a
//! `for` rule, and an exactly-once Kafka sink. The leader is killed with `kill -9` while the
//! rule's timer is pending, and again while its alert is firing. The timer fires on the new
//! leader at its original deadline, each route's chain runs through both failovers with no
//! gap, a `read_committed` consumer sees every event once, and the ids are those of a single
//! kubecast (no leader election) that ran throughout.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::json;
use support::consume::{KafkaTopic, Record};
use support::kubecast::{Kubecast, scratch_dir};
use support::replicas::Replicas;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(90);
/// The rule's `for`, in seconds: long enough to kill the leader and take over inside it.
const FOR: i64 = 10;

/// Routes and the rule; `phases` goes to the Kafka sink's own topic, `page` to `alerts`.
fn routing(alerts: &str) -> String {
    format!(
        "alerts:\n  restarts: {{enabled: false}}\n  failed: {{enabled: false}}\n  not_ready: {{enabled: false}}\n  oom_killed: {{enabled: false}}\n  unscheduled: {{enabled: false}}\n  rules:\n    bad:\n      expr: 'metadata.labels.state == \"bad\"'\n      for: {FOR}s\n      severity: critical\n\
routes:\n  phases:\n    sinks: [kafka]\n    changes: [phase]\n  page:\n    sinks: [kafka]\n    types: [alerts]\n    topic: {alerts}\n  edge:\n    sinks: [mqtt]\n"
    )
}

fn time(v: &serde_json::Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("{v} is not RFC 3339: {e}"))
}

/// Records of `status` (`firing`, `resolved`) in an alert topic.
fn alerts<'a>(records: &'a [Record], status: &str) -> Vec<&'a Record> {
    let kind = format!("io.kubecast.alert.{status}");
    records.iter().filter(|r| r.ce("type") == kind).collect()
}

fn ids(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.ce("id").to_string()).collect()
}

/// Each id once; otherwise the ids seen more than once.
fn each_once(what: &str, records: &[Record]) {
    let mut seen = BTreeMap::<String, usize>::new();
    for id in ids(records) {
        *seen.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{what}: ids read more than once: {twice:?}"
    );
}

/// Each object's events link (`k8sprevrv`) to the one before them in the topic: no gap.
fn gapless(what: &str, records: &[Record]) {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for r in records {
        let (uid, rv, prev) = (r.ce("k8suid"), r.ce("k8srv"), r.ce("k8sprevrv"));
        let want = last.get(uid).copied().unwrap_or_default();
        assert_eq!(
            prev,
            want,
            "{what}: {} links to {prev:?}, but the one before it is at {want:?}",
            r.ce("id")
        );
        last.insert(uid, rv);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_for_and_a_firing_alert_survive_leader_kills_with_gapless_routes_and_one_replicas_ids()
 {
    let scene = Scene::new("ha-alerts").await;
    let stack = &scene.stack;
    let (changes_topic, alerts_topic) =
        (unique_name("kc-hal-changes"), unique_name("kc-hal-alerts"));
    let changes = KafkaTopic::create(stack, &changes_topic).await;
    let page = KafkaTopic::create(stack, &alerts_topic).await;
    let prefix = unique_name("kc-hal");
    let mut replicas =
        Replicas::start_with(&scene, 2, &changes_topic, &prefix, &routing(&alerts_topic));

    // One kubecast without leader election, into topics of its own, for the ids.
    let (single_changes, single_alerts) =
        (unique_name("kc-hal-one"), unique_name("kc-hal-one-alerts"));
    let single_read = KafkaTopic::create(stack, &single_changes).await;
    let single_page = KafkaTopic::create(stack, &single_alerts).await;
    let single_config = scene.config(
        &routing(&single_alerts),
        &[
            scene.kafka_sink("kafka", &single_changes, &[]),
            scene.mqtt_sink("mqtt", &unique_name("kc-hal-one"), "kc-hal-one/{name}", &[]),
        ],
    );
    let mut single = Kubecast::start(stack, &scratch_dir("ha-alerts-single"), &single_config);
    single.wait_for_log("list complete", 1, LIMIT).await;
    replicas.leader(LIMIT).await;

    let pods = &scene.pods;
    let pod = pods
        .create_with("slow", json!({}), json!({"state": "bad"}))
        .await;
    let created = Instant::now();
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The leader committed the pod's first event: the pending episode is committed with it.
    if let Err(e) = changes
        .wait_until("the pod's added event", LIMIT, |r| {
            r.iter().any(|x| x.ce("k8suid") == uid)
        })
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    let leader = replicas.leader(LIMIT).await;
    assert!(
        created.elapsed() < Duration::from_secs(FOR as u64 - 4),
        "the kill must come while the timer is pending ({:?} after the pod)",
        created.elapsed()
    );
    let first = replicas.kill_and_replace(&scene, leader).await;

    let fired = match page
        .wait_until("the firing alert", LIMIT, |r| {
            !alerts(r, "firing").is_empty()
        })
        .await
    {
        Ok(r) => alerts(&r, "firing")[0].clone(),
        Err(e) => panic!("{e}\n{}\nkilled:\n{first}", replicas.logs()),
    };
    let deadline = time(&fired.json()["beganAt"]) + jiff::SignedDuration::from_secs(FOR);
    let late = time(&json!(fired.ce("time"))).duration_since(deadline);
    println!("the alert fired {late:?} after its original deadline, on the new leader");
    assert!(
        late >= jiff::SignedDuration::ZERO && late <= jiff::SignedDuration::from_secs(1),
        "fired {late:?} after its deadline {deadline}"
    );
    assert!(
        !first.contains("alert firing"),
        "the killed leader fired it already:\n{first}"
    );

    // A phase change while the alert fires, then the second kill.
    pods.status("slow", json!({"phase": "Running"})).await;
    let phases_before = changes.records().len();
    if let Err(e) = changes
        .wait_until("the phase change", LIMIT, |r| r.len() > phases_before)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    let leader = replicas.leader(LIMIT).await;
    let second = replicas.kill_and_replace(&scene, leader).await;
    replicas.leader(LIMIT).await;

    // Out of its episode and gone, on whichever leader there is now.
    pods.label("slow", "state", "good").await;
    pods.status("slow", json!({"phase": "Succeeded"})).await;
    pods.delete("slow").await;
    let deleted = format!("{uid}:deleted");
    let resolved = |r: &[Record]| !alerts(r, "resolved").is_empty();
    let gone = |r: &[Record]| r.iter().any(|x| x.ce("id") == deleted);
    type Done<'a> = &'a dyn Fn(&[Record]) -> bool;
    let replica_logs = || format!("{}\nkilled:\n{first}\n----\n{second}", replicas.logs());
    let single_log = || single.log();
    let waits: [(&KafkaTopic, &str, Done, &dyn Fn() -> String); 4] = [
        (&page, "the resolved alert", &resolved, &replica_logs),
        (&changes, "the delete", &gone, &replica_logs),
        (
            &single_page,
            "the single kubecast's resolved alert",
            &resolved,
            &single_log,
        ),
        (&single_read, "its delete", &gone, &single_log),
    ];
    for (topic, what, done, log) in waits {
        if let Err(e) = topic.wait_until(what, LIMIT, done).await {
            panic!("{e}\n{}", log());
        }
    }

    let (changed, paged) = (changes.records(), page.records());
    each_once("phases (read_committed)", &changed);
    each_once("page (read_committed)", &paged);
    gapless("route phases", &changed);
    gapless("route page", &paged);
    let kinds: Vec<&str> = changed.iter().map(|r| r.ce("type")).collect();
    assert_eq!(
        kinds,
        [
            "io.k8s.core.v1.pod.added",
            "io.k8s.core.v1.pod.modified",
            "io.k8s.core.v1.pod.modified",
            "io.k8s.core.v1.pod.deleted"
        ],
        "route phases: the pod's phases only (not its label change), across both kills"
    );
    assert_eq!(alerts(&paged, "firing").len(), 1, "{:?}", ids(&paged));
    assert_eq!(alerts(&paged, "resolved").len(), 1, "{:?}", ids(&paged));
    assert_eq!(
        ids(&fired_and_resolved(&paged)),
        vec![
            format!("{uid}:{}:alert:bad:firing", changed[0].ce("k8srv")),
            format!("{uid}:{}:alert:bad:resolved", changed[0].ce("k8srv")),
        ],
        "the episode began at the pod's added event"
    );
    let single_ids: BTreeSet<String> = ids(&single_read.records())
        .into_iter()
        .chain(ids(&single_page.records()))
        .collect();
    let ha_ids: BTreeSet<String> = ids(&changed).into_iter().chain(ids(&paged)).collect();
    assert_eq!(
        ha_ids, single_ids,
        "the replicas' ids are a single kubecast's"
    );

    let (code, log) = single.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    replicas.stop(LIMIT).await;
}

/// The alert records in order.
fn fired_and_resolved(records: &[Record]) -> Vec<Record> {
    records
        .iter()
        .filter(|r| r.ce("type").starts_with("io.kubecast.alert."))
        .cloned()
        .collect()
}
