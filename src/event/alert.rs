//! Alert events: `io.kubecast.alert.firing` and `io.kubecast.alert.resolved`, subject the pod,
//! with the rule, severity, message, labels and evidence as `data` (schema
//! `schemas/alert.v1.json`). Entry point: [`alert_event`].
//!
//! The id is `{uid}:{began_rv}:alert:{rule}:firing` (or `:resolved`): a pure function of the
//! rule, the pod and the resourceVersion at which the episode began, so two replicas, or one
//! before and after a restart, give the same alert the same id.

use bytes::Bytes;
use serde_json::json;

use super::{Event, SCHEMA_ALERT};
use crate::alert::episode::{Episode, alert_id};
use crate::alert::rule::Rule;
use crate::model::{ChangeKind, ObjectRef};

/// The event of `kind` (firing or resolved) for episode `ep` of `rule`.
pub fn alert_event(cluster: &str, kind: ChangeKind, ep: &Episode, rule: &Rule) -> Event {
    let resource = &rule.resource;
    // The object the alert is about: the one the episode judged, or for `warning_event`
    // the Event's involved object (the episode belongs to the Event that showed it).
    let about = About::of(ep, resource);
    let alert = alert_id(&about.rule_id(&rule.name), &about.uid, &ep.began_rv);
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
        "object": {"kind": about.kind, "apiVersion": about.api_version,
            "namespace": about.namespace, "name": about.name, "uid": about.uid},
        "container": ep.container,
        "evidence": ep.facts,
        "beganAt": began_at,
        "beganResourceVersion": ep.began_rv,
        "resourceVersion": ep.rv,
    });
    if let Some(member) = crate::kinds::of(resource).alert_member() {
        data[member] = json!({"namespace": ep.namespace, "name": ep.name, "uid": ep.uid});
    }
    Event {
        seq: 0,
        id: format!("{alert}:{status}"),
        kind,
        ty: kind.event_type().into(),
        source: resource.source(cluster, &ep.namespace),
        // A resolve kept firing happened when its wait ended, however late it is said.
        time: match (kind, ep.resolved_at) {
            (ChangeKind::AlertResolved, Some(at)) => {
                jiff::Timestamp::from_millisecond(at).unwrap_or_else(|_| jiff::Timestamp::now())
            }
            _ => jiff::Timestamp::now(),
        },
        dataschema: SCHEMA_ALERT.into(),
        api_version: about.api_version.as_str().into(),
        k8s_kind: about.kind.as_str().into(),
        scope: "".into(),
        object: ObjectRef {
            uid: about.uid.clone(),
            resource: resource.key().clone(),
            namespace: about.namespace.as_str().into(),
            name: about.name.clone(),
        },
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

/// Who an alert is about.
struct About {
    kind: String,
    api_version: String,
    namespace: String,
    name: String,
    uid: String,
    /// `warning_event`: the Event's reason, which makes the alert's stream (and id) its own.
    reason: Option<String>,
}

impl About {
    fn of(ep: &Episode, resource: &crate::kinds::Resource) -> About {
        let o = &ep.facts.get("involvedObject");
        match o.filter(|_| !ep.group.is_empty()) {
            Some(o) => {
                let s = |k: &str| o[k].as_str().unwrap_or_default().to_string();
                About {
                    kind: s("kind"),
                    api_version: s("apiVersion"),
                    namespace: s("namespace"),
                    name: s("name"),
                    uid: s("uid"),
                    reason: ep
                        .facts
                        .get("reason")
                        .and_then(|r| r.as_str())
                        .map(str::to_string),
                }
            }
            None => About {
                kind: resource.kind_name().to_string(),
                api_version: resource.api_version().to_string(),
                namespace: ep.namespace.clone(),
                name: ep.name.clone(),
                uid: ep.uid.clone(),
                reason: None,
            },
        }
    }

    /// The rule as the alert's id names it: `warning_event-{reason}` (in lower case), so
    /// that each reason of an object is an alert stream of its own; else the rule's name.
    fn rule_id(&self, rule: &str) -> String {
        match &self.reason {
            None => rule.to_string(),
            Some(r) => {
                let r: String = r
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_lowercase()
                        } else {
                            '-'
                        }
                    })
                    .collect();
                format!("{rule}-{r}")
            }
        }
    }
}
