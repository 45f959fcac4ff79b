use super::*;
use crate::redact::RedactConfig;

fn record<'a>(headers: &[(&str, &'a str)], payload: Option<&'a [u8]>) -> Record<'a> {
    Record::from_parts(
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes()))
            .collect(),
        payload,
    )
}

fn one(r: Record<'_>) -> Event {
    let mut events = events_of(r, &RedactConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(events.len(), 1);
    events.remove(0)
}

const DATA: &[u8] = br#"{"metadata":{"name":"p","labels":{"app":"web"}}}"#;

#[test]
fn binary_mode_is_read_whatever_the_header_casing() {
    let headers = [
        ("CE_SpecVersion", "1.0"),
        ("Ce_Id", "u:7:added"),
        ("ce_source", "k8s://c/api/v1/namespaces/ns/pods"),
        ("ce_type", "io.k8s.core.v1.pod.added"),
        ("Content-Type", "application/json"),
        ("ce_k8suid", "u"),
        ("ce_k8srv", "7"),
        ("ce_k8sinitial", "true"),
    ];
    let e = one(record(&headers, Some(DATA)));
    assert_eq!(e.id(), "u:7:added");
    assert_eq!(e.ty(), "io.k8s.core.v1.pod.added");
    assert_eq!(e.datacontenttype(), Some("application/json"));
    assert_eq!(extension_text(&e, "k8suid").as_deref(), Some("u"));
    // A header string becomes the boolean structured mode writes.
    assert_eq!(
        e.extension("k8sinitial"),
        Some(&ExtensionValue::Boolean(true))
    );
    assert_eq!(
        data_json(&e).map(|v| v["metadata"]["name"].clone()),
        Some("p".into())
    );
}

#[test]
fn structured_mode_is_read_with_or_without_its_content_type() {
    let event = br#"{"specversion":"1.0","id":"x","source":"s","type":"t","k8sinitial":false,"data":{"a":1}}"#;
    for headers in [
        &[(
            "content-type",
            "application/cloudevents+json; charset=utf-8",
        )][..],
        &[][..],
    ] {
        let e = one(record(headers, Some(event)));
        assert_eq!(e.id(), "x");
        assert_eq!(
            e.extension("k8sinitial"),
            Some(&ExtensionValue::Boolean(false))
        );
        assert_eq!(data_json(&e).map(|v| v["a"].clone()), Some(1.into()));
    }
}

#[test]
fn a_structured_batch_gives_every_event_in_it() {
    let batch = br#"[{"specversion":"1.0","id":"a","source":"s","type":"t"},
                     {"specversion":"1.0","id":"b","source":"s","type":"t","data_base64":"AAE="}]"#;
    let events = events_of(
        record(
            &[("content-type", "application/cloudevents-batch+json")],
            Some(batch),
        ),
        &RedactConfig::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = events.iter().map(|e| e.id()).collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn records_that_are_not_cloudevents_say_why() {
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a [u8]>, &'a str);
    let cases: [Case<'_>; 5] = [
        (&[], Some(b"hello"), "neither binary mode"),
        (&[], Some(br#"{"id":"x"}"#), "neither binary mode"),
        (&[], None, "neither binary mode"),
        // Binary mode without the required `source`.
        (
            &[("ce_specversion", "1.0"), ("ce_id", "x"), ("ce_type", "t")],
            Some(DATA),
            "source",
        ),
        (
            &[("content-type", "application/cloudevents+json")],
            Some(b"{broken"),
            "not a valid CloudEvent",
        ),
    ];
    for (headers, payload, why) in cases {
        match events_of(record(headers, payload), &RedactConfig::default()) {
            Ok(e) => panic!("{headers:?} {payload:?} taken for {e:?}"),
            Err(NotCloudEvent(text)) => assert!(text.contains(why), "`{text}` should say `{why}`"),
        }
    }
    let batch = record(
        &[("content-type", "application/cloudevents-batch+json")],
        Some(b"{}"),
    );
    assert!(events_of(batch, &RedactConfig::default()).is_err());
}

#[test]
fn an_unknown_spec_version_is_refused() {
    let headers = [
        ("ce_specversion", "9.9"),
        ("ce_id", "x"),
        ("ce_source", "s"),
        ("ce_type", "t"),
    ];
    assert!(events_of(record(&headers, None), &RedactConfig::default()).is_err());
}

#[test]
fn json_content_types_are_recognised() {
    for (ct, json) in [
        (None, true),
        (Some("application/json"), true),
        (Some("application/json; charset=utf-8"), true),
        (Some("application/vnd.k8s+json"), true),
        (Some("text/json"), true),
        (Some("application/octet-stream"), false),
        (Some("text/plain"), false),
    ] {
        assert_eq!(json_content_type(ct), json, "{ct:?}");
    }
}

#[test]
fn data_read_from_a_topic_goes_through_the_same_redaction_and_kubecasts_own_is_unchanged() {
    let headers = |kind: &'static str| {
        [
            ("ce_specversion", "1.0"),
            ("ce_id", "u:7:added"),
            ("ce_source", "k8s://c/api/v1/namespaces/ns/x"),
            ("ce_type", "io.k8s.core.v1.x.added"),
            ("content-type", "application/json"),
            ("ce_k8skind", kind),
            ("ce_k8sapiversion", "v1"),
        ]
    };
    // Written by an older version or another producer: env values and a Secret's data plain.
    let pod = br#"{"kind":"ReplicationController","spec":{"template":{"spec":{"containers":[{"env":[{"name":"T","value":"s3cr3t"}]}]}}}}"#;
    let e = one(record(&headers("ReplicationController"), Some(pod)));
    let text = String::from_utf8_lossy(&data_bytes(&e).expect("data")).into_owned();
    assert!(
        !text.contains("s3cr3t") && text.contains("<redacted>"),
        "{text}"
    );
    let secret = br#"{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}"#;
    let s = one(record(&headers("Secret"), Some(secret)));
    assert_eq!(
        data_json(&s).expect("JSON")["data"]["password"],
        "<redacted>"
    );
    // What kubecast wrote comes back byte for byte.
    let own = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"containers\":[{\"env\":[{\"value\":\"<redacted>\"}]}]}}"}},"spec":{"containers":[{"env":[{"name":"T","value":"<redacted>"}]}]}}"#;
    let p = one(record(&headers("Pod"), Some(own)));
    assert_eq!(&data_bytes(&p).expect("data")[..], &own[..]);
}

#[test]
fn compat_shapes_other_types_and_the_writers_configured_names_are_redacted_too() {
    let headers = |ty: &'static str, extra: [(&'static str, &'static str); 2]| {
        let mut h = vec![
            ("ce_specversion", "1.0"),
            ("ce_id", "u:7:update"),
            ("ce_source", "k8s://c/api/v1/namespaces/ns/secrets"),
            ("ce_type", ty),
            ("content-type", "application/json"),
        ];
        h.extend(extra);
        h
    };
    // kubecast's own `compat: apiserversource` shape of a Secret.
    let secret = br#"{"metadata":{"name":"s"},"data":{"password":"aHVudGVyMg=="}}"#;
    let knative = headers(
        "dev.knative.apiserver.resource.update",
        [("ce_kind", "Secret"), ("ce_apiversion", "v1")],
    );
    let s = one(record(&knative, Some(secret)));
    assert_eq!(
        data_json(&s).expect("JSON")["data"]["password"],
        "<redacted>"
    );
    // Another producer's type, naming no kind: the data's own kind, and env values by shape.
    let other = headers("com.example.object.changed", [("ce_x", "1"), ("ce_y", "2")]);
    let own_kind = br#"{"apiVersion":"v1","kind":"Secret","data":{"k":"djE="}}"#;
    let o = one(record(&other, Some(own_kind)));
    assert_eq!(data_json(&o).expect("JSON")["data"]["k"], "<redacted>");
    let env = br#"{"spec":{"containers":[{"env":[{"name":"T","value":"s3cr3t"}]}]}}"#;
    let o = one(record(&other, Some(env)));
    assert_eq!(
        data_json(&o).expect("JSON")["spec"]["containers"][0]["env"][0]["value"],
        "<redacted>"
    );
    // What the writer's config named: an annotation, in a template too.
    let annotated = br#"{"metadata":{"annotations":{"example.com/token":"t0k3n"}},"spec":{"template":{"metadata":{"labels":{"owner":"o"}}}}}"#;
    let redact = RedactConfig {
        annotations: vec!["example.com/token".into()],
        labels: vec!["owner".into()],
        ..RedactConfig::default()
    };
    let pod = headers(
        "io.k8s.apps.v1.deployment.modified",
        [
            ("ce_k8skind", "Deployment"),
            ("ce_k8sapiversion", "apps/v1"),
        ],
    );
    let mut events =
        events_of(record(&pod, Some(annotated)), &redact).unwrap_or_else(|e| panic!("{e}"));
    let d = data_json(&events.remove(0)).expect("JSON");
    assert_eq!(
        d["metadata"]["annotations"]["example.com/token"],
        "<redacted>"
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["owner"],
        "<redacted>"
    );
}
