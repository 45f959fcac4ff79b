//! A write to the state directory that fails (part-way, as EIO, EFBIG or a full disk do):
//! nothing written after it may claim that what failed is on disk, so a restart resumes from
//! before it and the watch sends the lost changes again.
//!
//! The fault is a fake (`Store::fail_next_write_after`: the next append writes part of its
//! frames and fails), as a failed write part-way is not to be had on demand from a unit
//! test's disk; `tests/chaos_disk.rs` makes the real one with `RLIMIT_FSIZE`.

use super::tests::{log_watched, settings, temp_dir};
use super::*;
use crate::model::ChangeKind;
use crate::store::LogPolicy;
use crate::store::record_tests_event as event;

fn with_log(dir: &std::path::Path, log: LogPolicy) -> DurableSettings {
    let mut s = settings(Some(dir.to_path_buf()), &["a"]);
    s.state.log = log;
    s
}

#[tokio::test]
async fn after_a_failed_write_no_snapshot_claims_it_and_a_restart_resumes_before_it() {
    let dir = temp_dir("failed-write");
    let (mut d, start) = Durable::open(with_log(&dir, LogPolicy::Always))
        .await
        .unwrap();
    let mut c = start.classifier;
    log_watched(
        &mut d,
        &mut c,
        vec![event(0, "u1", "10", ChangeKind::Added)],
    )
    .await;

    d.store.as_mut().unwrap().fail_next_write_after(10);
    let lost = d.event(event(0, "u2", "11", ChangeKind::Added), true);
    c.restore_object(lost.object.key(), &lost.rv, false);
    let e = d.commit().await.unwrap_err().to_string();
    assert!(e.contains("injected by a test"), "{e}");
    assert!(d.is_broken());

    // What a shutdown would save: refused, whatever is asked.
    let e = d.close(&c, None).await.unwrap_err().to_string();
    assert!(e.contains("nothing more is written"), "{e}");
    let later = d.event(event(0, "u3", "12", ChangeKind::Added), true);
    c.restore_object(later.object.key(), &later.rv, false);
    assert!(d.commit().await.is_err(), "a later batch is refused too");
    assert!(
        !dir.join("snapshot.json").exists(),
        "no snapshot was written after the failure"
    );
    drop(d);

    let (_, start) = Durable::open(with_log(&dir, LogPolicy::Always))
        .await
        .unwrap();
    assert_eq!(
        start.resume.get("ns"),
        Some(&Some("10".to_string())),
        "the watch resumes before the change that was not written"
    );
    assert_eq!(start.classifier.known_rv("u2"), None);
    let pending: Vec<&str> = start.pending["a"].iter().map(|e| e.id.as_str()).collect();
    assert_eq!(pending, ["u1:10:added"], "only what was written is claimed");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_held_batch_that_fails_to_spill_is_not_covered_by_a_snapshot_at_shutdown() {
    let dir = temp_dir("failed-spill");
    let (mut d, start) = Durable::open(with_log(&dir, LogPolicy::WhenBehind))
        .await
        .unwrap();
    let mut c = start.classifier;
    // Held in memory: sink "a" never acknowledges them.
    log_watched(
        &mut d,
        &mut c,
        vec![event(0, "u1", "10", ChangeKind::Added)],
    )
    .await;
    log_watched(
        &mut d,
        &mut c,
        vec![event(0, "u2", "11", ChangeKind::Added)],
    )
    .await;

    d.store.as_mut().unwrap().fail_next_write_after(20);
    // The snapshot's upkeep spills what is held first: that write fails part-way.
    d.snapshot_due = true;
    assert!(d.maintain(&c, None).await.is_err());
    assert!(
        d.close(&c, None).await.is_err(),
        "the shutdown saves nothing"
    );
    assert!(!dir.join("snapshot.json").exists());
    drop(d);

    let (_, start) = Durable::open(with_log(&dir, LogPolicy::WhenBehind))
        .await
        .unwrap();
    assert_eq!(
        start.resume.get("ns"),
        None,
        "nothing moved the resume point: the watch lists again"
    );
    assert!(start.pending["a"].is_empty());
    let _ = std::fs::remove_dir_all(dir);
}
