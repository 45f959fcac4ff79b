//! What the watch delivers and where: an [`Object`] (identity and JSON bytes of any kind) and
//! the [`Scope`] of one watch (a resource in one namespace, or in all of them).

use std::sync::Arc;

use bytes::Bytes;

use crate::kinds::Resource;

/// An object as the watch delivers it: its identity and its JSON bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub uid: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
    pub rv: String,
    /// The object's JSON as the apiserver sent it.
    pub bytes: Bytes,
}

/// The part of the cluster one watch covers: one resource, in one namespace or in all of
/// them (`namespace: None`, always for a cluster-scoped resource).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub resource: Arc<Resource>,
    pub namespace: Option<Arc<str>>,
    /// See [`Scope::label`].
    label: Arc<str>,
}

impl Scope {
    pub fn new(resource: Arc<Resource>, namespace: Option<&str>) -> Scope {
        let namespace: Option<Arc<str>> = namespace.filter(|_| resource.namespaced).map(Arc::from);
        let ns = namespace.as_deref().unwrap_or("*");
        // Pods keep the labels they had before other kinds were watched, so state written
        // then (positions in snapshots, logs and checkpoints) is read as it is.
        let label: Arc<str> = if resource.is_pod() {
            ns.into()
        } else {
            format!("{}/{ns}", resource.key()).into()
        };
        Scope {
            resource,
            namespace,
            label,
        }
    }

    /// Pods in all namespaces: the watch of a config without `watch.resources`.
    pub fn all_pods() -> Scope {
        Scope::new(Resource::pods(), None)
    }

    /// `*` or the namespace for Pods; `deployments.apps/*`, `nodes/*`,
    /// `widgets.example.com/shop` for the rest: the scope's name in metrics, readiness, the
    /// durable positions and the exactly-once checkpoint.
    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// The label as the durable log and snapshot store it: `None` for Pods in all
    /// namespaces (as before), else the label.
    pub fn stored(&self) -> Option<String> {
        (&*self.label != "*").then(|| self.label.to_string())
    }

    /// Whether an object of `namespace` of this scope's resource belongs to this scope.
    pub fn holds(&self, resource: &str, namespace: &str) -> bool {
        **self.resource.key() == *resource
            && self.namespace.as_deref().is_none_or(|s| s == namespace)
    }

    /// `pods in namespace shop`, `nodes`, `deployments.apps in all namespaces`, for messages.
    pub fn describe(&self) -> String {
        match (&self.namespace, self.resource.namespaced) {
            (Some(ns), _) => format!("{} in namespace {ns}", self.resource),
            (None, true) => format!("{} in all namespaces", self.resource),
            (None, false) => self.resource.to_string(),
        }
    }
}

/// The scope label of a stored position (`None`: Pods in all namespaces).
pub fn label_of_stored(stored: Option<&str>) -> &str {
    stored.unwrap_or("*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_scopes_keep_their_old_labels_and_others_name_their_resource() {
        assert_eq!(&**Scope::all_pods().label(), "*");
        assert_eq!(Scope::all_pods().stored(), None);
        let shop = Scope::new(Resource::pods(), Some("shop"));
        assert_eq!(
            (&**shop.label(), shop.stored().as_deref()),
            ("shop", Some("shop"))
        );
        let d = Arc::new(Resource::new(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
        ));
        assert_eq!(&**Scope::new(d.clone(), None).label(), "deployments.apps/*");
        assert_eq!(
            &**Scope::new(d, Some("shop")).label(),
            "deployments.apps/shop"
        );
        let nodes = Arc::new(Resource::new("", "v1", "Node", "nodes", false));
        let s = Scope::new(nodes, Some("shop"));
        assert_eq!((s.namespace.clone(), &**s.label()), (None, "nodes/*"));
        assert_eq!(s.describe(), "nodes");
    }
}
