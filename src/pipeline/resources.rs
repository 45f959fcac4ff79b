//! The configured resources, resolved against the apiserver's discovery at start: what each
//! `watch.resources` entry names, where it is watched and with which selectors. Entry point:
//! [`plan`].
//!
//! The default `[pods]` needs no discovery (core/v1 Pods are always served), so a config
//! that does not name resources starts exactly as before, even while the apiserver is down.

use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::{ResourceConfig, ResourceScope, WatchConfig};
use crate::kinds::Resource;
use crate::kinds::discovery::{self, DiscoveryError};
use crate::kinds::resolve::Served;
use crate::kinds::resolve::{self, ResolveError};
use crate::watch::Target;

/// Why the configured resources cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// A name the apiserver does not serve, or a resource the config may not watch: the
    /// config is wrong (exit 2).
    #[error("field `{field}`: {message}")]
    Invalid { field: String, message: String },
    /// Discovery refused kubecast (exit 1).
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

/// One resource as it will be watched.
#[derive(Debug, Clone)]
pub struct Planned {
    pub target: Target,
    /// The entry's field path (`watch.resources[2]`), for errors.
    pub field: String,
    /// The scope the entry declares, if it does.
    pub scope: Option<ResourceScope>,
    /// Namespaces (empty: all; ignored for cluster-scoped resources).
    pub namespaces: Vec<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl Planned {
    /// What RBAC must grant for it. A custom resource not served yet is granted only as its
    /// entry declares it: `resource: PLURAL.GROUP` with a `scope` (no guess at a plural or a
    /// scope); `Err` names the entry otherwise.
    pub fn grant(&self) -> Result<crate::rbac::Grant, ResourceError> {
        let (group, plural, namespaced) = match &self.target {
            Target::Resolved(r) => (r.group.clone(), r.plural.clone(), r.namespaced),
            Target::Pending { name, .. } => {
                let (plural, group) = declared(name, self.scope).ok_or_else(|| ResourceError::Invalid {
                    field: self.field.clone(),
                    message: format!(
                        "`{name}` is not served yet, so its plural and scope are unknown: name it as PLURAL.GROUP with its scope, e.g. {{resource: widgets.example.com, scope: Namespaced}}"
                    ),
                })?;
                (group, plural, self.scope == Some(ResourceScope::Namespaced))
            }
        };
        Ok(crate::rbac::Grant {
            group,
            plural,
            namespaced,
            namespaces: if namespaced {
                self.namespaces.clone()
            } else {
                Vec::new()
            },
        })
    }

    /// Whether this is core/v1 Pods (known now or not).
    pub fn is_pods(&self) -> bool {
        matches!(&self.target, Target::Resolved(r) if r.is_pod())
    }
}

/// Whether `watch` is the default `[pods]` with no overrides.
fn only_pods(watch: &WatchConfig) -> bool {
    matches!(watch.resources.as_slice(), [r] if *r == ResourceConfig::named("pods"))
}

/// Resolves every entry of `watch.resources`, asking discovery again while it is unavailable
/// (the caller races it against its shutdown).
pub async fn plan(
    client: &kube::Client,
    watch: &WatchConfig,
    max_backoff: Duration,
) -> Result<Vec<Planned>, ResourceError> {
    if only_pods(watch) {
        return Ok(vec![planned(
            watch,
            &watch.resources[0],
            "watch.resources[0]",
            Target::Resolved(Resource::pods()),
        )]);
    }
    let mut backoff = Backoff::new(Duration::from_millis(250), max_backoff);
    let served = loop {
        match discovery::served(client).await {
            Ok(s) => break s,
            Err(e) if e.is_retriable() => {
                let wait = backoff.next_delay();
                tracing::warn!(error = %crate::error_chain(&e), retry_in_ms = wait.as_millis() as u64,
                    "discovery failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    plan_served(watch, &served)
}

/// Resolves every entry of `watch.resources` against what discovery found served.
pub fn plan_served(watch: &WatchConfig, served: &[Served]) -> Result<Vec<Planned>, ResourceError> {
    let mut out = Vec::new();
    for (i, entry) in watch.resources.iter().enumerate() {
        let field = format!("watch.resources[{i}]");
        let target = match resolve::resolve(&entry.resource, served) {
            Ok(r) => {
                check_allowed(&r, entry, &field)?;
                check_scope(&r, entry, &field)?;
                tracing::info!(resource = %entry.resource, resolved = %r, api_version = %r.api_version(),
                    namespaced = r.namespaced, "watching");
                Target::Resolved(r)
            }
            Err(ResolveError::NotYet { name }) => {
                let group = resolve::group_of(&name).unwrap_or_default().to_string();
                Target::Pending { name, group }
            }
            Err(e) => {
                return Err(ResourceError::Invalid {
                    field,
                    message: e.to_string(),
                });
            }
        };
        let p = planned(watch, entry, &field, target);
        if let Target::Resolved(r) = &p.target
            && out
                .iter()
                .any(|o: &Planned| matches!(&o.target, Target::Resolved(x) if x == r))
        {
            return Err(ResourceError::Invalid {
                field,
                message: format!(
                    "`{}` names {r}, which an earlier entry names already",
                    entry.resource
                ),
            });
        }
        out.push(p);
    }
    Ok(out)
}

/// The grants of `watch.resources` without the apiserver: every entry must declare itself
/// as `PLURAL[.GROUP]` with a `scope`; `Err` names the first that does not.
pub fn grants_offline(
    watch: &WatchConfig,
    why: &str,
) -> Result<Vec<crate::rbac::Grant>, ResourceError> {
    watch
        .resources
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let field = format!("watch.resources[{i}]");
            let name = entry.resource.trim();
            let group = name.split_once('.').map_or("", |(_, g)| g).to_string();
            let p = planned(watch, entry, &field, Target::Pending { name: name.to_string(), group });
            p.grant().map_err(|_| ResourceError::Invalid {
                field,
                message: format!(
                    "the apiserver could not be asked ({why}), so `{name}` cannot be resolved: name it as PLURAL.GROUP (PLURAL for the core group) with its scope, e.g. {{resource: deployments.apps, scope: Namespaced}}"
                ),
            })
        })
        .collect()
}

/// `name` as `PLURAL.GROUP` (or a core `PLURAL`) when the entry declares a scope.
fn declared(name: &str, scope: Option<ResourceScope>) -> Option<(String, String)> {
    scope?;
    let (plural, group) = name.split_once('.').unwrap_or((name, ""));
    let lower = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let version = group.split('.').next().is_some_and(resolve::is_version);
    (lower(plural) && !version && group.split('.').all(|g| group.is_empty() || lower(g)))
        .then(|| (plural.to_string(), group.to_string()))
}

/// A declared scope must be the one discovery knows.
fn check_scope(
    r: &Arc<Resource>,
    entry: &ResourceConfig,
    field: &str,
) -> Result<(), ResourceError> {
    match entry.scope {
        Some(declared) if (declared == ResourceScope::Namespaced) != r.namespaced => {
            Err(ResourceError::Invalid {
                field: format!("{field}.scope"),
                message: format!(
                    "is {declared:?}, but the apiserver serves {r} as {}",
                    if r.namespaced {
                        "Namespaced"
                    } else {
                        "Cluster"
                    }
                ),
            })
        }
        _ => Ok(()),
    }
}

/// Secrets only with `allow_secrets`.
fn check_allowed(
    r: &Arc<Resource>,
    entry: &ResourceConfig,
    field: &str,
) -> Result<(), ResourceError> {
    if r.group.is_empty() && r.plural == "secrets" && !entry.allow_secrets {
        return Err(ResourceError::Invalid {
            field: field.to_string(),
            message: "watching Secrets needs `allow_secrets: true` on this entry (their data and stringData are then always redacted)".into(),
        });
    }
    Ok(())
}

fn planned(watch: &WatchConfig, entry: &ResourceConfig, field: &str, target: Target) -> Planned {
    Planned {
        target,
        field: field.to_string(),
        scope: entry.scope,
        namespaces: entry
            .namespaces
            .clone()
            .unwrap_or_else(|| watch.namespaces.clone()),
        label_selector: entry
            .label_selector
            .clone()
            .or_else(|| watch.label_selector.clone()),
        field_selector: entry
            .field_selector
            .clone()
            .or_else(|| watch.field_selector.clone()),
    }
}

/// Binds each alert rule that names another resource than Pods to the watched resource it
/// names, and checks its paths against a custom resource's schema from the apiserver (a
/// built-in kind's were checked with the config). A rule naming a resource that is not
/// watched, or a path its kind does not have, is a config error (exit 2) naming the rule.
pub async fn bind_rules(
    client: &kube::Client,
    rules: &mut [crate::alert::rule::Rule],
    planned: &[Planned],
) -> Result<(), ResourceError> {
    let watched: Vec<std::sync::Arc<crate::kinds::Resource>> = planned
        .iter()
        .filter_map(|p| match &p.target {
            Target::Resolved(r) => Some(r.clone()),
            Target::Pending { .. } => None,
        })
        .collect();
    for rule in rules.iter_mut() {
        let at = format!("alerts.rules.{}", rule.name);
        let check = rule
            .bind(&watched)
            .map_err(|message| ResourceError::Invalid {
                field: format!("{at}.resource"),
                message,
            })?;
        if !check {
            continue;
        }
        let schema = match schema_of(client, &rule.resource).await {
            Ok(s) => s,
            Err(e) => {
                // Not the config's fault: judge the rule unchecked rather than stop.
                tracing::warn!(rule = %rule.name, resource = %rule.resource.key(), error = %crate::error_chain(&e),
                    "the resource's schema could not be read; the rule's paths are not checked");
                continue;
            }
        };
        let what = format!("a {}", rule.resource.kind_name());
        for p in rule.paths() {
            crate::alert::fields::check_in(&schema, &what, p).map_err(|message| {
                ResourceError::Invalid {
                    field: at.clone(),
                    message,
                }
            })?;
        }
    }
    Ok(())
}

/// A custom resource's schema from the apiserver's OpenAPI v3, which publishes a new CRD's a
/// few seconds after the CRD is established: asked again for up to 15 s.
async fn schema_of(
    client: &kube::Client,
    r: &crate::kinds::Resource,
) -> Result<serde_json::Value, crate::kinds::schema::SchemaError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match crate::kinds::schema::from_openapi(client, r).await {
            Ok(s) => return Ok(s),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(backoff.next_delay()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_needs_no_discovery_and_any_override_does() {
        let mut w = WatchConfig::default();
        assert!(only_pods(&w));
        w.resources = vec![ResourceConfig {
            label_selector: Some("a=b".into()),
            ..ResourceConfig::named("pods")
        }];
        assert!(!only_pods(&w));
    }

    #[test]
    fn an_entry_overrides_the_watch_level_settings_it_names() {
        let w = WatchConfig {
            namespaces: vec!["a".into()],
            label_selector: Some("app=web".into()),
            ..WatchConfig::default()
        };
        let e = ResourceConfig {
            field_selector: Some("type=Warning".into()),
            namespaces: Some(vec![]),
            ..ResourceConfig::named("events")
        };
        let p = planned(
            &w,
            &e,
            "watch.resources[0]",
            Target::Resolved(Resource::pods()),
        );
        assert!(p.namespaces.is_empty());
        assert_eq!(p.label_selector.as_deref(), Some("app=web"));
        assert_eq!(p.field_selector.as_deref(), Some("type=Warning"));
    }

    #[test]
    fn secrets_need_allow_secrets() {
        let s = Arc::new(Resource::new("", "v1", "Secret", "secrets", true));
        let e =
            check_allowed(&s, &ResourceConfig::named("secrets"), "watch.resources[1]").unwrap_err();
        assert!(
            e.to_string().contains("watch.resources[1]") && e.to_string().contains("allow_secrets"),
            "{e}"
        );
        let ok = ResourceConfig {
            allow_secrets: true,
            ..ResourceConfig::named("secrets")
        };
        assert!(check_allowed(&s, &ok, "f").is_ok());
    }
}
