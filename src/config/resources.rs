//! `watch.resources`: what to watch, named as `kubectl get` names it, each entry a name or a
//! map that overrides the watch-level settings for that resource. Entry points:
//! [`ResourceConfig`] and [`check`] (the pure part of validation; names are resolved against
//! the apiserver's discovery when kubecast starts).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::vocab::{Issue, is_dns_label};

/// One watched resource. In the file: a name (`deploy`, `jobs.v1.batch`,
/// `widgets.example.com`) or a map with `resource` and overrides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    /// The resource as `kubectl get` names it: plural, singular, kind or short name,
    /// optionally with its version and group (`deployments.apps`, `jobs.v1.batch`). Resolved
    /// through discovery at start (the group's preferred version when none is named). A custom
    /// resource whose CRD is not installed yet is waited for. Required.
    pub resource: String,
    /// Namespaces to watch this resource in. Default: `watch.namespaces`. Ignored for
    /// cluster-scoped resources (Nodes, Namespaces).
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Label selector for this resource. Default: `watch.label_selector`.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Field selector for this resource (`type=Warning` for Events). Default:
    /// `watch.field_selector`.
    #[serde(default)]
    pub field_selector: Option<String>,
    /// Watching Secrets needs this set to true, and even then every value of their `data` and
    /// `stringData` is redacted. Default: false.
    #[serde(default)]
    pub allow_secrets: bool,
    /// `Namespaced` or `Cluster`: the resource's scope as its CRD declares it. Only needed
    /// where discovery cannot say: `kubecast rbac` for a custom resource not installed yet, or
    /// without the apiserver, takes the entry's `resource` as `PLURAL.GROUP` with this scope.
    /// When discovery can say, a scope that differs from it is an error. Default: none.
    #[serde(default)]
    pub scope: Option<ResourceScope>,
}

/// A resource's scope, as a CRD's `spec.scope` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResourceScope {
    Namespaced,
    Cluster,
}

impl ResourceConfig {
    /// An entry that names a resource and overrides nothing.
    pub fn named(name: &str) -> ResourceConfig {
        ResourceConfig {
            resource: name.to_string(),
            namespaces: None,
            label_selector: None,
            field_selector: None,
            allow_secrets: false,
            scope: None,
        }
    }
}

/// The default of `watch.resources`: `[pods]`.
pub fn default_resources() -> Vec<ResourceConfig> {
    vec![ResourceConfig::named("pods")]
}

/// Reads an entry as a plain name or as a map.
pub fn entries<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ResourceConfig>, D::Error> {
    struct Entry(ResourceConfig);
    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Entry;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str(
                        "a resource name such as `deployments.apps`, or a map with `resource`",
                    )
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Entry, E> {
                    Ok(Entry(ResourceConfig::named(v)))
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<Entry, E> {
                    Err(E::custom(format!(
                        "`{v}` is not a resource name: YAML reads a bare `no` (the short name of nodes) as false; write `nodes` or quote it, 'no'"
                    )))
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Entry, A::Error> {
                    ResourceConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                        .map(Entry)
                }
            }
            d.deserialize_any(V)
        }
    }
    Ok(Vec::<Entry>::deserialize(d)?
        .into_iter()
        .map(|e| e.0)
        .collect())
}

/// The checks that need no apiserver: each entry's name, namespaces and selectors, and no
/// name given twice.
pub fn check(resources: &[ResourceConfig], issues: &mut Vec<Issue>) {
    if resources.is_empty() {
        issues.push(Issue::new(
            "watch.resources",
            "is empty; leave it out to watch pods",
        ));
    }
    for (i, r) in resources.iter().enumerate() {
        let at = format!("watch.resources[{i}]");
        let name = r.resource.trim();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
        {
            issues.push(Issue::new(
                format!("{at}.resource"),
                format!(
                    "`{}` is not a resource name such as `deployments.apps` or `deploy`",
                    r.resource
                ),
            ));
        }
        if resources[..i]
            .iter()
            .any(|o| o.resource.eq_ignore_ascii_case(name))
        {
            issues.push(Issue::new(&at, format!("`{name}` is listed twice")));
        }
        for (j, ns) in r.namespaces.iter().flatten().enumerate() {
            if !is_dns_label(ns) {
                issues.push(Issue::new(
                    format!("{at}.namespaces[{j}]"),
                    format!("`{ns}` is not a namespace name"),
                ));
            }
        }
        for (field, sel) in [
            ("label_selector", &r.label_selector),
            ("field_selector", &r.field_selector),
        ] {
            if sel.as_deref().is_some_and(|s| s.trim().is_empty()) {
                issues.push(Issue::new(
                    format!("{at}.{field}"),
                    "is empty; leave it out to use the watch-level one",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::load_str;

    fn issues(text: &str) -> Vec<String> {
        match load_str("t.yaml", text, Vec::new()).and_then(|c| {
            c.validate()
                .map_err(|source| super::super::ConfigError::Invalid {
                    file: "t.yaml".into(),
                    source,
                })
        }) {
            Ok(_) => Vec::new(),
            Err(super::super::ConfigError::Invalid { source, .. }) => {
                source.issues.iter().map(|i| i.field.clone()).collect()
            }
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn entries_are_names_or_maps_and_default_to_pods() {
        let c = load_str(
            "t.yaml",
            "cluster: c\nwatch:\n  resources:\n    - deploy\n    - {resource: events, field_selector: type=Warning, namespaces: [shop]}\nsinks: {s: {type: stdout}}\n",
            Vec::new(),
        )
        .expect("loads");
        let r = &c.watch.resources;
        assert_eq!(r[0], super::ResourceConfig::named("deploy"));
        assert_eq!(r[1].field_selector.as_deref(), Some("type=Warning"));
        assert_eq!(r[1].namespaces, Some(vec!["shop".to_string()]));
        let d = load_str(
            "t.yaml",
            "cluster: c\nsinks: {s: {type: stdout}}\n",
            Vec::new(),
        )
        .expect("loads");
        assert_eq!(d.watch.resources, super::default_resources());
    }

    #[test]
    fn bad_entries_are_named_by_their_index() {
        let text = "cluster: c\nwatch:\n  resources:\n    - pods\n    - 'no way'\n    - PODS\n    - {resource: nodes, namespaces: [Bad], label_selector: ''}\nsinks: {s: {type: stdout}}\n";
        assert_eq!(
            issues(text),
            vec![
                "watch.resources[1].resource",
                "watch.resources[2]",
                "watch.resources[3].namespaces[0]",
                "watch.resources[3].label_selector"
            ]
        );
        let no = load_str(
            "t.yaml",
            "cluster: c\nwatch:\n  resources: [pods, no]\nsinks: {s: {type: stdout}}\n",
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(no.contains("write `nodes` or quote it"), "{no}");
        let unknown = load_str(
            "t.yaml",
            "cluster: c\nwatch:\n  resources: [{resource: pods, colour: red}]\nsinks: {s: {type: stdout}}\n",
            Vec::new(),
        )
        .unwrap_err()
        .to_string();
        assert!(unknown.contains("colour"), "{unknown}");
    }

    #[test]
    fn the_examples_of_other_kinds_are_valid() {
        for (name, text, first) in [
            (
                "rollouts",
                include_str!("../../examples/rollouts.yaml"),
                "deployments.apps",
            ),
            (
                "warning-events",
                include_str!("../../examples/warning-events.yaml"),
                "events",
            ),
            (
                "custom-resource",
                include_str!("../../examples/custom-resource.yaml"),
                "widgets.example.com",
            ),
        ] {
            let v = load_str(name, text, Vec::new())
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .validate()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(v.watch.resources[0].resource, first, "{name}");
        }
    }
}
