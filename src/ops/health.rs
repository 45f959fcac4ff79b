//! Liveness and readiness. kubecast is ready when its state is restored, every watch has
//! synced (its initial list is done, or its resumed watch is open: the seeds'
//! WaitForCacheSync), and every sink is connected to its destination. A sink that has never
//! connected (an MQTT sink in a quiet cluster) is not ready. Entry point: [`Health`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What readiness waits for.
#[derive(Debug, Default)]
pub struct Health {
    /// A replica standing by for the Lease: ready (to take over), whatever else says.
    standby: AtomicBool,
    restored: AtomicBool,
    /// Per watch scope (`*` or a namespace): synced yet.
    scopes: Mutex<BTreeMap<String, bool>>,
    /// Per sink: connected now.
    sinks: Mutex<BTreeMap<String, bool>>,
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
            sinks: Mutex::new(sinks.into_iter().map(|s| (s, false)).collect()),
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
    }

    /// `Ok` when ready; otherwise every reason it is not.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        if self.standby.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut why = Vec::new();
        if !self.restored.load(Ordering::Relaxed) {
            why.push("the state directory is not restored yet".to_string());
        }
        for (scope, synced) in lock(&self.scopes).iter() {
            if !synced {
                let what = if scope == "*" {
                    "all namespaces".to_string()
                } else {
                    format!("namespace {scope}")
                };
                why.push(format!("the initial list of pods in {what} is not done"));
            }
        }
        for (sink, up) in lock(&self.sinks).iter() {
            if !up {
                why.push(format!("sink `{sink}` is not connected"));
            }
        }
        if why.is_empty() { Ok(()) } else { Err(why) }
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
