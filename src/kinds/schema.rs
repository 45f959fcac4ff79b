//! The JSON Schemas of the `data` of events of any kind, per data mode: `full` from the API
//! types (k8s-openapi's, through schemars, for the built-ins kubecast ships; the apiserver's
//! OpenAPI v3 for every other resource, custom resources included), `summary` from each
//! kind's own summary, `reference` the same shape for all. Entry points: [`shipped`] (the
//! built-ins, offline: what `schemas/` holds), [`from_openapi`] (any served resource) and
//! [`wrap`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::Resource;

/// The data modes, as they appear in schema names.
pub const MODES: [&str; 3] = ["full", "summary", "reference"];

/// The built-in kinds whose schemas `schemas/` ships: (group, version, kind, plural,
/// namespaced).
pub const SHIPPED: [(&str, &str, &str, &str, bool); 13] = [
    ("", "v1", "Pod", "pods", true),
    ("", "v1", "Node", "nodes", false),
    ("", "v1", "Event", "events", true),
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ConfigMap", "configmaps", true),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    ),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "ReplicaSet", "replicasets", true),
    ("apps", "v1", "StatefulSet", "statefulsets", true),
    ("apps", "v1", "DaemonSet", "daemonsets", true),
    ("batch", "v1", "Job", "jobs", true),
    ("batch", "v1", "CronJob", "cronjobs", true),
];

/// The API type's schema of a built-in kind kubecast ships, from k8s-openapi.
fn api_type(r: &Resource) -> Option<Value> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    let schema = match (r.group.as_str(), r.version.as_str(), r.kind.as_str()) {
        ("", "v1", "Pod") => schemars::schema_for!(core::Pod),
        ("", "v1", "Node") => schemars::schema_for!(core::Node),
        ("", "v1", "Event") => schemars::schema_for!(core::Event),
        ("", "v1", "Namespace") => schemars::schema_for!(core::Namespace),
        ("", "v1", "Service") => schemars::schema_for!(core::Service),
        ("", "v1", "ConfigMap") => schemars::schema_for!(core::ConfigMap),
        ("", "v1", "PersistentVolumeClaim") => schemars::schema_for!(core::PersistentVolumeClaim),
        ("", "v1", "Secret") => schemars::schema_for!(core::Secret),
        ("apps", "v1", "Deployment") => schemars::schema_for!(apps::Deployment),
        ("apps", "v1", "ReplicaSet") => schemars::schema_for!(apps::ReplicaSet),
        ("apps", "v1", "StatefulSet") => schemars::schema_for!(apps::StatefulSet),
        ("apps", "v1", "DaemonSet") => schemars::schema_for!(apps::DaemonSet),
        ("batch", "v1", "Job") => schemars::schema_for!(batch::Job),
        ("batch", "v1", "CronJob") => schemars::schema_for!(batch::CronJob),
        _ => return None,
    };
    serde_json::to_value(schema).ok()
}

/// The built-in kind kubecast ships a schema of that `name` names (kubectl's names, short
/// names included), with its API type's schema: for checking paths offline. `None` for any
/// other name (a custom resource, a kind not shipped).
pub fn shipped_api_type(name: &str) -> Option<(String, Value)> {
    shipped_resource(name).map(|(_, what, schema)| (what, schema))
}

/// Whether kubecast ships the schemas of `r` (a built-in kind whose paths it can check
/// offline), without building them.
pub fn ships(r: &Resource) -> bool {
    r.is_pod()
        || SHIPPED
            .iter()
            .any(|(g, _, _, p, _)| *g == r.group && *p == r.plural)
}

/// [`shipped_api_type`] with the resource itself: (the resource, "a Deployment", its API
/// type's schema).
pub fn shipped_resource(name: &str) -> Option<(Resource, String, Value)> {
    SHIPPED.iter().find_map(|(g, v, k, p, n)| {
        let short: Vec<String> = super::resolve::builtin_short_names(g, p)
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = Resource::new(g, v, k, p, *n).with_names(&k.to_ascii_lowercase(), &short);
        if !r.answers_to(name) {
            return None;
        }
        let schema = api_type(&r)?;
        Some((r, format!("a {k}"), schema))
    })
}

/// The schema of `r`'s data in `mode` without the apiserver: the built-ins' `full` from
/// their API types, every kind's `summary` and `reference`. `None` for the `full` data of a
/// kind k8s-openapi does not have (ask [`from_openapi`]).
pub fn shipped(r: &Resource, mode: &str) -> Option<Value> {
    if r.is_pod() {
        // Pods keep the schemas they always had.
        let text = match mode {
            "full" => include_str!("../../schemas/pod-full.v1.json"),
            "summary" => include_str!("../../schemas/pod-summary.v1.json"),
            _ => include_str!("../../schemas/pod-reference.v1.json"),
        };
        return serde_json::from_str(text).ok();
    }
    let body = match mode {
        "full" => full_body(api_type(r)?, r),
        "summary" => summary_body(r),
        _ => reference_body(r),
    };
    Some(wrap(r, mode, body))
}

/// `body` with the `$id` (the URN events name as `dataschema`), a title and a description.
pub fn wrap(r: &Resource, mode: &str, body: Value) -> Value {
    let mut out = Map::new();
    out.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    out.insert("$id".into(), json!(&*r.schema_urn(mode)));
    out.insert(
        "title".into(),
        json!(format!("kubecast {} ({}), {mode}", r.kind, r.api_version())),
    );
    let what = match mode {
        "full" => format!(
            "The `data` of a kubecast event in `full` mode: the {} {} as the apiserver returned it, without `metadata.managedFields`. Redacted values are the string \"<redacted>\".",
            r.api_version(),
            r.kind
        ),
        "summary" => format!(
            "The `data` of a kubecast event in `summary` mode: kubecast's compact form of a {}.",
            r.kind
        ),
        _ => format!(
            "The `data` of a kubecast event in `reference` mode, and of every inferred delete: the {}'s identity.",
            r.kind
        ),
    };
    out.insert("description".into(), json!(what));
    if let Value::Object(b) = body {
        for (k, v) in b {
            if !matches!(k.as_str(), "$schema" | "$id" | "title" | "description") {
                out.insert(k, v);
            }
        }
    }
    Value::Object(out)
}

/// The API type's schema, with `apiVersion` and `kind` pinned (kubecast adds them to list
/// items that lack them) and every optional field allowed to be `null`, as the apiserver
/// writes some of them (an Event's `eventTime: null`, a condition's `lastProbeTime: null`).
fn full_body(mut schema: Value, r: &Resource) -> Value {
    nullable_optionals(&mut schema);
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("apiVersion".into(), json!({"const": &**r.api_version()}));
        props.insert("kind".into(), json!({"const": r.kind}));
    }
    schema["required"] = json!(["apiVersion", "kind", "metadata"]);
    schema
}

fn string_or_null() -> Value {
    json!({"type": ["string", "null"]})
}

/// The identity every summary starts with.
fn identity(r: &Resource) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("apiVersion".into(), json!({"const": &**r.api_version()}));
    p.insert("kind".into(), json!({"const": r.kind}));
    p.insert(
        "metadata".into(),
        json!({"type": "object", "required": ["name", "uid", "resourceVersion"],
            "properties": {"namespace": string_or_null(), "name": {"type": "string"},
                "uid": {"type": "string"}, "resourceVersion": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "deletionTimestamp": string_or_null()}}),
    );
    p.insert(
        "owner".into(),
        json!({"oneOf": [{"type": "null"}, {"type": "object", "properties": {"apiVersion": {"type": "string"},
            "kind": {"type": "string"}, "name": {"type": "string"}, "uid": {"type": "string"}}}]}),
    );
    p
}

fn conditions() -> Value {
    json!({"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"},
        "status": {"type": "string"}, "reason": string_or_null(), "message": string_or_null(),
        "lastTransitionTime": string_or_null()}}})
}

fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

fn summary_body(r: &Resource) -> Value {
    let mut p = identity(r);
    let mut required = vec!["apiVersion", "kind", "metadata"];
    let mut add = |k: &'static str, v: Value, req: bool| {
        p.insert(k.into(), v);
        if req {
            required.push(k);
        }
    };
    match (r.group.as_str(), r.kind.as_str()) {
        ("", "Node") => {
            add("conditions", conditions(), true);
            add("capacity", json!({"type": ["object", "null"]}), false);
            add("allocatable", json!({"type": ["object", "null"]}), false);
            add("taints", json!({"type": "array"}), true);
            add("unschedulable", json!({"type": "boolean"}), true);
        }
        ("", "Event") => {
            for k in [
                "type",
                "reason",
                "message",
                "firstTime",
                "lastTime",
                "reportingController",
            ] {
                add(k, string_or_null(), true);
            }
            add("involvedObject", json!({"type": "object"}), true);
            add("count", count(), true);
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
            add(
                "replicas",
                json!({"type": "object", "required": ["desired", "ready", "updated", "available"],
                    "properties": {"desired": count(), "ready": count(), "updated": count(), "available": count()}}),
                true,
            );
            add("generation", json!({"type": ["integer", "null"]}), false);
            add(
                "observedGeneration",
                json!({"type": ["integer", "null"]}),
                false,
            );
            add("conditions", conditions(), true);
            add(
                "images",
                json!({"type": "array", "items": {"type": "object"}}),
                true,
            );
        }
        ("batch", "Job") => {
            for k in ["active", "succeeded", "failed"] {
                add(k, count(), true);
            }
            add("startTime", string_or_null(), false);
            add("completionTime", string_or_null(), false);
            add("conditions", conditions(), true);
        }
        ("batch", "CronJob") => {
            add("schedule", json!({"type": "string"}), true);
            add("suspend", json!({"type": "boolean"}), true);
            add("active", count(), true);
            add("lastScheduleTime", string_or_null(), false);
            add("lastSuccessfulTime", string_or_null(), false);
        }
        _ => {
            add("phase", json!({}), false);
            add("conditions", conditions(), false);
            if r.group.is_empty() && r.kind == "Secret" {
                add("type", string_or_null(), false);
            }
        }
    }
    json!({"type": "object", "required": required, "properties": p})
}

fn reference_body(r: &Resource) -> Value {
    json!({"type": "object", "required": ["apiVersion", "kind", "metadata"], "additionalProperties": false,
        "properties": {"apiVersion": {"const": &**r.api_version()}, "kind": {"const": r.kind},
            "metadata": {"type": "object", "required": ["name", "uid", "resourceVersion"], "additionalProperties": false,
                "properties": {"namespace": {"type": "string"}, "name": {"type": "string"},
                    "uid": {"type": "string"}, "resourceVersion": {"type": "string"}}}}})
}

/// Why the apiserver's schema of a resource could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("reading the apiserver's OpenAPI v3 document {path}")]
    Request {
        path: String,
        #[source]
        source: kube::Error,
    },
    #[error("the apiserver's OpenAPI v3 has no schema for {0}")]
    Missing(String),
}

/// The `full` schema of any served resource from the apiserver's OpenAPI v3 (a custom
/// resource's from its CRD), as one standalone JSON Schema (`$defs` for what it refers to).
pub async fn from_openapi(client: &kube::Client, r: &Resource) -> Result<Value, SchemaError> {
    let get = |path: String| async move {
        let req = http::Request::get(&path)
            .header(http::header::ACCEPT, "application/json")
            .body(Vec::new())
            // An API path always makes a request.
            .unwrap_or_default();
        client
            .request::<Value>(req)
            .await
            .map_err(|source| SchemaError::Request { path, source })
    };
    let index = get("/openapi/v3".to_string()).await?;
    let gv = if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    };
    let url = index["paths"][&gv]["serverRelativeURL"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("/openapi/v3/{gv}"));
    let doc = get(url).await?;
    let schemas = doc["components"]["schemas"]
        .as_object()
        .ok_or_else(|| SchemaError::Missing(r.to_string()))?;
    let key = schemas
        .iter()
        .find(|(_, s)| {
            s["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|g| {
                    g["group"] == r.group.as_str()
                        && g["version"] == r.version.as_str()
                        && g["kind"] == r.kind.as_str()
                })
        })
        .map(|(k, _)| k.clone())
        .ok_or_else(|| SchemaError::Missing(r.to_string()))?;
    Ok(wrap(r, "full", full_body(standalone(schemas, &key), r)))
}

/// The schema `key` of an OpenAPI document's components, with every schema it refers to
/// (transitively) under `$defs` and its references pointing there.
fn standalone(schemas: &Map<String, Value>, key: &str) -> Value {
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    let mut queue = vec![key.to_string()];
    while let Some(k) = queue.pop() {
        if !wanted.insert(k.clone()) {
            continue;
        }
        if let Some(s) = schemas.get(&k) {
            let mut refs = Vec::new();
            collect_refs(s, &mut refs);
            queue.extend(refs);
        }
    }
    let mut root = schemas.get(key).cloned().unwrap_or(Value::Null);
    rewrite_refs(&mut root);
    let defs: BTreeMap<String, Value> = wanted
        .into_iter()
        .filter(|k| k != key)
        .filter_map(|k| {
            let mut s = schemas.get(&k)?.clone();
            rewrite_refs(&mut s);
            Some((k, s))
        })
        .collect();
    if !defs.is_empty() {
        root["$defs"] = json!(defs);
    }
    root
}

/// Wherever a schema lists `properties`, those not `required` may also be `null`.
fn nullable_optionals(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let required: Vec<String> = m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(Value::Object(props)) = m.get_mut("properties") {
                for (k, p) in props.iter_mut() {
                    nullable_optionals(p);
                    if !required.contains(k) && p.is_object() {
                        *p = json!({"anyOf": [p.take(), {"type": "null"}]});
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                if k != "properties" {
                    nullable_optionals(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(nullable_optionals),
        _ => {}
    }
}

const COMPONENT: &str = "#/components/schemas/";

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(COMPONENT))
            {
                out.push(r.to_string());
            }
            m.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref")
                && let Some(name) = r.strip_prefix(COMPONENT)
            {
                *r = format!("#/$defs/{name}");
            }
            m.values_mut().for_each(rewrite_refs);
        }
        Value::Array(a) => a.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped_resources() -> Vec<Resource> {
        SHIPPED
            .iter()
            .map(|(g, v, k, p, n)| Resource::new(g, v, k, p, *n))
            .collect()
    }

    /// `schemas/{name}-{mode}.v1.json`, the file of a schema URN.
    fn file_of(r: &Resource, mode: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("schemas")
            .join(format!("{}-{mode}.v1.json", r.schema_name()))
    }

    /// The shipped files are what the generator makes: regenerate them with
    /// `KUBECAST_WRITE_SCHEMAS=1 cargo test --lib shipped_schema_files`.
    #[test]
    fn shipped_schema_files_are_generated_from_the_api_types() {
        let write = std::env::var_os("KUBECAST_WRITE_SCHEMAS").is_some();
        for r in shipped_resources().iter().filter(|r| !r.is_pod()) {
            for mode in MODES {
                let schema = shipped(r, mode).expect("a shipped kind has every mode");
                let text = format!("{}\n", serde_json::to_string_pretty(&schema).expect("JSON"));
                let path = file_of(r, mode);
                if write {
                    std::fs::write(&path, &text).expect("writing a schema file");
                }
                let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
                assert!(
                    on_disk == text,
                    "{} is not what the generator makes; run with KUBECAST_WRITE_SCHEMAS=1",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn every_shipped_schema_is_a_valid_schema_that_takes_what_the_kind_emits() {
        for r in shipped_resources() {
            for mode in MODES {
                let schema = shipped(&r, mode).expect("every mode");
                assert_eq!(schema["$id"], &*r.schema_urn(mode), "{r} {mode}");
            }
        }
        let d = Resource::new("apps", "v1", "Deployment", "deployments", true);
        let summary = shipped(&d, "summary").expect("a summary schema");
        let props = summary["properties"].as_object().expect("properties");
        assert!(props.contains_key("replicas") && props.contains_key("images"));
        let full = shipped(&d, "full").expect("a full schema");
        assert_eq!(full["properties"]["kind"]["const"], "Deployment");
        assert!(
            shipped(
                &Resource::new("example.com", "v1", "Widget", "widgets", true),
                "full"
            )
            .is_none()
        );
    }

    #[test]
    fn an_openapi_component_becomes_a_standalone_schema() {
        let schemas: Map<String, Value> = serde_json::from_value(json!({
            "com.example.v1.Widget": {"type": "object", "properties": {
                "metadata": {"$ref": "#/components/schemas/io.k8s.ObjectMeta"},
                "spec": {"type": "object"}}},
            "io.k8s.ObjectMeta": {"type": "object", "properties": {"owner": {"allOf": [{"$ref": "#/components/schemas/io.k8s.Owner"}]}}},
            "io.k8s.Owner": {"type": "object"},
            "io.k8s.Unrelated": {"type": "string"}
        }))
        .expect("components");
        let s = standalone(&schemas, "com.example.v1.Widget");
        assert_eq!(
            s["properties"]["metadata"]["$ref"],
            "#/$defs/io.k8s.ObjectMeta"
        );
        assert_eq!(
            s["$defs"]["io.k8s.ObjectMeta"]["properties"]["owner"]["allOf"][0]["$ref"],
            "#/$defs/io.k8s.Owner"
        );
        assert!(s["$defs"].get("io.k8s.Unrelated").is_none());
    }

    #[test]
    fn optional_fields_may_be_null_as_the_apiserver_writes_them() {
        let mut s = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "string"}, "b": {"type": "string"},
            "c": {"type": "object", "properties": {"d": {"$ref": "#/$defs/x"}}}}});
        nullable_optionals(&mut s);
        assert_eq!(s["properties"]["a"], json!({"type": "string"}));
        assert_eq!(s["properties"]["b"]["anyOf"][1], json!({"type": "null"}));
        assert_eq!(
            s["properties"]["c"]["anyOf"][0]["properties"]["d"]["anyOf"][0]["$ref"],
            "#/$defs/x"
        );
    }
}
