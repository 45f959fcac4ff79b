//! Examples of the redaction pass: pod specs found by shape in any kind, Secrets, the
//! last-applied copy, and the bytes it keeps.

use serde_json::{Value, json};

use super::RedactConfig;
use super::{Shape, full_data, redacted_value};

const SECRET: Shape = Shape { secret: true };

fn full_with(obj: Value, shape: Shape, redact: &RedactConfig) -> Value {
    let out = full_data(obj.to_string().as_bytes(), redact, shape, "x/v1", "X").expect("an object");
    serde_json::from_slice(&out).expect("JSON")
}

fn full(obj: Value, shape: Shape) -> Value {
    full_with(obj, shape, &RedactConfig::default())
}

fn containers() -> Value {
    json!({"containers": [{"name": "c", "env": [{"name": "T", "value": "s3cr3t"}]}]})
}

#[test]
fn keeps_the_objects_own_bytes_and_order_and_adds_what_list_items_lack() {
    let pod = br#"{"metadata":{"name":"p","managedFields":[{"m":1}],"labels":{"z":"1","a":"2"}},"spec":{"containers":[{"env":[{"name":"A","value":"s3cr3t"},{"name":"B","valueFrom":{"x":1}}],"name":"c"}]},"status":{"phase":"Running","n":1.50}}"#;
    let out =
        full_data(pod, &RedactConfig::default(), Shape::default(), "v1", "Pod").expect("an object");
    assert_eq!(
        String::from_utf8(out).expect("UTF-8"),
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"z":"1","a":"2"}},"spec":{"containers":[{"env":[{"name":"A","value":"<redacted>"},{"name":"B","valueFrom":{"x":1}}],"name":"c"}]},"status":{"phase":"Running","n":1.50}}"#
    );
}

#[test]
fn env_values_are_redacted_wherever_a_container_list_sits_in_any_kind() {
    let at = |d: &Value, path: &[&str]| {
        let mut v = d;
        for p in path {
            v = match p.parse::<usize>() {
                Ok(i) => &v[i],
                Err(_) => &v[*p],
            };
        }
        v.clone()
    };
    let cases: Vec<(Value, Vec<&str>)> = vec![
        // A workload's or a ReplicationController's template.
        (
            json!({"spec": {"replicas": 2, "template": {"spec": containers()}}}),
            vec!["spec", "template", "spec"],
        ),
        // A CronJob's job template.
        (
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": containers()}}}}}),
            vec!["spec", "jobTemplate", "spec", "template", "spec"],
        ),
        // A PodTemplate: `template` at the top.
        (
            json!({"template": {"spec": containers()}}),
            vec!["template", "spec"],
        ),
        // A custom resource's pod template, in a list of its own (Tekton-like steps).
        (
            json!({"spec": {"tasks": [{"name": "t", "podTemplate": {"spec": containers()}}]}}),
            vec!["spec", "tasks", "0", "podTemplate", "spec"],
        ),
        // A Knative Service-like nesting.
        (
            json!({"spec": {"template": {"metadata": {}, "spec": containers()}}}),
            vec!["spec", "template", "spec"],
        ),
    ];
    for (obj, path) in cases {
        let d = full(obj.clone(), Shape::default());
        let spec = at(&d, &path);
        assert_eq!(
            spec["containers"][0]["env"][0]["value"], "<redacted>",
            "{obj}"
        );
        assert_eq!(spec["containers"][0]["env"][0]["name"], "T", "{obj}");
        assert_eq!(spec["containers"][0]["name"], "c", "{obj}");
    }
    // Turned off, a custom resource's container list is left as it is.
    let off = RedactConfig {
        env_values: false,
        ..RedactConfig::default()
    };
    let w = full_with(json!({"spec": containers()}), Shape::default(), &off);
    assert_eq!(w["spec"]["containers"][0]["env"][0]["value"], "s3cr3t");
}

#[test]
fn a_container_list_spelled_with_escapes_is_still_found() {
    let obj = br#"{"spec":{"c\u006fntainers":[{"env":[{"name":"T","value":"s3cr3t"}]}]}}"#;
    let out =
        full_data(obj, &RedactConfig::default(), Shape::default(), "v1", "X").expect("an object");
    assert!(
        !String::from_utf8_lossy(&out).contains("s3cr3t"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

#[test]
fn every_value_of_a_secret_is_redacted_and_its_keys_kept() {
    let s = full(
        json!({"type": "Opaque", "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "t"}}),
        SECRET,
    );
    assert_eq!(s["data"]["password"], "<redacted>");
    assert_eq!(s["stringData"]["token"], "<redacted>");
    assert_eq!(s["type"], "Opaque");
    // A Secret's data of another shape is redacted whole.
    assert_eq!(
        full(json!({"data": "aHVudGVyMg=="}), SECRET)["data"],
        "<redacted>"
    );
    // Only a Secret's data: a ConfigMap's stays.
    assert_eq!(
        full(json!({"data": {"k": "v"}}), Shape::default())["data"]["k"],
        "v"
    );
}

#[test]
fn the_last_applied_copy_is_redacted_as_the_object_it_copies() {
    let key = super::LAST_APPLIED;
    let secret_copy = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "plain"}});
    let s = full(
        json!({"metadata": {"annotations": {key: secret_copy.to_string()}}, "data": {"password": "aHVudGVyMg=="}}),
        SECRET,
    );
    let copy: Value = serde_json::from_str(
        s["metadata"]["annotations"][key]
            .as_str()
            .expect("a string"),
    )
    .expect("the copy is JSON");
    assert_eq!(copy["data"]["password"], "<redacted>");
    assert_eq!(copy["stringData"]["token"], "<redacted>");
    assert_eq!(copy["metadata"]["name"], "s");
    // A workload's copy of its env.
    let rc_copy =
        json!({"kind": "ReplicationController", "spec": {"template": {"spec": containers()}}});
    let rc = full(
        json!({"metadata": {"annotations": {key: rc_copy.to_string()}}}),
        Shape::default(),
    );
    let copy: Value = serde_json::from_str(
        rc["metadata"]["annotations"][key]
            .as_str()
            .expect("a string"),
    )
    .expect("the copy is JSON");
    assert_eq!(
        copy["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
        "<redacted>"
    );
    // What does not parse as an object is redacted whole.
    for bad in [
        json!("{not json"),
        json!("[1]"),
        json!(42),
        json!({"a": "b"}),
    ] {
        let d = full(
            json!({"metadata": {"annotations": {key: bad}}}),
            Shape::default(),
        );
        assert_eq!(d["metadata"]["annotations"][key], "<redacted>");
    }
}

#[test]
fn configured_annotations_and_labels_add_to_the_defaults() {
    let key = super::LAST_APPLIED;
    let redact = RedactConfig {
        annotations: vec!["example.com/token".into()],
        labels: vec!["owner".into()],
        ..RedactConfig::default()
    };
    let copy = json!({"kind": "Pod", "spec": containers()}).to_string();
    let d = full_with(
        json!({"metadata": {"annotations": {key: copy, "example.com/token": "t", "keep": "k"},
            "labels": {"owner": "o", "app": "a"}}, "spec": containers()}),
        Shape::default(),
        &redact,
    );
    let a = &d["metadata"]["annotations"];
    assert_eq!(a["example.com/token"], "<redacted>");
    assert_eq!(a["keep"], "k");
    assert!(!a[key].as_str().expect("a string").contains("s3cr3t"));
    assert_eq!(d["metadata"]["labels"]["owner"], "<redacted>");
    assert_eq!(d["metadata"]["labels"]["app"], "a");
    assert_eq!(d["spec"]["containers"][0]["env"][0]["value"], "<redacted>");
}

#[test]
fn an_object_reads_back_redacted() {
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": containers()});
    let v = redacted_value(
        pod.to_string().as_bytes(),
        &RedactConfig::default(),
        Shape::default(),
    );
    assert_eq!(v["spec"]["containers"][0]["env"][0]["value"], "<redacted>");
    assert_eq!(v["metadata"]["name"], "p");
    let s = redacted_value(
        br#"{"data": {"k": "djE="}}"#,
        &RedactConfig::default(),
        SECRET,
    );
    assert_eq!(s["data"]["k"], "<redacted>");
    assert_eq!(
        redacted_value(b"[1]", &RedactConfig::default(), SECRET),
        Value::Null
    );
}

#[test]
fn configured_annotations_and_labels_are_redacted_in_every_metadata_of_the_document() {
    let key = super::LAST_APPLIED;
    let template_meta = json!({"annotations": {"example.com/token": "t", "keep": "k"},
        "labels": {"owner": "o", "app": "a"}});
    // A CronJob: its job template's and that job's pod template's metadata, and the same
    // again inside its last-applied copy; a custom resource's template in a list.
    let cronjob = json!({"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {
        "metadata": template_meta, "spec": {"template": {"metadata": template_meta, "spec": {}}}}},
        "status": {"tasks": [{"podTemplate": {"metadata": template_meta}}]}});
    let mut obj = cronjob.clone();
    obj["metadata"]["annotations"] = json!({key: cronjob.to_string()});
    for env_values in [true, false] {
        let redact = RedactConfig {
            env_values,
            annotations: vec!["example.com/token".into()],
            labels: vec!["owner".into()],
        };
        let d = full_with(obj.clone(), Shape::default(), &redact);
        let copy: Value = serde_json::from_str(
            d["metadata"]["annotations"][key]
                .as_str()
                .expect("a string"),
        )
        .expect("the copy is JSON");
        for (doc, at) in [(&d, "the object"), (&copy, "its last-applied copy")] {
            for path in [
                "/spec/jobTemplate/metadata",
                "/spec/jobTemplate/spec/template/metadata",
                "/status/tasks/0/podTemplate/metadata",
            ] {
                let meta = doc.pointer(path).expect("the metadata is kept");
                assert_eq!(
                    meta["annotations"]["example.com/token"], "<redacted>",
                    "{at}{path} (env_values {env_values})"
                );
                assert_eq!(
                    meta["labels"]["owner"], "<redacted>",
                    "{at}{path} (env_values {env_values})"
                );
                assert_eq!(meta["annotations"]["keep"], "k", "{at}{path}");
                assert_eq!(meta["labels"]["app"], "a", "{at}{path}");
            }
        }
    }
}

#[test]
fn a_metadata_spelled_with_escapes_under_any_member_is_still_found() {
    let obj =
        br#"{"status":{"t":{"m\u0065tadata":{"annotations":{"example.com/token":"s3cr3t"}}}}}"#;
    let redact = RedactConfig {
        env_values: false,
        annotations: vec!["example.com/token".into()],
        ..RedactConfig::default()
    };
    let out = full_data(obj, &redact, Shape::default(), "v1", "X").expect("an object");
    assert!(
        !String::from_utf8_lossy(&out).contains("s3cr3t"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}
