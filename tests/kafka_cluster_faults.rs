//! kubecast on a production-shaped Kafka (the stack's three-node cluster: SCRAM-SHA-512,
//! ACLs granted from `kubecast kafka-acls`, replication factor 3, min.insync.replicas 2, no
//! auto-created topics) while the cluster is rolled and broken under it. One kubecast runs
//! an exactly-once sink and an at-least-once sink side by side while pods churn; an
//! independent observer records the truth. After each fault a `read_committed` reader holds
//! every change exactly once from the exactly-once sink and at least once (duplicates keep
//! their ids) from the other, and `kubecast replay --verify` passes on both topics. Each test
//! prints the longest pause in delivery the fault caused.
//!
//! The faults share the one cluster, so they run one at a time.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use support::churn::Churn;
use support::consume::{KafkaTopic, Record};
use support::http::{free_port, wait_for};
use support::kafka_cluster::{Cluster, kafka_acls_json};
use support::kubecast::{Kubecast, run_to_end};
use support::observer::Observer;
use support::partition::BlackHole;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 3;
const STEADY: usize = 3;

/// One fault at a time on the shared cluster.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// kubecast with both sinks on the cluster, pods churning, and readers of both topics.
struct Bed {
    scene: Scene,
    cluster: Cluster,
    kubecast: Kubecast,
    observer: Observer,
    churn: Churn,
    eos: KafkaTopic,
    alo: KafkaTopic,
    txn_id: String,
    port: u16,
}

impl Bed {
    async fn start(label: &str) -> Bed {
        let scene = Scene::new(label).await;
        let cluster = Cluster::up(&scene.stack);
        let (eos_topic, alo_topic) = (unique_name("kc-cl-eos"), unique_name("kc-cl-alo"));
        cluster.create_topic(&eos_topic, PARTITIONS).await;
        cluster.create_topic(&alo_topic, PARTITIONS).await;
        let txn_id = unique_name("kc-cl-txn");
        let eos_lines = [
            "exactly_once: true".to_string(),
            "create_topics: {}".to_string(),
            format!(
                "transactions: {{id: {txn_id}, checkpoint_topic: {}, state_topic: {}, max_ms: 50}}",
                unique_name("kc-cl-checkpoints"),
                unique_name("kc-cl-state")
            ),
        ];
        let eos_lines: Vec<&str> = eos_lines.iter().map(String::as_str).collect();
        let port = free_port();
        let config = scene.config(
            &format!("metrics:\n  address: 127.0.0.1:{port}\n"),
            &[
                cluster.sink("eos", &eos_topic, &eos_lines),
                cluster.sink("alo", &alo_topic, &[]),
            ],
        );
        let path = scene.dir.join("acls.yaml");
        std::fs::write(&path, &config).expect("writing the config");
        cluster.acls("grant", &kafka_acls_json(&path));
        // Pods that sit still: once both sinks carry them kubecast publishes, and the churn,
        // whose every change the observer sees, starts only then.
        scene.pods.create_each("steady", STEADY).await;
        let observer = Observer::start(&scene.client, &scene.ns).await;
        let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
        let (eos, alo) = (
            cluster.read(&eos_topic, PARTITIONS),
            cluster.read(&alo_topic, PARTITIONS),
        );
        for reader in [&eos, &alo] {
            kubecast.check(
                reader
                    .wait_until("the steady pods", LIMIT, |r| r.len() >= STEADY)
                    .await,
            );
        }
        let churn = Churn::start(&scene.client, &scene.ns, 12, Duration::from_millis(50));
        for reader in [&eos, &alo] {
            kubecast.check(reader.wait_for_more("the first changes", 20, LIMIT).await);
        }
        Bed {
            scene,
            cluster,
            kubecast,
            observer,
            churn,
            eos,
            alo,
            txn_id,
            port,
        }
    }

    /// Waits until both sinks published `n` more records: kubecast publishes (again).
    async fn publishing(&self, n: usize, what: &str) {
        for reader in [&self.eos, &self.alo] {
            self.kubecast
                .check(reader.wait_for_more(what, n, LIMIT).await);
        }
    }

    /// Stops the churn and checks both topics against the observer; prints the figures.
    async fn finish(self, fault: &str, window: (Instant, Instant)) {
        let ops = self.churn.stop().await;
        self.observer.catch_up(&self.scene.pods, LIMIT).await;
        let want: BTreeSet<String> = self.observer.changes().iter().map(|c| c.id()).collect();
        let eos = all_of(&self.kubecast, &self.eos, &want).await;
        let alo = all_of(&self.kubecast, &self.alo, &want).await;
        let (code, log) = self.kubecast.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{log}");
        let eos_times = times(&eos);
        let duplicated: Vec<_> = eos_times.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            duplicated.is_empty(),
            "{fault}: read_committed saw these more than once from the exactly-once sink: {duplicated:?}"
        );
        for (sink, t) in [
            ("exactly-once", &eos_times),
            ("at-least-once", &times(&alo)),
        ] {
            let phantom: Vec<_> = t.keys().filter(|id| !want.contains(**id)).collect();
            assert!(
                phantom.is_empty(),
                "{fault}: the {sink} sink published changes the apiserver never reported (or with other ids): {phantom:?}"
            );
            assert_eq!(
                t.len(),
                want.len(),
                "{fault}: the {sink} sink has every change"
            );
        }
        for topic in [&self.eos.topic, &self.alo.topic] {
            let mut args: Vec<String> = vec!["replay".into()];
            args.extend(self.cluster.replay_args());
            args.extend(["--topic".into(), topic.clone(), "--verify".into()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, out, err) = run_to_end(&args, &[]);
            assert_eq!(
                code,
                Some(0),
                "{fault}: replay --verify of {topic}:\n{out}{err}"
            );
        }
        println!(
            "kafka cluster, {fault}: {ops} pod operations, {} changes; exactly-once {} records (0 duplicates, 0 lost), longest pause {:.1}s; at-least-once {} records ({} duplicates, 0 lost), longest pause {:.1}s",
            want.len(),
            eos.len(),
            pause(&eos, window).as_secs_f64(),
            alo.len(),
            alo.len() - want.len(),
            pause(&alo, window).as_secs_f64(),
        );
    }
}

/// Waits until `reader` holds every change of `want`; fails naming the missing ones.
async fn all_of(kubecast: &Kubecast, reader: &KafkaTopic, want: &BTreeSet<String>) -> Vec<Record> {
    match reader.wait_for_ids(want, LIMIT).await {
        Ok(records) => records,
        Err(e) => {
            let got: BTreeSet<String> = reader
                .records()
                .iter()
                .map(|r| r.ce("id").to_string())
                .collect();
            let missing: Vec<&String> = want.difference(&got).collect();
            kubecast.check(Err(format!(
                "{e}\nmissing from {}: {missing:?}",
                reader.topic
            )))
        }
    }
}

fn times(records: &[Record]) -> BTreeMap<&str, usize> {
    let mut t = BTreeMap::new();
    for r in records {
        *t.entry(r.ce("id")).or_default() += 1;
    }
    t
}

/// The longest stretch without a new record from the fault's start until the first record
/// after its end: how long kubecast took to publish again.
fn pause(records: &[Record], (from, to): (Instant, Instant)) -> Duration {
    let mut arrivals: Vec<Instant> = records
        .iter()
        .map(|r| r.at)
        .filter(|at| *at >= from)
        .collect();
    arrivals.sort();
    let mut last = from;
    let mut longest = Duration::ZERO;
    for at in arrivals {
        longest = longest.max(at - last);
        last = at;
        if at > to {
            break;
        }
    }
    longest
}

#[tokio::test]
async fn a_rolling_restart_of_all_three_nodes_loses_and_duplicates_nothing() {
    let _one = CLUSTER.lock().await;
    let bed = Bed::start("kc-roll").await;
    let from = Instant::now();
    for n in ["1", "2", "3"] {
        bed.cluster.script(&["stop", n]);
        bed.publishing(5, &format!("changes with node {n} stopped"))
            .await;
        bed.cluster.script(&["start", n]);
        bed.cluster.script(&["in-sync"]);
    }
    let to = Instant::now();
    bed.publishing(5, "changes after the rolling restart").await;
    bed.finish(
        "rolling restart (controlled shutdowns, one node at a time)",
        (from, to),
    )
    .await;
}

/// `kill -9` of the node `which` picks (`role` says what it is), running on until kubecast
/// publishes again, then started again.
async fn kill_9(label: &str, role: &str, which: impl Fn(&Bed) -> i32) {
    let _one = CLUSTER.lock().await;
    let bed = Bed::start(label).await;
    let node = which(&bed).to_string();
    let from = Instant::now();
    bed.cluster.script(&["kill", &node]);
    bed.publishing(10, &format!("changes with node {node} ({role}) killed"))
        .await;
    let to = Instant::now();
    bed.cluster.script(&["start", &node]);
    bed.cluster.script(&["in-sync"]);
    bed.finish(&format!("kill -9 of node {node}, {role}"), (from, to))
        .await;
}

#[tokio::test]
async fn kill_9_of_the_node_leading_kubecasts_partition_loses_and_duplicates_nothing() {
    kill_9("kc-kill-leader", "the leader of partition 0", |bed| {
        bed.cluster.leader_of(&bed.eos.topic, 0)
    })
    .await;
}

#[tokio::test]
async fn kill_9_of_the_transaction_coordinator_loses_and_duplicates_nothing() {
    kill_9("kc-kill-coord", "the transaction coordinator", |bed| {
        bed.cluster.coordinator_of(&bed.txn_id)
    })
    .await;
}

#[tokio::test]
async fn two_nodes_stopped_hold_kubecast_not_ready_and_one_back_resumes_it() {
    let _one = CLUSTER.lock().await;
    let bed = Bed::start("kc-two-down").await;
    let from = Instant::now();
    bed.cluster.script(&["stop", "2"]);
    bed.cluster.script(&["stop", "3"]);
    let (_, body) = wait_for(
        bed.port,
        "/readyz",
        LIMIT,
        "readiness to say Kafka holds kubecast",
        |code, _| code == 503,
    )
    .await;
    assert!(
        body.contains("min.insync.replicas") || body.contains("Kafka"),
        "/readyz names why: {body}"
    );
    // Below min.insync.replicas nothing is acknowledged: what both readers hold stays put.
    let held = (bed.eos.records().len(), bed.alo.records().len());
    bed.cluster.script(&["start", "2"]);
    let to = Instant::now();
    bed.publishing(10, "changes with one node back").await;
    assert!(bed.eos.records().len() > held.0 && bed.alo.records().len() > held.1);
    wait_for(
        bed.port,
        "/readyz",
        LIMIT,
        "readiness once Kafka acknowledges again",
        |code, _| code == 200,
    )
    .await;
    bed.cluster.script(&["start", "3"]);
    bed.cluster.script(&["in-sync"]);
    println!("kafka cluster, two nodes stopped: /readyz said: {body}");
    bed.finish(
        "two of three nodes stopped (below min.insync.replicas), then one back",
        (from, to),
    )
    .await;
}

#[tokio::test]
async fn a_black_holed_node_loses_and_duplicates_nothing() {
    let _one = CLUSTER.lock().await;
    let bed = Bed::start("kc-blackhole").await;
    let node = bed.cluster.leader_of(&bed.alo.topic, 0);
    let from = Instant::now();
    // Every packet the node sends is dropped: it answers no one and reaches no one.
    let hole = BlackHole::cgroup(&bed.cluster.cgroup_of(node), &format!("Kafka node {node}"));
    bed.publishing(10, &format!("changes with node {node} cut off"))
        .await;
    let to = Instant::now();
    drop(hole);
    bed.cluster.script(&["in-sync"]);
    bed.finish(
        &format!("node {node} (a partition leader) black-holed"),
        (from, to),
    )
    .await;
}
