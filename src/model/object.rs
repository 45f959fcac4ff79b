//! Which object a change is about ([`ObjectRef`]) and an object as known at one
//! resourceVersion ([`KnownObject`]): the identity every stage shares.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::legacy;

/// Which object: its resource, namespace, name and uid. A uid alone names an object within
/// one cluster; the rest say where it lives and what to call it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub uid: String,
    /// Its resource's key (`pods`, `deployments.apps`); state written before other kinds were
    /// watched has none and holds Pods ([`legacy::pods`]).
    #[serde(default = "legacy::pods_key")]
    pub resource: Arc<str>,
    /// Empty for a cluster-scoped object.
    pub namespace: Arc<str>,
    pub name: String,
}

/// An object's identity, borrowed: what a stage passes on without copying its strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectKey<'a> {
    pub uid: &'a str,
    /// Its resource's key (`pods`, `deployments.apps`).
    pub resource: &'a str,
    /// Empty for a cluster-scoped object.
    pub namespace: &'a str,
    pub name: &'a str,
}

/// An object as known at one resourceVersion: what the classifier keeps per object, what the
/// snapshot and the exactly-once checkpoint store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownObject {
    #[serde(flatten)]
    pub object: ObjectRef,
    pub rv: String,
}

impl ObjectRef {
    /// Its identity, borrowed.
    pub fn key(&self) -> ObjectKey<'_> {
        ObjectKey {
            uid: &self.uid,
            resource: &self.resource,
            namespace: &self.namespace,
            name: &self.name,
        }
    }

    /// `{namespace}/{name}`, or `{name}` for a cluster-scoped object.
    pub fn subject(&self) -> String {
        subject(&self.namespace, &self.name)
    }

    /// The resource as a record stores it: empty for Pods ([`legacy::stored_resource`]).
    pub fn stored_resource(&self) -> &str {
        legacy::stored_resource(&self.resource)
    }
}

/// `{namespace}/{name}`, or `{name}` for a cluster-scoped object.
pub fn subject(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_object_reads_and_writes_the_flat_fields_the_snapshot_always_had() {
        let old = r#"{"uid":"u","namespace":"ns","name":"a","rv":"7"}"#;
        let k: KnownObject = serde_json::from_str(old).expect("an old snapshot entry");
        assert_eq!(
            &*k.object.resource, "pods",
            "entries before other kinds are Pods'"
        );
        let back = serde_json::to_value(&k).expect("serializes");
        assert_eq!(
            back,
            serde_json::json!({"uid": "u", "resource": "pods", "namespace": "ns", "name": "a", "rv": "7"})
        );
        assert_eq!(k.object.subject(), "ns/a");
    }
}
