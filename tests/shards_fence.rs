//! A change of `sharding.shards` while the old count's commits are still on their way to the
//! transaction coordinator. The old count's replica reaches Kafka through a relay of the
//! test's own that holds back every `EndTxn` request for 40 s (a commit that arrives late: a
//! fault the real broker cannot be made to produce on demand, `support::kafka_relay`); it is
//! killed with a commit of each of its shards held, and a replica of the new count takes
//! over. Before a new shard reads its checkpoints it must fence the old count's transactional
//! ids, so that a held commit that arrives after the read is refused rather than making
//! visible what the new shard publishes again. An independent observer records the truth:
//! every change is in `read_committed` exactly once (none twice, none lost) and `replay
//! --verify` finds every chain gapless.
//!
//! A fresh sink whose very first commits are held shows the other half: the new count sees
//! no checkpoint of the old one (each is in a transaction still open, invisible to a
//! `read_committed` reader), so it must wait until those transactions are decided before it
//! reads, or it fences nothing, publishes everything again, and the held commits land too.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::consume::{KafkaTopic, MqttSubscriber};
use support::kafka_relay::KafkaRelay;
use support::observer::Observer;
use support::replicas::Replicas;
use support::scene::Scene;
use support::shards::{balanced_then_churning, wait_balanced};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
/// How long the relay holds each commit: far past the new count's take-over (a few Leases),
/// within the transactions' `timeout_ms` (60 s), after which the broker aborts them itself.
const HOLD: Duration = Duration::from_secs(40);

/// One replica of `from` shards whose commits are held, killed; one of `to` shards takes
/// over directly.
async fn commits_held_while_the_count_changes(from: u32, to: u32) {
    let scene = Scene::new(&format!("shards-fence-{from}-{to}")).await;
    let stack = &scene.stack;
    let topic = unique_name("kc-fence");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-fence");
    let _mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let relay = KafkaRelay::start(&stack.kafka_bootstrap).await;
    let (direct, relayed) = (
        format!("brokers: {}", stack.kafka_bootstrap),
        format!("brokers: {}", relay.bootstrap()),
    );
    scene.pods.create_each("stable", 8).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let mut replicas = Replicas::start_edited(
        &scene,
        1,
        &topic,
        &prefix,
        &format!("sharding:\n  shards: {from}\n"),
        &[],
        |c| c.replace(&direct, &relayed),
    );
    // Enough pods that every shard has changes to commit.
    let churn = balanced_then_churning(
        &scene,
        &replicas,
        from,
        &committed,
        (24, Duration::from_millis(10)),
        20,
        LIMIT,
    )
    .await;
    let new = replicas.add_edited(&scene, &[], |c| {
        c.replace(&format!("shards: {from}"), &format!("shards: {to}"))
            .replace(&relayed, &direct)
    });
    replicas.procs[new]
        .wait_for_log("another shard count is in force", 1, LIMIT)
        .await;

    // Each old shard's next commit is held; the replica dies with them all in flight.
    relay.hold_end_txn(HOLD);
    if let Err(e) = relay.wait_held(from as usize, LIMIT).await {
        panic!("{e}\n{}", replicas.logs());
    }
    replicas.kill(0).await;
    if let Err(e) = wait_balanced(
        &scene.client,
        &scene.ns,
        &replicas.lease,
        to,
        &replicas.alive(),
        LIMIT,
    )
    .await
    {
        panic!("the new count: {e}\n{}", replicas.logs());
    }
    // The held commits reach the coordinator now. The new count's first read waits until
    // every transaction open at its start is decided: a held commit is either accepted before
    // the new count reads (which then reads on from it) or refused once fenced.
    let answers = match relay.wait_answered(HOLD + LIMIT).await {
        Ok(a) => a,
        Err(e) => panic!("{e}\n{}", replicas.logs()),
    };
    if let Err(e) = committed
        .wait_for_more(&format!("changes under {to} shards"), 20, LIMIT)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    let ops = churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    assert_eq!(
        replicas.committed_once(&committed, &want, LIMIT).await,
        0,
        "read_committed must see each change once although the old count's commits arrived after the new count took over (held commits answered {answers:?})\n{}",
        replicas.logs()
    );
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "replay --verify:\n{out}{err}");
    let fences =
        replicas.procs[new].count_in_log("fenced the transactional ids of another shard count");
    assert!(
        fences >= to as usize,
        "each of the {to} new shards fences the old count's ids before reading their checkpoints ({fences}):\n{}",
        replicas.procs[new].log()
    );
    // Kafka's error codes: 0 none (committed before the new count read), 47 invalid producer
    // epoch, 90 producer fenced. Each held commit was decided one way or the other; which way
    // shows in the printed answers, and either way each change is read once (above).
    assert_eq!(
        answers.len(),
        from as usize,
        "every held commit was answered: {answers:?}"
    );
    assert!(
        answers.iter().all(|(_, code)| [0, 47, 90].contains(code)),
        "a held commit was answered with an error other than a fence: {answers:?}"
    );
    let took_over = replicas.procs[new].count_in_log("took over the exactly-once sink");
    assert!(
        took_over >= to as usize,
        "each of the {to} new shards took over ({took_over}):\n{}",
        replicas.procs[new].log()
    );
    println!(
        "{} changes from {ops} operations through {from} -> {to} shards with {} commits held {HOLD:?}, each change once; the held commits were answered {answers:?}",
        want.len(),
        answers.len()
    );
    replicas.stop(LIMIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_shards_become_six_while_the_fours_commits_are_held_and_every_change_is_once() {
    commits_held_while_the_count_changes(4, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_shards_become_four_while_the_sixs_commits_are_held_and_every_change_is_once() {
    commits_held_while_the_count_changes(6, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_sink_of_four_whose_first_commits_are_held_becomes_six_and_every_change_is_once() {
    let scene = Scene::new("shards-fence-first").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-fence");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-fence");
    let _mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let relay = KafkaRelay::start(&stack.kafka_bootstrap).await;
    let (direct, relayed) = (
        format!("brokers: {}", stack.kafka_bootstrap),
        format!("brokers: {}", relay.bootstrap()),
    );
    // Enough pods that every shard of four has a first commit to make.
    scene.pods.create_each("stable", 24).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    relay.hold_end_txn(HOLD);
    let mut replicas = Replicas::start_edited(
        &scene,
        1,
        &topic,
        &prefix,
        "sharding:\n  shards: 4\n",
        &[],
        |c| c.replace(&direct, &relayed),
    );
    // Every shard's first commit is held; the replica dies with them all in flight.
    if let Err(e) = relay.wait_held(4, LIMIT).await {
        panic!("{e}\n{}", replicas.logs());
    }
    replicas.kill(0).await;
    let new = replicas.add_edited(&scene, &[], |c| {
        c.replace("shards: 4", "shards: 6")
            .replace(&relayed, &direct)
    });
    if let Err(e) = wait_balanced(
        &scene.client,
        &scene.ns,
        &replicas.lease,
        6,
        &replicas.alive(),
        HOLD + LIMIT,
    )
    .await
    {
        panic!("the new count: {e}\n{}", replicas.logs());
    }
    let answers = match relay.wait_answered(HOLD + LIMIT).await {
        Ok(a) => a,
        Err(e) => panic!("{e}\n{}", replicas.logs()),
    };
    scene.pods.create_each("after", 6).await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    assert_eq!(
        replicas.committed_once(&committed, &want, LIMIT).await,
        0,
        "read_committed must see each change once although the four shards' first commits were still open when the six took over (held commits answered {answers:?})\n{}",
        replicas.logs()
    );
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "replay --verify:\n{out}{err}");
    println!(
        "{} changes through a fresh 4 -> 6 shards with the four's first {} commits held {HOLD:?}, each change once; the held commits were answered {answers:?}; new replica: {} fences",
        want.len(),
        answers.len(),
        replicas.procs[new].count_in_log("fenced the transactional ids of another shard count"),
    );
    replicas.stop(LIMIT).await;
}
