//! What changed between two versions of an object, field by field — the same paths and
//! the same rules as the HTML report's diff (`html/page.js`), so a line printed by
//! `--follow`, a row of `--diff-clusters` and the report's detail panel agree. Entry points:
//! [`diff`] and [`Versions`] (each object's previous version while following).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::facts::ObjectKey;

/// How a field differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Edit {
    Added,
    Removed,
    Changed,
}

/// One field that differs between two versions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    pub kind: Edit,
    /// `status.phase`, `spec.containers[0].image`; `(the whole object)` when one of the two
    /// is not an object.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<Value>,
}

/// The fields that differ from `a` to `b`: a member only `b` has is added, one only `a` has
/// removed, a value that differs (or changes type) changed; objects and arrays are compared
/// member by member.
pub fn diff(a: &Value, b: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    walk(a, b, "", &mut out);
    out
}

fn walk(a: &Value, b: &Value, path: &str, out: &mut Vec<FieldChange>) {
    let at = |key: &str, array: bool| {
        if array {
            format!("{path}[{key}]")
        } else if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, old) in x {
                match y.get(k) {
                    Some(new) => walk(old, new, &at(k, false), out),
                    None => out.push(removed(at(k, false), old)),
                }
            }
            for (k, new) in y.iter().filter(|(k, _)| !x.contains_key(*k)) {
                out.push(added(at(k, false), new));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = at(&i.to_string(), true);
                match (x.get(i), y.get(i)) {
                    (Some(old), Some(new)) => walk(old, new, &p, out),
                    (Some(old), None) => out.push(removed(p, old)),
                    (None, Some(new)) => out.push(added(p, new)),
                    (None, None) => {}
                }
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            kind: Edit::Changed,
            path: if path.is_empty() {
                "(the whole object)".to_string()
            } else {
                path.to_string()
            },
            old: Some(a.clone()),
            new: Some(b.clone()),
        }),
    }
}

fn added(path: String, new: &Value) -> FieldChange {
    FieldChange {
        kind: Edit::Added,
        path,
        old: None,
        new: Some(new.clone()),
    }
}

fn removed(path: String, old: &Value) -> FieldChange {
    FieldChange {
        kind: Edit::Removed,
        path,
        old: Some(old.clone()),
        new: None,
    }
}

/// Each object's latest version, to diff its next one against: one entry per live object
/// read so far (a delete drops it).
#[derive(Debug, Default)]
pub struct Versions {
    last: HashMap<ObjectKey, Value>,
}

impl Versions {
    /// Takes `data` as the object's version now; returns what changed since its previous one
    /// (`None`: no earlier version was read).
    pub fn next(&mut self, key: &ObjectKey, data: Value) -> Option<Vec<FieldChange>> {
        let changes = self.last.get(key).map(|before| diff(before, &data));
        self.last.insert(key.clone(), data);
        changes
    }

    /// The object is gone.
    pub fn forget(&mut self, key: &ObjectKey) {
        self.last.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn paths(a: Value, b: Value) -> Vec<(Edit, String)> {
        diff(&a, &b).into_iter().map(|c| (c.kind, c.path)).collect()
    }

    #[test]
    fn nested_members_and_array_items_are_named_by_their_paths() {
        let a = json!({"status": {"phase": "Pending"}, "spec": {"containers": [{"image": "a"}]},
            "metadata": {"labels": {"x": "1"}}});
        let b = json!({"status": {"phase": "Running", "podIP": "10.0.0.1"},
            "spec": {"containers": [{"image": "b"}, {"image": "c"}]}, "metadata": {}});
        assert_eq!(
            paths(a, b),
            vec![
                (Edit::Removed, "metadata.labels".into()),
                (Edit::Changed, "spec.containers[0].image".into()),
                (Edit::Added, "spec.containers[1]".into()),
                (Edit::Changed, "status.phase".into()),
                (Edit::Added, "status.podIP".into()),
            ]
        );
    }

    #[test]
    fn a_change_of_type_or_of_the_whole_value_is_one_change() {
        assert_eq!(
            paths(json!({"a": {"b": 1}}), json!({"a": [1]})),
            vec![(Edit::Changed, "a".into())]
        );
        assert_eq!(
            paths(json!(null), json!({"a": 1})),
            vec![(Edit::Changed, "(the whole object)".into())]
        );
        assert!(paths(json!({"a": [1, {"b": 2}]}), json!({"a": [1, {"b": 2}]})).is_empty());
    }

    #[test]
    fn versions_diff_each_object_against_its_own_previous_version() {
        let mut v = Versions::default();
        let one = ObjectKey {
            cluster: "eu-1".into(),
            uid: "u".into(),
        };
        let other = ObjectKey {
            cluster: "us-1".into(),
            uid: "u".into(),
        };
        assert_eq!(v.next(&one, json!({"n": 1})), None);
        assert_eq!(
            v.next(&other, json!({"n": 5})),
            None,
            "the same uid elsewhere is new"
        );
        let c = v.next(&one, json!({"n": 2})).unwrap_or_default();
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].old.clone(), c[0].new.clone()),
            (Some(json!(1)), Some(json!(2)))
        );
        v.forget(&one);
        assert_eq!(
            v.next(&one, json!({"n": 3})),
            None,
            "a deleted object starts again"
        );
        assert!(v.next(&other, json!({"n": 6})).is_some());
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..4).prop_map(|n| json!(n)),
            "[ab]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[abc]", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Puts `v` at `path` in `target` (the paths `diff` writes), or removes it.
    fn set(target: &mut Value, path: &str, v: Option<&Value>) {
        if path == "(the whole object)" {
            *target = v.cloned().unwrap_or(Value::Null);
            return;
        }
        let mut steps: Vec<String> = Vec::new();
        for part in path.split('.') {
            let mut rest = part;
            while let Some(open) = rest.find('[') {
                if open > 0 {
                    steps.push(rest[..open].to_string());
                }
                let close = rest.find(']').unwrap_or(rest.len());
                steps.push(rest[open..=close].to_string());
                rest = &rest[(close + 1).min(rest.len())..];
            }
            if !rest.is_empty() {
                steps.push(rest.to_string());
            }
        }
        let mut at = target;
        for (i, step) in steps.iter().enumerate() {
            let last = i + 1 == steps.len();
            if let Some(n) = step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                let n: usize = n.parse().unwrap_or(0);
                let Value::Array(items) = at else { return };
                if last {
                    match v {
                        Some(v) if n < items.len() => items[n] = v.clone(),
                        Some(v) => items.push(v.clone()),
                        None => {
                            items.truncate(n);
                        }
                    }
                    return;
                }
                at = &mut items[n];
            } else {
                let Value::Object(m) = at else { return };
                if last {
                    match v {
                        Some(v) => {
                            m.insert(step.clone(), v.clone());
                        }
                        None => {
                            m.remove(step);
                        }
                    }
                    return;
                }
                at = m.entry(step.clone()).or_insert(Value::Null);
            }
        }
    }

    proptest! {
        /// The changes are exactly what turns one version into the other: applied to the
        /// first, they give the second, and equal versions have none.
        #[test]
        fn applying_the_changes_to_the_first_version_gives_the_second(a in value(), b in value()) {
            let changes = diff(&a, &b);
            prop_assert_eq!(changes.is_empty(), a == b);
            let mut rebuilt = a.clone();
            // Removals of array items from the end first, so indices stay right.
            for c in changes.iter().rev().filter(|c| c.kind == Edit::Removed) {
                set(&mut rebuilt, &c.path, None);
            }
            for c in changes.iter().filter(|c| c.kind != Edit::Removed) {
                set(&mut rebuilt, &c.path, c.new.as_ref());
            }
            prop_assert_eq!(rebuilt, b);
        }
    }
}
