//! `state.log: when_behind`: what every sink acknowledged in time is never written, what a
//! sink falls behind on is, and a restart resumes where nothing unacknowledged is passed.

use std::time::Duration;

use super::tests::{log_watched, ns, settings, temp_dir};
use super::*;
use crate::model::ChangeKind;
use crate::store::record_tests_event as event;
use crate::store::{LogPolicy, Record};

/// Settings with `log: when_behind`, changes held for `behind_ms`.
fn behind(dir: &std::path::Path, sinks: &[&str], behind_ms: u64) -> DurableSettings {
    let mut s = settings(Some(dir.to_path_buf()), sinks);
    s.state.log = LogPolicy::WhenBehind;
    s.state.behind_ms = behind_ms;
    s
}

fn logged_bytes(d: &Durable) -> u64 {
    d.store.as_ref().map_or(0, crate::store::Store::disk_bytes)
}

/// Logs one watched add of `uid` at `rv`; returns it.
async fn added(d: &mut Durable, c: &mut Classifier, uid: &str, rv: &str) -> Arc<Event> {
    let mut logged = log_watched(d, c, vec![event(0, uid, rv, ChangeKind::Added)]).await;
    logged.remove(0)
}

/// Every sink in `sinks` acknowledges `e` (and what came before).
fn acked_by(d: &mut Durable, sinks: &[&str], e: &Event) {
    for s in sinks {
        d.acked(s, e.seq);
    }
}

/// A list of one pod (u1 at 30, list at 31), acknowledged, and the snapshot it forces.
async fn listed_and_snapshotted(d: &mut Durable, c: &mut Classifier, sinks: &[&str]) {
    let listed = added(d, c, "u1", "30").await;
    d.observed(&Observed::ListDone {
        scope: ns(),
        rv: "31".into(),
    });
    d.commit().await.unwrap();
    acked_by(d, sinks, &listed);
    d.maintain(c, None).await.unwrap();
}

/// The log's records, read back as a restart reads them.
fn logged(dir: &std::path::Path) -> Vec<Record> {
    crate::store::Log::open(&dir.join("log"), 1 << 20)
        .unwrap()
        .1
}

fn events_logged(dir: &std::path::Path) -> Vec<String> {
    logged(dir)
        .iter()
        .filter_map(|r| match r {
            Record::Event { event, .. } => Some(event.rv.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn changes_every_sink_acknowledged_in_time_are_never_written_only_the_resume_point_they_move()
{
    let dir = temp_dir("behind-acked");
    let (mut d, start) = Durable::open(behind(&dir, &["a", "b"], 60_000))
        .await
        .unwrap();
    let mut c = start.classifier;
    listed_and_snapshotted(&mut d, &mut c, &["a", "b"]).await;
    let acked = added(&mut d, &mut c, "u2", "32").await;
    acked_by(&mut d, &["a", "b"], &acked);
    d.log_delivered().await.unwrap();
    // Only in memory at the crash: b has not acknowledged it.
    let held = added(&mut d, &mut c, "u3", "33").await;
    acked_by(&mut d, &["a"], &held);
    d.log_delivered().await.unwrap();
    d.maintain(&c, None).await.unwrap();
    assert!(
        events_logged(&dir).is_empty(),
        "no event was written: {:?}",
        events_logged(&dir)
    );
    drop(d); // kill -9

    let (mut d, start) = Durable::open(behind(&dir, &["a", "b"], 60_000))
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
        "the acknowledged change moved the resume point"
    );
    assert_eq!(
        start.classifier.known_rv("u3"),
        None,
        "the change only in memory is not known: the watch sends it again"
    );
    assert_eq!(
        start.resume.get("ns"),
        Some(&Some("32".to_string())),
        "the watch resumes after the acknowledged change, before the held one"
    );
    assert!(start.pending.values().all(Vec::is_empty));
    let next = d.event(event(0, "u4", "34", ChangeKind::Added), true);
    assert!(next.seq > acked.seq, "numbers continue: {}", next.seq);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_change_a_sink_falls_behind_on_is_written_after_the_bound_and_sent_again_after_a_crash() {
    let dir = temp_dir("behind-slow");
    let (mut d, start) = Durable::open(behind(&dir, &["a", "b"], 20)).await.unwrap();
    let mut c = start.classifier;
    listed_and_snapshotted(&mut d, &mut c, &["a", "b"]).await;
    let acked = added(&mut d, &mut c, "u2", "32").await;
    acked_by(&mut d, &["a", "b"], &acked);
    let slow = added(&mut d, &mut c, "u3", "33").await;
    acked_by(&mut d, &["a"], &slow);
    assert!(
        d.next_due().is_some(),
        "upkeep is due when the bound passes"
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    d.maintain(&c, None).await.unwrap();
    assert_eq!(
        events_logged(&dir),
        ["33"],
        "the change b fell behind on is written"
    );
    drop(d); // kill -9

    let (mut d, start) = Durable::open(behind(&dir, &["a", "b"], 20)).await.unwrap();
    let next = d.event(event(0, "u4", "34", ChangeKind::Added), true);
    assert!(
        next.seq > slow.seq,
        "numbers continue past every number on disk: {} after {}",
        next.seq,
        slow.seq
    );
    let pending =
        |s: &str| -> Vec<String> { start.pending[s].iter().map(|e| e.rv.clone()).collect() };
    assert_eq!(
        pending("b"),
        ["33"],
        "b gets the change it had not acknowledged"
    );
    assert!(pending("a").is_empty(), "a had acknowledged it");
    assert_eq!(
        (
            start.classifier.known_rv("u2"),
            start.classifier.known_rv("u3")
        ),
        (Some("32"), Some("33"))
    );
    assert_eq!(start.resume.get("ns"), Some(&Some("33".to_string())));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_snapshot_first_writes_what_is_still_held() {
    let dir = temp_dir("behind-snap");
    let (mut d, start) = Durable::open(behind(&dir, &["a"], 60_000)).await.unwrap();
    let mut c = start.classifier;
    listed_and_snapshotted(&mut d, &mut c, &["a"]).await;
    let held = added(&mut d, &mut c, "u2", "32").await;
    // A second list completes: the snapshot it forces covers u2, not yet acknowledged.
    d.observed(&Observed::ListDone {
        scope: ns(),
        rv: "40".into(),
    });
    d.commit().await.unwrap();
    d.maintain(&c, None).await.unwrap();
    drop(d); // kill -9

    let (_, start) = Durable::open(behind(&dir, &["a"], 60_000)).await.unwrap();
    assert_eq!(
        start.classifier.known_rv("u2"),
        Some("32"),
        "from the snapshot"
    );
    assert_eq!(start.resume.get("ns"), Some(&Some("40".to_string())));
    assert_eq!(
        start.pending["a"].iter().map(|e| e.seq).collect::<Vec<_>>(),
        [held.seq],
        "the snapshot passed it, so it was written first and is sent again"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn beyond_the_memory_bound_a_commit_writes_the_oldest_at_once() {
    let dir = temp_dir("behind-bytes");
    let mut s = behind(&dir, &["a"], 60_000);
    s.state.behind_mib = 1;
    let (mut d, start) = Durable::open(s).await.unwrap();
    let mut c = start.classifier;
    let mut big = event(0, "u1", "30", ChangeKind::Added);
    big.data = bytes::Bytes::from(vec![b' '; 700 * 1024]);
    log_watched(&mut d, &mut c, vec![big.clone()]).await;
    assert_eq!(logged_bytes(&d), 0, "700 KiB fit in 1 MiB");
    big.object.uid = "u2".into();
    log_watched(&mut d, &mut c, vec![big]).await;
    assert!(
        logged_bytes(&d) > 700 * 1024,
        "the first was written at once"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_bookmark_after_everything_was_settled_is_delivered_at_once_and_never_synced() {
    let dir = temp_dir("behind-bookmark");
    let (mut d, start) = Durable::open(behind(&dir, &["a"], 60_000)).await.unwrap();
    let mut c = start.classifier;
    listed_and_snapshotted(&mut d, &mut c, &["a"]).await;
    d.observed(&Observed::Bookmark {
        scope: ns(),
        rv: "40".into(),
    });
    d.commit().await.unwrap();
    assert!(
        d.held.as_ref().is_some_and(Held::is_empty),
        "no report will come to settle it: it is delivered at once"
    );
    assert_eq!(
        d.held.as_ref().and_then(Held::next_due),
        None,
        "nothing waits for behind_ms (an idle cluster is not synced per bookmark)"
    );
    // Logged as a delivered resume point: appended, not synced.
    d.log_delivered().await.unwrap();
    let positions: Vec<Option<String>> = logged(&dir)
        .into_iter()
        .filter_map(|r| match r {
            Record::Position { rv, .. } => Some(rv),
            _ => None,
        })
        .collect();
    assert_eq!(positions.last(), Some(&Some("40".to_string())));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_routers_object_states_count_against_behind_mib() {
    use crate::route::engine::ObjectState;
    let state = ObjectState {
        uid: "u".repeat(36),
        resource: "pods".into(),
        scope: "ns".into(),
        namespace: "ns".into(),
        name: "p".repeat(40),
        rv: "123".into(),
        gone: false,
        marks: Vec::new(),
        episodes: Vec::new(),
    };
    let mut held = Held::new(Duration::from_secs(60), 1000, false);
    for seq in 1..=10 {
        held.push(
            vec![Record::State {
                seq,
                state: Arc::new(state.clone()),
                from_watch: true,
            }],
            0,
            std::time::Instant::now(),
        );
    }
    assert!(
        held.over(),
        "ten object states are more than 1000 bytes of memory"
    );
}
