//! What an event becomes in OTLP: its log record (attributes, body, times, severity) and the
//! resource it belongs to, in either shape. Entry points: [`record_of`] and [`resource_of`].
//!
//! `kubecast` shape: attribute names from the OpenTelemetry semantic conventions where they
//! define one (`k8s.cluster.name`, `k8s.namespace.name`, `k8s.pod.name`, …, the
//! `cloudevents.*` attributes) and from the Collector's `k8s_events` receiver where they do
//! not (`k8s.object.*`); `EventName` is the CloudEvent type; the body is the event's `data`.
//!
//! `k8sobjects` shape: what the Collector's `k8sobjects` receiver emits in watch mode, field
//! for field — body `{type, object}`, attributes `k8s.resource.name`, `event.domain`,
//! `event.name`, no resource attributes, no `Timestamp` — so that a pipeline built on it
//! keeps working. The object is kubecast's `full` data: redacted, without managedFields.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::Event;
use crate::model::ChangeKind;

/// The shape of the records (`shape:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// kubecast's own mapping onto the semantic conventions.
    #[default]
    Kubecast,
    /// The Collector's `k8sobjects` receiver in watch mode.
    K8sobjects,
}

/// One log record, before it is written in a protocol's encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    /// `time_unix_nano` (0: unset).
    pub time_ns: u64,
    pub observed_ns: u64,
    /// `severity_number` and `severity_text` (0 and empty: unset).
    pub severity: (i32, String),
    /// `event_name` (empty: unset).
    pub event_name: &'a str,
    pub body: Value,
    pub attributes: Vec<(&'static str, Cow<'a, str>)>,
}

/// Which `ResourceLogs` `event` goes in: in kubecast's shape its namespace (empty for a
/// cluster-scoped object; the cluster is the sink's own), in the k8sobjects receiver's none
/// (it sets no resource attributes in watch mode). Events with equal resources share one.
pub fn resource_of(shape: Shape, event: &Event) -> Option<&str> {
    (shape == Shape::Kubecast || event.kind.is_alert()).then_some(&*event.object.namespace)
}

/// The record of `event` in `shape`. Alerts are in kubecast's shape in either: the
/// `k8sobjects` receiver has none.
pub fn record_of(shape: Shape, event: &Event) -> Record<'_> {
    let data: Value = serde_json::from_slice(&event.data).unwrap_or(Value::Null);
    let ns = |t: jiff::Timestamp| u64::try_from(t.as_nanosecond()).unwrap_or(0);
    if shape == Shape::K8sobjects && !event.kind.is_alert() {
        let ty = match event.kind {
            ChangeKind::Added => "ADDED",
            ChangeKind::Deleted => "DELETED",
            _ => "MODIFIED",
        };
        let resource = event.object.resource.split('.').next().unwrap_or_default();
        let mut body = serde_json::Map::new();
        body.insert("type".into(), ty.into());
        body.insert("object".into(), data);
        let mut attributes = vec![("k8s.resource.name", Cow::Borrowed(resource))];
        if !event.object.name.is_empty() {
            attributes.push(("event.domain", Cow::Borrowed("k8s")));
            attributes.push(("event.name", Cow::Borrowed(event.object.name.as_str())));
        }
        return Record { time_ns: 0, observed_ns: ns(event.time), severity: (0, String::new()), event_name: "", body: Value::Object(body), attributes };
    }
    let ty = event.compat.and_then(|c| c.event_type(event)).unwrap_or(&event.ty);
    let mut attributes = vec![
        ("cloudevents.event_id", Cow::Borrowed(event.id.as_str())),
        ("cloudevents.event_source", Cow::Borrowed(event.source.as_str())),
        ("cloudevents.event_spec_version", Cow::Borrowed("1.0")),
        ("cloudevents.event_type", Cow::Borrowed(ty)),
        ("cloudevents.event_subject", Cow::Owned(event.subject())),
        ("k8s.object.kind", Cow::Borrowed(&*event.k8s_kind)),
        ("k8s.object.api_version", Cow::Borrowed(&*event.api_version)),
        ("k8s.object.name", Cow::Borrowed(event.object.name.as_str())),
        ("k8s.object.uid", Cow::Borrowed(event.object.uid.as_str())),
        ("k8s.object.resource_version", Cow::Borrowed(event.rv.as_str())),
    ];
    if let Some((name, uid)) = semconv_kind(&event.k8s_kind) {
        attributes.push((name, Cow::Borrowed(event.object.name.as_str())));
        attributes.push((uid, Cow::Borrowed(event.object.uid.as_str())));
    }
    if !event.kind.is_alert() && &*event.k8s_kind == "Pod" {
        pod_attributes(&data, &mut attributes);
    }
    let severity = if event.kind.is_alert() { severity_of(&data) } else { (0, String::new()) };
    Record { time_ns: ns(event.time), observed_ns: ns(event.time), severity, event_name: ty, body: data, attributes }
}

/// The semantic conventions' `k8s.{kind}.name` and `.uid` for the kinds they name.
fn semconv_kind(kind: &str) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        "Pod" => ("k8s.pod.name", "k8s.pod.uid"),
        "Deployment" => ("k8s.deployment.name", "k8s.deployment.uid"),
        "ReplicaSet" => ("k8s.replicaset.name", "k8s.replicaset.uid"),
        "StatefulSet" => ("k8s.statefulset.name", "k8s.statefulset.uid"),
        "DaemonSet" => ("k8s.daemonset.name", "k8s.daemonset.uid"),
        "Job" => ("k8s.job.name", "k8s.job.uid"),
        "CronJob" => ("k8s.cronjob.name", "k8s.cronjob.uid"),
        "Namespace" => ("k8s.namespace.name", "k8s.namespace.uid"),
        "Node" => ("k8s.node.name", "k8s.node.uid"),
        "ReplicationController" => ("k8s.replicationcontroller.name", "k8s.replicationcontroller.uid"),
        "HorizontalPodAutoscaler" => ("k8s.hpa.name", "k8s.hpa.uid"),
        "ResourceQuota" => ("k8s.resourcequota.name", "k8s.resourcequota.uid"),
        _ => return None,
    })
}

/// A Pod's node (`k8s.node.name`) and its controller (`k8s.replicaset.name`, …), from the
/// `full` data (`spec.nodeName`, `metadata.ownerReferences`) or the `summary` (`node`,
/// `owner`).
fn pod_attributes<'a>(data: &Value, attributes: &mut Vec<(&'static str, Cow<'a, str>)>) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let node = text(data.pointer("/spec/nodeName")).or_else(|| text(data.get("node")));
    if let Some(node) = node {
        attributes.push(("k8s.node.name", Cow::Owned(node)));
    }
    let owners = data.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    let owner = owners
        .and_then(|o| o.iter().find(|r| r.get("controller") == Some(&Value::Bool(true))))
        .or_else(|| data.get("owner").filter(|o| o.is_object()));
    if let Some(owner) = owner
        && let (Some(kind), Some(name)) = (text(owner.get("kind")), text(owner.get("name")))
        && let Some((name_attr, uid_attr)) = semconv_kind(&kind).filter(|_| kind != "Pod" && kind != "Node")
    {
        attributes.push((name_attr, Cow::Owned(name)));
        if let Some(uid) = text(owner.get("uid")) {
            attributes.push((uid_attr, Cow::Owned(uid)));
        }
    }
}

/// An alert's severity number and text, from the rule's `severity` (`critical` FATAL,
/// `error` ERROR, `warning` WARN, `info` INFO, `debug` DEBUG, as the log data model maps
/// syslog's; another word keeps its text with no number).
fn severity_of(data: &Value) -> (i32, String) {
    let text = data.get("severity").and_then(Value::as_str).unwrap_or_default();
    let number = match text.to_ascii_lowercase().as_str() {
        "critical" | "fatal" | "emergency" | "alert" => 21,
        "error" | "err" | "high" => 17,
        "warning" | "warn" | "medium" => 13,
        "info" | "informational" | "notice" | "low" | "none" => 9,
        "debug" => 5,
        _ => 0,
    };
    (number, text.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::ObjectRef;

    pub(crate) fn pod_event(kind: ChangeKind, data: Value) -> Event {
        event_in(kind, "shop", data)
    }

    /// A Pod's event of `kind` in `namespace` with `data`: the tests' fixture.
    pub(crate) fn event_in(kind: ChangeKind, namespace: &str, data: Value) -> Event {
        Event {
            seq: 1,
            id: crate::event::event_id("u1", "42", kind),
            kind,
            ty: kind.event_type().into(),
            source: format!("k8s://prod/api/v1/namespaces/{namespace}/pods"),
            time: "2026-01-01T00:00:01.5Z".parse().expect("a time"),
            dataschema: "urn:x".into(),
            api_version: "v1".into(),
            k8s_kind: "Pod".into(),
            scope: "*".into(),
            object: ObjectRef { uid: "u1".into(), resource: "pods".into(), namespace: namespace.into(), name: "web-1".into() },
            rv: "42".into(),
            prev_rv: String::new(),
            inferred: false,
            initial: false,
            truncated: false,
            from_watch: true,
            route: None,
            compat: None,
            data: data.to_string().into(),
        }
    }

    fn attr<'a>(r: &'a Record, name: &str) -> Option<&'a str> {
        r.attributes.iter().find(|(k, _)| *k == name).map(|(_, v)| &**v)
    }

    #[test]
    fn a_pod_change_carries_the_semantic_conventions_names() {
        let data = serde_json::json!({
            "metadata": {"name": "web-1", "ownerReferences": [
                {"kind": "ReplicaSet", "name": "web-7d9", "uid": "rs1", "controller": true}]},
            "spec": {"nodeName": "node-3"},
        });
        let e = pod_event(ChangeKind::Modified, data.clone());
        let r = record_of(Shape::Kubecast, &e);
        assert_eq!(r.event_name, "io.k8s.core.v1.pod.modified");
        assert_eq!(r.time_ns, 1_767_225_601_500_000_000);
        assert_eq!(r.body, data);
        for (k, v) in [
            ("cloudevents.event_id", "u1:42:modified"),
            ("cloudevents.event_subject", "shop/web-1"),
            ("k8s.pod.name", "web-1"),
            ("k8s.pod.uid", "u1"),
            ("k8s.node.name", "node-3"),
            ("k8s.replicaset.name", "web-7d9"),
            ("k8s.replicaset.uid", "rs1"),
            ("k8s.object.kind", "Pod"),
            ("k8s.object.resource_version", "42"),
        ] {
            assert_eq!(attr(&r, k), Some(v), "{k}");
        }
        assert_eq!(r.severity, (0, String::new()));
        assert_eq!(resource_of(Shape::Kubecast, &e), Some("shop"));
    }

    #[test]
    fn the_k8sobjects_shape_is_the_receivers_watch_record() {
        let data = serde_json::json!({"kind": "Pod", "metadata": {"name": "web-1"}});
        let e = pod_event(ChangeKind::Deleted, data.clone());
        let r = record_of(Shape::K8sobjects, &e);
        assert_eq!(r.body, serde_json::json!({"type": "DELETED", "object": data}));
        assert_eq!(r.time_ns, 0, "the receiver sets no Timestamp");
        assert_eq!(r.event_name, "");
        let attrs: Vec<_> = r.attributes.iter().map(|(k, v)| (*k, &**v)).collect();
        assert_eq!(attrs, [("k8s.resource.name", "pods"), ("event.domain", "k8s"), ("event.name", "web-1")]);
        assert_eq!(resource_of(Shape::K8sobjects, &e), None);
    }

    #[test]
    fn alert_severities_map_onto_the_log_data_models_numbers() {
        let data = |s: &str| serde_json::json!({"severity": s});
        assert_eq!(severity_of(&data("critical")), (21, "critical".into()));
        assert_eq!(severity_of(&data("warning")), (13, "warning".into()));
        assert_eq!(severity_of(&data("page-me")), (0, "page-me".into()));
        let mut e = pod_event(ChangeKind::AlertFiring, data("warning"));
        e.ty = "io.kubecast.alert.firing".into();
        let r = record_of(Shape::K8sobjects, &e);
        assert_eq!((r.severity, r.event_name), ((13, "warning".into()), "io.kubecast.alert.firing"));
    }
}
