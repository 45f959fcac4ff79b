//! Pods: the summary (phase, conditions, container states, node, IPs, labels, owner; schema
//! `schemas/pod-summary.v1.json`). Its env values are redacted by shape (`redact`).
//! A Pod's summary is written straight from its JSON where it can, else from the parsed
//! object, through the same shell (`pod_shell.rs`).

use serde_json::Value;

use super::{Kind, Resource};

/// core/v1 Pod.
pub struct Pod;

impl Kind for Pod {
    fn summary(&self, obj: &Value, _: &Resource) -> Value {
        super::pod_shell::summary_of_value(obj)
    }

    fn summary_from_slice(&self, obj: &[u8], _: &Resource) -> Option<Vec<u8>> {
        super::pod_shell::summary(obj)
    }

    fn alert_member(&self) -> Option<&'static str> {
        Some("pod")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_summary_keeps_phase_conditions_container_states_node_ips_labels_and_owner() {
        let pod = json!({
            "metadata": {"namespace": "ns", "name": "p", "uid": "u", "resourceVersion": "3",
                "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}], "hostIP": "1.2.3.4",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "i", "ready": true, "restartCount": 2,
                    "state": {"running": {"startedAt": "t"}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
        });
        let s = Pod.summary(&pod, &Resource::pods());
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["nodeName"], "n1");
        assert_eq!(s["podIPs"][0], "10.0.0.1");
        assert_eq!(s["metadata"]["labels"]["app"], "web");
        assert_eq!(s["owner"]["kind"], "ReplicaSet");
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["containers"][0]["restartCount"], 2);
        assert_eq!(s["containers"][0]["state"]["state"], "running");
        assert_eq!(s["containers"][0]["lastState"]["reason"], "OOMKilled");
        assert_eq!(s["containers"][0]["lastState"]["exitCode"], 137);
        assert!(s.get("spec").is_none());
    }

    #[test]
    fn the_summary_read_straight_from_json_is_the_summary_of_the_parsed_pod() {
        let line: Value =
            serde_json::from_str(include_str!("../../benches/fixtures/pod-watch-line.json").trim())
                .expect("the fixture is JSON");
        let pods = [
            line["object"].clone(),
            json!({}),
            json!({"metadata": {"name": "p", "labels": "not a map", "ownerReferences": {"x": 1}}}),
            json!({"metadata": {"ownerReferences": [{"kind": "A"}, {"kind": "B", "controller": true}]},
                "spec": {"containers": [{"name": "c"}]}, "status": null}),
            json!({"status": {"phase": "Pending", "containerStatuses": [{"name": "c", "state": {}}],
                "initContainerStatuses": [{"name": "i", "ready": "yes", "restartCount": -1}],
                "conditions": [{"type": "PodScheduled"}], "podIPs": [{"ip": "fd00::1"}, {}]}}),
        ];
        let r = Resource::pods();
        for pod in pods {
            let bytes = serde_json::to_vec(&pod).expect("JSON");
            let straight = Pod
                .summary_from_slice(&bytes, &r)
                .expect("a Pod has its own path");
            assert_eq!(
                String::from_utf8(straight).expect("UTF-8"),
                Pod.summary(&pod, &Resource::pods()).to_string(),
                "the same bytes for {pod}"
            );
        }
        for other in [&b" [1, 2]"[..], b"{\"metadata\": 1}", b"{\"metadata\": "] {
            assert!(
                Pod.summary_from_slice(other, &r).is_none(),
                "{} takes the general path",
                String::from_utf8_lossy(other)
            );
        }
    }
}
