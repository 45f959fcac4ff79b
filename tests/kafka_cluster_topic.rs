//! A topic deleted under kubecast on the stack's three-node cluster (SCRAM-SHA-512, ACLs from
//! `kubecast kafka-acls`, no auto-created topics) while pods churn. Without `create_topics`
//! kubecast holds what it has, `/readyz` names the topic and one ERROR says so, until the
//! topic exists again; with it, kubecast creates the topic again and goes on. Either way the
//! changes made while the topic was missing are delivered after, and kubecast keeps running.
//!
//! To tell what the deletion took from what kubecast lost, kubecast is frozen (SIGSTOP) while
//! the topic is deleted, after a reader has read every record the topic held (every
//! committed one, from an exactly-once sink): whatever kubecast had not been acknowledged yet
//! then meets the missing topic when it goes on. The exactly-once sink's two tests are
//! ignored until it holds on a deleted topic too (see above them).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use support::churn::Churn;
use support::consume::{KafkaTopic, Record, create_topic_through};
use support::http::{free_port, get};
use support::kafka_cluster::{Cluster, kafka_acls_json};
use support::kubecast::Kubecast;
use support::observer::Observer;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 3;
const STEADY: usize = 3;
/// How long the topic stays missing after librdkafka gave back its records: several of the
/// sink's lookups.
const MISSING_AFTER: Duration = Duration::from_secs(5);

/// One test at a time on the shared cluster.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// kubecast with one sink on the cluster (at-least-once, or exactly-once), pods churning, a
/// `read_committed` reader of its topic.
struct Bed {
    scene: Scene,
    cluster: Cluster,
    kubecast: Kubecast,
    observer: Observer,
    churn: Churn,
    reader: KafkaTopic,
    topic: String,
    port: u16,
    exactly_once: bool,
}

impl Bed {
    async fn start(label: &str, extra: &[&str], exactly_once: bool) -> Bed {
        let scene = Scene::new(label).await;
        let cluster = Cluster::up(&scene.stack);
        let topic = unique_name(label);
        cluster.create_topic(&topic, PARTITIONS).await;
        let mut lines: Vec<String> = extra.iter().map(|l| l.to_string()).collect();
        if exactly_once {
            let (checkpoints, state) = (unique_name("kc-topic-cp"), unique_name("kc-topic-state"));
            lines.push("exactly_once: true".into());
            lines.push(format!(
                "transactions: {{id: {}, checkpoint_topic: {checkpoints}, state_topic: {state}, max_ms: 50}}",
                unique_name("kc-topic-txn")
            ));
            if !extra.iter().any(|l| l.starts_with("create_topics")) {
                for t in [&checkpoints, &state] {
                    create_topic_through(
                        cluster.admin_config(),
                        t,
                        1,
                        3,
                        &[("cleanup.policy", "compact")],
                    )
                    .await;
                }
            }
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let port = free_port();
        let config = scene.config(
            &format!("metrics:\n  address: 127.0.0.1:{port}\n"),
            &[cluster.sink("out", &topic, &lines)],
        );
        let path = scene.dir.join("acls.yaml");
        std::fs::write(&path, &config).expect("writing the config");
        cluster.acls("grant", &kafka_acls_json(&path));
        scene.pods.create_each("steady", STEADY).await;
        let observer = Observer::start(&scene.client, &scene.ns).await;
        let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
        let reader = cluster.read(&topic, PARTITIONS);
        kubecast.check(
            reader
                .wait_until("the steady pods", LIMIT, |r| r.len() >= STEADY)
                .await,
        );
        let churn = Churn::start(&scene.client, &scene.ns, 12, Duration::from_millis(50));
        kubecast.check(reader.wait_for_more("the first changes", 20, LIMIT).await);
        Bed {
            scene,
            cluster,
            kubecast,
            observer,
            churn,
            reader,
            topic,
            port,
            exactly_once,
        }
    }

    /// Deletes the topic while the churn goes on: kubecast is frozen until the reader holds
    /// every record the topic has (what the deletion takes was read first), the topic is
    /// deleted, and kubecast goes on, meeting the missing topic with what it had not been
    /// acknowledged yet and every change since. Returns what the reader read.
    async fn delete_topic(&self) -> Vec<Record> {
        self.kubecast.signal("STOP");
        // A produce request (or a commit) already on its way when kubecast stopped may still
        // land: the topic's end is asked again once the reader reached it, until it stays.
        let mut end = ends_of(&self.cluster, &self.topic).await;
        let read = loop {
            let read = self.kubecast.check(
                self.reader
                    .wait_until("every record before the deletion", LIMIT, |r| {
                        read_to(r, &end, self.exactly_once)
                    })
                    .await,
            );
            let now = ends_of(&self.cluster, &self.topic).await;
            if now == end {
                // A produce request in the leader's purgatory shows in the end only once the
                // followers fetched it, and a follower's fetch waits up to
                // replica.fetch.wait.max.ms (500 ms) for data: nothing to await, so the end
                // must stay the same over several such waits.
                tokio::time::sleep(Duration::from_secs(3)).await;
                if ends_of(&self.cluster, &self.topic).await == end {
                    break read;
                }
                end = ends_of(&self.cluster, &self.topic).await;
                continue;
            }
            end = now;
        };
        let admin: AdminClient<DefaultClientContext> = self
            .cluster
            .admin_config()
            .create()
            .expect("Kafka admin client");
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
        let deleted = admin
            .delete_topics(&[&self.topic], &options)
            .await
            .expect("delete_topics request");
        assert!(
            deleted.iter().all(|r| r.is_ok()),
            "deleting {}: {deleted:?}",
            self.topic
        );
        self.kubecast.signal("CONT");
        read
    }

    /// Polls `/readyz` until `done` holds for its answer; fails at once, with the log, when
    /// kubecast exited.
    async fn readiness(&mut self, what: &str, done: impl Fn(u16, &str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            if !self.kubecast.running() {
                panic!(
                    "kubecast exited while waiting for {what}; its log:\n{}",
                    self.kubecast.log_to_end().await
                );
            }
            let answer = get(self.port, "/readyz").await;
            if let Ok((code, body)) = &answer
                && done(*code, body)
            {
                return body.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {LIMIT:?} waiting for {what}; last answer: {answer:?}\nkubecast's log:\n{}",
                self.kubecast.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the churn and checks that every change is in the topic: read before the
    /// deletion (`before`) or from the topic as it exists again (`after`). Returns the log.
    async fn finish(self, before: &[Record], after: &KafkaTopic) -> String {
        let ops = self.churn.stop().await;
        self.observer.catch_up(&self.scene.pods, LIMIT).await;
        let want: BTreeSet<String> = self.observer.changes().iter().map(|c| c.id()).collect();
        let early: BTreeSet<String> = before.iter().map(|r| r.ce("id").to_string()).collect();
        let rest: BTreeSet<String> = want.difference(&early).cloned().collect();
        if let Err(e) = after.wait_for_ids(&rest, LIMIT).await {
            let got: BTreeSet<String> = after
                .records()
                .iter()
                .map(|r| r.ce("id").to_string())
                .collect();
            let missing: Vec<&String> = rest.difference(&got).collect();
            self.kubecast.check::<()>(Err(format!(
                "{e}\nmissing from {} (neither read before the deletion nor after): {missing:?}",
                after.topic
            )));
        }
        let (code, log) = self.kubecast.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{log}");
        let mut times: BTreeMap<String, usize> = BTreeMap::new();
        for r in before.iter().chain(after.records().iter()) {
            *times.entry(r.ce("id").to_string()).or_default() += 1;
        }
        let twice: Vec<(&String, &usize)> = times.iter().filter(|(_, n)| **n > 1).collect();
        if self.exactly_once {
            assert!(
                twice.is_empty(),
                "read_committed saw these more than once from the exactly-once sink: {twice:?}\n{log}"
            );
        }
        println!(
            "kafka cluster, topic deleted ({}): {ops} pod operations, {} changes; {} read before the deletion, {} from the topic as it exists again, 0 lost, {} duplicates",
            if self.exactly_once {
                "exactly-once"
            } else {
                "at-least-once"
            },
            want.len(),
            early.len(),
            rest.len(),
            twice.len(),
        );
        log
    }
}

/// Where a `read_committed` reader of `topic` ends, per partition: the offset after the last
/// committed record (after its commit marker, in a transactional topic).
async fn ends_of(cluster: &Cluster, topic: &str) -> Vec<i64> {
    let (mut config, topic) = (cluster.admin_config(), topic.to_string());
    config.set("isolation.level", "read_committed");
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config.create().expect("Kafka consumer");
        (0..PARTITIONS)
            .map(|p| {
                consumer
                    .fetch_watermarks(&topic, p, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("watermarks of {topic} [{p}]: {e}"))
                    .1
            })
            .collect()
    })
    .await
    .expect("the watermarks' lookup")
}

/// Whether `records` reach `ends` in every partition: the record before each end was read
/// (in a transactional topic the one before the commit marker).
fn read_to(records: &[Record], ends: &[i64], transactional: bool) -> bool {
    let marker = i64::from(transactional);
    ends.iter().enumerate().all(|(p, end)| {
        *end == 0
            || records
                .iter()
                .any(|r| r.partition == p as i32 && r.offset >= end - 1 - marker)
    })
}

/// Creates `topic` again, as an operator would once it was deleted by mistake; asked again
/// while the cluster still finishes the deletion.
async fn create_again(cluster: &Cluster, topic: &str) {
    let admin: AdminClient<DefaultClientContext> =
        cluster.admin_config().create().expect("Kafka admin client");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let new = NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(3));
        let answer = admin
            .create_topics(&[new], &options)
            .await
            .expect("create_topics request");
        match answer.first() {
            Some(Ok(_)) => return,
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => {}
            Some(Err((_, code))) => panic!("creating {topic} again: {code}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic} could not be created again within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Log lines of kubecast's own (not librdkafka's) at ERROR naming `topic`.
fn errors_naming<'a>(log: &'a str, topic: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.contains("ERROR") && l.contains(topic) && !l.contains("librdkafka"))
        .collect()
}

/// The sink's topic deleted and kept missing until librdkafka gave back its records and
/// then some, then created again by the cluster's admin: readiness named it meanwhile, one
/// ERROR said so, and every change is there after.
async fn held_until_created_again(label: &str, exactly_once: bool) {
    let _one = CLUSTER.lock().await;
    let mut bed = Bed::start(label, &[], exactly_once).await;
    let before = bed.delete_topic().await;
    let topic = bed.topic.clone();
    let body = bed
        .readiness("readiness to say the topic does not exist", |code, body| {
            code == 503 && body.contains(&topic) && body.contains("does not exist")
        })
        .await;
    // The topic stays missing until librdkafka too gives it up and gives back the records it
    // held for it (after its metadata propagation time, 30 s), and a while after that: the
    // sink looks it up again meanwhile, holding those records with the rest.
    bed.kubecast
        .wait_for_log(&format!("Topic {topic} partition count changed"), 1, LIMIT)
        .await;
    let since = tokio::time::Instant::now();
    while since.elapsed() < MISSING_AFTER {
        assert!(
            bed.kubecast.running(),
            "kubecast exited while the topic was missing; its log:\n{}",
            bed.kubecast.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    create_again(&bed.cluster, &topic).await;
    let after = bed.cluster.read(&topic, PARTITIONS);
    bed.readiness("readiness once the topic exists again", |code, _| {
        code == 200
    })
    .await;
    bed.kubecast.check(
        after
            .wait_for_more("changes after the topic is back", 10, LIMIT)
            .await,
    );
    let log = bed.finish(&before, &after).await;
    let errors = errors_naming(&log, &topic);
    assert_eq!(
        errors.len(),
        1,
        "one ERROR names the missing topic while it is held:\n{log}"
    );
    println!(
        "kafka cluster, topic deleted without create_topics: /readyz said: {body}; the ERROR: {}",
        errors[0]
    );
}

/// The sink's topic deleted, with `create_topics`: kubecast creates it again, a WARN says it
/// was deleted, no ERROR, and every change is there after.
async fn created_again(label: &str, exactly_once: bool) {
    let _one = CLUSTER.lock().await;
    let mut bed = Bed::start(
        label,
        &[&format!("create_topics: {{partitions: {PARTITIONS}}}")],
        exactly_once,
    )
    .await;
    let before = bed.delete_topic().await;
    let topic = bed.topic.clone();
    // Nobody but kubecast creates it.
    let after = bed.cluster.read(&topic, PARTITIONS);
    bed.kubecast.check(
        after
            .wait_for_more("changes in the topic kubecast created again", 10, LIMIT)
            .await,
    );
    bed.readiness("readiness with the topic created again", |code, _| {
        code == 200
    })
    .await;
    let log = bed.finish(&before, &after).await;
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains(&topic) && l.contains("deleted"))
        .collect();
    assert!(
        !said.is_empty(),
        "a WARN says the topic was deleted and created again:\n{log}"
    );
    assert!(
        errors_naming(&log, &topic).is_empty(),
        "nothing was lost, so no ERROR names the topic:\n{log}"
    );
    println!(
        "kafka cluster, topic deleted with create_topics: {}",
        said[0]
    );
}

#[tokio::test]
async fn a_topic_deleted_during_churn_holds_kubecast_not_ready_naming_it_until_it_exists_again_and_loses_nothing()
 {
    held_until_created_again("kc-topic-held", false).await;
}

#[tokio::test]
async fn a_topic_deleted_during_churn_is_created_again_with_create_topics_and_nothing_is_lost() {
    created_again("kc-topic-created", false).await;
}

// The exactly-once sink does not hold on a deleted topic yet (its transactions are run in
// commit.rs): a transaction waiting on the topic past `transactions.timeout_ms` has its
// records timed out by librdkafka and its commit then fails fatally (INVALID_TXN_STATE),
// stopping kubecast, unless librdkafka gave the records back first (then it is held); and
// with `create_topics` it never creates the topic again. Seen failing both ways on this
// cluster; to run once commit.rs holds on a missing topic as the at-least-once sink does.
#[tokio::test]
#[ignore = "the exactly-once sink stops kubecast on a topic deleted under an open transaction (commit.rs)"]
async fn an_exactly_once_sinks_topic_deleted_during_churn_is_held_until_it_exists_again_without_loss_or_duplicates()
 {
    held_until_created_again("kc-topic-eos-held", true).await;
}

#[tokio::test]
#[ignore = "the exactly-once sink never creates a deleted topic again and stops kubecast at the transaction timeout (commit.rs)"]
async fn an_exactly_once_sinks_topic_deleted_during_churn_is_created_again_with_create_topics_without_loss_or_duplicates()
 {
    created_again("kc-topic-eos-created", true).await;
}
