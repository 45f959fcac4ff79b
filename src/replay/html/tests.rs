use serde_json::json;

use super::*;
use crate::replay::facts::Place;

use crate::replay::facts::ObjectKey;
use crate::replay::testing::{event, event_in};

fn key(cluster: &str, uid: &str) -> ObjectKey {
    ObjectKey {
        cluster: cluster.into(),
        uid: uid.into(),
    }
}

fn feed(t: &mut Timeline, e: &Event) {
    t.observe(&Facts::of(e, Place::default()), e);
}

fn written(t: Timeline, verdict: Option<(bool, String)>) -> String {
    let mut out = Vec::new();
    let header = Header {
        topic: "audit".into(),
        range: "the whole topic".into(),
        verdict,
    };
    t.write(&mut out, &header).expect("written to memory");
    String::from_utf8(out).expect("UTF-8")
}

/// The data island of a written report.
fn island(html: &str) -> Value {
    let start = html.find("id=\"timeline-data\">").expect("the island") + 19;
    let end = start + html[start..].find("</script>").expect("its end");
    serde_json::from_str(&html[start..end]).expect("JSON")
}

#[test]
fn status_churn_is_kept_as_the_first_version_and_one_small_patch_per_change() {
    let mut t = Timeline::new();
    let big = "x".repeat(4096);
    let pod = |rv: &str, phase: &str| json!({"metadata": {"name": "web", "resourceVersion": rv, "annotations": {"big": big}}, "status": {"phase": phase}});
    feed(
        &mut t,
        &event(
            "added",
            "1",
            0,
            pod("1", "Pending"),
            &[("k8sinitial", "true")],
        ),
    );
    feed(
        &mut t,
        &event("modified", "2", 1000, pod("2", "Running"), &[]),
    );
    feed(
        &mut t,
        &event(
            "deleted",
            "3",
            2000,
            pod("3", "Running"),
            &[("k8sinferred", "true")],
        ),
    );
    let html = written(t, None);
    let doc = island(&html);
    let lane = &doc["lanes"][0];
    assert_eq!(lane["first"], pod("1", "Pending"));
    let marks = lane["marks"].as_array().expect("marks");
    let types: Vec<&str> = marks.iter().filter_map(|m| m["ty"].as_str()).collect();
    assert_eq!(types, ["initial", "modified", "inferred"]);
    assert_eq!(
        marks[1]["p"],
        json!({"metadata": {"resourceVersion": "2"}, "status": {"phase": "Running"}})
    );
    assert_eq!(marks[2]["p"], json!({"metadata": {"resourceVersion": "3"}}));
    assert!(marks[0].get("p").is_none());
    assert_eq!(marks[1]["tt"], "1970-01-02T00:00:01Z");
    assert!(
        html.matches(big.as_str()).count() == 1,
        "the annotation is stored once"
    );
    assert_eq!(
        doc["counts"],
        json!({"inferred": 1, "initial": 1, "modified": 1})
    );
    assert_eq!(doc["span"], json!([86_400_000, 86_402_000]));
}

#[test]
fn an_alert_episode_is_a_bar_from_firing_to_resolved_and_gaps_land_on_their_lane() {
    let mut t = Timeline::new();
    feed(&mut t, &event("added", "1", 0, json!({}), &[]));
    feed(&mut t, &event("firing", "1", 500, json!({}), &[]));
    feed(
        &mut t,
        &event("modified", "5", 900, json!({"a": 1}), &[("k8sprevrv", "4")]),
    );
    feed(&mut t, &event("resolved", "5", 1500, json!({}), &[]));
    t.gaps(vec![
        (key("test", "u1"), "u1:5:modified".into(), "4".into()),
        // The same uid in another cluster is another object: no mark here.
        (key("other", "u1"), "u1:5:modified".into(), "3".into()),
        (key("test", "unknown"), "x".into(), "9".into()),
    ]);
    let doc = island(&written(t, Some((false, "verify: ... FAILED".into()))));
    let lane = &doc["lanes"][0];
    assert_eq!(
        lane["alerts"],
        json!([{"rule": "crashloop", "from": 86_400_500, "to": 86_401_500, "id": "u1:1:alert:crashloop:firing"}])
    );
    assert_eq!(lane["gaps"], json!([{"id": "u1:5:modified", "rv": "4"}]));
    assert_eq!(lane["marks"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        doc["header"]["verdict"],
        json!([false, "verify: ... FAILED"])
    );
}

#[test]
fn nothing_in_the_data_can_end_the_island_or_add_markup() {
    let mut t = Timeline::new();
    let hostile = "</script><script>alert(1)</script><!--";
    feed(
        &mut t,
        &event(
            "added",
            "1",
            0,
            json!({"metadata": {"labels": {"x": hostile}}}),
            &[],
        ),
    );
    let html = written(t, None);
    assert_eq!(html.matches("</script>").count(), 2, "{html}");
    assert!(!html.contains("<script>alert"), "{html}");
    assert_eq!(
        island(&html)["lanes"][0]["first"]["metadata"]["labels"]["x"],
        hostile
    );
    assert!(html.contains("Content-Security-Policy"));
    assert!(html.contains("default-src 'none'"));
}

#[test]
fn a_fleet_has_a_lane_per_cluster_and_uid_sorted_by_cluster_with_counts_per_cluster() {
    let mut t = Timeline::new();
    feed(
        &mut t,
        &event_in("us-1", "added", "1", 0, json!({"n": 1}), &[]),
    );
    feed(
        &mut t,
        &event_in("eu-1", "added", "1", 10, json!({"n": 1}), &[]),
    );
    feed(
        &mut t,
        &event_in("eu-1", "modified", "2", 20, json!({"n": 2}), &[]),
    );
    let doc = island(&written(t, None));
    let lanes = doc["lanes"].as_array().cloned().unwrap_or_default();
    assert_eq!(lanes.len(), 2, "the same uid in two clusters is two lanes");
    assert_eq!(
        (lanes[0]["cluster"].clone(), lanes[1]["cluster"].clone()),
        (json!("eu-1"), json!("us-1"))
    );
    assert_eq!(lanes[0]["marks"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        doc["clusters"],
        json!({"eu-1": {"added": 1, "modified": 1}, "us-1": {"added": 1}})
    );
}
