//! Asking the apiserver what it serves: the core group's resources (`/api/v1`) and every
//! group's versions (`/apis`, then `/apis/{group}/{version}`), as [`Served`] entries for
//! [`super::resolve`]. Entry points: [`served`] (everything, at start) and [`served_group`]
//! (one group, while a custom resource is waited for).

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
    /// Unreachable, slow or failing: worth another try.
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

/// Every resource the apiserver serves, core first, then the groups in its order.
pub async fn served(client: &kube::Client) -> Result<Vec<Served>, DiscoveryError> {
    let core: APIResourceList = get(client, "/api/v1").await?;
    let mut out = entries(&core, "", "v1", true);
    let groups: APIGroupList = get(client, "/apis").await?;
    out.extend(groups_served(client, &groups.groups).await?);
    Ok(out)
}

/// The resources of `group` (empty when the apiserver does not serve it, yet).
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
    groups_served(client, &wanted).await
}

async fn groups_served(
    client: &kube::Client,
    groups: &[APIGroup],
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
        // A group version that vanished between the two requests (a CRD deleted) or whose
        // aggregated server is down is left out, as kubectl does.
        match get::<APIResourceList>(client, &format!("/apis/{g}/{v}")).await {
            Ok(l) => Ok(Some(l)),
            Err(DiscoveryError::Unavailable { path, source }) => {
                tracing::warn!(%path, error = %source, "discovery: skipping a group version the apiserver did not serve");
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
