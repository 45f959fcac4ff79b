//! A shard's Lease and its replica's publishing: two replicas share four shards; then one's
//! Lease requests get no answer (an API proxy of its own holds them) while its watches and
//! sinks still work. It must stop publishing each of its shards at its renew deadline, a
//! margin before the other replica may take the shard, and the other then takes them all:
//! every change arrives exactly once in `read_committed`.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::apiproxy::ApiProxy;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::observer::Observer;
use support::replicas::{LEASE_DURATION_MS, Replicas};
use support::scene::Scene;
use support::shards::{balanced_then_churning, terms, wait_balanced};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
const SHARDS: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_lease_requests_get_no_answer_stops_each_shard_before_another_takes_it() {
    let scene = Scene::new("shards-lease").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-shards-lease");
    let committed = KafkaTopic::create(stack, &topic).await;
    let prefix = unique_name("kc-shards-lease");
    let _mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    scene.pods.create_each("stable", 6).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let proxy = ApiProxy::start(stack).await;
    let kubeconfig = scene.dir.join("proxied.kubeconfig");
    proxy.kubeconfig(&kubeconfig);
    let kubeconfig = kubeconfig.to_string_lossy().to_string();
    let mut replicas = Replicas::start_with(
        &scene,
        0,
        &topic,
        &prefix,
        &format!("sharding:\n  shards: {SHARDS}\n"),
    );
    let cut = replicas.add_env(&scene, &[("KUBECONFIG", &kubeconfig)]);
    let other = replicas.add(&scene);
    let churn = balanced_then_churning(
        &scene,
        &replicas,
        SHARDS,
        &committed,
        (6, Duration::from_millis(50)),
        20,
        LIMIT,
    )
    .await;

    // From here on the first replica's Lease requests get no answer.
    let held_at = jiff::Timestamp::now();
    proxy.hold(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        scene.ns
    ));
    let survivor = vec![replicas.identities[other].clone()];
    if let Err(e) = wait_balanced(
        &scene.client,
        &scene.ns,
        &replicas.lease,
        SHARDS,
        &survivor,
        LIMIT,
    )
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
        "each change once"
    );

    // Each shard the cut replica held when its Lease requests were held ended there a margin
    // before the other took it: the renew deadline is two thirds of the Lease, the other
    // waits the whole Lease. (Shards it handed over while balancing, before, went at once.)
    let (cut_terms, other_terms) = (
        terms(&replicas.procs[cut].log()),
        terms(&replicas.procs[other].log()),
    );
    let margin = Duration::from_millis(LEASE_DURATION_MS / 6);
    let mut moved = 0;
    for t in cut_terms
        .iter()
        .filter(|t| t.end.is_none_or(|e| e >= held_at))
    {
        let end = t.end.unwrap_or_else(|| {
            panic!(
                "the cut replica still runs shard {}:\n{}",
                t.shard,
                replicas.procs[cut].log()
            )
        });
        let Some(next) = other_terms
            .iter()
            .filter(|o| o.shard == t.shard && o.start >= t.start)
            .map(|o| o.start)
            .min()
        else {
            continue;
        };
        moved += 1;
        let gap = next.duration_since(end);
        assert!(
            gap.as_secs_f64() >= margin.as_secs_f64(),
            "shard {}: the cut replica stopped at {end}, the other took it at {next}: {gap:?} apart, less than {margin:?}\n{}",
            t.shard,
            replicas.logs()
        );
        println!(
            "shard {}: stopped {gap:?} before the other replica took it",
            t.shard
        );
    }
    assert!(
        moved > 0,
        "no shard moved from the cut replica:\n{}",
        replicas.logs()
    );
    println!(
        "{} changes from {ops} operations, each once; {moved} shards moved",
        want.len()
    );
    replicas.stop(LIMIT).await;
}
