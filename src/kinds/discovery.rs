//! Asking the apiserver what it serves: the core group's resources (`/api/v1`) and every
//! group's versions (`/apis`, then `/apis/{group}/{version}`), as [`Served`] entries for
//! [`super::resolve`]. Entry points: [`served`] (everything, at start) and [`served_group`]
//! (one group: while a custom resource is waited for, and when a watch answered 404).
//!
//! Only an answer that proves a group version gone counts as "not served": the group absent
//! from `/apis`, or a 404 for `/apis/{group}/{version}`. [`served_group`] answers with an
//! error for anything else (a timeout, a 5xx, a 429), since its caller may infer deletes from
//! what is not served; [`served`] at start leaves such a group version out, as kubectl does,
//! so one broken aggregated API does not keep kubecast from starting.

use futures::future::join_all;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroup, APIGroupList, APIResourceList};

use super::resolve::Served;

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The apiserver refuses kubecast's credentials or its permission to read discovery:
    /// retrying cannot help.
    #[error("discovering the apiserver's resources: {what}")]
    Rejected {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// Unreachable, slow or failing (no proof of anything gone): worth another try.
    #[error("discovering the apiserver's resources at {path}")]
    Unavailable {
        path: String,
        #[source]
        source: kube::Error,
    },
}

impl DiscoveryError {
    /// Whether retrying can help.
    pub fn is_retriable(&self) -> bool {
        matches!(self, DiscoveryError::Unavailable { .. })
    }
}

async fn get<T: serde::de::DeserializeOwned>(
    client: &kube::Client,
    path: &str,
) -> Result<T, DiscoveryError> {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        // A path of DNS labels and slashes always makes a request.
        .unwrap_or_default();
    client.request::<T>(req).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 401 => DiscoveryError::Rejected {
            what: "the apiserver rejected kubecast's credentials (401 Unauthorized)",
            source: e,
        },
        kube::Error::Api(s) if s.code == 403 => DiscoveryError::Rejected {
            what: "kubecast may not read the apiserver's discovery documents (403 Forbidden)",
            source: e,
        },
        _ => DiscoveryError::Unavailable {
            path: path.to_string(),
            source: e,
        },
    })
}

/// Every resource the apiserver serves, core first, then the groups in its order. A group
/// version whose discovery fails for another reason than a 404 is left out (and logged).
pub async fn served(client: &kube::Client) -> Result<Vec<Served>, DiscoveryError> {
    let core: APIResourceList = get(client, "/api/v1").await?;
    let mut out = entries(&core, "", "v1", true);
    let groups: APIGroupList = get(client, "/apis").await?;
    out.extend(groups_served(client, &groups.groups, Unproven::LeftOut).await?);
    Ok(out)
}

/// The resources of `group`: empty only when the apiserver proves it serves none of them (the
/// group absent from `/apis`, a 404 for each of its versions). Any other failure is an error,
/// retriable where [`DiscoveryError::is_retriable`] says so.
pub async fn served_group(
    client: &kube::Client,
    group: &str,
) -> Result<Vec<Served>, DiscoveryError> {
    let groups: APIGroupList = get(client, "/apis").await?;
    let wanted: Vec<APIGroup> = groups
        .groups
        .into_iter()
        .filter(|g| g.name == group)
        .collect();
    groups_served(client, &wanted, Unproven::Error).await
}

/// What a group version whose discovery failed without proof that it is gone becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unproven {
    /// Left out, as kubectl does (at start: one broken aggregated API stops nothing).
    LeftOut,
    /// The whole answer is an error: the caller may not take "not listed" for "gone".
    Error,
}

async fn groups_served(
    client: &kube::Client,
    groups: &[APIGroup],
    unproven: Unproven,
) -> Result<Vec<Served>, DiscoveryError> {
    let mut wanted = Vec::new();
    for g in groups {
        let preferred = g.preferred_version.as_ref().map(|p| p.version.as_str());
        for v in &g.versions {
            wanted.push((
                g.name.as_str(),
                v.version.as_str(),
                preferred == Some(&v.version),
            ));
        }
    }
    let lists = join_all(wanted.iter().map(|(g, v, _)| async move {
        match get::<APIResourceList>(client, &format!("/apis/{g}/{v}")).await {
            Ok(l) => Ok(Some(l)),
            // A group version that vanished between the two requests (a CRD deleted).
            Err(DiscoveryError::Unavailable { path, source }) if is_not_found(&source) => {
                tracing::info!(%path, "discovery: the group version is no longer served (404)");
                Ok(None)
            }
            Err(DiscoveryError::Unavailable { path, source }) if unproven == Unproven::LeftOut => {
                tracing::warn!(%path, error = %source, "discovery: skipping a group version whose discovery failed");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }))
    .await;
    let mut out = Vec::new();
    for ((g, v, preferred), list) in wanted.iter().zip(lists) {
        if let Some(list) = list? {
            out.extend(entries(&list, g, v, *preferred));
        }
    }
    Ok(out)
}

/// Whether the apiserver answered 404 Not Found: proof that the path is not served.
fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The watchable top-level resources of one group version (subresources left out).
fn entries(list: &APIResourceList, group: &str, version: &str, preferred: bool) -> Vec<Served> {
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| Served {
            group: group.to_string(),
            version: version.to_string(),
            kind: r.kind.clone(),
            plural: r.name.clone(),
            singular: if r.singular_name.is_empty() {
                r.kind.to_ascii_lowercase()
            } else {
                r.singular_name.clone()
            },
            short_names: r.short_names.clone().unwrap_or_default(),
            namespaced: r.namespaced,
            watchable: ["list", "watch"]
                .iter()
                .all(|v| r.verbs.iter().any(|have| have == v)),
            preferred,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subresources_are_left_out_and_watchability_comes_from_the_verbs() {
        let list: APIResourceList = serde_json::from_value(serde_json::json!({
            "groupVersion": "apps/v1",
            "resources": [
                {"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment",
                 "verbs": ["create", "get", "list", "watch"], "shortNames": ["deploy"]},
                {"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": ["get"]},
                {"name": "controllerrevisions", "singularName": "", "namespaced": true, "kind": "ControllerRevision", "verbs": ["get", "list"]}
            ]
        }))
        .expect("an APIResourceList");
        let e = entries(&list, "apps", "v1", true);
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].plural.as_str(), e[0].watchable),
            ("deployments", true)
        );
        assert_eq!(e[0].short_names, vec!["deploy".to_string()]);
        assert_eq!(
            (e[1].singular.as_str(), e[1].watchable),
            ("controllerrevision", false)
        );
    }
}
