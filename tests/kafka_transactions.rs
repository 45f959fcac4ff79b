//! The ground of the exactly-once Kafka sink, against the real broker: what a transactional
//! producer commits is what a `read_committed` consumer sees, an aborted transaction is never
//! seen by it (a `read_uncommitted` consumer sees both), and a second producer with the same
//! `transactional.id` fences the first: the first's commit fails as fenced and nothing it
//! sent after the fence becomes visible to `read_committed` consumers. A sink's checkpoint,
//! committed with its events, is read back as the last committed one, and the known state
//! is rebuilt from the state topic written in the same transactions.

mod support;

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use kubecast::pipeline::kept::{StateRecord, decode};
use kubecast::sinks::kafka::checkpoint::{Checkpoint, read_known, read_latest};
use kubecast::sinks::kafka::txn::{Transactions, TxnError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use support::consume::create_topic;
use support::{Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(60);

/// The stack's broker, for the clients of these tests.
fn config(stack: &Stack) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    config
}

/// A transactional producer with `id`, registered with the coordinator (fencing any older
/// one with the same id).
async fn producer(stack: &Stack, id: &str) -> Transactions {
    let t = Transactions::create("txn-test", config(stack), id, Duration::from_secs(30))
        .expect("a transactional producer");
    within(LIMIT, "init_transactions", t.init())
        .await
        .expect("init_transactions");
    t
}

/// Sends `payloads` in the open transaction and waits for each delivery report.
async fn send(t: &Transactions, topic: &str, payloads: &[&str]) {
    for p in payloads {
        send_keyed(t, topic, "k", Some(p.as_bytes())).await;
    }
}

/// Sends one record (no value: a tombstone) in the open transaction and waits for its
/// delivery report.
async fn send_keyed(t: &Transactions, topic: &str, key: &str, value: Option<&[u8]>) {
    let (record, delivery) = Transactions::record(topic);
    let record = match value {
        Some(v) => record.key(key).payload(v),
        None => record.key(key),
    };
    t.send(record)
        .map_err(|(e, _)| e)
        .expect("librdkafka takes the record");
    within(LIMIT, "a delivery report", delivery)
        .await
        .expect("a delivery report")
        .expect("the broker took the record");
}

/// Every record's payload of partition 0 of `topic`, read to its end with `isolation`.
fn read_all(stack: &Stack, topic: &str, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = config(stack)
        .set("group.id", unique_name("txn-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()
        .expect("a Kafka consumer");
    let mut partitions = TopicPartitionList::new();
    partitions
        .add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition 0");
    consumer.assign(&partitions).expect("assigning partition 0");
    let started = Instant::now();
    let mut out = Vec::new();
    loop {
        assert!(
            started.elapsed() < LIMIT,
            "{topic} ({isolation}): no end of partition within {LIMIT:?}; read so far {out:?}"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("reading {topic} ({isolation}): {e}"),
            None => {}
        }
    }
}

#[tokio::test]
async fn read_committed_consumers_see_committed_transactions_and_never_aborted_ones() {
    let stack = Stack::load();
    let topic = unique_name("txn-commit");
    create_topic(&stack, &topic, 1).await;
    let t = producer(&stack, &unique_name("kubecast-txn")).await;

    t.begin().expect("begin");
    send(&t, &topic, &["c1", "c2", "c3"]).await;
    within(LIMIT, "the commit", t.commit(Vec::new()))
        .await
        .expect("commit");

    t.begin().expect("begin");
    send(&t, &topic, &["a1", "a2"]).await;
    within(LIMIT, "the abort", t.abort()).await.expect("abort");

    assert_eq!(
        read_all(&stack, &topic, "read_committed"),
        ["c1", "c2", "c3"]
    );
    let all = read_all(&stack, &topic, "read_uncommitted");
    assert_eq!(
        all,
        ["c1", "c2", "c3", "a1", "a2"],
        "the aborted records are in the log"
    );
}

#[tokio::test]
async fn a_newer_producer_with_the_same_transactional_id_fences_the_older_one() {
    let stack = Stack::load();
    let topic = unique_name("txn-fence");
    create_topic(&stack, &topic, 1).await;
    let id = unique_name("kubecast-txn");

    let old = producer(&stack, &id).await;
    old.begin().expect("begin");
    send(&old, &topic, &["before the fence"]).await;

    // The new leader takes over: its init fences the old producer and aborts what it left open.
    let new = producer(&stack, &id).await;
    new.begin().expect("begin");
    send(&new, &topic, &["leader"]).await;
    within(LIMIT, "the new producer's commit", new.commit(Vec::new()))
        .await
        .expect("the new producer commits");

    // The old one has not noticed; its commit is refused as fenced.
    let outcome = within(LIMIT, "the old producer's commit", old.commit(Vec::new())).await;
    assert!(
        matches!(outcome, Err(TxnError::Fenced(_))),
        "the old producer's commit must fail as fenced, got {outcome:?}"
    );

    assert_eq!(read_all(&stack, &topic, "read_committed"), ["leader"]);
    assert!(
        read_all(&stack, &topic, "read_uncommitted").contains(&"before the fence".to_string()),
        "the fenced producer's record is in the log, uncommitted"
    );
}

fn checkpoint(seq: u64) -> Checkpoint {
    Checkpoint {
        seq,
        positions: BTreeMap::from([("*".to_string(), format!("{}", 1000 + seq))]),
    }
}

#[tokio::test]
async fn the_last_committed_checkpoint_is_read_back_and_an_aborted_one_never_is() {
    let stack = Stack::load();
    let events = unique_name("txn-events");
    let checkpoints = unique_name("txn-checkpoints");
    create_topic(&stack, &events, 1).await;
    create_topic(&stack, &checkpoints, 2).await;
    let t = producer(&stack, &unique_name("kubecast-txn")).await;

    for (seqs, commit) in [
        (&[("audit", 10)][..], true),
        (&[("audit", 20), ("edge", 99)][..], true),
        (&[("audit", 30)][..], false),
    ] {
        t.begin().expect("begin");
        send(&t, &events, &["event"]).await;
        for (sink, seq) in seqs {
            send_keyed(&t, &checkpoints, sink, Some(&checkpoint(*seq).to_bytes())).await;
        }
        if commit {
            within(LIMIT, "the commit", t.commit(Vec::new()))
                .await
                .expect("commit");
        } else {
            within(LIMIT, "the abort", t.abort()).await.expect("abort");
        }
    }

    let config = config(&stack);
    let read = |key: &str, topic: &str| {
        let (config, topic, key) = (config.clone(), topic.to_string(), key.to_string());
        tokio::task::spawn_blocking(move || read_latest(&config, &topic, &key, LIMIT))
    };
    let audit = read("audit", &checkpoints)
        .await
        .expect("the reader")
        .expect("read");
    assert_eq!(
        audit,
        Some(checkpoint(20)),
        "the last committed, not the aborted 30"
    );
    let edge = read("edge", &checkpoints)
        .await
        .expect("the reader")
        .expect("read");
    assert_eq!(edge, Some(checkpoint(99)));
    let nobody = read("nobody", &checkpoints)
        .await
        .expect("the reader")
        .expect("read");
    assert_eq!(
        nobody, None,
        "a sink that never committed has no checkpoint"
    );

    // A record under a sink's key that is not a checkpoint is an error naming where it is.
    t.begin().expect("begin");
    send_keyed(&t, &checkpoints, "broken", Some(b"not a checkpoint")).await;
    within(LIMIT, "the commit", t.commit(Vec::new()))
        .await
        .expect("commit");
    let broken = read("broken", &checkpoints).await.expect("the reader");
    let message = broken
        .expect_err("a damaged checkpoint is refused")
        .to_string();
    assert!(
        message.contains(&checkpoints)
            && message.contains("offset")
            && message.contains("partition"),
        "the error names the topic, partition and offset: {message}"
    );
}

#[tokio::test]
async fn the_known_state_is_rebuilt_from_committed_state_records_and_tombstones() {
    let stack = Stack::load();
    let state = unique_name("txn-state");
    create_topic(&stack, &state, 3).await;
    let t = producer(&stack, &unique_name("kubecast-txn")).await;

    // Three pods seen, one of them changed and one deleted, committed.
    t.begin().expect("begin");
    for (uid, rv) in [
        ("uid-a", "10"),
        ("uid-b", "11"),
        ("uid-c", "12"),
        ("uid-a", "20"),
    ] {
        send_keyed(&t, &state, uid, Some(&pod_state(uid, rv))).await;
    }
    send_keyed(&t, &state, "uid-b", None).await;
    within(LIMIT, "the commit", t.commit(Vec::new()))
        .await
        .expect("commit");
    // An aborted change and an aborted delete leave no trace.
    t.begin().expect("begin");
    send_keyed(&t, &state, "uid-c", Some(&pod_state("uid-c", "99"))).await;
    send_keyed(&t, &state, "uid-a", None).await;
    within(LIMIT, "the abort", t.abort()).await.expect("abort");

    let config = config(&stack);
    let known = tokio::task::spawn_blocking(move || read_known(&config, &state, LIMIT))
        .await
        .expect("the reader")
        .expect("read");
    let (known, _) = decode(&known).expect("the states decode");
    let mut known: Vec<(String, String, String)> = known
        .into_iter()
        .map(|k| (k.object.uid, k.object.name, k.rv))
        .collect();
    known.sort();
    let expected: Vec<(String, String, String)> = [("uid-a", "20"), ("uid-c", "12")]
        .into_iter()
        .map(|(uid, rv)| (uid.to_string(), format!("pod-{uid}"), rv.to_string()))
        .collect();
    assert_eq!(known, expected);
}

fn pod_state(uid: &str, rv: &str) -> Vec<u8> {
    StateRecord {
        resource: String::new(),
        namespace: "ns".to_string(),
        name: format!("pod-{uid}"),
        rv: rv.to_string(),
        ..StateRecord::default()
    }
    .to_bytes()
}
