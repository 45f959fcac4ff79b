//! A leader that lost its Lease without noticing (frozen with SIGSTOP) comes back while
//! another replica leads: its next commit is fenced, it steps down to standby, and
//! `read_committed` consumers see every change once. Then the Lease is deleted by hand, and
//! then the apiserver goes away during the leader's term and comes back while the replicas
//! compete for the Lease: each time one replica leads again and nothing is lost or doubled.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::observer::Observer;
use support::replicas::Replicas;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const CHURNING: usize = 30;

/// Waits until `done` holds, failing with the replicas' logs after `LIMIT`.
async fn until(replicas: &Replicas, what: &str, done: impl Fn(&Replicas) -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done(replicas) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {LIMIT:?} waiting for {what}:\n{}",
            replicas.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_frozen_leader_is_fenced_and_a_deleted_lease_or_a_restarted_apiserver_loses_nothing() {
    let scene = Scene::new("ha-zombie").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-zombie");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-zombie");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let mut replicas = Replicas::start(&scene, 2, &topic, &prefix);
    // The churn starts once the first leader has listed: the changes before its list are
    // not changes it could see.
    let first = replicas.leader(LIMIT).await;
    until(&replicas, "the first leader's list", |r| {
        r.procs[first].count_in_log("list complete") > 0
    })
    .await;
    let churn = Churn::start(&scene.client, &scene.ns, CHURNING, Duration::from_millis(5));
    let check = |r: Result<Vec<_>, String>, replicas: &Replicas| {
        r.unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs()))
    };

    // The zombie: freeze the leader until the other replica has taken over and published.
    let zombie = replicas.leader(LIMIT).await;
    let other = 1 - zombie;
    check(
        committed
            .wait_for_more("the first leader publishing", 10, LIMIT)
            .await,
        &replicas,
    );
    assert_eq!(zombie, first, "no failover yet");
    // The standby's first read of the committed state, which a warm take-over needs.
    replicas.procs[other]
        .wait_for_log("standby: read the committed state", 1, LIMIT)
        .await;
    replicas.procs[zombie].signal("STOP");
    until(&replicas, "the other replica taking over", |r| {
        r.terms(other) > 0
    })
    .await;
    assert_eq!(
        replicas.procs[other].count_in_log("warm=true"),
        1,
        "the standby had read the committed state while standing by:\n{}",
        replicas.procs[other].log()
    );
    check(
        committed
            .wait_for_more("the new leader publishing", 20, LIMIT)
            .await,
        &replicas,
    );
    replicas.procs[zombie].signal("CONT");
    until(&replicas, "the frozen leader stepping down", |r| {
        r.procs[zombie].count_in_log("stepped down") > 0
    })
    .await;
    assert_eq!(replicas.leader(LIMIT).await, other, "the new leader stays");
    let zombie_log = replicas.procs[zombie].log();

    // The Lease deleted by hand: a replica creates it again and leads.
    let leases: Api<Lease> = Api::namespaced(scene.client.clone(), &scene.ns);
    leases
        .delete(&replicas.lease, &Default::default())
        .await
        .expect("deleting the Lease");
    check(
        committed
            .wait_for_more("publishing after the Lease was deleted", 20, LIMIT)
            .await,
        &replicas,
    );
    replicas.leader(LIMIT).await;
    let terms: usize = (0..2).map(|i| replicas.terms(i)).sum();

    // The apiserver goes away during the term: the leader cannot renew and steps down;
    // when it is back, the replicas compete and one leads again.
    let churned = churn.stop().await;
    // The term's leader has published every change so far before the apiserver goes away.
    // Without that, changes no leader committed would meet the restarted apiserver's watch
    // cache, whose history starts after them: a `410 Gone` and a re-list that folds them
    // into each object's current state, as documented, and no watcher can see them again.
    observer
        .catch_up(&support::pods::Pods::new(&scene.client, &scene.ns), LIMIT)
        .await;
    let so_far: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    check(
        committed
            .wait_for_ids(&so_far, LIMIT)
            .await
            .map_err(|e| format!("before the apiserver stopped: {e}")),
        &replicas,
    );
    stack.script(&["stop", "kube-apiserver"]);
    until(
        &replicas,
        "the leader stepping down without the apiserver",
        |r| (0..2).all(|i| !r.leading(i)),
    )
    .await;
    stack.script(&["start", "kube-apiserver"]);
    until(&replicas, "a new term after the apiserver came back", |r| {
        (0..2).map(|i| r.terms(i)).sum::<usize>() > terms
    })
    .await;
    // A client of its own: the old one's connections died with the apiserver.
    let client = stack.kube_client().await;
    let churn = Churn::start_named(
        &client,
        &scene.ns,
        "again",
        CHURNING,
        Duration::from_millis(5),
    );
    check(
        committed
            .wait_for_more("publishing after the apiserver restart", 20, LIMIT)
            .await,
        &replicas,
    );
    let churned = churned + churn.stop().await;

    let pods = support::pods::Pods::new(&client, &scene.ns);
    observer.catch_up(&pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let records = match committed.wait_for_ids(&want, LIMIT).await {
        Ok(r) => r,
        Err(_) => {
            let have: BTreeSet<String> = committed
                .records()
                .iter()
                .map(|r| r.ce("id").to_string())
                .collect();
            let missing: Vec<&String> = want.difference(&have).collect();
            panic!(
                "read_committed lacks {missing:?}\nzombie's log:\n{zombie_log}\n{}",
                replicas.logs()
            );
        }
    };
    let messages = mqtt
        .wait_for_ids(&want, LIMIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs()));
    let fenced = zombie_log.contains("fenced");
    replicas.stop(LIMIT).await;

    let ids: Vec<&str> = records.iter().map(|r| r.ce("id")).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "read_committed saw duplicates");
    assert!(
        unique.iter().all(|id| want.contains(*id)),
        "read_committed holds changes never reported"
    );
    println!(
        "ha_zombie: {churned} API operations, {} changes; the frozen leader stepped down ({}); read_committed {} records (0 duplicates, 0 lost); MQTT {} messages ({} duplicates, 0 lost)",
        want.len(),
        if fenced {
            "fenced by the new leader's producer"
        } else {
            "its elector saw the new holder first"
        },
        records.len(),
        messages.len(),
        messages.len()
            - messages
                .iter()
                .map(|m| m.prop("id"))
                .collect::<BTreeSet<_>>()
                .len(),
    );
}
