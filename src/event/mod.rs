//! The CloudEvent that kubecast publishes: its attributes per the event contract (README,
//! "Event contract") and its two wire shapes, binary attributes and structured JSON.
//!
//! Entry points: [`Encoder::encode`] builds an [`Event`] from a classified change;
//! [`Event::attributes`] lists the attributes for binary bindings (Kafka `ce_` headers, MQTT 5
//! user properties); [`Event::structured_json`] is the `application/cloudevents+json` form.

mod alert;
mod encode;
mod redact;
#[cfg(test)]
mod redact_proptests;
mod summary;

pub use alert::alert_event;
pub use encode::{
    EncodeError, Encoder, SCHEMA_ALERT, SCHEMA_FULL, SCHEMA_REFERENCE, SCHEMA_SUMMARY,
};

use bytes::Bytes;

/// The kind of a change, which picks the CloudEvents `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// An alert rule began to hold for the pod (after its `for`).
    AlertFiring,
    /// A firing alert stopped holding, or its pod was deleted.
    AlertResolved,
}

impl ChangeKind {
    /// The CloudEvents `type`.
    pub fn event_type(self) -> &'static str {
        match self {
            ChangeKind::Added => "io.k8s.core.v1.pod.added",
            ChangeKind::Modified => "io.k8s.core.v1.pod.modified",
            ChangeKind::Deleted => "io.k8s.core.v1.pod.deleted",
            ChangeKind::AlertFiring => "io.kubecast.alert.firing",
            ChangeKind::AlertResolved => "io.kubecast.alert.resolved",
        }
    }

    /// Every kind, in the order above.
    pub const ALL: [ChangeKind; 5] = [
        ChangeKind::Added,
        ChangeKind::Modified,
        ChangeKind::Deleted,
        ChangeKind::AlertFiring,
        ChangeKind::AlertResolved,
    ];

    /// The kind whose CloudEvents `type` is `ty` (the inverse of [`ChangeKind::event_type`]).
    pub fn of_type(ty: &str) -> Option<ChangeKind> {
        ChangeKind::ALL.into_iter().find(|k| k.event_type() == ty)
    }

    /// The word used in ids.
    pub fn word(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::AlertFiring => "alert.firing",
            ChangeKind::AlertResolved => "alert.resolved",
        }
    }

    /// Whether this is an alert event rather than a change of the pod.
    pub fn is_alert(self) -> bool {
        matches!(self, ChangeKind::AlertFiring | ChangeKind::AlertResolved)
    }
}

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
    /// `k8s://{cluster}/api/v1/namespaces/{namespace}/pods`.
    pub source: String,
    /// RFC 3339 time at which kubecast observed the change.
    pub time: String,
    /// URN of the JSON Schema that `data` follows.
    pub dataschema: &'static str,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// resourceVersion of the object in this event (the last known one for an inferred delete).
    pub rv: String,
    /// resourceVersion of this pod's previous event; empty on `added`.
    pub prev_rv: String,
    /// A delete inferred from a re-list rather than seen on the watch.
    pub inferred: bool,
    /// An `added` that comes from the initial list of a start without saved state.
    pub initial: bool,
    /// Seen on the watch (its resourceVersion is a point the watch can resume after) rather
    /// than in a list. Given by the pipeline; not an attribute.
    pub from_watch: bool,
    /// The route that emitted it (`routes:` in the config); `None`: every sink takes it.
    /// Sinks use it to pick the route's topic. Not an attribute.
    pub route: Option<std::sync::Arc<str>>,
    /// The JSON `data`.
    pub data: Bytes,
}

impl Event {
    /// `{namespace}/{name}`.
    pub fn subject(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Every attribute but `data`, as (name, value) pairs in a fixed order, for binary mode.
    /// Booleans are `true`/`false`; `k8sinferred` appears on deletes only and `k8sinitial`
    /// on adds only.
    pub fn attributes(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("specversion", "1.0".to_string()),
            ("id", self.id.clone()),
            ("source", self.source.clone()),
            ("type", self.kind.event_type().to_string()),
            ("subject", self.subject()),
            ("time", self.time.clone()),
            ("datacontenttype", DATA_CONTENT_TYPE.to_string()),
            ("dataschema", self.dataschema.to_string()),
            ("partitionkey", self.uid.clone()),
            ("k8suid", self.uid.clone()),
            ("k8snamespace", self.namespace.clone()),
            ("k8sname", self.name.clone()),
            ("k8srv", self.rv.clone()),
            ("k8sprevrv", self.prev_rv.clone()),
        ];
        match self.kind {
            ChangeKind::Added => out.push(("k8sinitial", self.initial.to_string())),
            ChangeKind::Deleted => out.push(("k8sinferred", self.inferred.to_string())),
            ChangeKind::Modified | ChangeKind::AlertFiring | ChangeKind::AlertResolved => {}
        }
        out
    }

    /// The structured-mode JSON object (`application/cloudevents+json`), data inline.
    pub fn structured_json(&self) -> Vec<u8> {
        let attrs: std::collections::BTreeMap<&'static str, serde_json::Value> = self
            .attributes()
            .into_iter()
            .map(|(k, v)| {
                // Booleans are JSON booleans in structured mode.
                let v = match (k, v.as_str()) {
                    ("k8sinitial" | "k8sinferred", "true") => serde_json::Value::Bool(true),
                    ("k8sinitial" | "k8sinferred", "false") => serde_json::Value::Bool(false),
                    _ => serde_json::Value::String(v),
                };
                (k, v)
            })
            .collect();
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
            source: "k8s://c/api/v1/namespaces/ns/pods".into(),
            time: "2026-01-01T00:00:00Z".into(),
            dataschema: "urn:x",
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "p".into(),
            rv: "42".into(),
            prev_rv: String::new(),
            inferred: false,
            initial: true,
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
        assert_eq!(v["data"]["a"], 1);
    }
}
