//! Resolving the names people type (`pods`, `deploy`, `deployments.apps`, `jobs.v1.batch`,
//! `widgets.example.com`) to served resources, with kubectl's rules: a name matches a
//! resource's plural, singular, kind or a short name, case-insensitively; `a.b.c` is first
//! read as resource `a`, version `b`, group `c` and then as resource `a`, group `b.c`;
//! without a group, the core group wins, then the groups in the apiserver's order; without
//! a version, the group's preferred version. Entry point: [`resolve`]; pure, fed by
//! [`super::discovery`].

use std::sync::Arc;

use super::Resource;

/// One resource the apiserver serves in one group version, as discovery lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// Whether `list` and `watch` are among its verbs.
    pub watchable: bool,
    /// Whether `version` is its group's preferred version.
    pub preferred: bool,
}

impl Served {
    fn resource(&self) -> Arc<Resource> {
        Arc::new(
            Resource::new(
                &self.group,
                &self.version,
                &self.kind,
                &self.plural,
                self.namespaced,
            )
            .with_names(&self.singular, &self.short_names),
        )
    }

    /// `deployments.apps`, or `pods`.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn answers_to(&self, name: &str) -> bool {
        let eq = |s: &str| s.eq_ignore_ascii_case(name);
        eq(&self.plural)
            || eq(&self.singular)
            || eq(&self.kind)
            || self.short_names.iter().any(|s| eq(s))
    }
}

/// Why a name does not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Nothing of that name is served; `closest` are served names that look like it.
    #[error("the apiserver serves no resource `{name}`{}", suggest(.closest))]
    Unknown { name: String, closest: Vec<String> },
    /// A custom resource whose group is not served yet: its CRD may be installed later.
    #[error("`{name}` is not served yet (its CustomResourceDefinition is not installed)")]
    NotYet { name: String },
    /// Served, but without `list` or `watch`.
    #[error("`{name}` cannot be watched: the apiserver does not offer list and watch on it")]
    NotWatchable { name: String },
}

fn suggest(closest: &[String]) -> String {
    if closest.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", closest.join(", "))
    }
}

/// Whether `group` is a custom resource's (a DNS name outside Kubernetes' own `*.k8s.io`),
/// whose resources may be installed later and are waited for.
pub fn is_custom_group(group: &str) -> bool {
    group.contains('.') && group != "k8s.io" && !group.ends_with(".k8s.io")
}

/// The API group a name asks for: `widgets.example.com` -> `example.com`,
/// `widgets.v1.example.com` -> `example.com` (the second part is a version), `pods` -> none.
pub fn group_of(name: &str) -> Option<&str> {
    let (_, rest) = name.split_once('.')?;
    match rest.split_once('.') {
        Some((version, group)) if is_version(version) => Some(group),
        _ => Some(rest),
    }
}

/// `v1`, `v2beta1`, `v1alpha3`: a Kubernetes API version.
pub fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|p| {
            tail.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

/// The short names of the built-in resources (as the apiserver serves them), for matching
/// names offline (`kubecast replay --resource deploy`).
pub fn builtin_short_names(group: &str, plural: &str) -> &'static [&'static str] {
    let short: &[&str] = match (group, plural) {
        ("", "pods") => &["po"],
        ("", "nodes") => &["no"],
        ("", "events") => &["ev"],
        ("", "namespaces") => &["ns"],
        ("", "services") => &["svc"],
        ("", "configmaps") => &["cm"],
        ("", "persistentvolumeclaims") => &["pvc"],
        ("", "persistentvolumes") => &["pv"],
        ("", "serviceaccounts") => &["sa"],
        ("", "endpoints") => &["ep"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "replicasets") => &["rs"],
        ("apps", "statefulsets") => &["sts"],
        ("apps", "daemonsets") => &["ds"],
        ("batch", "cronjobs") => &["cj"],
        ("networking.k8s.io", "ingresses") => &["ing"],
        ("autoscaling", "horizontalpodautoscalers") => &["hpa"],
        ("policy", "poddisruptionbudgets") => &["pdb"],
        _ => &[],
    };
    short
}

/// A name read as kubectl reads it: the resource part, and the group and version if given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted<'a> {
    resource: &'a str,
    version: Option<&'a str>,
    group: Option<&'a str>,
}

/// The readings of `name`, most specific first.
fn readings(name: &str) -> Vec<Wanted<'_>> {
    let mut out = Vec::new();
    let mut parts = name.splitn(3, '.');
    let resource = parts.next().unwrap_or_default();
    match (parts.next(), parts.next()) {
        (Some(version), Some(group)) => {
            out.push(Wanted {
                resource,
                version: Some(version),
                group: Some(group),
            });
            out.push(Wanted {
                resource,
                version: None,
                group: Some(&name[resource.len() + 1..]),
            });
        }
        (Some(group), None) => out.push(Wanted {
            resource,
            version: None,
            group: Some(group),
        }),
        _ => out.push(Wanted {
            resource,
            version: None,
            group: None,
        }),
    }
    out
}

/// Resolves `name` against `served` (in the apiserver's group order, core first).
pub fn resolve(name: &str, served: &[Served]) -> Result<Arc<Resource>, ResolveError> {
    let name = name.trim();
    for w in readings(name) {
        let matches: Vec<&Served> = served
            .iter()
            .filter(|s| {
                s.answers_to(w.resource)
                    && w.group.is_none_or(|g| s.group.eq_ignore_ascii_case(g))
                    && w.version.is_none_or(|v| s.version == v)
            })
            .collect();
        // Core first, then discovery's order (a stable sort keeps it); the preferred version
        // of the first group that has one.
        let group = match matches.iter().find(|s| s.group.is_empty()) {
            Some(core) => &core.group,
            None => match matches.first() {
                Some(first) => &first.group,
                None => continue,
            },
        };
        let in_group: Vec<&&Served> = matches.iter().filter(|s| &s.group == group).collect();
        let pick = in_group
            .iter()
            .find(|s| s.preferred)
            .or(in_group.first())
            .copied()
            .copied();
        if let Some(s) = pick {
            if !s.watchable {
                return Err(ResolveError::NotWatchable {
                    name: name.to_string(),
                });
            }
            return Ok(s.resource());
        }
    }
    if group_of(name).is_some_and(is_custom_group) {
        return Err(ResolveError::NotYet {
            name: name.to_string(),
        });
    }
    Err(ResolveError::Unknown {
        name: name.to_string(),
        closest: closest(name, served),
    })
}

/// Up to three served names (qualified) nearest to `name` by edit distance.
fn closest(name: &str, served: &[Served]) -> Vec<String> {
    let name = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, String)> = Vec::new();
    for s in served.iter().filter(|s| s.watchable) {
        let q = s.qualified();
        let best = [&q, &s.plural, &s.singular]
            .into_iter()
            .chain(s.short_names.iter())
            .map(|c| distance(&name, &c.to_ascii_lowercase()))
            .min()
            .unwrap_or(usize::MAX);
        if !scored.iter().any(|(_, n)| *n == q) {
            scored.push((best, q));
        }
    }
    scored.sort();
    let limit = (name.len() / 2).max(2);
    scored
        .into_iter()
        .filter(|(d, _)| *d <= limit)
        .take(3)
        .map(|(_, n)| n)
        .collect()
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn s(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        short: &[&str],
        preferred: bool,
    ) -> Served {
        Served {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            namespaced: !matches!(kind, "Node" | "Namespace"),
            watchable: kind != "TokenReview",
            preferred,
        }
    }

    /// A small cluster's discovery, in the apiserver's order.
    pub(crate) fn cluster() -> Vec<Served> {
        vec![
            s("", "v1", "Pod", "pods", &["po"], true),
            s("", "v1", "Node", "nodes", &["no"], true),
            s("", "v1", "Event", "events", &["ev"], true),
            s("", "v1", "Namespace", "namespaces", &["ns"], true),
            s("apps", "v1", "Deployment", "deployments", &["deploy"], true),
            s("apps", "v1", "ReplicaSet", "replicasets", &["rs"], true),
            s("events.k8s.io", "v1", "Event", "events", &[], true),
            s("batch", "v1", "Job", "jobs", &[], true),
            s(
                "autoscaling",
                "v2",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
                &["hpa"],
                true,
            ),
            s(
                "autoscaling",
                "v1",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
                &["hpa"],
                false,
            ),
            s(
                "authentication.k8s.io",
                "v1",
                "TokenReview",
                "tokenreviews",
                &[],
                true,
            ),
            s("example.com", "v1", "Widget", "widgets", &["wd"], false),
            s("example.com", "v2", "Widget", "widgets", &["wd"], true),
        ]
    }

    fn key(name: &str) -> String {
        let r = resolve(name, &cluster()).unwrap_or_else(|e| panic!("{name}: {e}"));
        format!("{}/{}", r.api_version(), r.plural)
    }

    #[test]
    fn names_resolve_as_kubectl_resolves_them() {
        for (name, want) in [
            ("pods", "v1/pods"),
            ("pod", "v1/pods"),
            ("po", "v1/pods"),
            ("Pod", "v1/pods"),
            ("deploy", "apps/v1/deployments"),
            ("deployments.apps", "apps/v1/deployments"),
            ("deployment.apps", "apps/v1/deployments"),
            ("jobs.v1.batch", "batch/v1/jobs"),
            ("nodes", "v1/nodes"),
            // The core group wins over events.k8s.io.
            ("events", "v1/events"),
            ("events.events.k8s.io", "events.k8s.io/v1/events"),
            // The preferred version, unless one is named.
            ("hpa", "autoscaling/v2/horizontalpodautoscalers"),
            (
                "hpa.v1.autoscaling",
                "autoscaling/v1/horizontalpodautoscalers",
            ),
            ("widgets.example.com", "example.com/v2/widgets"),
            ("widgets.v1.example.com", "example.com/v1/widgets"),
        ] {
            assert_eq!(key(name), want, "{name}");
        }
    }

    #[test]
    fn an_unknown_name_names_the_closest_served_ones() {
        let e = resolve("deploymnets", &cluster()).unwrap_err();
        let ResolveError::Unknown { closest, .. } = &e else {
            panic!("{e}")
        };
        assert_eq!(
            closest.first().map(String::as_str),
            Some("deployments.apps")
        );
        assert!(
            e.to_string().contains("did you mean deployments.apps"),
            "{e}"
        );
        assert!(matches!(
            resolve("jobs.v9.batch", &cluster()),
            Err(ResolveError::Unknown { .. })
        ));
    }

    #[test]
    fn a_custom_resource_not_served_yet_is_waited_for_and_a_built_in_group_is_not() {
        assert_eq!(
            resolve("gadgets.example.com", &cluster()),
            Err(ResolveError::NotYet {
                name: "gadgets.example.com".into()
            })
        );
        assert!(matches!(
            resolve("gadgets.apps", &cluster()),
            Err(ResolveError::Unknown { .. })
        ));
        assert!(matches!(
            resolve("things.storage.k8s.io", &cluster()),
            Err(ResolveError::Unknown { .. })
        ));
        assert!(matches!(
            resolve("tokenreviews", &cluster()),
            Err(ResolveError::NotWatchable { .. })
        ));
    }

    #[test]
    fn the_group_of_a_name_skips_a_version() {
        assert_eq!(group_of("widgets.example.com"), Some("example.com"));
        assert_eq!(group_of("widgets.v1.example.com"), Some("example.com"));
        assert_eq!(group_of("widgets.v1beta2.example.com"), Some("example.com"));
        assert_eq!(
            group_of("widgets.vendor.example.com"),
            Some("vendor.example.com")
        );
        assert_eq!(group_of("pods"), None);
        assert!(!is_version("v1beta") && !is_version("version") && is_version("v10"));
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("pods", "pods"), 0);
    }
}
