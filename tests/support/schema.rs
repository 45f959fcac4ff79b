//! The JSON Schemas shipped in `schemas/`, for checking emitted payloads.

use serde_json::Value;

/// The validator of `schemas/{name}`.
pub fn validator(name: &str) -> jsonschema::Validator {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let value: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    jsonschema::validator_for(&value)
        .unwrap_or_else(|e| panic!("{} is not a valid schema: {e}", path.display()))
}

/// The validator for a `dataschema` URN such as `urn:kubecast:schema:pod-full:v1`.
pub fn for_urn(urn: &str) -> jsonschema::Validator {
    let name = urn
        .strip_prefix("urn:kubecast:schema:")
        .and_then(|rest| rest.rsplit_once(':'))
        .map(|(mode, version)| format!("{mode}.{version}.json"))
        .unwrap_or_else(|| panic!("`{urn}` is not a kubecast schema URN"));
    validator(&name)
}

/// Fails with every violation if `data` does not follow the schema named by `urn`.
pub fn assert_follows(urn: &str, data: &Value, what: &str) {
    let v = for_urn(urn);
    let errors: Vec<String> = v
        .iter_errors(data)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not follow {urn}: {errors:?}\n{data}"
    );
}
