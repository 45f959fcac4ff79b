//! What kubecast knows of particular kinds, kept out of the pipeline: each kind's `summary`
//! data and whether its `data` is secret. Pod specs are found by their shape wherever they sit
//! (`redact`), so no kind needs to say where its pod templates are. The watch, classifier, store,
//! sinks and replay know no kind; they carry a [`Resource`].
//!
//! Entry points: [`Resource`] (a served resource and the contract derived from it),
//! [`of`] (the extras of a resource's kind), [`resolve`] (kubectl's names to resources) and
//! [`discovery`] (asking the apiserver what it serves). Supporting a new kind's extras is one
//! file with a [`Kind`] and one line in [`of`].

pub mod aspects;
pub mod discovery;
mod event;
mod generic;
mod node;
mod pod;
mod pod_aspects;
mod pod_shell;
pub mod resolve;
mod resource;
pub mod schema;
mod workload;

pub use resource::{Resource, names_answer};

use serde_json::{Value, json};

/// The extras of one kind.
pub trait Kind: Sync {
    /// The `summary` data of an object of this kind.
    fn summary(&self, obj: &Value, r: &Resource) -> Value;

    /// The `summary` data's JSON straight from an object's JSON, reading only what the
    /// summary needs: the same bytes as parsing it and [`Kind::summary`]. `None` when the kind has no such
    /// path or the JSON does not have the expected shape: then the object is parsed whole
    /// (and refused there if it is not one).
    fn summary_from_slice(&self, _obj: &[u8], _r: &Resource) -> Option<Vec<u8>> {
        None
    }

    /// Whether `data` and `stringData` hold secrets (every value is redacted).
    fn secret_data(&self) -> bool {
        false
    }

    /// The member of an alert's `data` that names the object alerted on (its namespace,
    /// name and uid), for the kinds whose alerts always had one (`pod`).
    fn alert_member(&self) -> Option<&'static str> {
        None
    }
}

/// Every kind's own aspects for route predicates (a Pod's phase, readiness, ...).
pub fn own_aspects() -> impl Iterator<Item = &'static aspects::KindAspect> {
    pod_aspects::ASPECTS.iter()
}

/// The kind aspect called `name`, if any kind has one.
pub fn own_aspect(name: &str) -> Option<&'static aspects::KindAspect> {
    own_aspects().find(|a| a.name == name)
}

/// The extras of `resource`'s kind: a built-in's own, or the generic ones.
pub fn of(resource: &Resource) -> &'static dyn Kind {
    match (resource.group.as_str(), resource.kind.as_str()) {
        ("", "Pod") => &pod::Pod,
        ("", "Node") => &node::Node,
        ("", "Event") => &event::CoreEvent,
        ("", "Secret") => &generic::Secret,
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => &workload::Workload,
        ("batch", "Job") => &workload::Job,
        ("batch", "CronJob") => &workload::CronJob,
        _ => &generic::Generic,
    }
}

/// The identity every summary starts with: apiVersion, kind and the object's metadata
/// (namespace, name, uid, resourceVersion, labels, deletionTimestamp), with its controlling
/// owner.
pub(crate) fn identity(obj: &Value, r: &Resource) -> serde_json::Map<String, Value> {
    let meta = &obj["metadata"];
    let mut m = serde_json::Map::new();
    m.insert("apiVersion".into(), json!(&**r.api_version()));
    m.insert("kind".into(), json!(r.kind));
    m.insert("metadata".into(), metadata(meta));
    m.insert("owner".into(), owner(meta));
    m
}

/// A summary's `metadata`: namespace, name, uid, resourceVersion, labels (`{}` when none) and
/// deletionTimestamp.
pub(crate) fn metadata(meta: &Value) -> Value {
    json!({
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
        "labels": if meta["labels"].is_object() { meta["labels"].clone() } else { json!({}) },
        "deletionTimestamp": meta["deletionTimestamp"],
    })
}

/// The controlling owner reference (or the first one), as apiVersion, kind, name and uid.
pub(crate) fn owner(meta: &Value) -> Value {
    meta["ownerReferences"]
        .as_array()
        .and_then(|owners| {
            owners
                .iter()
                .find(|o| o["controller"].as_bool() == Some(true))
                .or(owners.first())
        })
        .map(|o| json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["name"], "uid": o["uid"]}))
        .unwrap_or(Value::Null)
}

/// `status.conditions` as type, status, reason, message and lastTransitionTime.
pub(crate) fn conditions(status: &Value) -> Value {
    Value::Array(
        status["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        json!({"type": c["type"], "status": c["status"], "reason": c["reason"],
                            "message": c["message"], "lastTransitionTime": c["lastTransitionTime"]})
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_have_their_own_extras_and_the_rest_the_generic_ones() {
        let r = |g: &str, k: &str| Resource::new(g, "v1", k, "x", true);
        assert!(of(&r("", "Secret")).secret_data());
        assert!(!of(&r("", "ConfigMap")).secret_data());
        // A kind named like a built-in in another group is not that built-in.
        assert!(!of(&r("example.com", "Secret")).secret_data());
    }
}
