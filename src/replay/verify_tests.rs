use super::*;

fn facts(kind: Kind, uid: &str, rv: &str, prev: &str, offset: i64) -> Facts {
    Facts {
        kind,
        uid: Some(uid.to_string()),
        namespace: Some("ns".into()),
        name: Some(format!("pod-{uid}")),
        k8s_kind: "Pod".into(),
        api_version: "v1".into(),
        resource: "pods".into(),
        cluster: None,
        rv: Some(rv.to_string()),
        prev_rv: (!prev.is_empty()).then(|| prev.to_string()),
        time_ms: Some(0),
        place: Place {
            topic: None,
            partition: 0,
            offset,
        },
    }
}

/// Feeds (kind, uid, rv, prev, repeat) in order.
fn verify(from_start: bool, events: &[(Kind, &str, &str, &str, bool)]) -> (Verdict, String) {
    let mut v = Verifier::new(from_start);
    for (i, (kind, uid, rv, prev, repeat)) in events.iter().enumerate() {
        let id = format!("{uid}:{rv}");
        v.observe(&facts(*kind, uid, rv, prev, i as i64), &id, *repeat);
    }
    v.finish()
}

use Kind::{Added as A, Deleted as D, Modified as M};

#[test]
fn a_complete_chain_passes() {
    let (v, report) = verify(
        true,
        &[
            (A, "a", "1", "", false),
            (A, "b", "2", "", false),
            (M, "a", "3", "1", false),
            (D, "a", "4", "3", false),
        ],
    );
    assert!(v.passed(), "{report}");
    assert_eq!((v.objects, v.checked, v.incomplete), (2, 4, 0));
    assert!(report.trim_end().ends_with("PASSED"), "{report}");
}

#[test]
fn a_missing_event_is_a_gap_naming_the_object_and_the_link() {
    let (v, report) = verify(
        true,
        &[
            (A, "a", "1", "", false),
            (M, "a", "3", "2", false),
            (A, "b", "4", "", false),
            (M, "b", "5", "4", false),
        ],
    );
    assert!(!v.passed());
    assert_eq!(v.incomplete, 1);
    assert!(report.contains("INCOMPLETE ns/pod-a (uid a)"), "{report}");
    assert!(
        report.contains("links to resourceVersion 2, which is not in the topic"),
        "{report}"
    );
    assert!(!report.contains("pod-b"), "{report}");
}

#[test]
fn duplicates_are_reported_but_do_not_fail() {
    let (v, report) = verify(
        true,
        &[
            (A, "a", "1", "", false),
            (M, "a", "2", "1", false),
            (M, "a", "2", "1", true),
            (M, "a", "3", "2", false),
        ],
    );
    assert!(v.passed(), "{report}");
    assert_eq!(v.duplicates, 1);
    assert!(report.contains("DUPLICATES ns/pod-a"), "{report}");
}

#[test]
fn an_event_older_than_one_read_before_is_an_order_violation_not_a_gap() {
    // rv 2 arrives after rv 3, which linked to it: the link is filled late.
    let (v, report) = verify(
        true,
        &[
            (A, "a", "1", "", false),
            (M, "a", "3", "2", false),
            (M, "a", "2", "1", false),
        ],
    );
    assert_eq!((v.incomplete, v.out_of_order), (0, 1), "{report}");
    assert!(!v.passed());
    assert!(report.contains("OUT OF ORDER ns/pod-a"), "{report}");
}

#[test]
fn a_chain_that_starts_again_is_incomplete() {
    let (v, report) = verify(true, &[(A, "a", "1", "", false), (A, "a", "5", "", false)]);
    assert_eq!(v.incomplete, 1, "{report}");
    assert!(report.contains("starts the chain again"), "{report}");
}

#[test]
fn the_first_event_must_start_the_chain_only_from_the_beginning_of_the_topic() {
    let events = [(M, "a", "7", "6", false), (M, "a", "8", "7", false)];
    assert!(verify(false, &events).0.passed());
    let (v, report) = verify(true, &events);
    assert_eq!(v.incomplete, 1, "{report}");
    assert!(report.contains("links to resourceVersion 6"), "{report}");
}

#[test]
fn events_without_a_chain_are_counted_not_checked() {
    let mut v = Verifier::new(true);
    let mut alert = facts(Kind::Alert, "a", "9", "", 0);
    alert.prev_rv = None;
    v.observe(&alert, "alert", false);
    let (verdict, _) = v.finish();
    assert_eq!((verdict.unchained, verdict.objects), (1, 0));
    assert!(verdict.passed());
}

#[test]
fn a_re_list_at_the_version_already_read_is_a_duplicate_not_a_restart() {
    let (v, report) = verify(
        true,
        &[
            (A, "a", "1", "", false),
            (M, "a", "2", "1", false),
            (A, "a", "2", "", false),
        ],
    );
    assert!(v.passed(), "{report}");
    assert_eq!(v.duplicates, 1, "{report}");
}

#[test]
fn an_objects_alerts_of_each_rule_form_a_chain_of_their_own() {
    let alert = |rv: &str, prev: &str, offset: i64| facts(Kind::Alert, "a", rv, prev, offset);
    let stream = [
        (alert("5", "", 0), "a:5:alert:restarts:firing"),
        (alert("7", "5", 1), "a:5:alert:restarts:resolved"),
        (alert("9", "7", 2), "a:9:alert:restarts:firing"),
        (alert("11", "9", 3), "a:9:alert:restarts:resolved"),
        // Another rule of the same object: a chain of its own.
        (alert("6", "", 4), "a:6:alert:failed:firing"),
    ];
    let mut v = Verifier::new(true);
    for (f, id) in &stream {
        v.observe(f, id, false);
    }
    let (verdict, report) = v.finish();
    assert!(verdict.passed(), "{report}");
    assert_eq!((verdict.objects, verdict.unchained), (2, 0));

    // Without the first episode's `resolved`, the next `firing` names the missing link.
    let mut v = Verifier::new(true);
    for (i, (f, id)) in stream.iter().enumerate() {
        if i != 1 {
            v.observe(f, id, false);
        }
    }
    let (verdict, report) = v.finish();
    assert_eq!(verdict.incomplete, 1, "{report}");
    assert!(
        report.contains("links to resourceVersion 7") && report.contains("alert restarts"),
        "{report}"
    );
}

#[test]
fn the_same_uid_in_two_clusters_is_two_chains_and_the_report_names_the_cluster() {
    let in_cluster = |cluster: &str, kind, rv: &str, prev: &str, offset| {
        let mut f = facts(kind, "u", rv, prev, offset);
        f.cluster = Some(cluster.to_string());
        f
    };
    let mut v = Verifier::new(true);
    // eu-1's chain is whole; us-1's links to a version never read.
    v.observe(
        &in_cluster("eu-1", Kind::Added, "1", "", 0),
        "u:1:added",
        false,
    );
    v.observe(
        &in_cluster("us-1", Kind::Added, "7", "", 1),
        "u:7:added",
        false,
    );
    v.observe(
        &in_cluster("eu-1", Kind::Modified, "2", "1", 2),
        "u:2:modified",
        false,
    );
    v.observe(
        &in_cluster("us-1", Kind::Modified, "9", "8", 3),
        "u:9:modified",
        false,
    );
    let (verdict, report) = v.finish();
    assert_eq!((verdict.objects, verdict.incomplete), (2, 1), "{report}");
    assert!(
        report.contains("INCOMPLETE ns/pod-u (cluster us-1, uid u)"),
        "{report}"
    );
    assert!(!report.contains("cluster eu-1, uid"), "{report}");
    assert!(
        report
            .contains("of 2 object(s) in 2 clusters (eu-1, us-1) from the beginning of the topic"),
        "{report}"
    );
}
