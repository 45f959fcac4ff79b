//! Alert events: `io.kubecast.alert.firing` and `io.kubecast.alert.resolved`, subject the pod,
//! with the rule, severity, message, labels and evidence as `data` (schema
//! `schemas/alert.v1.json`). Entry point: [`alert_event`].
//!
//! The id is `{uid}:{began_rv}:alert:{rule}:firing` (or `:resolved`): a pure function of the
//! rule, the pod and the resourceVersion at which the episode began, so two replicas, or one
//! before and after a restart, give the same alert the same id.

use bytes::Bytes;
use serde_json::json;

use super::{ChangeKind, Event, SCHEMA_ALERT};
use crate::alert::episode::{Episode, alert_id};
use crate::alert::rule::Rule;

/// The event of `kind` (firing or resolved) for episode `ep` of `rule`.
pub fn alert_event(cluster: &str, kind: ChangeKind, ep: &Episode, rule: &Rule) -> Event {
    let resource = &rule.resource;
    let alert = alert_id(&rule.name, &ep.uid, &ep.began_rv);
    let status = match kind {
        ChangeKind::AlertResolved => "resolved",
        _ => "firing",
    };
    let began_at = jiff::Timestamp::from_millisecond(ep.began_at)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let mut data = json!({
        "alert": alert,
        "status": status,
        "rule": rule.name,
        "severity": rule.severity,
        "message": ep.message,
        "labels": rule.labels,
        "object": {"kind": &**resource.kind_name(), "apiVersion": &**resource.api_version(),
            "namespace": ep.namespace, "name": ep.name, "uid": ep.uid},
        "container": ep.container,
        "evidence": ep.facts,
        "beganAt": began_at,
        "beganResourceVersion": ep.began_rv,
        "resourceVersion": ep.rv,
    });
    if resource.is_pod() {
        data["pod"] = json!({"namespace": ep.namespace, "name": ep.name, "uid": ep.uid});
    }
    Event {
        seq: 0,
        id: format!("{alert}:{status}"),
        kind,
        ty: kind.event_type().into(),
        source: resource.source(cluster, &ep.namespace),
        time: jiff::Timestamp::now().to_string(),
        dataschema: SCHEMA_ALERT.into(),
        api_version: resource.api_version().clone(),
        k8s_kind: resource.kind_name().clone(),
        resource: resource.key().clone(),
        scope: "".into(),
        uid: ep.uid.clone(),
        namespace: ep.namespace.clone(),
        name: ep.name.clone(),
        rv: ep.rv.clone(),
        // The alert stream's chain: a `firing` links to the last alert event of its rule
        // for this object (empty for the first), a `resolved` to its `firing`.
        prev_rv: match kind {
            ChangeKind::AlertResolved => ep.fired_rv.clone(),
            _ => ep.prev_alert_rv.clone(),
        },
        inferred: false,
        initial: false,
        truncated: false,
        compat: None,
        from_watch: false,
        route: None,
        data: Bytes::from(data.to_string()),
    }
}
