//! One configured resource: resolved at start, or (a custom resource whose CRD is not
//! installed yet) waited for through discovery; then one watch per scope. When the resource
//! stops being served (its CRD deleted), its scopes report their objects gone and the
//! resource is waited for again. Entry point: [`run_resource`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::mpsc;

use super::source::{self, Ended, WatchSettings};
use super::{Observed, WatchError};
use crate::backoff::Backoff;
use crate::classify::Scope;
use crate::kinds::Resource;
use crate::kinds::discovery;
use crate::kinds::resolve::{self, ResolveError};

/// How often discovery is asked again while a custom resource is not served.
const POLL: Duration = Duration::from_secs(2);

/// A configured resource, as start-up found it.
#[derive(Debug, Clone)]
pub enum Target {
    /// Served: watched at once.
    Resolved(Arc<Resource>),
    /// A custom resource not served yet: `name` as configured, `group` its API group.
    Pending { name: String, group: String },
}

impl Target {
    /// The name readiness reports while it is waited for.
    pub fn name(&self) -> String {
        match self {
            Target::Resolved(r) => r.key().to_string(),
            Target::Pending { name, .. } => name.clone(),
        }
    }
}

/// Watches `target` in `namespaces` (empty: all; ignored for cluster-scoped resources), each
/// scope from its position in `resume` (by scope label). Ends when `out` is closed, with an
/// error only when retrying cannot help.
pub async fn run_resource(
    client: kube::Client,
    target: Target,
    namespaces: Vec<String>,
    settings: Arc<WatchSettings>,
    mut resume: HashMap<String, Option<String>>,
    out: mpsc::Sender<Observed>,
) -> Result<(), WatchError> {
    let name = target.name();
    let mut resource = match target {
        Target::Resolved(r) => Some(r),
        Target::Pending { .. } => None,
    };
    loop {
        let r = match resource.take() {
            Some(r) => r,
            None => match wait_until_served(&client, &name, &settings, &out).await? {
                Some(r) => r,
                None => return Ok(()),
            },
        };
        let watches = scopes(&r, &namespaces).into_iter().map(|scope| {
            let from = resume.remove(&**scope.label()).flatten();
            settings.ops.health.expect(scope.label(), scope.describe());
            source::run(client.clone(), scope, settings.clone(), from, out.clone())
        });
        let mut unserved = false;
        for ended in join_all(watches).await {
            match ended? {
                Ended::Closed => return Ok(()),
                Ended::Unserved => unserved = true,
            }
        }
        if !unserved || out.is_closed() {
            return Ok(());
        }
        // Every scope reported its objects gone; from now on the resource is listed afresh.
        resume.clear();
    }
}

/// The scopes of `r`: one per namespace, or one for all (always, when cluster-scoped).
pub fn scopes(r: &Arc<Resource>, namespaces: &[String]) -> Vec<Scope> {
    if namespaces.is_empty() || !r.namespaced {
        vec![Scope::new(r.clone(), None)]
    } else {
        namespaces
            .iter()
            .map(|ns| Scope::new(r.clone(), Some(ns)))
            .collect()
    }
}

/// Asks discovery until `name` is served; `None` when the pipeline went away meanwhile.
async fn wait_until_served(
    client: &kube::Client,
    name: &str,
    settings: &WatchSettings,
    out: &mpsc::Sender<Observed>,
) -> Result<Option<Arc<Resource>>, WatchError> {
    let group = resolve::group_of(name).unwrap_or_default();
    // Polled every POLL while nothing is wrong; discovery errors back off further.
    let mut backoff = Backoff::new(POLL, settings.max_backoff.max(POLL));
    settings.ops.health.waiting(name, true);
    tracing::warn!(
        resource = name,
        "waiting for the custom resource: its CustomResourceDefinition is not installed"
    );
    loop {
        let served = discovery::served_group(client, group).await;
        let outcome = match served {
            Ok(served) => resolve::resolve(name, &served).map_err(Some),
            Err(e) if e.is_retriable() => Err(None),
            Err(e) => {
                settings.ops.health.waiting(name, false);
                return Err(WatchError::Discovery {
                    name: name.to_string(),
                    source: e,
                });
            }
        };
        match outcome {
            Ok(r) => {
                settings.ops.health.waiting(name, false);
                tracing::info!(resource = name, served_as = %r.api_version(), "the custom resource is served; watching it");
                return Ok(Some(r));
            }
            Err(Some(ResolveError::NotYet { .. })) => backoff.reset(),
            Err(Some(other)) => {
                tracing::warn!(resource = name, error = %other, "waiting for the custom resource");
            }
            Err(None) => {}
        }
        if out.is_closed() {
            return Ok(None);
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}
