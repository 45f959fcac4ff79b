//! JSON merge patches (RFC 7386) between two versions of an object: the report stores each
//! object's first version and one patch per later change, so status churn costs the fields
//! that changed, not the whole object again. Entry point: [`merge_patch`].
//!
//! A merge patch cannot say "set to null" (null removes the member), so a member whose new
//! value is `null` reads back as absent; arrays are replaced whole.

use serde_json::{Map, Value};

/// The merge patch that turns `from` into `to` (`None`: they are equal).
pub fn merge_patch(from: &Value, to: &Value) -> Option<Value> {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = Map::new();
            for key in a.keys() {
                if !b.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            for (key, new) in b {
                match a.get(key) {
                    Some(old) => {
                        if let Some(p) = merge_patch(old, new) {
                            patch.insert(key.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), new.clone());
                    }
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        // Anything else is replaced whole (an object patched onto a non-object starts from
        // an empty object, which is the same).
        (a, b) if a == b => None,
        (_, b) => Some(b.clone()),
    }
}

/// Applies `patch` to `target` (RFC 7386), as the report's page does (the tests and the
/// merge-patch fuzz target check the round trip with it).
pub fn apply(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (key, value) in p {
            if value.is_null() {
                t.remove(key);
            } else {
                apply(t.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_status_change_patches_only_the_fields_that_changed() {
        let a = json!({"metadata": {"name": "p", "resourceVersion": "1"}, "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}});
        let b = json!({"metadata": {"name": "p", "resourceVersion": "2"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}});
        let p = merge_patch(&a, &b).expect("a patch");
        assert_eq!(
            p,
            json!({"metadata": {"resourceVersion": "2"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}})
        );
        let mut c = a.clone();
        apply(&mut c, &p);
        assert_eq!(c, b);
    }

    #[test]
    fn equal_versions_have_no_patch_and_removed_members_become_null() {
        let a = json!({"a": 1, "b": {"c": 2}});
        assert_eq!(merge_patch(&a, &a), None);
        assert_eq!(
            merge_patch(&a, &json!({"b": {}})),
            Some(json!({"a": null, "b": {"c": null}}))
        );
    }

    /// JSON without nulls (a merge patch cannot carry them) and small enough to shrink well.
    fn json_without_null() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn applying_the_patch_gives_the_new_version(a in json_without_null(), b in json_without_null()) {
            let mut c = a.clone();
            if let Some(p) = merge_patch(&a, &b) {
                apply(&mut c, &p);
            }
            prop_assert_eq!(c, b);
        }
    }
}
