//! The ground of the exactly-once Kafka sink, against the real broker: what a transactional
//! producer commits is what a `read_committed` consumer sees, an aborted transaction is never
//! seen by it (a `read_uncommitted` consumer sees both), and a second producer with the same
//! `transactional.id` fences the first: the first's commit fails as fenced and nothing it
//! sent after the fence becomes visible to `read_committed` consumers.

mod support;

use std::time::{Duration, Instant};

use kubecast::sinks::kafka::txn::{Transactions, TxnError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use support::consume::create_topic;
use support::{Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(60);

fn producer(stack: &Stack, id: &str) -> Transactions {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &stack.kafka_bootstrap);
    Transactions::create("txn-test", config, id, Duration::from_secs(30))
        .expect("a transactional producer")
}

/// Sends `payloads` in the open transaction and waits for each delivery report.
async fn send(t: &Transactions, topic: &str, payloads: &[&str]) {
    for p in payloads {
        let (record, delivery) = Transactions::record(topic);
        let record = record.key("k").payload(p.as_bytes());
        t.send(record)
            .map_err(|(e, _)| e)
            .expect("librdkafka takes the record");
        within(LIMIT, "a delivery report", delivery)
            .await
            .expect("a delivery report")
            .expect("the broker took the record");
    }
}

/// Every record's payload of partition 0 of `topic`, read to its end with `isolation`.
fn read_all(stack: &Stack, topic: &str, isolation: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
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
    let t = producer(&stack, &unique_name("kubecast-txn"));
    within(LIMIT, "init_transactions", t.init())
        .await
        .expect("init");

    t.begin().expect("begin");
    send(&t, &topic, &["c1", "c2", "c3"]).await;
    within(LIMIT, "the commit", t.commit())
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

    let old = producer(&stack, &id);
    within(LIMIT, "init_transactions", old.init())
        .await
        .expect("init");
    old.begin().expect("begin");
    send(&old, &topic, &["before the fence"]).await;

    // The new leader takes over: its init fences the old producer and aborts what it left open.
    let new = producer(&stack, &id);
    within(LIMIT, "init_transactions", new.init())
        .await
        .expect("the new producer's init");
    new.begin().expect("begin");
    send(&new, &topic, &["leader"]).await;
    within(LIMIT, "the new producer's commit", new.commit())
        .await
        .expect("the new producer commits");

    // The old one has not noticed; its commit is refused as fenced.
    let outcome = within(LIMIT, "the old producer's commit", old.commit()).await;
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
