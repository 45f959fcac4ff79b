//! Every other kind, custom resources included: the summary is the identity with
//! `status.phase` and `status.conditions` when the object has them. And Secrets, whose
//! summary never carries data.

use serde_json::Value;

use super::{Kind, Resource};

/// Any kind without extras of its own.
pub struct Generic;

/// core/v1 Secret: the generic summary; `data` and `stringData` are always redacted.
pub struct Secret;

impl Kind for Generic {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut m = super::identity(obj, r);
        let status = &obj["status"];
        if let Some(phase) = status.get("phase") {
            m.insert("phase".into(), phase.clone());
        }
        if status.get("conditions").is_some() {
            m.insert("conditions".into(), super::conditions(status));
        }
        Value::Object(m)
    }
}

impl Kind for Secret {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut s = Generic.summary(obj, r);
        s["type"] = obj["type"].clone();
        s
    }

    fn secret_data(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_generic_summary_keeps_identity_phase_and_conditions_when_present() {
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"namespace": "ns", "name": "w", "uid": "u", "resourceVersion": "2", "labels": {"a": "b"}},
            "spec": {"size": 3}, "status": {"phase": "Ready", "conditions": [{"type": "Synced", "status": "True"}]}});
        let s = Generic.summary(
            &w,
            &Resource::new("example.com", "v1", "Widget", "widgets", true),
        );
        assert_eq!(s["apiVersion"], "example.com/v1");
        assert_eq!(s["metadata"]["labels"]["a"], "b");
        assert_eq!(s["phase"], "Ready");
        assert_eq!(s["conditions"][0]["type"], "Synced");
        assert!(s.get("spec").is_none());
        let bare = Generic.summary(
            &json!({"metadata": {"name": "c"}, "data": {"k": "v"}}),
            &Resource::new("", "v1", "ConfigMap", "configmaps", true),
        );
        assert!(
            bare.get("phase").is_none()
                && bare.get("conditions").is_none()
                && bare.get("data").is_none()
        );
    }
}
