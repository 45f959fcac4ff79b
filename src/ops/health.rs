//! Liveness and readiness. kubecast is ready when its state is restored, every watch has
//! synced (its initial list is done, or its resumed watch is open: the seeds'
//! WaitForCacheSync), and every sink is connected to its destination. A sink that has never
//! connected (an MQTT sink in a quiet cluster) is not ready. Entry point: [`Health`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What readiness waits for.
#[derive(Debug, Default)]
pub struct Health {
    /// A replica standing by for the Lease: ready (to take over), whatever else says.
    standby: AtomicBool,
    restored: AtomicBool,
    /// Per watch scope (its label: `*` or a namespace for Pods, `deployments.apps/*`):
    /// synced yet.
    scopes: Mutex<BTreeMap<String, bool>>,
    /// How each scope expected by a watch reads in a reason (`nodes`, `pods in namespace
    /// shop`), by label; the watch knows, from its resource.
    described: Mutex<BTreeMap<String, String>>,
    /// Custom resources waited for (their CRD is not installed), by configured name.
    waiting: Mutex<std::collections::BTreeSet<String>>,
    /// Per sink: connected now.
    sinks: Mutex<BTreeMap<String, bool>>,
    /// Why a sink that is not connected is not, where it knows more than that.
    sink_why: Mutex<BTreeMap<String, String>>,
    /// With `sharding`: the readiness of each shard this replica holds, which is its
    /// readiness (`None` without shards).
    parts: Mutex<Option<BTreeMap<u32, Arc<Health>>>>,
}

impl Health {
    /// Readiness for these watch scopes and sinks, none of them ready yet.
    pub fn new(
        scopes: impl IntoIterator<Item = String>,
        sinks: impl IntoIterator<Item = String>,
    ) -> Health {
        Health {
            standby: AtomicBool::new(false),
            restored: AtomicBool::new(false),
            scopes: Mutex::new(scopes.into_iter().map(|s| (s, false)).collect()),
            described: Mutex::new(Default::default()),
            waiting: Mutex::new(Default::default()),
            sinks: Mutex::new(sinks.into_iter().map(|s| (s, false)).collect()),
            sink_why: Mutex::new(BTreeMap::new()),
            parts: Mutex::new(None),
        }
    }

    /// This replica's readiness is its shards' from now on: ready while it holds none
    /// (ready to take some over), else when every shard it holds is.
    pub fn sharded(&self) {
        lock(&self.parts).get_or_insert_with(BTreeMap::new);
    }

    /// This replica holds shard `part`, whose readiness is `health`.
    pub fn hold(&self, part: u32, health: Arc<Health>) {
        lock(&self.parts)
            .get_or_insert_with(BTreeMap::new)
            .insert(part, health);
    }

    /// This replica no longer holds shard `part`.
    pub fn release(&self, part: u32) {
        if let Some(parts) = lock(&self.parts).as_mut() {
            parts.remove(&part);
        }
    }

    /// With `sharding`, the shards this replica holds, as `/readyz` names them.
    pub fn held(&self) -> Option<Vec<u32>> {
        lock(&self.parts)
            .as_ref()
            .map(|parts| parts.keys().copied().collect())
    }

    /// A watch of the scope labelled `scope` starts: it is not synced until its list is done
    /// (a scope known already keeps its state). `description` is how a reason names it.
    pub fn expect(&self, scope: &str, description: String) {
        lock(&self.scopes).entry(scope.to_string()).or_insert(false);
        lock(&self.described).insert(scope.to_string(), description);
    }

    /// The custom resource `name` is waited for (`true`) or served now (`false`).
    pub fn waiting(&self, name: &str, waiting: bool) {
        let mut w = lock(&self.waiting);
        if waiting {
            w.insert(name.to_string());
        } else {
            w.remove(name);
        }
    }

    /// This replica stands by (`true`) or starts leading: then nothing counts as restored,
    /// synced or connected until this term's pipeline says so.
    pub fn standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::Relaxed);
        if !standby {
            self.restored.store(false, Ordering::Relaxed);
            lock(&self.scopes).values_mut().for_each(|v| *v = false);
            lock(&self.sinks).values_mut().for_each(|v| *v = false);
        }
    }

    /// The state directory was read (or there is none).
    pub fn restored(&self) {
        self.restored.store(true, Ordering::Relaxed);
    }

    /// The watch of `scope` has its initial state (a list done, or a resumed watch open).
    pub fn synced(&self, scope: &str) {
        lock(&self.scopes).insert(scope.to_string(), true);
    }

    /// `sink` connected to (or lost) its destination.
    pub fn sink_connected(&self, sink: &str, up: bool) {
        lock(&self.sinks).insert(sink.to_string(), up);
        if up {
            lock(&self.sink_why).remove(sink);
        }
    }

    /// `sink` lost its destination, for the reason `why` (readiness names it).
    pub fn sink_down(&self, sink: &str, why: String) {
        lock(&self.sinks).insert(sink.to_string(), false);
        lock(&self.sink_why).insert(sink.to_string(), why);
    }

    /// `Ok` when ready; otherwise every reason it is not.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        if let Some(parts) = lock(&self.parts).as_ref() {
            let why: Vec<String> = parts
                .iter()
                .filter_map(|(part, h)| h.readiness().err().map(|w| (part, w)))
                .flat_map(|(part, w)| w.into_iter().map(move |w| format!("shard {part}: {w}")))
                .collect();
            return if why.is_empty() { Ok(()) } else { Err(why) };
        }
        if self.standby.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut why = Vec::new();
        if !self.restored.load(Ordering::Relaxed) {
            why.push("the state directory is not restored yet".to_string());
        }
        for name in lock(&self.waiting).iter() {
            why.push(format!(
                "waiting for the custom resource {name}: its CustomResourceDefinition is not installed"
            ));
        }
        let described = lock(&self.described);
        for (scope, synced) in lock(&self.scopes).iter() {
            if !synced {
                let what = described
                    .get(scope)
                    .cloned()
                    .unwrap_or_else(|| pods_scope(scope));
                why.push(format!("the initial list of {what} is not done"));
            }
        }
        let sink_why = lock(&self.sink_why);
        for (sink, up) in lock(&self.sinks).iter() {
            match (up, sink_why.get(sink)) {
                (true, _) => {}
                (false, Some(reason)) => {
                    why.push(format!("sink `{sink}` is not connected: {reason}"))
                }
                (false, None) => why.push(format!("sink `{sink}` is not connected")),
            }
        }
        if why.is_empty() { Ok(()) } else { Err(why) }
    }
}

/// A Pods' scope label (`*` or a namespace) as a reason names it, for scopes given at
/// construction.
fn pods_scope(label: &str) -> String {
    match label {
        "*" => "pods in all namespaces".to_string(),
        ns => format!("pods in namespace {ns}"),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps stay consistent between statements; a panic elsewhere does not spoil them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_restored_synced_and_every_sink_connected() {
        let h = Health::new(["*".to_string()], ["kafka".to_string(), "mqtt".to_string()]);
        assert_eq!(h.readiness().unwrap_err().len(), 4);
        h.restored();
        h.synced("*");
        h.sink_connected("kafka", true);
        let why = h.readiness().unwrap_err();
        assert_eq!(why, vec!["sink `mqtt` is not connected".to_string()]);
        h.sink_connected("mqtt", true);
        assert!(h.readiness().is_ok());
        h.sink_connected("kafka", false);
        assert!(
            h.readiness().is_err(),
            "a sink that went down makes it unready again"
        );
    }

    #[test]
    fn a_waited_for_custom_resource_and_an_unsynced_resource_are_named() {
        let h = Health::new(["*".to_string()], []);
        h.restored();
        h.synced("*");
        h.waiting("widgets.example.com", true);
        h.expect("nodes/*", "nodes".into());
        h.expect(
            "deployments.apps/shop",
            "deployments.apps in namespace shop".into(),
        );
        let why = h.readiness().unwrap_err().join("; ");
        assert!(
            why.contains("waiting for the custom resource widgets.example.com"),
            "{why}"
        );
        assert!(why.contains("initial list of nodes is not done"), "{why}");
        assert!(why.contains("deployments.apps in namespace shop"), "{why}");
        h.waiting("widgets.example.com", false);
        h.synced("nodes/*");
        h.synced("deployments.apps/shop");
        assert!(h.readiness().is_ok());
    }

    #[test]
    fn a_sharded_replica_is_ready_when_every_shard_it_holds_is() {
        let h = Health::new([], ["kafka".to_string()]);
        h.sharded();
        assert!(
            h.readiness().is_ok(),
            "holding nothing, it is ready to take shards"
        );
        assert_eq!(h.held(), Some(vec![]));
        let (a, b) = (
            Arc::new(Health::new([], ["kafka".to_string()])),
            Arc::new(Health::new([], ["kafka".to_string()])),
        );
        h.hold(3, a.clone());
        h.hold(5, b.clone());
        for part in [&a, &b] {
            part.restored();
            part.sink_connected("kafka", true);
        }
        b.sink_connected("kafka", false);
        assert_eq!(
            h.readiness().unwrap_err(),
            vec!["shard 5: sink `kafka` is not connected".to_string()]
        );
        h.release(5);
        assert!(h.readiness().is_ok());
        assert_eq!(h.held(), Some(vec![3]));
    }

    #[test]
    fn a_standby_is_ready_and_a_new_term_starts_unready() {
        let h = Health::new(["*".to_string()], ["kafka".to_string()]);
        h.standby(true);
        assert!(h.readiness().is_ok(), "a standby is ready to take over");
        h.restored();
        h.synced("*");
        h.sink_connected("kafka", true);
        h.standby(false);
        assert_eq!(
            h.readiness().unwrap_err().len(),
            3,
            "the last term's state is forgotten"
        );
    }
}
