//! Leader election on a real Lease (kube-apiserver with etcd): of two candidates exactly one
//! leads; the other never claims the Lease while the leader renews it, and takes it over when
//! the leader stops renewing, after the lease duration by its own clock (the takeover time is
//! printed); two candidates racing for a new Lease never both win.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubecast::ha::{Elector, LeaseSettings};
use support::{Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(20);

fn settings(lease: &str, identity: &str) -> LeaseSettings {
    LeaseSettings {
        namespace: "default".into(),
        name: lease.into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(250),
    }
}

async fn until(rx: &mut tokio::sync::watch::Receiver<bool>, what: &str) {
    within(LIMIT, what, rx.wait_for(|leading| *leading))
        .await
        .unwrap_or_else(|_| panic!("{what}: the elector stopped"));
}

#[tokio::test]
async fn one_candidate_leads_and_the_other_takes_over_only_when_it_stops_renewing() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    let lease = unique_name("kubecast-lease");
    let mut a = Elector::new(client.clone(), settings(&lease, "replica-a")).run();
    until(&mut a, "replica-a leading").await;
    let mut b = Elector::new(client.clone(), settings(&lease, "replica-b")).run();

    // Over twice the lease duration, while a renews, b never claims the Lease.
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        assert!(*a.borrow(), "replica-a lost the Lease while renewing it");
        assert!(
            !*b.borrow(),
            "replica-b claimed the Lease while replica-a renewed it"
        );
        let _ = tokio::time::timeout(Duration::from_millis(100), b.changed()).await;
    }

    // a stops renewing (its task ends at its next tick); b takes over.
    drop(a);
    let stopped = Instant::now();
    until(&mut b, "replica-b taking over").await;
    let takeover = stopped.elapsed();
    eprintln!("ha_lease: takeover after {takeover:?} (lease duration 2 s, renewals every 250 ms)");
    assert!(
        takeover >= Duration::from_millis(1500),
        "replica-b took over after {takeover:?}, before the Lease could have expired"
    );

    let leases: Api<Lease> = Api::namespaced(client, "default");
    let spec = leases
        .get(&lease)
        .await
        .expect("the Lease")
        .spec
        .expect("its spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1), "one change of holder");
    assert_eq!(spec.lease_duration_seconds, Some(2));
}

#[tokio::test]
async fn two_candidates_racing_for_a_new_lease_never_both_win() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    for _ in 0..5 {
        let lease = unique_name("kubecast-race");
        let mut a = Elector::new(client.clone(), settings(&lease, "replica-a"));
        let mut b = Elector::new(client.clone(), settings(&lease, "replica-b"));
        let (ra, rb) = tokio::join!(a.round(), b.round());
        let (ra, rb) = (ra.expect("a's round"), rb.expect("b's round"));
        assert!(
            ra ^ rb,
            "exactly one of two racing candidates leads: a {ra}, b {rb}"
        );
        // The loser stays a follower on its next round while the winner renews.
        let (ra, rb) = tokio::join!(a.round(), b.round());
        assert_eq!(
            (ra.expect("a's round"), rb.expect("b's round")),
            (a.is_leader(), b.is_leader())
        );
        assert!(a.is_leader() ^ b.is_leader(), "still exactly one leader");
    }
}
