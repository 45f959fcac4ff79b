//! Nodes: the summary is what scheduling and on-call care about: conditions,
//! capacity and allocatable, taints, and whether the Node is cordoned.

use serde_json::Value;

use super::{Kind, Resource};

/// core/v1 Node.
pub struct Node;

impl Kind for Node {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut m = super::identity(obj, r);
        let status = &obj["status"];
        m.insert("conditions".into(), super::conditions(status));
        m.insert("capacity".into(), status["capacity"].clone());
        m.insert("allocatable".into(), status["allocatable"].clone());
        m.insert(
            "taints".into(),
            obj["spec"]["taints"]
                .as_array()
                .map(|t| Value::Array(t.clone()))
                .unwrap_or_else(|| Value::Array(Vec::new())),
        );
        m.insert(
            "unschedulable".into(),
            Value::Bool(obj["spec"]["unschedulable"].as_bool().unwrap_or(false)),
        );
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_summary_keeps_conditions_resources_taints_and_cordon() {
        let n = json!({"metadata": {"name": "n1", "uid": "u", "resourceVersion": "4"},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "3800m"},
                "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}],
                "images": [{"names": ["big"]}]}});
        let s = Node.summary(&n, &Resource::new("", "v1", "Node", "nodes", false));
        assert_eq!(s["kind"], "Node");
        assert_eq!(s["conditions"][0]["reason"], "KubeletDown");
        assert_eq!(s["allocatable"]["cpu"], "3800m");
        assert_eq!(s["taints"][0]["key"], "k");
        assert_eq!(s["unschedulable"], true);
        assert!(s.get("images").is_none() && s.get("status").is_none());
    }
}
