//! Building an [`Event`] from a classified change of any kind: attributes, and `data` in the
//! configured mode (full with redactions, the kind's summary, or reference).

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{Event, event_id};
use crate::classify::Change;
use crate::kinds::{self, Resource};
use crate::model::ObjectRef;
use crate::redact::{RedactConfig, Shape, shape_of};
use crate::vocab::DataMode;

/// Pods' schema URNs; the files are `schemas/pod-{full,summary,reference}.v1.json`. Other
/// kinds' follow the same pattern ([`Resource::schema_urn`]).
pub const SCHEMA_FULL: &str = "urn:kubecast:schema:pod-full:v1";
pub const SCHEMA_SUMMARY: &str = "urn:kubecast:schema:pod-summary:v1";
pub const SCHEMA_REFERENCE: &str = "urn:kubecast:schema:pod-reference:v1";
/// The schema of an alert event's data (`schemas/alert.v1.json`).
pub const SCHEMA_ALERT: &str = "urn:kubecast:schema:alert:v1";

/// Why an object could not be encoded in the configured mode; the encoder then falls back
/// to reference data so the change itself is not lost.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("{resource} {subject} (uid {uid}): the object is not a JSON object: {reason}")]
    NotAnObject {
        resource: String,
        subject: String,
        uid: String,
        reason: String,
    },
}

/// Turns changes into events. Entry point: [`Encoder::encode`].
#[derive(Debug)]
pub struct Encoder {
    cluster: String,
    mode: DataMode,
    redact: RedactConfig,
}

impl Encoder {
    pub fn new(cluster: &str, mode: DataMode, redact: RedactConfig) -> Encoder {
        Encoder {
            cluster: cluster.to_string(),
            mode,
            redact,
        }
    }

    /// Encodes `change`. The second value is set when the object could not be encoded in the
    /// configured mode and reference data was used instead. The event's `seq` is 0: its
    /// place in the stream is given by the pipeline (`pipeline::durable`).
    pub fn encode(&self, change: &Change) -> (Event, Option<EncodeError>) {
        self.encode_as(change, self.mode)
    }

    /// Encodes `change` with data in `mode` (a route's own), observed now.
    pub fn encode_as(&self, change: &Change, mode: DataMode) -> (Event, Option<EncodeError>) {
        self.encode_at(change, mode, jiff::Timestamp::now())
    }

    /// Encodes `change` with data in `mode`, observed at `observed` (the event's `time`).
    pub fn encode_at(
        &self,
        change: &Change,
        mode: DataMode,
        observed: jiff::Timestamp,
    ) -> (Event, Option<EncodeError>) {
        let r = &*change.resource;
        // An inferred delete has no object: it was gone when the re-list ran.
        let (data, mode, error) = match (&change.object, mode) {
            (Some(obj), DataMode::Full) => match self.full(r, obj) {
                Ok(d) => (d, "full", None),
                Err(reason) => (
                    reference(change),
                    "reference",
                    Some(not_object(change, reason)),
                ),
            },
            (Some(obj), DataMode::Summary) => match kinds::of(r).summary_from_slice(obj, r) {
                Some(summary) => (
                    Bytes::from(self.summary_redacted(r, summary)),
                    "summary",
                    None,
                ),
                None => self.summary_of_value(change, obj),
            },
            _ => (reference(change), "reference", None),
        };
        let event = Event {
            seq: 0,
            id: event_id(&change.uid, &change.rv, change.kind),
            kind: change.kind,
            ty: r.event_type(change.kind),
            source: r.source(&self.cluster, &change.namespace),
            time: observed,
            dataschema: r.schema_urn(mode),
            api_version: r.api_version().clone(),
            k8s_kind: r.kind_name().clone(),
            scope: change.scope.clone(),
            object: ObjectRef {
                uid: change.uid.clone(),
                resource: r.key().clone(),
                namespace: change.namespace.as_str().into(),
                name: change.name.clone(),
            },
            rv: change.rv.clone(),
            prev_rv: change.prev_rv.clone(),
            inferred: change.inferred,
            initial: change.initial,
            truncated: false,
            compat: None,
            from_watch: false,
            route: None,
            data,
        };
        (event, error)
    }

    /// The configured cluster name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The default data mode (`encoding.data`).
    pub fn mode(&self) -> DataMode {
        self.mode
    }

    /// The summary of an object parsed whole (kinds without a path of their own).
    fn summary_of_value(
        &self,
        change: &Change,
        obj: &[u8],
    ) -> (Bytes, &'static str, Option<EncodeError>) {
        let r = &*change.resource;
        match serde_json::from_slice::<Value>(obj) {
            Ok(v) if v.is_object() => (
                Bytes::from(
                    self.summary_redacted(r, kinds::of(r).summary(&v, r).to_string().into_bytes()),
                ),
                "summary",
                None,
            ),
            Ok(_) => (
                reference(change),
                "reference",
                Some(not_object(change, "not an object".into())),
            ),
            Err(e) => (
                reference(change),
                "reference",
                Some(not_object(change, e.to_string())),
            ),
        }
    }

    fn full(&self, r: &Resource, obj: &[u8]) -> Result<Bytes, String> {
        crate::redact::full_data(obj, &self.redact, shape_of(r), r.api_version(), &r.kind)
            .map(Bytes::from)
    }

    /// A summary with the configured labels redacted (a summary carries the object's labels,
    /// and nothing else that is redacted).
    fn summary_redacted(&self, r: &Resource, summary: Vec<u8>) -> Vec<u8> {
        if self.redact.labels.is_empty() {
            return summary;
        }
        // A summary is always an object; were it not, nothing of it is sent.
        crate::redact::full_data(
            &summary,
            &self.redact,
            Shape::default(),
            r.api_version(),
            &r.kind,
        )
        .unwrap_or_else(|_| crate::redact::REDACTED_JSON.to_vec())
    }
}

fn not_object(change: &Change, reason: String) -> EncodeError {
    EncodeError::NotAnObject {
        resource: change.resource.to_string(),
        subject: if change.namespace.is_empty() {
            change.name.clone()
        } else {
            format!("{}/{}", change.namespace, change.name)
        },
        uid: change.uid.clone(),
        reason,
    }
}

/// The reference data: the object's identity, nothing else (ApiServerSource's Reference
/// mode has the same facts).
pub(crate) fn reference(change: &Change) -> Bytes {
    let mut meta = Map::new();
    if !change.namespace.is_empty() {
        meta.insert("namespace".into(), json!(change.namespace));
    }
    meta.insert("name".into(), json!(change.name));
    meta.insert("uid".into(), json!(change.uid));
    meta.insert("resourceVersion".into(), json!(change.rv));
    let v = json!({
        "apiVersion": &**change.resource.api_version(),
        "kind": change.resource.kind,
        "metadata": meta,
    });
    Bytes::from(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;
    use std::sync::Arc;

    const REDACTED: &str = "<redacted>";

    fn change(kind: ChangeKind, object: Option<Value>) -> Change {
        Change {
            kind,
            resource: Resource::pods(),
            scope: "*".into(),
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "p".into(),
            rv: "5".into(),
            prev_rv: "4".into(),
            inferred: object.is_none(),
            initial: false,
            object: object.map(|o| Bytes::from(o.to_string())),
        }
    }

    fn pod() -> Value {
        json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "5",
                "managedFields": [{"manager": "x"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{secret}", "keep": "me"},
                "labels": {"app": "web"}
            },
            "spec": {
                "containers": [{"name": "c", "env": [{"name": "TOKEN", "value": "hunter2"},
                    {"name": "FROM", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
                "initContainers": [{"name": "i", "env": [{"name": "X", "value": "y"}]}]
            },
            "status": {"phase": "Pending"}
        })
    }

    fn data(e: &Event) -> Value {
        serde_json::from_slice(&e.data).unwrap()
    }

    #[test]
    fn full_data_drops_managed_fields_and_redacts_env_values_and_last_applied() {
        let enc = Encoder::new("c", DataMode::Full, RedactConfig::default());
        let (e, err) = enc.encode(&change(ChangeKind::Modified, Some(pod())));
        assert!(err.is_none());
        let d = data(&e);
        assert!(d["metadata"].get("managedFields").is_none());
        assert_eq!(
            d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            REDACTED
        );
        assert_eq!(d["metadata"]["annotations"]["keep"], "me");
        assert_eq!(d["spec"]["containers"][0]["env"][0]["value"], REDACTED);
        assert_eq!(
            d["spec"]["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["key"],
            "k"
        );
        assert_eq!(d["spec"]["initContainers"][0]["env"][0]["value"], REDACTED);
        assert_eq!(d["kind"], "Pod");
        assert_eq!(&*e.dataschema, SCHEMA_FULL);
        assert_eq!(e.id, "u1:5:modified");
        assert_eq!(e.source, "k8s://c/api/v1/namespaces/ns/pods");
    }

    #[test]
    fn redaction_can_be_turned_off() {
        let redact = RedactConfig {
            env_values: false,
            annotations: vec![],
            labels: vec![],
        };
        let enc = Encoder::new("c", DataMode::Full, redact);
        let (e, _) = enc.encode(&change(ChangeKind::Modified, Some(pod())));
        assert_eq!(
            data(&e)["spec"]["containers"][0]["env"][0]["value"],
            "hunter2"
        );
    }

    #[test]
    fn an_inferred_delete_carries_reference_data() {
        let enc = Encoder::new("c", DataMode::Full, RedactConfig::default());
        let (e, err) = enc.encode(&change(ChangeKind::Deleted, None));
        assert!(err.is_none());
        assert_eq!(&*e.dataschema, SCHEMA_REFERENCE);
        assert_eq!(data(&e)["metadata"]["uid"], "u1");
        assert_eq!(e.id, "u1:deleted");
    }

    #[test]
    fn an_object_that_is_not_json_falls_back_to_reference_data_with_an_error() {
        let enc = Encoder::new("c", DataMode::Full, RedactConfig::default());
        let mut c = change(ChangeKind::Added, None);
        c.object = Some(Bytes::from_static(b"[1"));
        let (e, err) = enc.encode(&c);
        assert_eq!(&*e.dataschema, SCHEMA_REFERENCE);
        assert!(err.unwrap().to_string().contains("ns/p"));
    }

    #[test]
    fn reference_mode_carries_the_identity_only() {
        let enc = Encoder::new("c", DataMode::Reference, RedactConfig::default());
        let a = enc.encode(&change(ChangeKind::Added, Some(pod()))).0;
        assert_eq!(&*a.dataschema, SCHEMA_REFERENCE);
        assert!(data(&a).get("spec").is_none(), "{:?}", data(&a));
    }

    #[test]
    fn a_cluster_scoped_object_gets_its_kinds_type_source_schema_and_summary() {
        let node = Arc::new(Resource::new("", "v1", "Node", "nodes", false));
        let enc = Encoder::new("prod", DataMode::Summary, RedactConfig::default());
        let c = Change {
            resource: node,
            scope: "nodes/*".into(),
            namespace: String::new(),
            name: "n1".into(),
            ..change(
                ChangeKind::Modified,
                Some(json!({"metadata": {"name": "n1"},
                "status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
            )
        };
        let (e, err) = enc.encode(&c);
        assert!(err.is_none());
        assert_eq!(&*e.ty, "io.k8s.core.v1.node.modified");
        assert_eq!(e.source, "k8s://prod/api/v1/nodes");
        assert_eq!(e.subject(), "n1");
        assert_eq!(&*e.dataschema, "urn:kubecast:schema:node-summary:v1");
        assert_eq!((&*e.k8s_kind, &*e.api_version), ("Node", "v1"));
        assert_eq!(data(&e)["conditions"][0]["status"], "False");
        let (r, _) = enc.encode_as(&Change { object: None, ..c }, DataMode::Full);
        assert_eq!(&*r.dataschema, "urn:kubecast:schema:node-reference:v1");
        assert!(data(&r)["metadata"].get("namespace").is_none());
        assert_eq!(data(&r)["kind"], "Node");
    }
}
