//! A Pod's own aspects for route predicates: `phase`, `readiness`, `container_states`,
//! `restart_counts`, `node`, `ips`. What each feeds into its fingerprint is fixed: the
//! fingerprints are kept in the durable state and must not change between versions.
//! Entry point: [`ASPECTS`].

use serde_json::Value;

use super::Resource;
use super::aspects::{Feed, KindAspect};

const fn pod_aspect(name: &'static str, feed: fn(&Value, &mut dyn Feed)) -> KindAspect {
    KindAspect {
        name,
        what: "Pods",
        resource: Resource::pods,
        feed,
    }
}

/// The aspects, in the order messages list them.
pub static ASPECTS: [KindAspect; 6] = [
    pod_aspect("phase", phase),
    pod_aspect("readiness", readiness),
    pod_aspect("container_states", container_states),
    pod_aspect("restart_counts", restart_counts),
    pod_aspect("node", node),
    pod_aspect("ips", ips),
];

/// The statuses of the init and app containers, in that order.
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    let status = &pod["status"];
    ["initContainerStatuses", "containerStatuses"]
        .into_iter()
        .flat_map(move |list| status[list].as_array().into_iter().flatten())
}

/// `status.phase`.
fn phase(pod: &Value, h: &mut dyn Feed) {
    h.value(&pod["status"]["phase"]);
}

/// The `Ready` condition and each container's `ready`.
fn readiness(pod: &Value, h: &mut dyn Feed) {
    let ready = pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map_or(&Value::Null, |c| &c["status"]);
    h.value(ready);
    for c in containers(pod) {
        h.value(&c["name"]);
        h.value(&c["ready"]);
    }
}

/// Each container's state (waiting, running, terminated) with its reason and exit code.
fn container_states(pod: &Value, h: &mut dyn Feed) {
    for c in containers(pod) {
        h.value(&c["name"]);
        // The state's kind and why, not its timestamps.
        if let Some((kind, detail)) = c["state"].as_object().and_then(|m| m.iter().next()) {
            h.bytes(kind.as_bytes());
            h.value(&detail["reason"]);
            h.value(&detail["exitCode"]);
        }
    }
}

/// Each container's restart count.
fn restart_counts(pod: &Value, h: &mut dyn Feed) {
    for c in containers(pod) {
        h.value(&c["name"]);
        h.value(&c["restartCount"]);
    }
}

/// `spec.nodeName`.
fn node(pod: &Value, h: &mut dyn Feed) {
    h.value(&pod["spec"]["nodeName"]);
}

/// `status.podIPs` and `status.hostIP`.
fn ips(pod: &Value, h: &mut dyn Feed) {
    h.value(&pod["status"]["podIPs"]);
    h.value(&pod["status"]["hostIP"]);
}
