//! Failover: two replicas elect a leader on a Lease; the leader is killed with `kill -9`
//! ten times at random moments while 50 pods churn, and a fresh replica replaces it each
//! time. The standby takes over (the times are printed), continues from the committed
//! checkpoint, and in the end a `read_committed` consumer holds every change an
//! independent watch saw exactly once; MQTT lost nothing, and its duplicates keep their ids.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::observer::Observer;
use support::replicas::{LEASE_DURATION_MS, RETRY_PERIOD_MS, Replicas};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const CHURNING: usize = 50;
const FAILOVERS: usize = 10;

#[tokio::test]
async fn ten_leader_kills_lose_nothing_and_read_committed_sees_each_change_once() {
    let scene = Scene::new("ha-failover").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-ha");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-ha");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    scene.pods.create_each("stable", 5).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let mut replicas = Replicas::start(&scene, 2, &topic, &prefix);
    replicas.leader(LIMIT).await;
    if let Err(e) = committed
        .wait_until("the stable pods' events", LIMIT, |r| r.len() >= 5)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }

    let churn = Churn::start(&scene.client, &scene.ns, CHURNING, Duration::ZERO);
    let mut takeovers = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..FAILOVERS {
        // A random moment to kill at: the chaos itself, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(500..2500))).await;
        let leader = replicas.leader(LIMIT).await;
        let standby = 1 - leader;
        let terms = replicas.terms(standby);
        let killed = Instant::now();
        logs.push(replicas.kill_and_replace(&scene, leader).await);
        // The standby, or the fresh replica if it wins the race for the expired Lease.
        let deadline = tokio::time::Instant::now() + LIMIT;
        while replicas.terms(standby) == terms && replicas.terms(leader) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no replica took over within {LIMIT:?}:\n{}",
                replicas.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        takeovers.push(killed.elapsed());
    }
    if let Err(e) = committed
        .wait_for_more("delivery after the last failover", 20, LIMIT)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    let ops = churn.stop().await;

    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let records = match committed.wait_for_ids(&want, LIMIT).await {
        Ok(r) => r,
        Err(e) => panic!(
            "{e}\n{}\nkilled:\n{}",
            replicas.logs(),
            logs.join("\n----\n")
        ),
    };
    let messages = match mqtt.wait_for_ids(&want, LIMIT).await {
        Ok(m) => m,
        Err(e) => panic!("{e}\n{}", replicas.logs()),
    };
    let all_logs = format!("{}\n{}", logs.join("\n"), replicas.logs());
    let warm = all_logs.matches("warm=true").count();
    let cold = all_logs.matches("warm=false").count();
    replicas.stop(LIMIT).await;

    let ids: Vec<&str> = records.iter().map(|r| r.ce("id")).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        ids.len(),
        unique.len(),
        "read_committed saw {} duplicates\nkilled leaders' logs:\n{}",
        ids.len() - unique.len(),
        logs.join("\n----\n")
    );
    let phantom: Vec<&&str> = unique.iter().filter(|id| !want.contains(**id)).collect();
    assert!(
        phantom.is_empty(),
        "never reported by the apiserver: {phantom:?}"
    );
    for m in &messages {
        assert!(
            want.contains(m.prop("id")),
            "MQTT carried {}, never reported",
            m.prop("id")
        );
    }
    let mqtt_unique = messages
        .iter()
        .map(|m| m.prop("id"))
        .collect::<BTreeSet<_>>()
        .len();
    let mut ms: Vec<u128> = takeovers.iter().map(Duration::as_millis).collect();
    ms.sort_unstable();
    println!(
        "ha_failover: {FAILOVERS} leader kills, {ops} API operations, {} changes; read_committed {} records (0 duplicates, 0 lost); MQTT {} messages ({} duplicates, 0 lost); kill -> a replica took over (lease {LEASE_DURATION_MS} ms, retry {RETRY_PERIOD_MS} ms), sorted: {ms:?} ms; take-overs from a warm standby {warm}, cold {cold}",
        want.len(),
        records.len(),
        messages.len(),
        messages.len() - mqtt_unique,
    );
}
