//! Chaos: `kill -9` of kubecast while changes are held only in memory (`state.log:
//! when_behind`): one sink acknowledged them, the other (an HTTP receiver slow to answer) has
//! not, and the bound after which they would be written has not passed.
//!
//! - While the apiserver still has them, nothing is lost: the state directory's log does not
//!   grow while they are made, and after the restart every change the independent observer
//!   saw reaches the HTTP sink's receiver, with its original id, and nothing made up.
//! - What `when_behind` does not cover, as the README says: a pod created and deleted while
//!   held, then etcd compacted (the restart's watch gets `410 Gone`). The sink that had
//!   acknowledged has both changes; the one that was behind gets neither (the re-list finds
//!   no such pod), and gets every change made after the restart. With `log: always` the
//!   same run hands the slow sink both changes, from the state directory.
//! - How long a change a sink falls behind on is only in memory: from when the fast sink has
//!   it until the state log grew, with the default `behind_ms`.
//!
//! The slow receiver is [`FakeReceiver`], named as the fake it is: no real receiver holds its
//! answers on demand. After the restart the sink points at the CloudEvents Go SDK's receiver.
//! The compaction tests restart a kube-apiserver of their own over the stack's etcd (the
//! stack's own, which the other tests use, is left alone), one test at a time.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use support::consume::{KafkaTopic, wait_for};
use support::kubecast::Kubecast;
use support::observer::{Observer, check_received};
use support::pods::Pods;
use support::receiver::{FakeReceiver, GoReceiver, Received, Script};
use support::scene::{Scene, file_events, file_sink};
use support::{Stack, unique_name};

const LIMIT: Duration = Duration::from_secs(120);

/// The ids among `ids` whose event record is in the state log (an event record holds the
/// event's id as it is). By content, not size: a resume point (a bookmark's, about once a
/// minute) is logged at once while nothing is held, so the log may grow meanwhile.
fn logged_ids(state: &Path, ids: &BTreeSet<String>) -> BTreeSet<String> {
    let text = log_text(state);
    ids.iter()
        .filter(|id| text.contains(id.as_str()))
        .cloned()
        .collect()
}

/// The text of the state log's segments.
fn log_text(state: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(state.join("log"))
        .into_iter()
        .flatten()
        .flatten()
    {
        text.push_str(&String::from_utf8_lossy(
            &std::fs::read(e.path()).unwrap_or_default(),
        ));
    }
    text
}

fn config(scene: &Scene, state: &Path, topic: &str, url: &str) -> String {
    scene.config(
        // Held for ten minutes and no periodic snapshot meanwhile: within the test, the
        // changes the receiver has not answered are only in memory.
        &format!(
            "state:\n  dir: {}\n  behind_ms: 600000\n  snapshot_interval_seconds: 600\n",
            state.display()
        ),
        &[
            scene.kafka_sink("kafka", topic, &[]),
            format!("  web:\n    type: http\n    url: '{url}'\n"),
        ],
    )
}

#[tokio::test]
async fn kill_9_while_changes_are_only_in_memory_loses_none_of_them() {
    let scene = Scene::new("chaos-held").await;
    let topic = unique_name("kc-held");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    // Answers after ten minutes: nothing it takes is acknowledged before the kill.
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], String::new()));
    let slow = FakeReceiver::start(Duration::from_secs(600), script).await;
    let state = scene.dir.join("state");
    let text = config(&scene, &state, &topic, &slow.url);
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    // The list's snapshot is written; what follows is held.
    let snapshot = state.join("snapshot.json");
    support::consume::wait_for(LIMIT, "the list's snapshot", || {
        snapshot.exists().then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no snapshot after the list:\n{}", kubecast.log()));

    let names: Vec<String> = (0..8).map(|i| format!("held-{i}")).collect();
    for name in &names {
        scene.pods.create(name).await;
    }
    for name in &names {
        scene.pods.label(name, "step", "1").await;
    }
    scene.pods.delete(&names[0]).await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    // Kafka acknowledged every change: kubecast has them all, held for the slow receiver.
    kubecast.check(kafka.wait_for_ids(&truth, LIMIT).await);
    assert!(
        slow.accepted().is_empty(),
        "the slow receiver answered nothing"
    );
    let logged = logged_ids(&state, &truth);
    assert!(
        logged.is_empty(),
        "the changes the receiver has not answered were not written, yet the state log holds {logged:?}:\n{}",
        kubecast.log()
    );
    let killed_log = kubecast.kill().await;

    let mut receiver = GoReceiver::start(&scene.stack).await;
    let text = config(&scene, &state, &topic, &receiver.url);
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    let events = kubecast.check(
        receiver
            .wait_until("every change at the receiver", LIMIT, |e| {
                let ids: BTreeSet<&str> = e.iter().map(|x| x.attr("id")).collect();
                truth.iter().all(|t| ids.contains(t.as_str()))
            })
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}\nbefore the kill:\n{killed_log}");
    // Only the namespace's pods: the observer's truth covers them all.
    let ids: Vec<&str> = events.iter().map(|e| e.attr("id")).collect();
    let dups = check_received(&truth, &ids, "the receiver");
    receiver.stop().await;
    println!(
        "chaos_held: {} changes held in memory at the kill, all delivered after it ({dups} duplicates, same ids)",
        truth.len()
    );
}

/// The compaction tests restart the one kube-apiserver of this binary's own: one at a time.
static OWN_APISERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A kube-apiserver of this binary's own over the stack's etcd (`scripts/stack apiserver
/// PORT`), stopped on drop. Restarted after etcd is compacted, it has no history before the
/// compaction, as `scripts/stack compact` leaves the stack's own apiserver, which every other
/// test uses and which this spares.
struct OwnApiserver {
    shared: Stack,
    /// The stack as seen through this apiserver: its kubeconfig and port.
    stack: Stack,
    port: u16,
}

impl OwnApiserver {
    fn start(shared: &Stack, dir: &Path) -> OwnApiserver {
        let port: u16 = std::env::var("KUBECAST_TEST_HELD_APISERVER_PORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(16481);
        shared.script(&["apiserver", &port.to_string()]);
        let text = std::fs::read_to_string(&shared.kubeconfig).expect("the stack's kubeconfig");
        let kubeconfig = dir.join("own-kubeconfig");
        std::fs::write(
            &kubeconfig,
            text.replace(
                &format!("https://127.0.0.1:{}", shared.kube_port),
                &format!("https://127.0.0.1:{port}"),
            ),
        )
        .expect("writing the own apiserver's kubeconfig");
        let mut stack = shared.clone();
        stack.kubeconfig = kubeconfig;
        stack.kube_port = port;
        OwnApiserver {
            shared: shared.clone(),
            stack,
            port,
        }
    }

    /// Compacts etcd to its current revision and restarts this apiserver (its watch cache
    /// would go on serving the compacted history): a watch from before gets `410 Gone`.
    fn compact(&self) {
        self.shared.script(&["compact", "etcd"]);
        self.shared
            .script(&["stop", &format!("kube-apiserver-{}", self.port)]);
        self.shared.script(&["apiserver", &self.port.to_string()]);
    }
}

impl Drop for OwnApiserver {
    fn drop(&mut self) {
        self.shared
            .script(&["stop", &format!("kube-apiserver-{}", self.port)]);
    }
}

/// A file sink (fast: it acknowledges at once) and an HTTP sink to `url`, `state.log: log`,
/// held for ten minutes, no periodic snapshot.
fn two_sinks(scene: &Scene, state: &Path, log: &str, file: &Path, url: &str) -> String {
    scene.config(
        &format!(
            "state:\n  dir: {}\n  log: {log}\n  behind_ms: 600000\n  snapshot_interval_seconds: 600\n",
            state.display()
        ),
        &[
            file_sink("file", file),
            format!("  web:\n    type: http\n    url: '{url}'\n"),
        ],
    )
}

/// What each sink has after a pod was created and deleted while the HTTP receiver had not
/// answered, kubecast was killed (`kill -9`), etcd compacted and kubecast restarted.
struct AfterCompaction {
    /// The ids of the pod's changes, as the independent observer saw them.
    gone: BTreeSet<String>,
    /// The ids of the other changes held at the kill: the observer's marker pod, created then
    /// and still there.
    present: BTreeSet<String>,
    /// The ids of the changes made after the restart (the namespace's pods as listed then,
    /// and a pod created, changed and deleted).
    after: BTreeSet<String>,
    /// The file sink's events (the fast sink).
    fast: Vec<serde_json::Value>,
    /// The receiver's events after the restart (the slow sink).
    slow: Vec<Received>,
    /// The ids of the changes held at the kill (the pod's and the marker's) whose event
    /// record was in the state log then.
    logged: BTreeSet<String>,
}

async fn held_then_compacted(label: &str, log: &str) -> AfterCompaction {
    let _one = OWN_APISERVER.lock().await;
    let scene = Scene::new(label).await;
    let own = OwnApiserver::start(&scene.stack, &scene.dir);
    let client = own.stack.kube_client().await;
    let pods = Pods::new(&client, &scene.ns);
    let observer = Observer::start(&client, &scene.ns).await;
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], String::new()));
    let slow = FakeReceiver::start(Duration::from_secs(600), script).await;
    let (state, file) = (scene.dir.join("state"), scene.dir.join("events.jsonl"));
    let text = two_sinks(&scene, &state, log, &file, &slow.url);
    let mut kubecast = Kubecast::start(&own.stack, &scene.dir, &text);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let snapshot = state.join("snapshot.json");
    wait_for(LIMIT, "the list's snapshot", || {
        snapshot.exists().then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no snapshot after the list:\n{}", kubecast.log()));

    pods.create("gone").await;
    pods.delete("gone").await;
    observer.catch_up(&pods, LIMIT).await;
    let seen = observer.changes();
    let (gone, present): (Vec<_>, Vec<_>) = seen.iter().partition(|c| c.name == "gone");
    let gone: BTreeSet<String> = gone.iter().map(|c| c.id()).collect();
    let present: BTreeSet<String> = present.iter().map(|c| c.id()).collect();
    let f = file.clone();
    let all: BTreeSet<String> = seen.iter().map(|c| c.id()).collect();
    kubecast.check(
        wait_for(LIMIT, "the fast sink", || {
            let ids: BTreeSet<String> = file_events(&f)
                .iter()
                .filter_map(|e| e["id"].as_str().map(String::from))
                .collect();
            all.is_subset(&ids).then_some(())
        })
        .await
        .ok_or(format!("the file sink lacks some of {all:?}")),
    );
    assert!(
        slow.accepted().is_empty(),
        "the slow receiver answered nothing"
    );
    let logged = logged_ids(&state, &all);
    let killed_log = kubecast.kill().await;
    // The observer's watch ends with the apiserver.
    drop(observer);

    own.compact();
    let client = own.stack.kube_client().await;
    let pods = Pods::new(&client, &scene.ns);
    let mut receiver = GoReceiver::start(&scene.stack).await;
    let text = two_sinks(&scene, &state, log, &file, &receiver.url);
    let mut kubecast = Kubecast::start(&own.stack, &scene.dir, &text);
    kubecast.wait_for_log("410 Gone", 1, LIMIT).await;
    let observer = Observer::start(&client, &scene.ns).await;
    pods.create("after").await;
    pods.label("after", "step", "1").await;
    pods.delete("after").await;
    observer.catch_up(&pods, LIMIT).await;
    let after: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let want: BTreeSet<&str> = after.iter().map(String::as_str).collect();
    let slow = kubecast.check(
        receiver
            .wait_until("the changes after the restart", LIMIT, |e| {
                let ids: BTreeSet<&str> = e.iter().map(|x| x.attr("id")).collect();
                want.is_subset(&ids)
            })
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}\nbefore the kill:\n{killed_log}");
    receiver.stop().await;
    AfterCompaction {
        gone,
        present,
        after,
        fast: file_events(&file),
        slow,
        logged,
    }
}

/// The ids of `events` (each event's `id`).
fn ids<'a>(events: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    events.map(String::from).collect()
}

#[tokio::test]
async fn with_when_behind_a_pod_made_and_deleted_while_held_and_then_compacted_away_reaches_only_the_sinks_that_had_acknowledged_it()
 {
    let r = held_then_compacted("held-compact", "when_behind").await;
    assert!(
        r.logged.is_empty(),
        "nothing of the changes held at the kill was written: {:?}",
        r.logged
    );
    assert!(
        r.gone.len() >= 2,
        "the observer saw the pod's create and delete: {:?}",
        r.gone
    );
    let fast = ids(r.fast.iter().filter_map(|e| e["id"].as_str()));
    assert!(
        r.gone.is_subset(&fast),
        "the sink that had acknowledged has every change of the pod"
    );
    let slow_gone: Vec<&Received> = r
        .slow
        .iter()
        .filter(|e| e.event["k8sname"] == "gone")
        .collect();
    assert!(
        slow_gone.is_empty(),
        "the sink that was behind gets none of the pod's changes (the re-list finds no such pod): {slow_gone:?}"
    );
    let slow = ids(r.slow.iter().map(|e| e.attr("id")));
    assert!(
        r.present.is_subset(&slow),
        "a pod made while held and still there reaches it from the re-list, with its id: {:?}",
        r.present
    );
    assert!(
        r.after.is_subset(&slow),
        "every change made after the restart reaches it"
    );
    println!(
        "chaos_held: a pod made and deleted while held ({} changes), then compacted away: the file sink has them, the receiver none; {} changes after the restart reached both",
        r.gone.len(),
        r.after.len()
    );
}

#[tokio::test]
async fn with_log_always_a_pod_made_and_deleted_before_a_kill_and_a_compaction_reaches_every_sink()
{
    let r = held_then_compacted("always-compact", "always").await;
    assert!(
        r.gone.is_subset(&r.logged),
        "with log: always the pod's changes were written before any sink had them: {:?} of {:?} not in the state log",
        r.gone.difference(&r.logged).collect::<Vec<_>>(),
        r.gone
    );
    let slow = ids(r.slow.iter().map(|e| e.attr("id")));
    assert!(
        r.gone.is_subset(&slow),
        "the slow sink gets every change of the pod, from the state directory: {:?} of {:?}",
        r.gone.difference(&slow).collect::<Vec<_>>(),
        r.gone
    );
    assert!(
        r.after.is_subset(&slow),
        "and every change made after the restart"
    );
    let fast = ids(r.fast.iter().filter_map(|e| e["id"].as_str()));
    assert!(r.gone.is_subset(&fast), "the file sink has them too");
}

/// `state.behind_ms` in the window test: the default.
const BEHIND_MS: u64 = 50;

/// Pods the window test creates, one every [`PACE`]: closer than the upkeep's 50 ms gap, so
/// a change falls due while the upkeep that wrote the one before waits out that gap.
const PODS: usize = 40;
const PACE: Duration = Duration::from_millis(20);

#[tokio::test]
async fn a_change_a_sink_falls_behind_on_is_on_disk_within_behind_ms_and_the_upkeep_gap() {
    let scene = Scene::new("held-window").await;
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], String::new()));
    let slow = FakeReceiver::start(Duration::from_secs(600), script).await;
    let (state, file) = (scene.dir.join("state"), scene.dir.join("events.jsonl"));
    let text = scene.config(
        &format!(
            "state:\n  dir: {}\n  behind_ms: {BEHIND_MS}\n",
            state.display()
        ),
        &[
            file_sink("file", &file),
            format!("  web:\n    type: http\n    url: '{}'\n", slow.url),
        ],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let names: Vec<String> = (0..PODS).map(|i| format!("w-{i}")).collect();
    // Polled every millisecond on a thread of its own: when the file sink (which
    // acknowledges at once) has each pod's change, and when the state log holds it.
    let (f, s, n) = (file.clone(), state.clone(), names.clone());
    let poll = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + LIMIT;
        let mut seen: Vec<(Option<std::time::Instant>, Option<std::time::Instant>)> =
            vec![(None, None); n.len()];
        while std::time::Instant::now() < deadline && seen.iter().any(|(_, l)| l.is_none()) {
            let now = std::time::Instant::now();
            let (events, log) = (file_events(&f), log_text(&s));
            for (name, (in_file, in_log)) in n.iter().zip(seen.iter_mut()) {
                if in_file.is_none() && events.iter().any(|e| e["k8sname"] == name.as_str()) {
                    *in_file = Some(now);
                }
                if in_log.is_none() && log.contains(&format!("\"name\":\"{name}\"")) {
                    *in_log = Some(now);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        seen
    });
    let mut pace = tokio::time::interval(PACE);
    for name in &names {
        pace.tick().await;
        scene.pods.create(name).await;
    }
    let seen = poll.await.expect("the polling thread");
    let mut windows = Vec::new();
    for (name, (in_file, in_log)) in names.iter().zip(seen) {
        let (Some(in_file), Some(in_log)) = (in_file, in_log) else {
            panic!(
                "pod {name}'s change: in the file sink {in_file:?}, in the state log {in_log:?} within {LIMIT:?}:\n{}",
                kubecast.log()
            );
        };
        windows.push(in_log.saturating_duration_since(in_file).as_millis() as u64);
    }
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    println!("chaos_held: windows in creation order (ms): {windows:?}");
    windows.sort_unstable();
    let (min, median, max) = (
        windows[0],
        windows[windows.len() / 2],
        windows[windows.len() - 1],
    );
    println!(
        "chaos_held: with behind_ms {BEHIND_MS} and a pod created every {} ms, a change the receiver had not answered was in the state log {min} ms (least), {median} ms (median), {max} ms (most) after the file sink had it",
        PACE.as_millis()
    );
    // The bound: `behind_ms`, then the upkeep that writes it, at most 50 ms after the one
    // before (`UPKEEP_MIN_GAP`), then the write; a second of slack for a busy machine, far
    // below what a missed upkeep would take (the 10 s idle gap).
    assert!(
        max < BEHIND_MS + 50 + 1000,
        "a change was only in memory for {max} ms: {windows:?}"
    );
}
