//! The known state alone: bytes the classifier holds per known pod, counted by a global
//! allocator that tracks live heap bytes (the figure the allocator was asked for, without
//! its own per-chunk overhead). Pods with real-shaped identities (a 36-character uid, a
//! 5 to 8 digit resourceVersion, a 20-character name, one of 50 namespaces) are listed into
//! a fresh classifier, and the live bytes before and after are compared.
//! Then the same for core/v1 Events (often a cluster's most numerous objects; names such as
//! `checkout-7d9f8b-00042.18ee22f430da6744`), watched beside Pods: their resource key is
//! interned like the namespaces.
//! Prints Markdown tables for BENCHMARKS.md ("Memory per known pod"); nothing is asserted.
//!
//! Then what routes and alert rules keep beside it per object (the router's marks and open
//! episodes, which a restart or a new leader restores): 100,000 Pod changes (the 9 KB fixture
//! of `benches/rules.rs` under 100,000 uids) through a router with three routes, without and
//! with the Pod rules on.
//!
//! `cargo bench --bench known_state -- 10000 100000` (default: 1000 10000 100000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use kubecast::classify::Change;
use kubecast::classify::{Classifier, Object};
use kubecast::config::InitialList;
use kubecast::route::engine::Router;

#[path = "shared/routes.rs"]
mod routes;
use routes::three_routes;

const FIXTURE: &str = include_str!("fixtures/pod-watch-line.json");

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn pod(i: usize) -> Object {
    Object {
        uid: format!("{:08x}-7c1e-4b7a-9f2d-{:012x}", i as u32, i * 7919),
        namespace: format!("team-{:02}", i % 50),
        name: format!("checkout-7d9f8b-{:05}", i % 100_000),
        rv: format!("{}", 10_000 + i * 37),
        // The classifier keeps no object bytes; an empty one keeps them out of the count.
        bytes: Bytes::new(),
    }
}

fn event(i: usize) -> Object {
    Object {
        name: format!(
            "checkout-7d9f8b-{:05}.{:016x}",
            i % 100_000,
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ),
        ..pod(i)
    }
}

/// Live heap bytes of a classifier that listed `n` objects made by `make` in `scope`.
fn measure(n: usize, scope: &kubecast::classify::Scope, make: fn(usize) -> Object) -> isize {
    let before = LIVE.load(Ordering::Relaxed);
    let mut classifier = Classifier::new(InitialList::Skip);
    classifier.list_start(scope);
    for i in 0..n {
        std::hint::black_box(classifier.listed(scope, make(i)));
    }
    std::hint::black_box(classifier.list_done(scope));
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(classifier.len(), n, "every listed object is known");
    bytes
}

fn main() {
    let mut counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .filter(|&n| n > 0)
        .collect();
    if counts.is_empty() {
        counts = vec![1_000, 10_000, 100_000];
    }
    println!("| known pods | live heap bytes of the known state | per pod |");
    println!("| --- | --- | --- |");
    for n in counts {
        let before = LIVE.load(Ordering::Relaxed);
        let mut classifier = Classifier::new(InitialList::Skip);
        let scope = kubecast::classify::Scope::all_pods();
        classifier.list_start(&scope);
        for i in 0..n {
            std::hint::black_box(classifier.listed(&scope, pod(i)));
        }
        std::hint::black_box(classifier.list_done(&scope));
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        println!("| {n} | {bytes} | {:.0} B |", bytes as f64 / n as f64);
        assert_eq!(classifier.len(), n, "every listed pod is known");
    }
    let events = kubecast::classify::Scope::new(
        std::sync::Arc::new(kubecast::kinds::Resource::new(
            "", "v1", "Event", "events", true,
        )),
        None,
    );
    println!();
    println!("| known core Events | live heap bytes of the known state | per Event |");
    println!("| --- | --- | --- |");
    let n = 100_000;
    let bytes = measure(n, &events, event);
    println!("| {n} | {bytes} | {:.0} B |", bytes as f64 / n as f64);

    println!();
    println!("| router, 100,000 Pods | live heap bytes | per Pod | open episodes |");
    println!("| --- | --- | --- | --- |");
    let rules = || {
        let c: kubecast::alert::config::AlertsConfig =
            serde_saphyr::from_str("{}").expect("the default rules");
        c.validate().expect("the default rules are valid")
    };
    for (label, router) in [
        ("3 routes", Router::new(three_routes(), Vec::new())),
        (
            "3 routes + the Pod rules",
            Router::new(three_routes(), rules()),
        ),
    ] {
        let (bytes, open) = measure_router(n, router);
        println!(
            "| {label} | {bytes} | {:.0} B | {open} |",
            bytes as f64 / n as f64
        );
    }
}

/// Live heap bytes `router` keeps after an `added` change of each of `n` Pods.
fn measure_router(n: usize, mut router: Router) -> (isize, usize) {
    let line: serde_json::Value = serde_json::from_str(FIXTURE.trim()).expect("the fixture");
    let object = Bytes::from(line["object"].to_string());
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..n {
        let p = pod(i);
        let change = Change {
            kind: kubecast::model::ChangeKind::Added,
            resource: kubecast::kinds::Resource::pods(),
            scope: "*".into(),
            uid: p.uid,
            namespace: p.namespace,
            name: p.name,
            rv: p.rv,
            prev_rv: String::new(),
            inferred: false,
            initial: false,
            object: Some(object.clone()),
        };
        // What it returns (events, states to log) goes out; what it keeps stays.
        drop(std::hint::black_box(router.on_change(&change, 1_000)));
    }
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    (bytes, router.open_episodes())
}
