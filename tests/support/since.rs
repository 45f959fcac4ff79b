//! What a file sink wrote since a point: the ids written so far, the events after them, and
//! waiting for one by name. For the restart tests, where events redelivered after a kill keep
//! their old ids and the new ids are the differences.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::kubecast::Kubecast;
use super::scene::file_events;

/// A string attribute of a structured event (empty when missing).
pub fn attr<'a>(e: &'a Value, name: &str) -> &'a str {
    e[name].as_str().unwrap_or_default()
}

/// `"{kind} {change} {name} inferred={..}"`: what the restart tests compare of an event.
pub fn describe(e: &Value) -> String {
    format!(
        "{} {} {} inferred={}",
        attr(e, "k8skind"),
        attr(e, "type").rsplit('.').next().unwrap_or_default(),
        attr(e, "k8sname"),
        e["k8sinferred"]
    )
}

/// The ids in the file now.
pub fn ids(file: &Path) -> BTreeSet<String> {
    file_events(file)
        .iter()
        .map(|e| attr(e, "id").to_string())
        .collect()
}

/// The events in the file whose ids are not in `before`.
pub fn fresh(file: &Path, before: &BTreeSet<String>) -> Vec<Value> {
    file_events(file)
        .into_iter()
        .filter(|e| !before.contains(attr(e, "id")))
        .collect()
}

/// Waits until an event of object `name` arrived after `before`; fails naming `what`.
pub async fn wait_for_fresh(
    kubecast: &Kubecast,
    file: &Path,
    before: &BTreeSet<String>,
    name: &str,
    what: &str,
    limit: Duration,
) {
    let seen = super::consume::wait_for(limit, what, || {
        fresh(file, before)
            .iter()
            .any(|e| attr(e, "k8sname") == name)
            .then_some(())
    })
    .await;
    kubecast.check(seen.ok_or(what.to_string()));
}
