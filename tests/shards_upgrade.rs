//! A rolling upgrade from a version before the shard announcement. Such a replica raises its
//! heartbeat in the members' record (annotation `kubecast.io/members` of the Lease
//! `{lease}-members`) and announces no shard count (`kubecast.io/member-shards`). While it is
//! alive a replica of today runs no shard at all — it cannot tell which ranges the old one
//! publishes — and says so at WARN, naming it; it takes its shards a Lease after the old one
//! left the record, and the changes made meanwhile reach Kafka then, none lost.
//!
//! The old replica is a FAKE, named as such: the test writes its heartbeats as that version
//! did (only the heartbeats' annotation, every retry period, the rest of the Lease kept), rather
//! than build and run an old binary.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use support::consume::KafkaTopic;
use support::observer::Observer;
use support::replicas::{LEASE_DURATION_MS, RETRY_PERIOD_MS, Replicas};
use support::scene::Scene;
use support::shards::{holders, wait_balanced};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

/// The identity the fake old replica beats as.
const OLD: &str = "kubecast-old-0";

/// One heartbeat of the old replica: its counter raised (`stay`) or its entry removed, in the
/// heartbeats' annotation only, as the old version writes it; retried when another replica
/// wrote in between (409).
async fn old_beat(api: &Api<Lease>, name: &str, beat: u64, stay: bool) {
    for _ in 0..10 {
        let current = api
            .get_opt(name)
            .await
            .expect("reading the members' record");
        let mut lease = current.unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: None,
        });
        let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let mut record: BTreeMap<String, u64> = annotations
            .get("kubecast.io/members")
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        if stay {
            record.insert(OLD.to_string(), beat);
        } else {
            record.remove(OLD);
        }
        annotations.insert(
            "kubecast.io/members".to_string(),
            serde_json::to_string(&record).expect("a map of numbers serializes"),
        );
        let written = if lease.metadata.resource_version.is_some() {
            api.replace(name, &PostParams::default(), &lease).await
        } else {
            api.create(&PostParams::default(), &lease).await
        };
        match written {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("writing the old replica's heartbeat: {e}"),
        }
    }
    panic!("the old replica's heartbeat was not written in 10 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_from_before_the_shard_announcement_holds_back_every_new_replica_until_it_is_gone()
 {
    let scene = Scene::new("shards-upgrade").await;
    let topic = unique_name("kc-upgrade");
    let committed = KafkaTopic::create(&scene.stack, &topic).await;
    let prefix = unique_name("kc-upgrade");
    let observer = Observer::start(&scene.client, &scene.ns).await;
    // No replica yet: the old one beats first, as it runs before the rolling update starts.
    let mut replicas = Replicas::start_with(&scene, 0, &topic, &prefix, "sharding:\n  shards: 2\n");
    let members = format!("{}-members", replicas.lease);
    let api: Api<Lease> = Api::namespaced(scene.client.clone(), &scene.ns);
    old_beat(&api, &members, 1, true).await;
    let beating = Arc::new(AtomicBool::new(true));
    let old = {
        let (api, members, beating) = (api.clone(), members.clone(), beating.clone());
        tokio::spawn(async move {
            let mut beat = 1;
            while beating.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(RETRY_PERIOD_MS)).await;
                beat += 1;
                old_beat(&api, &members, beat, true).await;
            }
        })
    };

    let new = replicas.add(&scene);
    replicas.procs[new]
        .wait_for_log("(announces no shard count)", 1, LIMIT)
        .await;
    // Four Leases beside the old replica: no shard taken, and a change made meanwhile waits.
    scene.pods.create("while-old").await;
    let until = Instant::now() + Duration::from_millis(4 * LEASE_DURATION_MS);
    while Instant::now() < until {
        let h = holders(&scene.client, &scene.ns, &replicas.lease, 2).await;
        assert!(
            h.iter().all(Option::is_none),
            "a new replica took a shard while a replica from before the announcement was alive: {h:?}\n{}",
            replicas.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = replicas.procs[new].log();
    assert!(
        !log.contains("holding the shard"),
        "no shard ran beside the old replica:\n{log}"
    );
    assert!(
        log.contains("replicas of another shard count are alive")
            && log.contains(&format!("{OLD} (announces no shard count)")),
        "the new replica says at WARN whom it waits for:\n{log}"
    );

    // The old replica stops: it leaves the record, as its shutdown does.
    beating.store(false, Ordering::Relaxed);
    old.await.expect("the old replica's heartbeats");
    old_beat(&api, &members, 0, false).await;
    let left = Instant::now();
    let identity = replicas.identities[new].clone();
    if let Err(e) = wait_balanced(
        &scene.client,
        &scene.ns,
        &replicas.lease,
        2,
        std::slice::from_ref(&identity),
        LIMIT,
    )
    .await
    {
        panic!("{e}\n{}", replicas.logs());
    }
    // `wait_balanced` waits a second of it held.
    let took = left.elapsed().saturating_sub(Duration::from_secs(1));
    assert!(
        took >= Duration::from_millis(LEASE_DURATION_MS / 2),
        "the new replica waits about a Lease after the old one left before taking a shard; it took them {took:?} after"
    );
    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let dups = replicas.committed_once(&committed, &want, LIMIT).await;
    println!(
        "shards_upgrade: the new replica took its 2 shards {} ms after the old one left; {} changes (one made beside the old replica) in Kafka, {dups} duplicates",
        took.as_millis(),
        want.len()
    );
    replicas.stop(LIMIT).await;
}
