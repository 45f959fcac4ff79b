use cloudevents::{EventBuilder, EventBuilderV10};
use serde_json::json;

use super::*;
use crate::replay::facts::Place;

/// A kubecast event of `ty` (`added`, `modified`, `deleted`, `firing`, `resolved`) about
/// Pod `ns/web` (uid `u1`) at `rv`, `ms` after the epoch's first day.
fn event(ty: &str, rv: &str, ms: i64, data: Value, extra: &[(&str, &str)]) -> Event {
    let (full, id) = match ty {
        "firing" | "resolved" => (
            format!("io.kubecast.alert.{ty}"),
            format!("u1:1:alert:crashloop:{ty}"),
        ),
        _ => (format!("io.k8s.core.v1.pod.{ty}"), format!("u1:{rv}:{ty}")),
    };
    let time = jiff::Timestamp::from_millisecond(86_400_000 + ms).expect("a time");
    let mut b = EventBuilderV10::new()
        .id(id)
        .source("k8s://test/api/v1/namespaces/ns/pods")
        .ty(full)
        .time(time.to_string())
        .subject("ns/web")
        .extension("k8suid", "u1")
        .extension("k8snamespace", "ns")
        .extension("k8sname", "web")
        .extension("k8srv", rv)
        .data("application/json", data);
    for (k, v) in extra {
        b = b.extension(k, *v);
    }
    b.build().expect("a valid event")
}

fn feed(t: &mut Timeline, e: &Event) {
    t.observe(
        &Facts::of(
            e,
            Place {
                partition: 0,
                offset: 0,
            },
        ),
        e,
    );
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
        ("u1".into(), "u1:5:modified".into(), "4".into()),
        ("unknown".into(), "x".into(), "9".into()),
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
