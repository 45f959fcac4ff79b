//! Building an [`Event`] from a classified change: attributes, and `data` in the configured
//! mode (full with redactions, summary, or reference).

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Event, event_id, summary};
use crate::classify::Change;
use crate::config::{DataMode, RedactConfig};

/// Schema URNs; the files are `schemas/pod-{full,summary,reference}.v1.json`.
pub const SCHEMA_FULL: &str = "urn:kubecast:schema:pod-full:v1";
pub const SCHEMA_SUMMARY: &str = "urn:kubecast:schema:pod-summary:v1";
pub const SCHEMA_REFERENCE: &str = "urn:kubecast:schema:pod-reference:v1";
/// The schema of an alert event's data (`schemas/alert.v1.json`).
pub const SCHEMA_ALERT: &str = "urn:kubecast:schema:alert:v1";

/// Why an object could not be encoded in the configured mode; the encoder then falls back
/// to reference data so the change itself is not lost.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("pod {namespace}/{name} (uid {uid}): the object is not a JSON object: {reason}")]
    NotAnObject {
        namespace: String,
        name: String,
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

    /// Encodes `change` with data in `mode` (a route's own).
    pub fn encode_as(&self, change: &Change, mode: DataMode) -> (Event, Option<EncodeError>) {
        // An inferred delete has no object: the pod was gone when the re-list ran.
        let (data, dataschema, error) = match (&change.object, mode) {
            (Some(obj), DataMode::Full) => match self.full(obj) {
                Ok(d) => (d, SCHEMA_FULL, None),
                Err(reason) => (
                    reference(change),
                    SCHEMA_REFERENCE,
                    Some(not_object(change, reason)),
                ),
            },
            (Some(obj), DataMode::Summary) => match serde_json::from_slice::<Value>(obj) {
                Ok(v) => (summary::of(&v), SCHEMA_SUMMARY, None),
                Err(e) => (
                    reference(change),
                    SCHEMA_REFERENCE,
                    Some(not_object(change, e.to_string())),
                ),
            },
            _ => (reference(change), SCHEMA_REFERENCE, None),
        };
        let event = Event {
            seq: 0,
            id: event_id(&change.uid, &change.rv, change.kind),
            kind: change.kind,
            source: format!(
                "k8s://{}/api/v1/namespaces/{}/pods",
                self.cluster, change.namespace
            ),
            time: jiff::Timestamp::now().to_string(),
            dataschema,
            uid: change.uid.clone(),
            namespace: change.namespace.clone(),
            name: change.name.clone(),
            rv: change.rv.clone(),
            prev_rv: change.prev_rv.clone(),
            inferred: change.inferred,
            initial: change.initial,
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

    fn full(&self, obj: &[u8]) -> Result<Bytes, String> {
        super::redact::full_data(obj, &self.redact).map(Bytes::from)
    }
}

fn not_object(change: &Change, reason: String) -> EncodeError {
    EncodeError::NotAnObject {
        namespace: change.namespace.clone(),
        name: change.name.clone(),
        uid: change.uid.clone(),
        reason,
    }
}

/// The reference data: the pod's identity, nothing else.
fn reference(change: &Change) -> Bytes {
    let v = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": change.namespace,
            "name": change.name,
            "uid": change.uid,
            "resourceVersion": change.rv,
        }
    });
    Bytes::from(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ChangeKind;

    const REDACTED: &str = "<redacted>";

    fn change(kind: ChangeKind, object: Option<Value>) -> Change {
        Change {
            kind,
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
        assert_eq!(e.dataschema, SCHEMA_FULL);
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
        assert_eq!(e.dataschema, SCHEMA_REFERENCE);
        assert_eq!(data(&e)["metadata"]["uid"], "u1");
        assert_eq!(e.id, "u1:deleted");
    }

    #[test]
    fn an_object_that_is_not_json_falls_back_to_reference_data_with_an_error() {
        let enc = Encoder::new("c", DataMode::Full, RedactConfig::default());
        let mut c = change(ChangeKind::Added, None);
        c.object = Some(Bytes::from_static(b"[1"));
        let (e, err) = enc.encode(&c);
        assert_eq!(e.dataschema, SCHEMA_REFERENCE);
        assert!(err.unwrap().to_string().contains("ns/p"));
    }

    #[test]
    fn reference_mode_carries_the_identity_only() {
        let enc = Encoder::new("c", DataMode::Reference, RedactConfig::default());
        let a = enc.encode(&change(ChangeKind::Added, Some(pod()))).0;
        assert_eq!(a.dataschema, SCHEMA_REFERENCE);
        assert!(data(&a).get("spec").is_none(), "{:?}", data(&a));
    }
}
