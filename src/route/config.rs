//! `routes:` in the config: each route names its sinks and what it takes — change types,
//! namespaces (names or glob patterns with `*` and `?`), a label selector, and a change
//! predicate (the aspects whose change makes a `modified` worth sending). A pure
//! [`RouteConfig::validate`] turns one into a [`Route`], naming the field of each problem.

use std::collections::BTreeSet;

use kube::core::{Selector, SelectorExt};
use serde::{Deserialize, Serialize};

use super::aspects::Aspect;
use super::selector;
use crate::kinds::aspects::KindAspect;
use crate::model::ChangeKind;
use crate::vocab::{DataMode, Issue};

/// One route.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The sinks (names under `sinks`) this route feeds. Required.
    pub sinks: Vec<String>,
    /// The resources taken, as `kubectl get` names them (`pods`, `deploy`,
    /// `deployments.apps`), matched against each watched resource's plural, singular, kind
    /// and short names. Default: every watched resource.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Event types taken: `added`, `modified`, `deleted`, and the alert events
    /// `alert.firing`, `alert.resolved` (`alerts` for both). Default: the three pod changes
    /// (alerts go only to routes that name them).
    #[serde(default)]
    pub types: Vec<String>,
    /// Namespaces taken: names or glob patterns (`prod-*`, `team-?`). Default: all.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A label selector on the pod (Kubernetes syntax, set-based included). Default: all.
    #[serde(default)]
    pub selector: Option<String>,
    /// A `modified` passes only when one of these aspects changed: `phase`, `readiness`,
    /// `container_states`, `restart_counts`, `node`, `ips`, `labels`, `annotations`,
    /// `spec`, or a field path (`status.qosClass`). Default: every `modified` passes.
    #[serde(default)]
    pub changes: Vec<String>,
    /// What `data` holds on this route: `full`, `summary` or `reference`. Default:
    /// `encoding.data`.
    #[serde(default)]
    pub data: Option<DataMode>,
    /// The topic on this route, instead of each of its sinks' own `topic` (a template with the
    /// placeholders that sink's `topic` takes). Default: the sink's.
    #[serde(default)]
    pub topic: Option<String>,
    /// Send this route's events in another source's shape in every sink it feeds:
    /// `apiserversource` (Knative's ApiServerSource types and extensions, beside kubecast's
    /// own). Default: the sink's `compat`, else kubecast's own shape.
    #[serde(default)]
    pub compat: Option<crate::vocab::Compat>,
}

/// The event types a route can name, as written.
const TYPES: [&str; 5] = [
    "added",
    "modified",
    "deleted",
    "alert.firing",
    "alert.resolved",
];

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub sinks: Vec<String>,
    /// Resource names taken; empty: every watched resource.
    resources: Vec<String>,
    types: BTreeSet<&'static str>,
    namespaces: Vec<String>,
    pub selector: Option<Selector>,
    pub changes: Vec<Aspect>,
    /// The data mode, when the route sets its own.
    pub data: Option<DataMode>,
    pub topic: Option<String>,
}

impl RouteConfig {
    /// Checks route `name` against the configured `sinks` and the names in
    /// `watch.resources` (`watched`), without any I/O.
    pub fn validate(
        &self,
        name: &str,
        sinks: &[&str],
        watched: &[&str],
    ) -> Result<Route, Vec<Issue>> {
        let at = format!("routes.{name}");
        let mut issues = Vec::new();
        for (i, r) in self.resources.iter().enumerate() {
            if r.trim().is_empty()
                || !r
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
            {
                issues.push(Issue::new(
                    format!("{at}.resources[{i}]"),
                    format!("`{r}` is not a resource name such as `deployments.apps` or `deploy`"),
                ));
            }
        }
        // What the route can take: its own resources, else everything watched.
        let takes: &[String] = &self.resources;
        let names: Vec<&str> = if takes.is_empty() {
            watched.to_vec()
        } else {
            takes.iter().map(String::as_str).collect()
        };
        if self.sinks.is_empty() {
            issues.push(Issue::new(
                format!("{at}.sinks"),
                "must name at least one sink",
            ));
        }
        for (i, s) in self.sinks.iter().enumerate() {
            if !sinks.contains(&s.as_str()) {
                issues.push(Issue::new(
                    format!("{at}.sinks[{i}]"),
                    format!("`{s}` is not a sink (configured: {})", sinks.join(", ")),
                ));
            }
        }
        let mut types = BTreeSet::new();
        for (i, t) in self.types.iter().enumerate() {
            match TYPES.into_iter().find(|k| k == t) {
                Some(k) => {
                    types.insert(k);
                }
                None if t == "alerts" => types.extend(&TYPES[3..]),
                None => issues.push(Issue::new(
                    format!("{at}.types[{i}]"),
                    format!("`{t}` is not one of {}, alerts", TYPES.join(", ")),
                )),
            }
        }
        if types.is_empty() {
            types.extend(&TYPES[..3]);
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            let ok = !ns.is_empty()
                && ns
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-*?".contains(&b));
            if !ok {
                issues.push(Issue::new(
                    format!("{at}.namespaces[{i}]"),
                    format!("`{ns}` is not a namespace name or pattern (lower-case letters, digits, `-`, `*`, `?`)"),
                ));
            }
        }
        let selector = match self.selector.as_deref().map(selector::parse) {
            None => None,
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                issues.push(Issue::new(format!("{at}.selector"), e.to_string()));
                None
            }
        };
        let mut changes = Vec::new();
        for (i, c) in self.changes.iter().enumerate() {
            // Paths are checked against the schema of every built-in kind the route can take
            // (a custom resource's is known only once the apiserver was asked: not checked).
            let checked = Aspect::parse(c).and_then(|a| match &a {
                Aspect::Path(p) => crate::alert::fields::check_for(&names, p).map(|()| a),
                _ => Ok(a),
            });
            let alone = |k: &KindAspect| {
                let r = (k.resource)();
                names.iter().all(|n| r.answers_to(n))
            };
            match checked {
                Ok(a) if a.kind_only().is_some_and(|k| !alone(k)) => {
                    let (what, plural) = a
                        .kind_only()
                        .map(|k| (k.what, (k.resource)().plural.clone()))
                        .unwrap_or_default();
                    issues.push(Issue::new(
                        format!("{at}.changes[{i}]"),
                        format!("`{c}` is an aspect of {what} only, and this route can take other kinds; set `resources: [{plural}]` on the route, or use labels, annotations, spec, status, conditions, generation, owners or a path"),
                    ))
                }
                Ok(a) => changes.push(a),
                Err(e) => issues.push(Issue::new(format!("{at}.changes[{i}]"), e)),
            }
        }
        if !changes.is_empty() && !types.contains("modified") {
            issues.push(Issue::new(
                format!("{at}.changes"),
                "filters `modified` events, which `types` leaves out",
            ));
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(Route {
            name: name.to_string(),
            sinks: self.sinks.clone(),
            resources: self.resources.clone(),
            types,
            namespaces: self.namespaces.clone(),
            selector,
            changes,
            data: self.data,
            topic: self.topic.clone(),
        })
    }
}

impl Route {
    /// Whether this route takes objects of `r`.
    pub fn takes_resource(&self, r: &crate::kinds::Resource) -> bool {
        self.resources.is_empty() || self.resources.iter().any(|n| r.answers_to(n))
    }

    /// Whether this route takes events of `kind`.
    pub fn takes_kind(&self, kind: ChangeKind) -> bool {
        self.types.contains(kind.word())
    }

    /// Whether this route takes a pod in `namespace` with `labels`.
    pub fn selects(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        (self.namespaces.is_empty() || self.namespaces.iter().any(|p| glob(p, namespace)))
            && self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }

    /// Whether this route takes a change of `kind` to a pod in `namespace` with `labels`
    /// (the change predicate aside).
    pub fn takes(
        &self,
        kind: ChangeKind,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        self.takes_kind(kind) && self.selects(namespace, labels)
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters and `?` for
/// one.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matching with one backtrack point (the last `*`): linear in practice.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn route(yaml: &str) -> Result<Route, Vec<Issue>> {
        let c: RouteConfig = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        c.validate("r", &["kafka", "edge"], &["pods"])
    }

    fn route_watching(yaml: &str, watched: &[&str]) -> Result<Route, Vec<Issue>> {
        let c: RouteConfig = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        c.validate("r", &["kafka", "edge"], watched)
    }

    #[test]
    fn pod_only_aspects_are_refused_on_a_route_that_can_take_other_kinds() {
        let watched = ["deployments.apps", "pods"];
        let e = route_watching(
            "sinks: [kafka]\nchanges: [phase, status.readyReplicas, status.colour]\n",
            &watched,
        )
        .expect_err("phase on every kind");
        // `status.readyReplicas` is a Deployment's (Pods lack it: allowed); no kind has a colour.
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].field, "routes.r.changes[0]");
        assert_eq!(e[1].field, "routes.r.changes[2]");
        assert!(e[0].message.contains("Pods only"), "{}", e[0].message);
        // A route of Pods may, and general aspects work on any route.
        assert!(
            route_watching(
                "sinks: [kafka]\nresources: [po]\nchanges: [phase]\n",
                &watched
            )
            .is_ok()
        );
        assert!(
            route_watching(
                "sinks: [kafka]\nchanges: [conditions, generation, owners, status, labels]\n",
                &watched
            )
            .is_ok()
        );
        let e = route_watching("sinks: [kafka]\nresources: ['no way']\n", &watched)
            .expect_err("a bad name");
        assert_eq!(e[0].field, "routes.r.resources[0]");
    }

    #[test]
    fn a_route_takes_the_resources_it_names_and_every_one_without() {
        let d = crate::kinds::Resource::new("apps", "v1", "Deployment", "deployments", true)
            .with_names("deployment", &["deploy".to_string()]);
        let only = route_watching("sinks: [kafka]\nresources: [deploy]\n", &["deploy", "pods"])
            .expect("valid");
        assert!(only.takes_resource(&d));
        assert!(!only.takes_resource(&crate::kinds::Resource::pods()));
        let all = route_watching("sinks: [kafka]\n", &["deploy", "pods"]).expect("valid");
        assert!(all.takes_resource(&d) && all.takes_resource(&crate::kinds::Resource::pods()));
    }

    #[test]
    fn globs_match_names_and_patterns() {
        for (p, t, m) in [
            ("prod", "prod", true),
            ("prod", "prod-1", false),
            ("prod-*", "prod-eu-1", true),
            ("*-db", "orders-db", true),
            ("team-?", "team-a", true),
            ("team-?", "team-ab", false),
            ("*", "", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ] {
            assert_eq!(glob(p, t), m, "{p} ~ {t}");
        }
    }

    #[test]
    fn a_route_takes_its_types_namespaces_and_labels_only() {
        let r = route("sinks: [edge]\ntypes: [modified]\nnamespaces: ['prod-*']\nselector: 'app in (web), !canary'\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
        let web: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        assert!(r.takes(ChangeKind::Modified, "prod-eu", &web));
        assert!(!r.takes(ChangeKind::Added, "prod-eu", &web), "type");
        assert!(!r.takes(ChangeKind::Modified, "staging", &web), "namespace");
        assert!(
            !r.takes(ChangeKind::Modified, "prod-eu", &BTreeMap::new()),
            "selector"
        );
    }

    #[test]
    fn every_bad_entry_is_named_by_its_path() {
        let issues = route("sinks: [kafka, nowhere]\ntypes: [created]\nnamespaces: [Prod]\nselector: 'app in a'\nchanges: [phase, colour, 'spec..x']\n")
            .expect_err("invalid");
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "routes.r.sinks[1]",
                "routes.r.types[0]",
                "routes.r.namespaces[0]",
                "routes.r.selector",
                "routes.r.changes[1]",
                "routes.r.changes[2]",
            ]
        );
        let empty = route("sinks: []\n").expect_err("no sinks");
        assert_eq!(empty[0].field, "routes.r.sinks");
    }
}
