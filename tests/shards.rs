//! Shards: replicas that share the cluster's objects, each shard a Lease, each with its own
//! exactly-once transactional id and checkpoint. Three replicas share eight shards while Pods
//! (in two namespaces) and ConfigMaps churn; one is killed with `kill -9`, a fourth joins,
//! one is frozen with SIGSTOP and resumed. Independent observers (their own watches) record
//! the truth: a `read_committed` consumer holds every change exactly once with the id a
//! single kubecast gives it, `replay --verify` finds every chain gapless, MQTT lost nothing,
//! each shard ran on one replica at a time, and the shards end balanced. With an apiserver
//! that does not shard lists and watches, kubecast filters by the same hash itself, with the
//! same results.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber, wait_for};
use support::objects::{Objects, churn_configmaps};
use support::observer::{Observer, check_received};
use support::pods::{Pods, namespace};
use support::replicas::Replicas;
use support::scene::Scene;
use support::shards::{Term, balanced_then_churning, holders, terms, wait_balanced};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const SHARDS: u32 = 8;

/// Waits until `observer` has seen the ConfigMap `name`.
async fn seen(observer: &Observer, name: &str) {
    let found = wait_for(LIMIT, name, || {
        observer
            .changes()
            .iter()
            .any(|c| c.name == name)
            .then_some(())
    })
    .await;
    assert!(found.is_some(), "the observer never saw configmap {name}");
}

/// Per shard, no two terms overlap. `freeze` is when a replica (by index) was frozen:
/// its terms running then count until the freeze (it published nothing while frozen), and
/// each must have ended within a second of `resumed`: its renew deadline passed while it was
/// frozen, so it stops at once, without publishing (checked by the caller). `killed` ends
/// the open terms of killed replicas.
fn check_one_at_a_time(
    logs: &[String],
    killed: &[(usize, jiff::Timestamp)],
    freeze: (usize, jiff::Timestamp, jiff::Timestamp),
) {
    let (frozen, froze_at, resumed) = freeze;
    let mut all: Vec<(usize, Term)> = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        for mut t in terms(log) {
            if let Some((_, at)) = killed.iter().find(|(k, _)| *k == i) {
                t.end.get_or_insert(*at);
            }
            if i == frozen && t.start < froze_at && t.end.is_none_or(|e| e > froze_at) {
                let end = t.end.unwrap_or_else(jiff::Timestamp::now);
                let after = end.duration_since(resumed);
                assert!(
                    after.as_secs_f64() < 1.0,
                    "replica {i} went on with shard {} for {after:?} after it was resumed",
                    t.shard,
                );
                t.end = Some(froze_at);
            }
            all.push((i, t));
        }
    }
    assert!(
        all.len() >= SHARDS as usize,
        "the logs hold {} shard terms, fewer than the {SHARDS} shards",
        all.len()
    );
    for (a, ta) in &all {
        for (b, tb) in &all {
            if a >= b || ta.shard != tb.shard {
                continue;
            }
            let far = jiff::Timestamp::MAX;
            let overlap = ta.start < tb.end.unwrap_or(far) && tb.start < ta.end.unwrap_or(far);
            assert!(
                !overlap,
                "shard {} ran on replicas {a} ({:?}..{:?}) and {b} ({:?}..{:?}) at once",
                ta.shard, ta.start, ta.end, tb.start, tb.end
            );
        }
    }
}

#[tokio::test]
async fn eight_shards_on_three_replicas_through_a_kill_a_join_and_a_freeze_keep_every_change_exactly_once()
 {
    let scene = Scene::new("shards").await;
    let stack = &scene.stack;
    let other_ns = unique_name("shards-b");
    namespace(&scene.client, &other_ns).await;
    let other_pods = Pods::new(&scene.client, &other_ns);
    let topic = unique_name("kc-shards");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-shards");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    scene.pods.create_each("stable", 5).await;
    other_pods.create_each("stable", 5).await;
    let objects = Objects::new(&scene.client);
    for i in 0..3 {
        objects
            .create(
                &format!("/api/v1/namespaces/{}/configmaps", scene.ns),
                &json!({"metadata": {"name": format!("still-{i}")}}),
            )
            .await;
    }
    let pods_a = Observer::start(&scene.client, &scene.ns).await;
    let pods_b = Observer::start(&scene.client, &other_ns).await;
    let cms = Observer::start_for::<ConfigMap>(&scene.client, &scene.ns).await;
    let watch = format!(
        "watch:\n  resources: [pods, configmaps]\n  namespaces: [{}, {other_ns}]\n",
        scene.ns
    );
    let ns_line = format!("watch:\n  namespaces: [{}]\n", scene.ns);
    let mut replicas = Replicas::start_edited(
        &scene,
        3,
        &topic,
        &prefix,
        &format!("sharding:\n  shards: {SHARDS}\n"),
        &[],
        |c| c.replacen(&ns_line, &watch, 1),
    );
    let (client, ns, lease) = (
        scene.client.clone(),
        scene.ns.clone(),
        replicas.lease.clone(),
    );
    let balanced = |alive: Vec<String>| {
        let (client, ns, lease) = (client.clone(), ns.clone(), lease.clone());
        async move { wait_balanced(&client, &ns, &lease, SHARDS, &alive, LIMIT).await }
    };
    if let Err(e) = balanced(replicas.alive()).await {
        panic!("{e}\n{}", replicas.logs());
    }
    if let Err(e) = committed
        .wait_until("the stable objects' events", LIMIT, |r| r.len() >= 13)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    for (i, k) in replicas.procs.iter().enumerate() {
        assert!(
            k.count_in_log("the apiserver filters this resource's list and watch by shard") > 0,
            "replica {i} did not find the apiserver filtering by shard:\n{}",
            k.log()
        );
    }

    let churn_a = Churn::start(&scene.client, &scene.ns, 10, Duration::from_millis(10));
    let churn_b = Churn::start(&scene.client, &other_ns, 10, Duration::from_millis(10));
    let stop_cms = Arc::new(AtomicBool::new(false));
    let cm_churn = churn_configmaps(
        &scene.client,
        &scene.ns,
        10,
        Duration::from_millis(20),
        stop_cms.clone(),
    );

    // kill -9 of a replica: the other two take its shards.
    tokio::time::sleep(Duration::from_millis(fastrand::u64(500..2000))).await;
    let mut killed = Vec::new();
    let t = Instant::now();
    killed.push((0, jiff::Timestamp::now()));
    replicas.kill(0).await;
    if let Err(e) = balanced(replicas.alive()).await {
        panic!("after kill -9: {e}\n{}", replicas.logs());
    }
    println!(
        "kill -9: its shards held by the others and balanced after {:?}",
        t.elapsed()
    );

    // A fourth replica joins: the others hand shards over to it.
    let joined = replicas.add(&scene);
    if let Err(e) = balanced(replicas.alive()).await {
        panic!("after a replica joined: {e}\n{}", replicas.logs());
    }
    let held = holders(&scene.client, &scene.ns, &replicas.lease, SHARDS).await;
    let identity = replicas.identities[joined].clone();
    assert!(
        held.iter().any(|h| h.as_deref() == Some(identity.as_str())),
        "the replica that joined holds no shard: {held:?}"
    );

    // One frozen: its shards move; resumed, it steps down from them and takes its share again.
    let frozen = 1;
    let froze_at = jiff::Timestamp::now();
    replicas.procs[frozen].signal("STOP");
    let others: Vec<String> = replicas
        .alive()
        .into_iter()
        .filter(|a| *a != replicas.identities[frozen])
        .collect();
    let moved = balanced(others).await;
    let resumed = jiff::Timestamp::now();
    replicas.procs[frozen].signal("CONT");
    if let Err(e) = moved {
        panic!("while a replica was frozen: {e}\n{}", replicas.logs());
    }
    if let Err(e) = balanced(replicas.alive()).await {
        panic!("after the frozen replica resumed: {e}\n{}", replicas.logs());
    }
    if let Err(e) = committed
        .wait_for_more("delivery after the freeze", 20, LIMIT)
        .await
    {
        panic!("{e}\n{}", replicas.logs());
    }

    stop_cms.store(true, Ordering::Relaxed);
    cm_churn.await.expect("the configmap churn");
    let ops = churn_a.stop().await + churn_b.stop().await;
    objects
        .create(
            &format!("/api/v1/namespaces/{}/configmaps", scene.ns),
            &json!({"metadata": {"name": "marker"}}),
        )
        .await;
    pods_a.catch_up(&scene.pods, LIMIT).await;
    pods_b.catch_up(&other_pods, LIMIT).await;
    seen(&cms, "marker").await;
    let want: BTreeSet<String> = [&pods_a, &pods_b, &cms]
        .iter()
        .flat_map(|o| o.changes())
        .map(|c| c.id())
        .collect();
    let duplicates = replicas.committed_once(&committed, &want, LIMIT).await;
    assert_eq!(
        duplicates, 0,
        "read_committed must see each change exactly once"
    );
    let messages = match mqtt.wait_for_ids(&want, LIMIT).await {
        Ok(m) => m,
        Err(e) => panic!("{e}\n{}", replicas.logs()),
    };
    let mqtt_ids: Vec<&str> = messages.iter().map(|m| m.prop("id")).collect();
    let mqtt_duplicates = check_received(&want, &mqtt_ids, "MQTT");
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "replay --verify:\n{out}{err}");
    let logs: Vec<String> = replicas.procs.iter().map(|k| k.log()).collect();
    check_one_at_a_time(&logs, &killed, (frozen, froze_at, resumed));
    // The frozen replica published nothing after it resumed: its Kafka producers were
    // fenced, and it never took an MQTT session back from the replicas that hold its
    // shards now (each would say so).
    for (i, log) in logs.iter().enumerate().filter(|(i, _)| *i != frozen) {
        let taken: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("was taken over by another client"))
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|at| at >= resumed)
            })
            .collect();
        assert!(
            taken.is_empty(),
            "replica {i}'s MQTT sessions were taken after the frozen replica resumed: {taken:#?}"
        );
    }
    println!(
        "{} changes from {ops} API operations over {SHARDS} shards: exactly once in Kafka, over MQTT {mqtt_duplicates} delivered again with their ids",
        want.len()
    );
    replicas.stop(LIMIT).await;
}

/// Another kube-apiserver over the stack's etcd, without feature gates, stopped on drop.
struct PlainApiserver {
    stack: support::Stack,
    port: u16,
    kubeconfig: std::path::PathBuf,
}

impl PlainApiserver {
    fn start(stack: &support::Stack, dir: &std::path::Path) -> PlainApiserver {
        let port: u16 = std::env::var("KUBECAST_TEST_PLAIN_APISERVER_PORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(16479);
        stack.script(&["apiserver", &port.to_string()]);
        let text = std::fs::read_to_string(&stack.kubeconfig).expect("the stack's kubeconfig");
        let server = format!("https://127.0.0.1:{}", stack.kube_port);
        let kubeconfig = dir.join("plain-kubeconfig");
        std::fs::write(
            &kubeconfig,
            text.replace(&server, &format!("https://127.0.0.1:{port}")),
        )
        .expect("writing the plain apiserver's kubeconfig");
        PlainApiserver {
            stack: stack.clone(),
            port,
            kubeconfig,
        }
    }
}

impl Drop for PlainApiserver {
    fn drop(&mut self) {
        self.stack
            .script(&["stop", &format!("kube-apiserver-{}", self.port)]);
    }
}

#[tokio::test]
async fn without_sharded_watches_on_the_apiserver_kubecast_filters_by_shard_itself_with_the_same_ids()
 {
    let scene = Scene::new("shards-plain").await;
    let stack = &scene.stack;
    let plain = PlainApiserver::start(stack, &scene.dir);
    let topic = unique_name("kc-shards-plain");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-shards-plain");
    scene.pods.create_each("stable", 6).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let kubeconfig = plain.kubeconfig.to_string_lossy().to_string();
    let replicas = Replicas::start_env(
        &scene,
        2,
        &topic,
        &prefix,
        "sharding:\n  shards: 4\n",
        &[("KUBECONFIG", &kubeconfig)],
    );
    let churn = balanced_then_churning(
        &scene,
        &replicas,
        4,
        &committed,
        (10, Duration::from_millis(10)),
        50,
        LIMIT,
    )
    .await;
    churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    assert_eq!(
        replicas.committed_once(&committed, &want, LIMIT).await,
        0,
        "each change once, though every replica received every object"
    );
    for (i, k) in replicas.procs.iter().enumerate() {
        assert!(
            k.count_in_log("the apiserver does not filter this resource by shard") > 0,
            "replica {i} did not say that it filters by shard itself:\n{}",
            k.log()
        );
    }
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "replay --verify:\n{out}{err}");
    replicas.stop(LIMIT).await;
}
