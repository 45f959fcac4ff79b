//! A resource kubecast watches, as discovery resolved it: group, version, kind, plural and
//! scope, with what the event contract derives from them (type, source, schema URNs).
//! Entry point: [`Resource`]; shared as `Arc<Resource>` by watches, changes and events.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::model::ChangeKind;

/// The data modes, in the order of [`Resource::schemas`].
const MODES: [&str; 3] = ["full", "summary", "reference"];

/// One served resource (`deployments` in `apps/v1`, `pods` in `v1`).
#[derive(Debug)]
pub struct Resource {
    /// API group; empty for the legacy core group.
    pub group: String,
    pub version: String,
    /// `Deployment`.
    pub kind: String,
    /// `deployments`: the name in the URL path.
    pub plural: String,
    /// `deployment`, and the short names (`deploy`), as discovery gave them.
    pub singular: String,
    pub short_names: Vec<String>,
    /// Whether objects live in namespaces (Pods) or in the cluster (Nodes).
    pub namespaced: bool,
    /// `deployments.apps` (`pods` for core): the resource's identity across versions, in the
    /// known state, positions and logs.
    key: Arc<str>,
    /// `apps/v1` or `v1`: the `k8sapiversion` extension.
    api_version: Arc<str>,
    /// `Deployment`: the `k8skind` extension.
    kind_arc: Arc<str>,
    /// The three change types, `io.k8s.apps.v1.deployment.added` and so on.
    types: [Arc<str>; 3],
    /// The schema URNs of the `full`, `summary` and `reference` data modes.
    schemas: [Arc<str>; 3],
}

impl Resource {
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        let key: Arc<str> = if group.is_empty() {
            plural.into()
        } else {
            format!("{plural}.{group}").into()
        };
        let api_version: Arc<str> = if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}").into()
        };
        let type_group = if group.is_empty() { "core" } else { group };
        let lower = kind.to_ascii_lowercase();
        let ty = |word: &str| -> Arc<str> {
            format!("io.k8s.{type_group}.{version}.{lower}.{word}").into()
        };
        let mut r = Resource {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
            singular: kind.to_ascii_lowercase(),
            short_names: Vec::new(),
            namespaced,
            key,
            api_version,
            kind_arc: kind.into(),
            types: [ty("added"), ty("modified"), ty("deleted")],
            schemas: ["".into(), "".into(), "".into()],
        };
        let name = r.schema_name();
        r.schemas = MODES.map(|mode| format!("urn:kubecast:schema:{name}-{mode}:v1").into());
        r
    }

    /// `pods` in `v1`: what kubecast watches without `watch.resources`.
    pub fn pods() -> Arc<Resource> {
        Arc::new(
            Resource::new("", "v1", "Pod", "pods", true).with_names("pod", &["po".to_string()]),
        )
    }

    /// The same, answering to `singular` and `short_names` too.
    pub fn with_names(mut self, singular: &str, short_names: &[String]) -> Resource {
        if !singular.is_empty() {
            self.singular = singular.to_string();
        }
        self.short_names = short_names.to_vec();
        self
    }

    /// Whether `name` names this resource as kubectl reads it: plural, singular, kind or a
    /// short name, case-insensitively, optionally followed by `.{version}.{group}` or
    /// `.{group}` of this resource.
    pub fn answers_to(&self, name: &str) -> bool {
        let names = [self.plural.as_str(), &self.singular, &self.kind];
        let short = self.short_names.iter().map(String::as_str);
        names_answer(
            name,
            &self.group,
            &self.version,
            names.into_iter().chain(short),
        )
    }

    /// `deployments.apps`, or `pods` for the core group.
    pub fn key(&self) -> &Arc<str> {
        &self.key
    }

    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> &Arc<str> {
        &self.api_version
    }

    /// The kind, `Deployment`.
    pub fn kind_name(&self) -> &Arc<str> {
        &self.kind_arc
    }

    /// Whether this is core/v1 Pods (whose Pod-only aspects and alert rules apply).
    pub fn is_pod(&self) -> bool {
        self.group.is_empty() && self.plural == "pods"
    }

    /// The CloudEvents `type` of a change of this resource; alerts keep their own types.
    pub fn event_type(&self, kind: ChangeKind) -> Arc<str> {
        match kind {
            ChangeKind::Added => self.types[0].clone(),
            ChangeKind::Modified => self.types[1].clone(),
            ChangeKind::Deleted => self.types[2].clone(),
            ChangeKind::AlertFiring | ChangeKind::AlertResolved => kind.event_type().into(),
        }
    }

    /// The collection's API path: `/api/v1/namespaces/{ns}/pods`, `/apis/apps/v1/deployments`,
    /// `/api/v1/nodes`. `namespace` is ignored for a cluster-scoped resource.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("{base}/namespaces/{ns}/{}", self.plural),
            None => format!("{base}/{}", self.plural),
        }
    }

    /// The event `source`: `k8s://{cluster}` and the path of the object's collection.
    pub fn source(&self, cluster: &str, namespace: &str) -> String {
        let ns = (!namespace.is_empty()).then_some(namespace);
        format!("k8s://{cluster}{}", self.collection_path(ns))
    }

    /// The name schema files and URNs use: `pod` for core/v1 kinds (`pod`, `node`), else
    /// `deployment.v1.apps`, `widget.v1.example.com` (kubectl's `resource.version.group`
    /// order, with the kind).
    pub fn schema_name(&self) -> String {
        let lower = self.kind.to_ascii_lowercase();
        if self.group.is_empty() && self.version == "v1" {
            lower
        } else if self.group.is_empty() {
            format!("{lower}.{}", self.version)
        } else {
            format!("{lower}.{}.{}", self.version, self.group)
        }
    }

    /// `urn:kubecast:schema:{schema_name}-{mode}:v1`, the `dataschema` of this kind's data in
    /// `mode` (`full`, `summary`, `reference`).
    pub fn schema_urn(&self, mode: &str) -> Arc<str> {
        match MODES.iter().position(|m| *m == mode) {
            Some(i) => self.schemas[i].clone(),
            None => format!("urn:kubecast:schema:{}-{mode}:v1", self.schema_name()).into(),
        }
    }
}

/// Whether `name` names a resource of `group` and `version` that answers to `names` (its
/// plural, singular, kind and short names), as kubectl reads it: one of the names,
/// case-insensitively, optionally followed by `.{version}.{group}` or `.{group}`.
pub fn names_answer<'a>(
    name: &str,
    group: &str,
    version: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> bool {
    let name = name.trim();
    let (base, rest) = name.split_once('.').unwrap_or((name, ""));
    let qualified = rest.is_empty()
        || rest.eq_ignore_ascii_case(group)
        || rest
            .split_once('.')
            .is_some_and(|(v, g)| v == version && g.eq_ignore_ascii_case(group));
    qualified && names.into_iter().any(|n| n.eq_ignore_ascii_case(base))
}

impl PartialEq for Resource {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Resource {}

impl Hash for Resource {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_is_derived_from_group_version_kind_and_plural() {
        let d = Resource::new("apps", "v1", "Deployment", "deployments", true);
        assert_eq!(&**d.key(), "deployments.apps");
        assert_eq!(&**d.api_version(), "apps/v1");
        assert_eq!(
            &*d.event_type(ChangeKind::Modified),
            "io.k8s.apps.v1.deployment.modified"
        );
        assert_eq!(
            d.source("prod", "shop"),
            "k8s://prod/apis/apps/v1/namespaces/shop/deployments"
        );
        assert_eq!(
            &*d.schema_urn("full"),
            "urn:kubecast:schema:deployment.v1.apps-full:v1"
        );
        let n = Resource::new("", "v1", "Node", "nodes", false);
        assert_eq!(n.source("prod", ""), "k8s://prod/api/v1/nodes");
        assert_eq!(n.collection_path(Some("ignored")), "/api/v1/nodes");
        assert_eq!(
            &*n.event_type(ChangeKind::Deleted),
            "io.k8s.core.v1.node.deleted"
        );
        let w = Resource::new("example.com", "v1", "Widget", "widgets", true);
        assert_eq!(
            &*w.event_type(ChangeKind::Added),
            "io.k8s.example.com.v1.widget.added"
        );
    }

    #[test]
    fn a_resource_answers_to_the_names_kubectl_gives_it() {
        let d = Resource::new("apps", "v1", "Deployment", "deployments", true)
            .with_names("deployment", &["deploy".to_string()]);
        for name in [
            "deployments",
            "deploy",
            "Deployment",
            "deployments.apps",
            "deploy.v1.apps",
        ] {
            assert!(d.answers_to(name), "{name}");
        }
        for name in [
            "pods",
            "deployments.extensions",
            "deployments.v2.apps",
            "dep",
        ] {
            assert!(!d.answers_to(name), "{name}");
        }
        assert!(Resource::pods().answers_to("po"));
    }

    #[test]
    fn pods_keep_the_types_sources_and_schemas_they_always_had() {
        let p = Resource::pods();
        assert!(p.is_pod());
        for k in [ChangeKind::Added, ChangeKind::Modified, ChangeKind::Deleted] {
            assert_eq!(&*p.event_type(k), k.event_type());
        }
        assert_eq!(p.source("c", "ns"), "k8s://c/api/v1/namespaces/ns/pods");
        assert_eq!(&*p.schema_urn("full"), crate::event::SCHEMA_FULL);
        assert_eq!(&*p.schema_urn("summary"), crate::event::SCHEMA_SUMMARY);
        assert_eq!(&*p.schema_urn("reference"), crate::event::SCHEMA_REFERENCE);
    }
}
