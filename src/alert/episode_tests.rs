use serde_json::json;

use super::*;

fn evidence(n: u64) -> Option<(Evidence, String)> {
    let facts = match json!({"restartCount": n}) {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Some((
        Evidence {
            container: Some("app".into()),
            facts,
        },
        format!("{n} restarts"),
    ))
}

/// A rule's timing without keep_firing_for.
fn fire_after(for_ms: i64) -> Timing {
    Timing { for_ms, keep_ms: 0 }
}

fn seen<'a>(uid: &'a str, rv: &'a str, now: i64) -> Seen<'a> {
    Seen {
        uid,
        namespace: "ns",
        name: "p",
        rv,
        now,
    }
}

fn kinds(ts: &[Transition]) -> Vec<String> {
    ts.iter()
        .map(|t| match t {
            Transition::Firing(e) => {
                format!("firing {}", alert_id(&e.rule, &e.uid, &e.began_rv))
            }
            Transition::Resolved(e) => {
                format!("resolved {}", alert_id(&e.rule, &e.uid, &e.began_rv))
            }
        })
        .collect()
}

#[test]
fn an_episode_fires_once_after_its_for_and_resolves_once() {
    let mut eps = Episodes::default();
    assert!(
        eps.observe(
            "restarts",
            fire_after(5_000),
            &seen("u", "10", 1_000),
            evidence(6)
        )
        .is_empty(),
        "pending"
    );
    assert!(
        eps.observe(
            "restarts",
            fire_after(5_000),
            &seen("u", "11", 2_000),
            evidence(7)
        )
        .is_empty(),
        "still pending"
    );
    assert_eq!(eps.next_deadline(), Some(6_000));
    assert!(eps.tick(5_999).is_empty());
    // The deadline passes with no further change: it fires on time, with the latest evidence.
    let fired = eps.tick(6_000);
    assert_eq!(kinds(&fired), vec!["firing u:10:alert:restarts"]);
    match &fired[0] {
        Transition::Firing(e) => assert_eq!(e.facts["restartCount"], 7),
        other => panic!("{other:?}"),
    }
    assert!(
        eps.observe(
            "restarts",
            fire_after(5_000),
            &seen("u", "12", 7_000),
            evidence(8)
        )
        .is_empty(),
        "not again"
    );
    assert!(eps.tick(100_000).is_empty());
    let resolved = eps.observe("restarts", fire_after(5_000), &seen("u", "13", 8_000), None);
    assert_eq!(kinds(&resolved), vec!["resolved u:10:alert:restarts"]);
    // A new episode has a new id.
    eps.observe(
        "restarts",
        fire_after(0),
        &seen("u", "20", 9_000),
        evidence(9),
    );
    assert_eq!(
        kinds(&eps.tick(9_000)),
        Vec::<String>::new(),
        "fired inside observe"
    );
}

#[test]
fn zero_for_fires_at_once_and_a_short_episode_says_nothing() {
    let mut eps = Episodes::default();
    assert_eq!(
        kinds(&eps.observe("failed", fire_after(0), &seen("u", "5", 1_000), evidence(0))),
        vec!["firing u:5:alert:failed"]
    );
    let mut eps = Episodes::default();
    eps.observe(
        "notready",
        fire_after(300_000),
        &seen("u", "5", 1_000),
        evidence(0),
    );
    assert!(
        eps.observe(
            "notready",
            fire_after(300_000),
            &seen("u", "6", 2_000),
            None
        )
        .is_empty()
    );
    assert_eq!(eps.next_deadline(), None);
}

#[test]
fn a_restored_copy_fires_at_the_original_deadline_with_the_same_id() {
    let mut eps = Episodes::default();
    eps.observe(
        "notready",
        fire_after(60_000),
        &seen("u", "42", 1_000),
        evidence(0),
    );
    // Saved and restored, as a restart does.
    let saved = serde_json::to_string(&eps).expect("episodes serialize");
    let mut restored: Episodes = serde_json::from_str(&saved).expect("and read back");
    assert_eq!(restored.next_deadline(), Some(61_000));
    assert_eq!(
        kinds(&restored.tick(61_000)),
        vec!["firing u:42:alert:notready"]
    );
    assert_eq!(
        kinds(&eps.tick(61_000)),
        vec!["firing u:42:alert:notready"],
        "the same id as the original's"
    );
}

#[test]
fn restoring_a_pods_episodes_replaces_them_and_their_deadlines() {
    let mut eps = Episodes::default();
    eps.observe(
        "notready",
        fire_after(60_000),
        &seen("u", "1", 1_000),
        evidence(0),
    );
    eps.observe(
        "notready",
        fire_after(60_000),
        &seen("v", "2", 2_000),
        evidence(0),
    );
    let saved = eps.of("u");
    // The same episode restored over itself keeps one deadline.
    eps.restore("u", saved.clone());
    assert_eq!(eps.next_deadline(), Some(61_000));
    eps.restore("u", Vec::new());
    assert_eq!(
        eps.next_deadline(),
        Some(62_000),
        "u's deadline went with it"
    );
    eps.restore("u", saved);
    assert_eq!(
        kinds(&eps.tick(62_000)),
        vec!["firing u:1:alert:notready", "firing v:2:alert:notready"]
    );
    assert_eq!(eps.next_deadline(), None);
}

#[test]
fn deleting_a_pod_resolves_what_fired_and_drops_what_was_pending() {
    let mut eps = Episodes::default();
    eps.observe("failed", fire_after(0), &seen("u", "5", 1_000), evidence(0));
    eps.observe(
        "notready",
        fire_after(60_000),
        &seen("u", "5", 1_000),
        evidence(0),
    );
    assert_eq!(
        kinds(&eps.deleted("u", 10_000)),
        vec!["resolved u:5:alert:failed"]
    );
    assert_eq!(eps.next_deadline(), None);
}

#[test]
fn each_resolved_links_to_its_firing_and_each_firing_to_the_last_alert_of_its_rule() {
    let mut eps = Episodes::default();
    let fired = eps.observe(
        "restarts",
        fire_after(0),
        &seen("u", "10", 1_000),
        evidence(6),
    );
    let Some(Transition::Firing(first)) = fired.first() else {
        panic!("{fired:?}")
    };
    assert_eq!(
        (first.fired_rv.as_str(), first.prev_alert_rv.as_str()),
        ("10", ""),
        "the first alert starts the chain"
    );
    let resolved = eps.observe("restarts", fire_after(0), &seen("u", "12", 2_000), None);
    let Some(Transition::Resolved(r)) = resolved.first() else {
        panic!("{resolved:?}")
    };
    assert_eq!(
        (r.rv.as_str(), r.fired_rv.as_str()),
        ("12", "10"),
        "resolved at 12, links to its firing at 10"
    );
    assert!(
        eps.is_empty(),
        "the memory left behind is not an open episode"
    );
    // A pending episode that never fires keeps the link.
    assert!(
        eps.observe(
            "restarts",
            fire_after(5_000),
            &seen("u", "13", 3_000),
            evidence(7)
        )
        .is_empty()
    );
    assert!(
        eps.observe("restarts", fire_after(5_000), &seen("u", "14", 3_500), None)
            .is_empty()
    );
    let fired = eps.observe(
        "restarts",
        fire_after(0),
        &seen("u", "15", 4_000),
        evidence(8),
    );
    let Some(Transition::Firing(second)) = fired.first() else {
        panic!("{fired:?}")
    };
    assert_eq!(
        second.prev_alert_rv, "12",
        "links to the last alert event of the rule: the resolve at 12"
    );
    // The memory goes with the object; nothing resolves twice.
    assert_eq!(
        kinds(&eps.deleted("u", 10_000)),
        vec!["resolved u:15:alert:restarts"]
    );
    assert!(eps.of("u").is_empty());
}

#[test]
fn a_warning_group_fires_once_whichever_event_shows_it_and_resolves_when_quiet() {
    let mut eps = Episodes::default();
    let warn = |uid, rv, now| (uid, rv, now);
    let (t, refreshed) = {
        let (uid, rv, now) = warn("e1", "20", 1_000);
        eps.observe_quiet(
            "warning_event",
            5_000,
            &seen(uid, rv, now),
            evidence(1),
            "pod/FailedScheduling",
        )
    };
    assert_eq!(
        (kinds(&t), refreshed),
        (vec!["firing e1:20:alert:warning_event".to_string()], None)
    );
    // Another Event of the same object and reason: the first Event's episode is refreshed.
    let (t, refreshed) = eps.observe_quiet(
        "warning_event",
        5_000,
        &seen("e2", "21", 3_000),
        evidence(1),
        "pod/FailedScheduling",
    );
    assert!(t.is_empty());
    assert_eq!(refreshed.as_deref(), Some("e1"));
    assert_eq!(
        eps.next_deadline(),
        Some(8_000),
        "quiet counts from the last such Event"
    );
    assert!(eps.tick(7_999).is_empty());
    assert_eq!(
        kinds(&eps.tick(8_000)),
        vec!["resolved e1:20:alert:warning_event"]
    );
    // Later, the same group again: a new episode linking to the last alert.
    let (t, _) = eps.observe_quiet(
        "warning_event",
        5_000,
        &seen("e3", "30", 9_000),
        evidence(1),
        "pod/FailedScheduling",
    );
    let Some(Transition::Firing(ep)) = t.first() else {
        panic!("{t:?}")
    };
    assert_eq!(ep.prev_alert_rv, "20");
}

#[test]
fn a_condition_that_comes_back_within_keep_firing_for_continues_the_same_episode() {
    let mut eps = Episodes::default();
    let keep = Timing {
        for_ms: 0,
        keep_ms: 600_000,
    };
    // A crash loop: waiting in back-off, running, waiting again, every few seconds.
    let fired = eps.observe(
        "crash_loop_backoff",
        keep,
        &seen("u", "10", 1_000),
        evidence(1),
    );
    assert_eq!(kinds(&fired), vec!["firing u:10:alert:crash_loop_backoff"]);
    for (i, now) in (8_000..120_000).step_by(7_000).enumerate() {
        let rv = format!("{}", 11 + 2 * i);
        assert!(
            eps.observe("crash_loop_backoff", keep, &seen("u", &rv, now), None)
                .is_empty(),
            "running: kept firing"
        );
        assert_eq!(eps.next_deadline(), Some(now + 600_000));
        let rv = format!("{}", 12 + 2 * i);
        assert!(
            eps.observe(
                "crash_loop_backoff",
                keep,
                &seen("u", &rv, now + 5_000),
                evidence(2)
            )
            .is_empty(),
            "back-off again: the same episode, nothing said"
        );
        assert_eq!(eps.next_deadline(), None, "holding: no resolve is due");
        assert_eq!(eps.len(), 1);
    }
    // Fixed at 200 s: it resolves 10 minutes later, at that time however late the tick.
    assert!(
        eps.observe("crash_loop_backoff", keep, &seen("u", "90", 200_000), None)
            .is_empty()
    );
    assert!(eps.tick(799_999).is_empty());
    let resolved = eps.tick(900_000);
    assert_eq!(
        kinds(&resolved),
        vec!["resolved u:10:alert:crash_loop_backoff"]
    );
    let Some(Transition::Resolved(ep)) = resolved.first() else {
        panic!("{resolved:?}")
    };
    assert_eq!(
        ep.resolved_at,
        Some(800_000),
        "cleared at 200 s plus 10 minutes"
    );
    assert_eq!(
        ep.rv, "90",
        "the resourceVersion at which it stopped holding"
    );
    assert_eq!(ep.facts["clearedAt"], "1970-01-01T00:03:20Z");
    assert_eq!(ep.facts["keptFiringFor"], "10m");
    assert!(eps.is_empty());
    // The memory it leaves is what a re-sending sink needs for a while, then not.
    assert_eq!(eps.standing(800_000, 900_000).count(), 1);
    assert_eq!(eps.standing(800_001, 900_000).count(), 0);
}

#[test]
fn a_kept_episode_survives_a_restart_and_a_deleted_object_resolves_at_once() {
    let mut eps = Episodes::default();
    let keep = Timing {
        for_ms: 0,
        keep_ms: 120_000,
    };
    eps.observe("node_not_ready", keep, &seen("n", "5", 1_000), evidence(0));
    eps.observe("node_not_ready", keep, &seen("n", "6", 2_000), None);
    let saved = serde_json::to_string(&eps).expect("episodes serialize");
    let mut restored: Episodes = serde_json::from_str(&saved).expect("and read back");
    assert_eq!(restored.next_deadline(), Some(122_000));
    assert_eq!(
        restored
            .standing(0, 121_999)
            .filter(Episode::is_active)
            .count(),
        1,
        "still firing while kept"
    );
    assert_eq!(
        kinds(&restored.tick(500_000)),
        vec!["resolved n:5:alert:node_not_ready"],
        "a resolve due while kubecast was down is said when it is back"
    );
    // Deleted while kept firing: resolved then, not at the end of the wait.
    let deleted = eps.deleted("n", 3_000);
    let Some(Transition::Resolved(ep)) = deleted.first() else {
        panic!("{deleted:?}")
    };
    assert_eq!(ep.resolved_at, Some(3_000));
    assert_eq!(eps.next_deadline(), None);
}

#[test]
fn an_episode_whose_keep_ran_out_while_kubecast_was_down_does_not_stand_as_firing() {
    let mut eps = Episodes::default();
    let keep = Timing {
        for_ms: 0,
        keep_ms: 60_000,
    };
    eps.observe("kept", keep, &seen("u", "5", 1_000), evidence(0));
    eps.observe("kept", keep, &seen("u", "6", 2_000), None);
    let saved = serde_json::to_string(&eps).expect("episodes serialize");
    // Back 20 minutes after the keep ran out (at 62 s), before any tick.
    let mut restored: Episodes = serde_json::from_str(&saved).expect("and read back");
    let now = 62_000 + 20 * 60_000;
    let window = 15 * 60_000;
    let standing: Vec<Episode> = restored.standing(now - window, now).collect();
    assert!(
        standing.is_empty(),
        "resolved longer ago than the window: not standing, least of all firing: {standing:?}"
    );
    // Within the window, it stands resolved at its time, as the tick then says.
    let standing: Vec<Episode> = restored.standing(0, now).collect();
    assert_eq!(standing.len(), 1, "{standing:?}");
    assert!(!standing[0].is_active(), "not firing: {standing:?}");
    assert_eq!(standing[0].resolved_at, Some(62_000));
    let ticked = restored.tick(now);
    assert_eq!(ticked, vec![Transition::Resolved(standing[0].clone())]);
    // Still within its keep: firing.
    let early: Episodes = serde_json::from_str(&saved).expect("read back");
    let firing: Vec<Episode> = early.standing(0, 61_999).collect();
    assert!(firing.len() == 1 && firing[0].is_active(), "{firing:?}");
    // The same for a `warning_event` episode whose quiet ran out while kubecast was down.
    let mut warned = Episodes::default();
    warned.observe_quiet(
        "warning_event",
        5_000,
        &seen("e", "7", 1_000),
        evidence(1),
        "u/Failed",
    );
    let standing: Vec<Episode> = warned.standing(0, 10_000).collect();
    assert!(
        standing.len() == 1 && !standing[0].is_active(),
        "{standing:?}"
    );
    assert_eq!(standing[0].resolved_at, Some(6_000));
}
