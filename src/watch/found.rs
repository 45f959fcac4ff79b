//! What discovery says of a custom resource whose watch or list answered 404: gone only on
//! proof, else served at a version to follow, else unknown (nothing inferred, the watch
//! retries). Entry point: [`found`].

use std::sync::Arc;

use crate::kinds::{Resource, discovery, resolve};

/// What discovery says of a resource whose watch or list answered 404.
pub(super) enum Found {
    /// Not served at any version: its objects are gone.
    Gone,
    /// Served, at this resource's preferred version.
    At(Arc<Resource>),
    /// Discovery failed without proving anything (a timeout, a 5xx, a 429): nothing is
    /// inferred, and the watch retries.
    Unknown(String),
}

/// What discovery says of `r` now: gone (proven: its group is not in `/apis`, or each of its
/// versions answers 404), served at a version, or unknown.
pub(super) async fn found(client: &kube::Client, r: &Resource) -> Found {
    match discovery::served_group(client, &r.group).await {
        Err(e) => Found::Unknown(crate::error_chain(&e)),
        Ok(served) => match resolve::resolve(r.key(), &served) {
            Ok(found) => Found::At(found),
            // Served without list or watch: not gone, and nothing to follow.
            Err(e @ resolve::ResolveError::NotWatchable { .. }) => Found::Unknown(e.to_string()),
            Err(_) => Found::Gone,
        },
    }
}
