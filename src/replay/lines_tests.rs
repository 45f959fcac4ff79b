use serde_json::json;

use super::*;
use crate::replay::facts::Place;
use crate::replay::testing::{event, event_in};

fn facts(e: &Event) -> Facts {
    Facts::of(e, Place::default())
}

/// The lines `events` give, written without colour.
fn written(events: &[Event], json: bool, color: bool) -> Vec<String> {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut lines = ChangeLines::new(Box::new(Shared(buf.clone())), json, color, false);
    for e in events {
        lines.write(&facts(e), e).unwrap_or_else(|e| panic!("{e}"));
    }
    lines.flush().unwrap_or_else(|e| panic!("{e}"));
    let bytes = buf.lock().map(|b| b.clone()).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_compact_line_names_time_cluster_object_change_and_the_fields_that_changed() {
    let lines = written(
        &[
            event_in(
                "eu-1",
                "added",
                "1",
                0,
                json!({"status": {"phase": "Pending"}}),
                &[],
            ),
            event_in(
                "eu-1",
                "modified",
                "2",
                0,
                json!({"status": {"phase": "Running", "podIP": "10.0.0.7"}}),
                &[],
            ),
            event_in("eu-1", "deleted", "3", 0, json!({}), &[]),
        ],
        false,
        false,
    );
    assert_eq!(lines[0], "--- 1970-01-02 (UTC) ---", "{lines:#?}");
    assert_eq!(lines[1], "00:00:00.000  eu-1  Pod ns/web  added");
    assert_eq!(
        lines[2],
        "00:00:00.000  eu-1  Pod ns/web  modified  status.phase: \"Pending\" → \"Running\"; +status.podIP: \"10.0.0.7\""
    );
    assert_eq!(lines[3], "00:00:00.000  eu-1  Pod ns/web  deleted");
    assert_eq!(lines.len(), 4);
}

#[test]
fn a_change_with_no_earlier_version_read_says_so_and_resource_versions_are_not_listed() {
    let lines = written(
        &[
            event(
                "modified",
                "5",
                0,
                json!({"metadata": {"resourceVersion": "5"}, "a": 1}),
                &[],
            ),
            event(
                "modified",
                "6",
                0,
                json!({"metadata": {"resourceVersion": "6"}, "a": 1}),
                &[],
            ),
        ],
        false,
        false,
    );
    assert!(
        lines[1].ends_with("modified  (no earlier version read)"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].ends_with("modified  (no field changed)"),
        "{}",
        lines[2]
    );
}

#[test]
fn long_values_and_many_fields_are_shortened_on_a_compact_line() {
    let before = json!({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": "x"});
    let after = json!({"a": 2, "b": 2, "c": 2, "d": 2, "e": 2, "f": "y".repeat(100)});
    let lines = written(
        &[
            event("added", "1", 0, before, &[]),
            event("modified", "2", 0, after, &[]),
        ],
        false,
        false,
    );
    assert!(lines[2].ends_with("d: 1 → 2; (+2 more)"), "{}", lines[2]);
}

#[test]
fn alerts_get_a_line_of_their_own_with_rule_and_message_and_colour_only_when_asked() {
    let firing = event(
        "firing",
        "1",
        0,
        json!({"message": "restarted 5 times"}),
        &[],
    );
    let plain = written(std::slice::from_ref(&firing), false, false);
    assert_eq!(
        plain[1],
        "00:00:00.000  test  Pod ns/web  firing    crashloop: restarted 5 times"
    );
    let coloured = written(&[firing], false, true);
    assert!(
        coloured[1].contains("\x1b[1;31mfiring  \x1b[0m"),
        "{:?}",
        coloured[1]
    );
}

#[test]
fn a_json_line_holds_every_changed_field_and_the_cluster() {
    let lines = written(
        &[
            event_in(
                "us-1",
                "added",
                "1",
                0,
                json!({"n": 1}),
                &[("k8sinitial", "true")],
            ),
            event_in("us-1", "modified", "2", 0, json!({"n": 2}), &[]),
        ],
        true,
        false,
    );
    let first: Value = serde_json::from_str(&lines[0]).unwrap_or_default();
    assert_eq!(first["change"], "initial");
    assert!(first.get("fields").is_none(), "{first}");
    let second: Value = serde_json::from_str(&lines[1]).unwrap_or_default();
    assert_eq!(second["cluster"], "us-1");
    assert_eq!(second["kind"], "Pod");
    assert_eq!(second["namespace"], "ns");
    assert_eq!(second["id"], "u1:2:modified");
    assert_eq!(
        second["fields"],
        json!([{"kind": "changed", "path": "n", "old": 1, "new": 2}])
    );
}
