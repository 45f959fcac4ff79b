//! The aspects of an object a route's change predicate can name (`labels`, `annotations`,
//! `spec`, `status`, `conditions`, `generation`, `owners`, a kind's own such as a Pod's
//! `phase` or `readiness` ([`crate::kinds::own_aspects`]), or any field by a path such as
//! `status.qosClass` or `spec.containers[*].image`), and a fingerprint of each: a
//! `modified` event passes a predicate when the fingerprint of one of its aspects differs
//! from the object's previous one. Fingerprints are 64-bit FNV-1a hashes of
//! the aspect's JSON (object keys sorted): stable across runs and builds, so they can be kept
//! in the durable state. Entry points: [`Aspect`], [`fingerprint`].

use serde_json::Value;

use crate::kinds::aspects::{Feed, KindAspect};
use crate::kinds::{own_aspect, own_aspects};
use crate::model::FieldPath;

/// One aspect of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aspect {
    /// An aspect only one kind has (a Pod's phase).
    Kind(&'static KindAspect),
    /// `metadata.labels`.
    Labels,
    /// `metadata.annotations`.
    Annotations,
    /// The whole `spec` (images, resources, ...).
    Spec,
    /// The whole `status`.
    Status,
    /// `status.conditions`, without their heartbeat and probe times.
    Conditions,
    /// `metadata.generation` (a spec change, for kinds that count them).
    Generation,
    /// `metadata.ownerReferences`.
    Owners,
    /// Any field, by path.
    Path(FieldPath),
}

impl Aspect {
    /// The aspect a predicate entry names: one of the names above, or a field path.
    pub fn parse(text: &str) -> Result<Aspect, String> {
        if let Some(a) = own_aspect(text) {
            return Ok(Aspect::Kind(a));
        }
        Ok(match text {
            "labels" => Aspect::Labels,
            "annotations" => Aspect::Annotations,
            "spec" => Aspect::Spec,
            "status" => Aspect::Status,
            "conditions" => Aspect::Conditions,
            "generation" => Aspect::Generation,
            "owners" => Aspect::Owners,
            path if path.contains('.') || path.contains('[') => {
                Aspect::Path(FieldPath::parse(path).map_err(|e| e.to_string())?)
            }
            other => {
                let names: Vec<&str> = own_aspects().map(|a| a.name).collect();
                let of = own_aspects().next().map_or("", |a| a.what);
                return Err(format!(
                    "`{other}` is not an aspect ({} for {of}; labels, annotations, spec, status, conditions, generation, owners for any kind) or a field path (status.qosClass)",
                    names.join(", ")
                ));
            }
        })
    }
}

impl Aspect {
    /// The kind whose objects alone have it (refused on a route that can take other kinds).
    pub fn kind_only(&self) -> Option<&'static KindAspect> {
        match self {
            Aspect::Kind(a) => Some(a),
            _ => None,
        }
    }
}

/// The fingerprint of `aspect` in `pod` (an object of any kind as JSON; a kind's own
/// aspects read that kind's fields).
pub fn fingerprint(pod: &Value, aspect: &Aspect) -> u64 {
    let status = &pod["status"];
    let mut h = Fnv::new();
    match aspect {
        Aspect::Kind(a) => (a.feed)(pod, &mut h),
        Aspect::Labels => h.value(&pod["metadata"]["labels"]),
        Aspect::Annotations => h.value(&pod["metadata"]["annotations"]),
        Aspect::Spec => h.value(&pod["spec"]),
        Aspect::Status => h.value(status),
        Aspect::Conditions => {
            for c in status["conditions"].as_array().into_iter().flatten() {
                for k in ["type", "status", "reason", "message"] {
                    h.value(&c[k]);
                }
            }
        }
        Aspect::Generation => h.value(&pod["metadata"]["generation"]),
        Aspect::Owners => h.value(&pod["metadata"]["ownerReferences"]),
        Aspect::Path(path) => {
            for v in path.select(pod) {
                h.value(v);
            }
        }
    }
    h.0
}

/// 64-bit FNV-1a, fed with a canonical form of JSON values.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Feed for Fnv {
    fn bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    /// Feeds `v` with object keys in sorted order (serde_json's default map is sorted).
    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.bytes(b"n"),
            Value::Bool(b) => self.bytes(if *b { b"t" } else { b"f" }),
            Value::Number(n) => self.bytes(n.to_string().as_bytes()),
            Value::String(s) => {
                self.bytes(b"s");
                self.bytes(s.as_bytes());
            }
            Value::Array(items) => {
                self.bytes(b"[");
                items.iter().for_each(|i| self.value(i));
                self.bytes(b"]");
            }
            Value::Object(map) => {
                self.bytes(b"{");
                for (k, v) in map {
                    self.bytes(k.as_bytes());
                    self.value(v);
                }
                self.bytes(b"}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "img:1"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}], "hostIP": "1.2.3.4",
                "qosClass": "Burstable",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t1"}],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "t1"}}}]}
        })
    }

    /// Applies `change` to a copy of the pod and returns the aspects whose fingerprint moved.
    fn moved(change: impl Fn(&mut Value)) -> Vec<&'static str> {
        let names = [
            "phase",
            "readiness",
            "container_states",
            "restart_counts",
            "node",
            "ips",
            "labels",
            "annotations",
            "spec",
            "status.qosClass",
            "spec.containers[*].image",
        ];
        let before = pod();
        let mut after = pod();
        change(&mut after);
        names
            .into_iter()
            .filter(|n| {
                let a = Aspect::parse(n).unwrap_or_else(|e| panic!("{n}: {e}"));
                fingerprint(&before, &a) != fingerprint(&after, &a)
            })
            .collect()
    }

    #[test]
    fn each_change_moves_exactly_the_aspects_it_touches() {
        assert_eq!(moved(|_| {}), Vec::<&str>::new(), "nothing changed");
        assert_eq!(
            moved(|p| p["status"]["phase"] = json!("Failed")),
            vec!["phase"]
        );
        assert_eq!(
            moved(|p| p["status"]["conditions"][0]["status"] = json!("False")),
            vec!["readiness"]
        );
        assert_eq!(
            moved(|p| p["status"]["conditions"][0]["lastTransitionTime"] = json!("t2")),
            Vec::<&str>::new(),
            "a timestamp alone is no change of readiness"
        );
        assert_eq!(
            moved(|p| p["status"]["containerStatuses"][0]["state"] =
                json!({"terminated": {"reason": "OOMKilled", "exitCode": 137}})),
            vec!["container_states"]
        );
        assert_eq!(
            moved(|p| p["status"]["containerStatuses"][0]["restartCount"] = json!(1)),
            vec!["restart_counts"]
        );
        assert_eq!(
            moved(|p| p["spec"]["nodeName"] = json!("n2")),
            vec!["node", "spec"]
        );
        assert_eq!(
            moved(|p| p["status"]["hostIP"] = json!("5.6.7.8")),
            vec!["ips"]
        );
        assert_eq!(
            moved(|p| p["metadata"]["labels"]["v"] = json!("2")),
            vec!["labels"]
        );
        assert_eq!(
            moved(|p| p["metadata"]["annotations"]["a"] = json!("2")),
            vec!["annotations"]
        );
        assert_eq!(
            moved(|p| p["spec"]["containers"][0]["image"] = json!("img:2")),
            vec!["spec", "spec.containers[*].image"]
        );
        assert_eq!(
            moved(|p| p["status"]["qosClass"] = json!("Guaranteed")),
            vec!["status.qosClass"]
        );
    }

    #[test]
    fn fingerprints_do_not_depend_on_key_order_and_unknown_names_are_refused() {
        let a: Value =
            serde_json::from_str(r#"{"metadata":{"labels":{"a":"1","b":"2"}}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"metadata":{"labels":{"b":"2","a":"1"}}}"#).unwrap();
        assert_eq!(
            fingerprint(&a, &Aspect::Labels),
            fingerprint(&b, &Aspect::Labels)
        );
        let e = Aspect::parse("colour").unwrap_err();
        assert!(e.contains("`colour` is not an aspect"), "{e}");
    }
}
