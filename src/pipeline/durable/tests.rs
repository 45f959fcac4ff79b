//! Restoring the pipeline's state from the state directory: the known state, the watch
//! positions and each sink's unacknowledged events, after a crash (no `close`).

use super::*;
use crate::classify::Change;
use crate::model::ChangeKind;
use crate::route::engine::Router;
use crate::store::record_tests_event as event;
use crate::store::{FsyncPolicy, LogPolicy};

pub(super) fn settings(dir: Option<std::path::PathBuf>, sinks: &[&str]) -> DurableSettings {
    DurableSettings {
        state: StateConfig {
            dir,
            fsync: FsyncPolicy::Always,
            log: LogPolicy::Always,
            ..StateConfig::default()
        },
        per_namespace: true,
        initial: InitialList::Emit,
        sinks: sinks.iter().map(|s| s.to_string()).collect(),
        ops: Arc::default(),
        resources: vec!["pods".to_string()],
        keeper: None,
        router: None,
    }
}

pub(super) fn temp_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kubecast-durable-{label}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(super) fn ns() -> crate::classify::Scope {
    crate::classify::Scope::new(crate::kinds::Resource::pods(), Some("ns"))
}

/// Moves `c`'s known state as a logged event does after a restart.
fn mirror(c: &mut Classifier, e: &Event) {
    let gone = e.kind == ChangeKind::Deleted;
    c.restore_object(e.object.key(), &e.rv, gone);
}

/// Logs `events` as seen on the watch, mirroring them into `classifier` as the bridge does.
pub(super) async fn log_watched(
    d: &mut Durable,
    c: &mut Classifier,
    events: Vec<Event>,
) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    for e in events {
        let e = d.event(e, true);
        mirror(c, &e);
        out.push(e);
    }
    d.commit().await.unwrap();
    out
}

#[tokio::test]
async fn a_crash_restores_known_pods_the_watch_position_and_each_sinks_unacknowledged_events() {
    let dir = temp_dir("crash");
    let (mut d, start) = Durable::open(settings(Some(dir.clone()), &["a", "b"]))
        .await
        .unwrap();
    assert!(start.pending.values().all(Vec::is_empty));
    let mut c = start.classifier;
    let logged = log_watched(
        &mut d,
        &mut c,
        vec![
            event(0, "u1", "10", ChangeKind::Added),
            event(0, "u2", "11", ChangeKind::Added),
            event(0, "u1", "12", ChangeKind::Modified),
            event(0, "u2", "13", ChangeKind::Deleted),
        ],
    )
    .await;
    d.acked("a", logged[1].seq);
    d.maintain(&c, None).await.unwrap();
    drop(d); // a crash: nothing closed

    let (_, start) = Durable::open(settings(Some(dir.clone()), &["a", "b"]))
        .await
        .unwrap();
    assert_eq!(start.classifier.known_rv("u1"), Some("12"));
    assert_eq!(start.classifier.known_rv("u2"), None, "deleted");
    assert_eq!(start.resume.get("ns"), Some(&Some("13".to_string())));
    let ids =
        |sink: &str| -> Vec<String> { start.pending[sink].iter().map(|e| e.id.clone()).collect() };
    assert_eq!(ids("a"), vec!["u1:12:modified", "u2:deleted"]);
    assert_eq!(ids("b").len(), 4, "b acknowledged nothing");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_list_under_way_at_the_crash_means_listing_again() {
    let dir = temp_dir("list");
    let (mut d, start) = Durable::open(settings(Some(dir.clone()), &["a"]))
        .await
        .unwrap();
    let mut c = start.classifier;
    d.observed(&Observed::ListStart { scope: ns() });
    let e = d.event(event(0, "u1", "20", ChangeKind::Added), false);
    mirror(&mut c, &e);
    d.commit().await.unwrap();
    drop(d);
    let (_, start) = Durable::open(settings(Some(dir.clone()), &["a"]))
        .await
        .unwrap();
    assert_eq!(
        start.resume.get("ns"),
        Some(&None),
        "no resume point: list again"
    );
    assert_eq!(
        start.classifier.known_rv("u1"),
        Some("20"),
        "what was listed is known"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_snapshot_and_the_log_after_it_restore_the_same_state_as_the_log() {
    let dir = temp_dir("snap");
    let (mut d, start) = Durable::open(settings(Some(dir.clone()), &["a"]))
        .await
        .unwrap();
    let mut c = start.classifier;
    log_watched(
        &mut d,
        &mut c,
        vec![event(0, "u1", "30", ChangeKind::Added)],
    )
    .await;
    // A finished list forces a snapshot at the next upkeep.
    d.observed(&Observed::ListDone {
        scope: ns(),
        rv: "31".into(),
    });
    d.commit().await.unwrap();
    d.maintain(&c, None).await.unwrap();
    let after = log_watched(
        &mut d,
        &mut c,
        vec![event(0, "u2", "32", ChangeKind::Added)],
    )
    .await;
    d.acked("a", after[0].seq);
    d.maintain(&c, None).await.unwrap();
    drop(d);
    let (_, start) = Durable::open(settings(Some(dir.clone()), &["a"]))
        .await
        .unwrap();
    assert_eq!(
        start.classifier.known_rv("u1"),
        Some("30"),
        "from the snapshot"
    );
    assert_eq!(
        start.classifier.known_rv("u2"),
        Some("32"),
        "from the log after it"
    );
    assert_eq!(start.resume.get("ns"), Some(&Some("32".to_string())));
    assert!(start.pending["a"].is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn without_a_state_directory_events_are_numbered_from_one_and_nothing_is_kept() {
    let (mut d, start) = Durable::open(settings(None, &["a"])).await.unwrap();
    assert!(start.resume.is_empty() && start.pending.is_empty());
    let a = d.event(event(0, "u1", "1", ChangeKind::Added), true);
    let b = d.event(event(0, "u2", "2", ChangeKind::Added), true);
    assert_eq!((a.seq, b.seq), (1, 2));
    d.commit().await.unwrap();
    d.maintain(&start.classifier, None).await.unwrap();
    d.close(&start.classifier, None).await.unwrap();
}

#[tokio::test]
async fn with_routes_a_crash_restores_pod_states_alert_timers_and_only_each_sinks_own_route_events()
{
    let dir = temp_dir("routes");
    let open = || {
        let mut s = settings(Some(dir.clone()), &["a", "b"]);
        s.router = Some(two_routes_and_a_timer());
        Durable::open(s)
    };
    let (mut d, start) = open().await.unwrap();
    let c = start.classifier;
    let mut r = start.router.expect("a router");
    let change = pending_pod_added();
    let routed = r.on_change(&change, 1_000);
    let mut logged = Vec::new();
    for o in &routed.outs {
        if let crate::route::engine::Out::Change { route: Some(i), .. } = o {
            let mut e = event(0, "u1", "10", ChangeKind::Added);
            e.route = Some(Arc::from(["ra", "rb"][*i]));
            logged.push(d.event(e, false));
        }
    }
    for s in routed.states {
        d.state(s, true);
    }
    d.commit().await.unwrap();
    d.acked("a", logged[0].seq);
    d.maintain(&c, Some(&r)).await.unwrap();
    drop(d); // a crash

    let (_, start) = open().await.unwrap();
    assert_eq!(start.classifier.known_rv("u1"), Some("10"));
    assert_eq!(
        start.resume.get("ns"),
        Some(&Some("10".to_string())),
        "the pod state moved the position"
    );
    let r = start.router.expect("a router");
    assert_eq!(
        r.next_deadline(),
        Some(1_000 + 3_600_000),
        "the pending timer, at its deadline"
    );
    let pending = |sink: &str| -> Vec<Option<String>> {
        start
            .pending
            .get(sink)
            .into_iter()
            .flatten()
            .map(|e| e.route.as_deref().map(str::to_string))
            .collect()
    };
    assert_eq!(
        pending("a"),
        Vec::<Option<String>>::new(),
        "a acknowledged its one event"
    );
    assert_eq!(
        pending("b"),
        vec![Some("rb".to_string())],
        "b gets back only its route's event"
    );
}

/// Two routes (`ra` to sink a, `rb` to sink b on phase changes) and a 1 h `not_ready`.
fn two_routes_and_a_timer() -> Router {
    use crate::route::config::RouteConfig;
    let a: RouteConfig = serde_saphyr::from_str("sinks: [a]\n").unwrap();
    let b: RouteConfig = serde_saphyr::from_str("sinks: [b]\nchanges: [phase]\n").unwrap();
    let routes = vec![
        a.validate("ra", &["a", "b"], &["pods"]).unwrap(),
        b.validate("rb", &["a", "b"], &["pods"]).unwrap(),
    ];
    let alerts: crate::alert::config::AlertsConfig =
        serde_saphyr::from_str("not_ready: {for: 1h}\nunscheduled: {enabled: false}\n").unwrap();
    Router::new(routes, alerts.validate().unwrap())
}

#[tokio::test]
async fn beside_an_exactly_once_sink_routes_hand_it_whole_steps_and_start_from_its_routing_state() {
    use crate::route::engine::Out;
    let keeper = |kept| {
        let mut s = settings(None, &["a", "b"]);
        s.keeper = Some(("a".to_string(), kept));
        s.router = Some(two_routes_and_a_timer());
        Durable::open(s)
    };
    let (mut d, start) = keeper(None).await.unwrap();
    let mut r = start.router.expect("a router");
    let slot = d
        .feed()
        .steps
        .expect("steps, with a router beside a keeper");
    let mut steps = slot.lock().unwrap().take().expect("the receiver, once");
    let change = pending_pod_added();
    let routed = r.on_change(&change, 1_000);
    for o in &routed.outs {
        if let Out::Change { route: Some(i), .. } = o {
            let e = d.event(event(0, "u1", "10", ChangeKind::Added), false);
            d.routed(e.seq, &super::To::Sinks(1 << i));
        }
    }
    for s in routed.states {
        d.state(s, true);
    }
    d.commit().await.unwrap();
    let step = steps.try_recv().expect("a step per batch");
    assert_eq!(step.upto, 2, "two events: one per route");
    assert_eq!(
        step.keeper_last,
        Some(1),
        "only route ra's event is the keeper's"
    );
    assert_eq!(step.positions.get("ns").map(String::as_str), Some("10"));
    assert_eq!(step.states.len(), 1);
    let record: crate::pipeline::kept::StateRecord =
        serde_json::from_slice(step.states[0].1.as_deref().expect("not gone")).unwrap();
    assert_eq!(record.marks.len(), 2, "a mark per route");
    d.commit().await.unwrap();
    assert!(steps.try_recv().is_err(), "nothing moved, no step");

    // A new leader starts from what the keeper committed with that step.
    let kept = crate::sinks::Kept {
        seq: step.upto,
        positions: step.positions.clone(),
        states: step
            .states
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
            .collect(),
        earlier: None,
    };
    let kept = crate::pipeline::kept::KeptState::decode(kept).unwrap();
    let (d, start) = keeper(Some(kept)).await.unwrap();
    let r = start.router.expect("a router");
    assert_eq!(
        r.next_deadline(),
        Some(1_000 + 3_600_000),
        "the pending timer, at its original deadline"
    );
    assert_eq!(start.resume.get("ns"), Some(&Some("10".to_string())));
    let e = {
        let mut d = d;
        d.event(event(0, "u1", "11", ChangeKind::Modified), false)
    };
    assert_eq!(e.seq, 3, "numbering continues after the step");
}

#[tokio::test]
async fn a_state_directory_of_the_pod_only_version_is_read_as_it_is() {
    let dir = temp_dir("pod-only");
    // The snapshot as the Pod-only version wrote it: known pods without a resource, the
    // position of the one all-namespaces watch.
    std::fs::write(
        dir.join("snapshot.json"),
        r#"{"next_seq":5,"known":[{"uid":"u1","namespace":"ns","name":"p1","rv":"41"}],"positions":[[null,"42"]]}"#,
    )
    .unwrap();
    let mut s = settings(Some(dir.clone()), &["a"]);
    s.per_namespace = false;
    s.resources = vec!["pods".to_string(), "deployments.apps".to_string()];
    let (_d, start) = Durable::open(s).await.unwrap();
    assert_eq!(
        start.classifier.known_rv("u1"),
        Some("41"),
        "the pod is known: no re-emit"
    );
    assert_eq!(start.classifier.counts().get("pods"), Some(&1));
    assert_eq!(
        start.resume.get("*"),
        Some(&Some("42".to_string())),
        "the Pods' watch resumes where it was"
    );
    assert!(
        !start.resume.contains_key("deployments.apps/*"),
        "a resource new to the config lists first"
    );
}

/// Pod `ns/p` (uid `u1`) added at resourceVersion 10, Pending.
fn pending_pod_added() -> Change {
    let pod =
        br#"{"metadata":{"uid":"u1","namespace":"ns","name":"p"},"status":{"phase":"Pending"}}"#;
    Change {
        kind: ChangeKind::Added,
        resource: crate::kinds::Resource::pods(),
        scope: "ns".into(),
        uid: "u1".into(),
        namespace: "ns".into(),
        name: "p".into(),
        rv: "10".into(),
        prev_rv: String::new(),
        inferred: false,
        initial: false,
        object: Some(bytes::Bytes::from_static(pod)),
    }
}

#[tokio::test]
async fn upkeep_reports_the_state_directorys_disk_and_its_free_space() {
    let dir = temp_dir("disk");
    let s = settings(Some(dir), &["a"]);
    let ops = s.ops.clone();
    let (mut d, start) = Durable::open(s).await.unwrap();
    d.maintain(&start.classifier, None).await.unwrap();
    let text = ops.metrics.encode();
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
    };
    let (free, size) = (
        value("kubecast_buffer_disk_free_bytes"),
        value("kubecast_buffer_disk_size_bytes"),
    );
    assert!(size > 0 && free <= size, "free {free} of {size}");
}
