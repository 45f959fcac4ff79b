//! The CloudEvent that kubecast publishes: its attributes per the event contract (README,
//! "Event contract") and its two wire shapes, binary attributes and structured JSON.
//!
//! Entry points: [`Encoder::encode`] builds an [`Event`] from a classified change;
//! [`Event::attributes`] lists the attributes for binary bindings (Kafka `ce_` headers, MQTT 5
//! user properties); [`Event::structured_json`] is the `application/cloudevents+json` form.

mod alert;
mod compat;
mod encode;

pub use alert::alert_event;
pub use compat::Compat;
pub use encode::{
    EncodeError, Encoder, SCHEMA_ALERT, SCHEMA_FULL, SCHEMA_REFERENCE, SCHEMA_SUMMARY,
};

use crate::model::{ChangeKind, ObjectRef};

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;

/// The deterministic event id: `{uid}:{resourceVersion}:added|modified` and `{uid}:deleted`.
///
/// A pod is deleted once, so its uid alone identifies the delete; leaving the
/// resourceVersion out makes a delete seen on the watch and the same delete inferred from a
/// re-list (which knows only the last resourceVersion) carry the same id.
pub fn event_id(uid: &str, rv: &str, kind: ChangeKind) -> String {
    match kind {
        ChangeKind::Deleted => format!("{uid}:deleted"),
        _ => format!("{uid}:{rv}:{}", kind.word()),
    }
}

/// The JSON content type of `data`.
pub const DATA_CONTENT_TYPE: &str = "application/json";
/// The content type of a structured-mode event.
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";

/// One CloudEvent, ready for any sink. Cheap to share (`Arc<Event>`) between sinks.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Position in the event stream (the durable log's sequence number, or a counter of this
    /// process without a state directory); sinks report acks by it. Given by the pipeline.
    pub seq: u64,
    pub id: String,
    pub kind: ChangeKind,
    /// The CloudEvents `type`: `io.k8s.core.v1.pod.added`, `io.k8s.apps.v1.deployment.modified`,
    /// `io.kubecast.alert.firing`.
    pub ty: Arc<str>,
    /// `k8s://{cluster}` and the collection's API path
    /// (`k8s://prod/apis/apps/v1/namespaces/shop/deployments`).
    pub source: String,
    /// When kubecast observed the change; a sink writes it as RFC 3339.
    pub time: jiff::Timestamp,
    /// URN of the JSON Schema that `data` follows.
    pub dataschema: Arc<str>,
    /// The object's `apiVersion` (`apps/v1`): the `k8sapiversion` extension.
    pub api_version: Arc<str>,
    /// The object's kind (`Deployment`): the `k8skind` extension.
    pub k8s_kind: Arc<str>,
    /// The label of the watch scope it came from ([`crate::classify::Scope::label`]); empty
    /// in events logged before other kinds were watched. Not an attribute.
    pub scope: Arc<str>,
    /// Which object (its resource key, where its known state belongs, is no attribute).
    pub object: ObjectRef,
    /// resourceVersion of the object in this event (the last known one for an inferred delete).
    pub rv: String,
    /// resourceVersion of this pod's previous event; empty on `added`.
    pub prev_rv: String,
    /// A delete inferred from a re-list rather than seen on the watch.
    pub inferred: bool,
    /// An `added` that comes from the initial list of a start without saved state.
    pub initial: bool,
    /// Sent in `reference` mode in place of an event too large for its sink (`too_large:
    /// reference`): the `k8struncated` extension. Set by the sink; never logged.
    pub truncated: bool,
    /// Seen on the watch (its resourceVersion is a point the watch can resume after) rather
    /// than in a list. Given by the pipeline; not an attribute.
    pub from_watch: bool,
    /// The route that emitted it (`routes:` in the config); `None`: every sink takes it.
    /// Sinks use it to pick the route's topic. Not an attribute.
    pub route: Option<std::sync::Arc<str>>,
    /// Sent in another source's shape (`compat:` on the sink or the route): its `type` and
    /// extensions beside kubecast's own. Set by the sink; never logged.
    pub compat: Option<Compat>,
    /// The JSON `data`.
    pub data: Bytes,
}

impl Event {
    /// `{namespace}/{name}`, or `{name}` for a cluster-scoped object.
    pub fn subject(&self) -> String {
        self.object.subject()
    }

    /// [`Event::scope_label`] as a shared string: the event's own, without a copy, unless it
    /// was logged before other kinds were watched.
    pub fn scope_key(&self, per_namespace: bool) -> Arc<str> {
        if self.scope.is_empty() {
            self.scope_label(per_namespace).into()
        } else {
            self.scope.clone()
        }
    }

    /// The label of the watch scope the event came from; for a Pod event logged before other
    /// kinds were watched, derived as it was then (its namespace, or `*`).
    pub fn scope_label(&self, per_namespace: bool) -> &str {
        if !self.scope.is_empty() {
            &self.scope
        } else if per_namespace {
            &self.object.namespace
        } else {
            "*"
        }
    }

    /// Every attribute but `data`, as (name, value) pairs in a fixed order, for binary mode.
    /// Booleans are `true`/`false`; `k8sinferred` appears on deletes only and `k8sinitial`
    /// on adds only. The values are borrowed from the event where they are its own strings.
    pub fn attributes(&self) -> Vec<(&'static str, Cow<'_, str>)> {
        let flag = |b: bool| Cow::Borrowed(if b { "true" } else { "false" });
        let mut out = vec![
            ("specversion", Cow::Borrowed("1.0")),
            ("id", Cow::Borrowed(self.id.as_str())),
            ("source", Cow::Borrowed(self.source.as_str())),
            (
                "type",
                Cow::Borrowed(
                    self.compat
                        .and_then(|c| c.event_type(self))
                        .unwrap_or(&self.ty),
                ),
            ),
            ("subject", Cow::Owned(self.subject())),
            ("time", Cow::Owned(self.time.to_string())),
            ("datacontenttype", Cow::Borrowed(DATA_CONTENT_TYPE)),
            ("dataschema", Cow::Borrowed(&*self.dataschema)),
            ("partitionkey", Cow::Borrowed(self.object.uid.as_str())),
            ("k8skind", Cow::Borrowed(&*self.k8s_kind)),
            ("k8sapiversion", Cow::Borrowed(&*self.api_version)),
            ("k8suid", Cow::Borrowed(self.object.uid.as_str())),
            ("k8snamespace", Cow::Borrowed(&*self.object.namespace)),
            ("k8sname", Cow::Borrowed(self.object.name.as_str())),
            ("k8srv", Cow::Borrowed(self.rv.as_str())),
            ("k8sprevrv", Cow::Borrowed(self.prev_rv.as_str())),
        ];
        if self.truncated {
            out.push(("k8struncated", flag(true)));
        }
        match self.kind {
            ChangeKind::Added => out.push(("k8sinitial", flag(self.initial))),
            ChangeKind::Deleted => out.push(("k8sinferred", flag(self.inferred))),
            ChangeKind::Modified | ChangeKind::AlertFiring | ChangeKind::AlertResolved => {}
        }
        if let Some(c) = self.compat {
            out.extend(c.extensions(self));
        }
        out
    }

    /// This event in `reference` mode, flagged `k8struncated`: what a sink with `too_large:
    /// reference` sends when the event itself is too large for it. Same id and chain.
    pub fn as_reference(&self) -> Event {
        let mut meta = serde_json::Map::new();
        if !self.object.namespace.is_empty() {
            meta.insert("namespace".into(), (*self.object.namespace).into());
        }
        meta.insert("name".into(), self.object.name.clone().into());
        meta.insert("uid".into(), self.object.uid.clone().into());
        meta.insert("resourceVersion".into(), self.rv.clone().into());
        let data = serde_json::json!({
            "apiVersion": &*self.api_version,
            "kind": &*self.k8s_kind,
            "metadata": meta,
        });
        let dataschema = ["-full:", "-summary:"]
            .iter()
            .find(|m| self.dataschema.contains(**m))
            .map(|m| self.dataschema.replacen(m, "-reference:", 1).into())
            .unwrap_or_else(|| self.dataschema.clone());
        Event {
            data: Bytes::from(data.to_string()),
            dataschema,
            truncated: true,
            ..self.clone()
        }
    }

    /// The structured-mode JSON object (`application/cloudevents+json`), data inline.
    pub fn structured_json(&self) -> Vec<u8> {
        self.structured_json_with(&[])
    }

    /// [`Event::structured_json`] with `extra` extensions (names checked by the caller not to
    /// clash with the event's own attributes).
    pub fn structured_json_with(&self, extra: &[(String, String)]) -> Vec<u8> {
        let mut attrs: std::collections::BTreeMap<&str, serde_json::Value> = self
            .attributes()
            .into_iter()
            .map(|(k, v)| {
                // Booleans are JSON booleans in structured mode.
                let v = match (k, &*v) {
                    ("k8sinitial" | "k8sinferred" | "k8struncated", "true") => {
                        serde_json::Value::Bool(true)
                    }
                    ("k8sinitial" | "k8sinferred", "false") => serde_json::Value::Bool(false),
                    _ => serde_json::Value::String(v.into_owned()),
                };
                (k, v)
            })
            .collect();
        for (k, v) in extra {
            attrs.insert(k, serde_json::Value::String(v.clone()));
        }
        // The attributes as a JSON object, then `data` spliced in as the bytes it already is:
        // the encoder produced it with serde_json, so it is valid JSON and is not parsed again.
        // Serializing a map of strings and booleans cannot fail.
        let mut out = serde_json::to_vec(&attrs).unwrap_or_else(|_| b"{}".to_vec());
        out.pop(); // the closing brace
        out.extend_from_slice(if attrs.is_empty() {
            b"\"data\":"
        } else {
            b",\"data\":"
        });
        out.extend_from_slice(if self.data.is_empty() {
            b"null"
        } else {
            &self.data
        });
        out.push(b'}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: ChangeKind) -> Event {
        Event {
            seq: 1,
            id: event_id("u1", "42", kind),
            kind,
            ty: kind.event_type().into(),
            source: "k8s://c/api/v1/namespaces/ns/pods".into(),
            time: "2026-01-01T00:00:00Z".parse().expect("a time"),
            dataschema: "urn:x".into(),
            api_version: "v1".into(),
            k8s_kind: "Pod".into(),
            scope: "*".into(),
            object: ObjectRef {
                uid: "u1".into(),
                resource: "pods".into(),
                namespace: "ns".into(),
                name: "p".into(),
            },
            rv: "42".into(),
            prev_rv: String::new(),
            inferred: false,
            initial: true,
            truncated: false,
            compat: None,
            from_watch: false,
            route: None,
            data: Bytes::from_static(br#"{"a":1}"#),
        }
    }

    #[test]
    fn ids_depend_only_on_uid_resource_version_and_kind() {
        assert_eq!(event_id("u", "7", ChangeKind::Added), "u:7:added");
        assert_eq!(event_id("u", "7", ChangeKind::Modified), "u:7:modified");
        assert_eq!(event_id("u", "7", ChangeKind::Deleted), "u:deleted");
        assert_eq!(event_id("u", "9", ChangeKind::Deleted), "u:deleted");
    }

    #[test]
    fn extension_names_follow_the_cloudevents_naming_rule() {
        for kind in [ChangeKind::Added, ChangeKind::Modified, ChangeKind::Deleted] {
            for (name, _) in sample(kind).attributes() {
                assert!(name.len() <= 20, "{name}");
                assert!(
                    name.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn structured_json_carries_every_attribute_and_the_data_inline() {
        let v: serde_json::Value =
            serde_json::from_slice(&sample(ChangeKind::Added).structured_json()).unwrap();
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["id"], "u1:42:added");
        assert_eq!(v["subject"], "ns/p");
        assert_eq!(v["k8sinitial"], true);
        assert_eq!(
            (v["k8skind"].as_str(), v["k8sapiversion"].as_str()),
            (Some("Pod"), Some("v1"))
        );
        assert_eq!(v["data"]["a"], 1);
    }

    #[test]
    fn an_event_too_large_becomes_its_flagged_reference_with_the_same_id() {
        let e = Event {
            dataschema: "urn:kubecast:schema:configmap-full:v1".into(),
            k8s_kind: "ConfigMap".into(),
            data: Bytes::from(vec![b'x'; 2_000_000]),
            ..sample(ChangeKind::Modified)
        };
        let r = e.as_reference();
        assert_eq!(
            (r.id.as_str(), r.rv.as_str()),
            (e.id.as_str(), e.rv.as_str())
        );
        assert_eq!(&*r.dataschema, "urn:kubecast:schema:configmap-reference:v1");
        let d: serde_json::Value = serde_json::from_slice(&r.data).expect("JSON");
        assert_eq!(
            (d["kind"].as_str(), d["metadata"]["uid"].as_str()),
            (Some("ConfigMap"), Some("u1"))
        );
        assert!(r.attributes().contains(&("k8struncated", "true".into())));
        let v: serde_json::Value = serde_json::from_slice(&r.structured_json()).expect("JSON");
        assert_eq!(v["k8struncated"], true);
        assert!(!e.attributes().iter().any(|(k, _)| *k == "k8struncated"));
    }

    #[test]
    fn a_cluster_scoped_object_is_its_own_subject() {
        let mut e = sample(ChangeKind::Modified);
        e.object.namespace = "".into();
        e.object.name = "node-1".into();
        assert_eq!(e.subject(), "node-1");
    }

    #[test]
    fn the_change_of_any_kind_is_read_back_from_its_type() {
        for (ty, kind) in [
            ("io.k8s.core.v1.pod.added", Some(ChangeKind::Added)),
            (
                "io.k8s.apps.v1.deployment.modified",
                Some(ChangeKind::Modified),
            ),
            (
                "io.k8s.example.com.v1.widget.deleted",
                Some(ChangeKind::Deleted),
            ),
            ("io.kubecast.alert.firing", Some(ChangeKind::AlertFiring)),
            ("io.k8s.core.v1.pod.touched", None),
            ("com.example.deleted", None),
        ] {
            assert_eq!(ChangeKind::of_type(ty), kind, "{ty}");
        }
    }
}
