//! Whether a field path can reach anything in a Pod: checked against the core/v1 Pod's JSON
//! Schema (k8s-openapi's, through schemars), so that a rule, a message template or a route
//! predicate naming a field Pods do not have (`status.colour`) is refused at start-up
//! instead of silently never matching. Entry point: [`check`].

use std::sync::LazyLock;

use serde_json::Value;

use crate::model::{FieldPath, Step};

/// The Pod's schema, built once (about 200 KiB of JSON).
static POD: LazyLock<Value> = LazyLock::new(|| {
    serde_json::to_value(schemars::schema_for!(k8s_openapi::api::core::v1::Pod))
        .unwrap_or(Value::Null)
});

/// `Ok` when every step of `path` names something a Pod can have; else which step does not.
pub fn check(path: &FieldPath) -> Result<(), String> {
    check_in(&POD, "a Pod", path)
}

/// Checks `path` against the objects of the resources `names` (kubectl's names): with Pods
/// only, against the Pod; else against every built-in kind among them that kubecast ships
/// a schema of, where some may lack it (`status.readyReplicas` on a route of Deployments and
/// Pods) but none having it is a mistake.
pub fn check_for(names: &[&str], path: &FieldPath) -> Result<(), String> {
    let pods = crate::kinds::Resource::pods();
    if names.iter().all(|n| pods.answers_to(n)) {
        return check(path);
    }
    let results: Vec<Result<(), String>> = names
        .iter()
        .filter_map(|n| crate::kinds::schema::shipped_api_type(n))
        .map(|(what, schema)| check_in(&schema, &what, path))
        .collect();
    match results.iter().find(|r| r.is_err()) {
        Some(Err(e)) if results.iter().all(Result::is_err) => Err(e.clone()),
        _ => Ok(()),
    }
}

/// The same against `root`, the JSON Schema of `object` (`a Deployment`).
pub fn check_in(root: &Value, object: &str, path: &FieldPath) -> Result<(), String> {
    if root.is_null() {
        // The schema could not be built (it always can); accept rather than refuse.
        return Ok(());
    }
    let mut here = resolve(root, root);
    let mut walked = String::new();
    for step in path.steps() {
        let next = match step {
            Step::Key(k) => here["properties"]
                .get(k)
                .or_else(|| here.get("additionalProperties").filter(|a| a.is_object())),
            Step::Index(_) | Step::Every => here
                .get("items")
                .or_else(|| here.get("additionalProperties").filter(|a| a.is_object())),
        };
        // A custom resource's schema may leave a subtree open (any fields).
        if here["x-kubernetes-preserve-unknown-fields"] == true {
            return Ok(());
        }
        let Some(next) = next else {
            let what = match step {
                Step::Key(k) => format!("`{k}`"),
                Step::Index(i) => format!("[{i}]"),
                Step::Every => "[*]".to_string(),
            };
            let inside = if walked.is_empty() {
                object.to_string()
            } else {
                format!("`{walked}`")
            };
            return Err(format!(
                "field path `{}`: {inside} has no {what}",
                path.as_str()
            ));
        };
        here = resolve(root, next);
        match step {
            Step::Key(k) if walked.is_empty() => walked.push_str(k),
            Step::Key(k) => {
                walked.push('.');
                walked.push_str(k);
            }
            Step::Index(i) => walked.push_str(&format!("[{i}]")),
            Step::Every => walked.push_str("[*]"),
        }
    }
    Ok(())
}

/// Follows `$ref`s to the definition.
fn resolve<'a>(root: &'a Value, mut v: &'a Value) -> &'a Value {
    for _ in 0..8 {
        if let Some(r) = v.get("$ref").and_then(Value::as_str) {
            let name = r.trim_start_matches("#/$defs/");
            v = &root["$defs"][name];
            continue;
        }
        // The apiserver's OpenAPI wraps references (`anyOf: [{allOf: [{$ref}]}, {type:
        // null}]`): the first branch that is not `null` is the definition.
        let wrapped = ["allOf", "anyOf", "oneOf"].iter().find_map(|k| {
            v.get(*k)?
                .as_array()?
                .iter()
                .find(|b| b.get("type").and_then(Value::as_str) != Some("null"))
        });
        match wrapped {
            Some(inner) if v.get("properties").is_none() => v = inner,
            _ => break,
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(p: &str) -> Result<(), String> {
        check(&FieldPath::parse(p).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn fields_pods_have_are_accepted() {
        for p in [
            "status.phase",
            "status.containerStatuses[*].restartCount",
            "status.containerStatuses[0].state.waiting.reason",
            "metadata.labels['app.kubernetes.io/name']",
            "spec.containers[*].resources.limits['nvidia.com/gpu']",
            "spec.nodeName",
            "status.conditions[*].lastTransitionTime",
        ] {
            assert_eq!(ok(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn fields_pods_do_not_have_are_named() {
        assert_eq!(
            ok("status.colour").unwrap_err(),
            "field path `status.colour`: `status` has no `colour`"
        );
        assert!(
            ok("spec.containers[*].imag")
                .unwrap_err()
                .contains("`spec.containers[*]` has no `imag`")
        );
        assert!(
            ok("status.phase.x")
                .unwrap_err()
                .contains("`status.phase` has no `x`")
        );
        assert!(ok("colour").unwrap_err().contains("a Pod has no `colour`"));
    }
}
