//! `schemas/asyncapi.yaml`, validated by the official AsyncAPI parser (`@asyncapi/parser`,
//! installed by `scripts/stack tool asyncapi-parser`, run by tests/asyncapi/validate.cjs), and
//! held to what kubecast really sends: the Kafka headers of `headers_of`, the MQTT 5 user
//! properties and the structured members of `Event`, for every kind of change.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use kubecast::event::{Event, SCHEMA_ALERT, SCHEMA_FULL, SCHEMA_REFERENCE, SCHEMA_SUMMARY};
use kubecast::model::{ChangeKind, ObjectRef};
use rdkafka::message::Headers;
use serde_json::Value;
use support::deploy::tool;
use support::kubecast::scratch_dir;
use support::{Stack, repo};

/// What validate.cjs reports for `document`: errors, warnings, channels, operations.
fn parse(stack: &Stack, document: &Path) -> Value {
    let out = Command::new("node")
        .arg(repo().join("tests/asyncapi/validate.cjs"))
        .arg(tool(stack, "asyncapi-parser"))
        .arg(document)
        .output()
        .unwrap_or_else(|e| panic!("running node: {e}"));
    assert!(
        out.status.success(),
        "validate.cjs failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "validate.cjs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn event(kind: ChangeKind) -> Event {
    Event {
        seq: 1,
        id: "u:1:added".into(),
        kind,
        source: "k8s://c/api/v1/namespaces/ns/pods".into(),
        time: "2026-01-01T00:00:00Z".parse().expect("a time"),
        ty: kind.event_type().into(),
        dataschema: SCHEMA_FULL.into(),
        api_version: "v1".into(),
        k8s_kind: "Pod".into(),
        scope: "*".into(),
        object: ObjectRef {
            uid: "u".into(),
            resource: "pods".into(),
            namespace: "ns".into(),
            name: "p".into(),
        },
        rv: "1".into(),
        prev_rv: String::new(),
        inferred: false,
        initial: false,
        truncated: false,
        compat: None,
        from_watch: false,
        route: None,
        data: Bytes::from_static(b"{}"),
    }
}

/// Every kind of event, alerts included (they share the channels).
const KINDS: [ChangeKind; 5] = ChangeKind::ALL;

/// The names each kind of change carries, by `names_of`: (every name any change has, the
/// names every change has). A change sent as a flagged reference (`too_large: reference`)
/// is among them.
fn union_and_common(names_of: impl Fn(&Event) -> BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let mut sets: Vec<BTreeSet<String>> = KINDS.iter().map(|k| names_of(&event(*k))).collect();
    sets.push(names_of(&event(ChangeKind::Modified).as_reference()));
    let union = sets.iter().flatten().cloned().collect::<BTreeSet<_>>();
    let common = sets.iter().skip(1).fold(sets[0].clone(), |acc, s| {
        acc.intersection(s).cloned().collect()
    });
    (union.into_iter().collect(), common.into_iter().collect())
}

/// (property names, required names) of `components.schemas.NAME` in the document.
fn declared(doc: &Value, name: &str) -> (Vec<String>, Vec<String>) {
    let schema = &doc["components"]["schemas"][name];
    let mut props: Vec<String> = schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("components.schemas.{name} has no properties"))
        .keys()
        .cloned()
        .collect();
    let mut required: Vec<String> = schema["required"]
        .as_array()
        .unwrap_or_else(|| panic!("components.schemas.{name} has no required list"))
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    props.sort();
    required.sort();
    (props, required)
}

#[test]
fn the_asyncapi_parser_accepts_the_document_and_reads_its_channels() {
    let stack = Stack::load();
    let report = parse(&stack, &repo().join("schemas/asyncapi.yaml"));
    assert_eq!(report["errors"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["warnings"], serde_json::json!([]), "{report:#}");

    let channels = &report["channels"];
    assert_eq!(channels["kafkaPods"]["address"], "k8s.{cluster}.pods");
    assert_eq!(
        channels["mqttPods"]["address"],
        "kubecast/{cluster}/{namespace}/{name}"
    );
    // The parser resolved the three payload schemas of schemas/ (their $id).
    for channel in ["kafkaPods", "mqttPods"] {
        let binary = &channels[channel]["messages"][0];
        assert_eq!(
            binary["payloadSchemas"],
            serde_json::json!([SCHEMA_FULL, SCHEMA_SUMMARY, SCHEMA_REFERENCE, SCHEMA_ALERT]),
            "{channel}: {binary:#}"
        );
    }
    let operations: Vec<(String, String)> = report["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .map(|o| {
            (
                o["action"].as_str().unwrap_or("?").to_string(),
                o["channels"][0].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    assert_eq!(
        operations,
        [
            ("send".to_string(), "kafkaPods".to_string()),
            ("send".to_string(), "mqttPods".to_string())
        ]
    );
}

#[test]
fn the_document_names_exactly_the_headers_and_properties_kubecast_sends() {
    let text = std::fs::read_to_string(repo().join("schemas/asyncapi.yaml")).expect("the file");
    let doc: Value = serde_saphyr::from_str(&text).expect("the document is YAML");

    let kafka = union_and_common(|e| {
        kubecast::sinks::kafka::headers_of(e)
            .iter()
            .map(|h| h.key.to_string())
            .collect()
    });
    assert_eq!(declared(&doc, "kafkaBinaryHeaders"), kafka, "Kafka headers");

    // MQTT 5: every attribute but datacontenttype, which is the Content Type property.
    let mqtt = union_and_common(|e| {
        e.attributes()
            .into_iter()
            .filter(|(k, _)| *k != "datacontenttype")
            .map(|(k, _)| k.to_string())
            .collect()
    });
    assert_eq!(
        declared(&doc, "mqttUserProperties"),
        mqtt,
        "MQTT user properties"
    );

    let structured = union_and_common(|e| {
        let v: Value = serde_json::from_slice(&e.structured_json()).expect("structured JSON");
        v.as_object().expect("an object").keys().cloned().collect()
    });
    assert_eq!(
        declared(&doc, "structuredEvent"),
        structured,
        "structured members"
    );
}

#[test]
fn the_asyncapi_parser_rejects_broken_copies_so_the_check_is_real() {
    let stack = Stack::load();
    let text = std::fs::read_to_string(repo().join("schemas/asyncapi.yaml")).expect("the file");
    let dir = scratch_dir("asyncapi");
    for schema in [
        "pod-full.v1.json",
        "pod-summary.v1.json",
        "pod-reference.v1.json",
        "alert.v1.json",
    ] {
        std::fs::copy(repo().join("schemas").join(schema), dir.join(schema))
            .unwrap_or_else(|e| panic!("copying {schema}: {e}"));
    }
    let file = dir.join("asyncapi.yaml");
    std::fs::write(&file, &text).expect("writing the copy");
    let report = parse(&stack, &file);
    assert_eq!(
        report["errors"],
        serde_json::json!([]),
        "the unchanged copy: {report:#}"
    );
    for (what, broken) in [
        (
            "an operation on a channel that does not exist",
            text.replace(
                "      $ref: '#/channels/kafkaPods'\n",
                "      $ref: '#/channels/kafkaTopic'\n",
            ),
        ),
        (
            "a payload schema file that does not exist",
            text.replace("./pod-summary.v1.json", "./pod-summary.v2.json"),
        ),
        (
            "an operation that neither sends nor receives",
            text.replacen("    action: send\n", "    action: publish\n", 1),
        ),
    ] {
        assert_ne!(broken, text, "the edit for {what} did not apply");
        std::fs::write(&file, broken).expect("writing the copy");
        let report = parse(&stack, &file);
        assert!(
            report["errors"].as_array().is_some_and(|e| !e.is_empty()),
            "the parser accepts {what}: {report:#}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
