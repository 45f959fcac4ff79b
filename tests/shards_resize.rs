//! Changing `sharding.shards` as a rolling update does it (`maxSurge: 1`): three replicas with
//! four shards and an exactly-once Kafka sink; then, one at a time, a replica with six shards
//! starts beside them before an old one stops, while pods churn throughout. Both counts run
//! side by side, yet only one publishes at a time: the new replicas wait while a replica of
//! the count in force is alive, the old ones keep sharing the four shards among themselves,
//! and once the last old one is gone the six shards continue where the four had stopped.
//! An independent observer records the truth: every change is in `read_committed` exactly
//! once, `replay --verify` finds every chain gapless, and no shard of the new count ran
//! before the old count's last one stopped.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::consume::{KafkaTopic, MqttSubscriber};
use support::observer::Observer;
use support::replicas::Replicas;
use support::scene::Scene;
use support::shards::{balanced_then_churning, terms, wait_balanced};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_shards_become_six_in_a_rolling_update_with_every_change_exactly_once() {
    let scene = Scene::new("shards-resize").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-resize");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-resize");
    let _mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    scene.pods.create_each("stable", 8).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let mut replicas = Replicas::start_with(&scene, 3, &topic, &prefix, "sharding:\n  shards: 4\n");
    let old: Vec<usize> = (0..3).collect();
    let lease = replicas.lease.clone();
    let churn = balanced_then_churning(
        &scene,
        &replicas,
        4,
        &committed,
        (8, Duration::from_millis(20)),
        20,
        LIMIT,
    )
    .await;

    // The rolling update: a new replica, then an old one stops.
    let mut new = Vec::new();
    for (step, o) in old.iter().enumerate() {
        let n = replicas.add_edited(&scene, &[], |c| c.replace("shards: 4", "shards: 6"));
        new.push(n);
        replicas.procs[n]
            .wait_for_log("sharing shards with the other replicas", 1, LIMIT)
            .await;
        if let Err(e) = committed
            .wait_for_more("changes while both counts run", 20, LIMIT)
            .await
        {
            panic!("{e}\n{}", replicas.logs());
        }
        replicas.stop_one(*o, LIMIT).await;
        let old_alive: Vec<String> = old[step + 1..]
            .iter()
            .map(|i| replicas.identities[*i].clone())
            .collect();
        if !old_alive.is_empty()
            && let Err(e) =
                wait_balanced(&scene.client, &scene.ns, &lease, 4, &old_alive, LIMIT).await
        {
            panic!(
                "the old count after replica {o} stopped: {e}\n{}",
                replicas.logs()
            );
        }
    }
    let new_alive: Vec<String> = new
        .iter()
        .map(|i| replicas.identities[*i].clone())
        .collect();
    if let Err(e) = wait_balanced(&scene.client, &scene.ns, &lease, 6, &new_alive, LIMIT).await {
        panic!("the new count: {e}\n{}", replicas.logs());
    }
    if let Err(e) = committed
        .wait_for_more("changes under six shards", 20, LIMIT)
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
        "read_committed must see each change exactly once across the change of count"
    );
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "replay --verify:\n{out}{err}");

    // No shard of six ran while one of four did.
    let last_old = old
        .iter()
        .flat_map(|i| terms(&replicas.procs[*i].log()))
        .map(|t| t.end.expect("an old replica stopped its every shard"))
        .max()
        .expect("the old replicas ran shards");
    let first_new = new
        .iter()
        .flat_map(|i| terms(&replicas.procs[*i].log()))
        .map(|t| t.start)
        .min()
        .expect("the new replicas run shards");
    assert!(
        last_old <= first_new,
        "a shard of six started at {first_new}, before the last of four stopped at {last_old}"
    );
    for n in &new {
        assert!(
            replicas.procs[*n].count_in_log("another shard count is in force") > 0,
            "a new replica ran beside the old count without saying that it waits:\n{}",
            replicas.procs[*n].log()
        );
    }
    let resumed = new
        .iter()
        .map(|i| {
            replicas.procs[*i].count_in_log("continuing where the earlier count's shards stopped")
        })
        .sum::<usize>();
    assert!(
        resumed >= 6,
        "each of the six shards continued from the four's checkpoints ({resumed})"
    );
    println!(
        "{} changes from {ops} operations through 4 -> 6 shards, each once; the six started {:?} after the four stopped",
        want.len(),
        first_new.duration_since(last_old)
    );
    replicas.stop(LIMIT).await;
}
