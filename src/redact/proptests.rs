//! Property tests of `full_data` against its reference model (`redact::model`): the whole
//! object as a `serde_json::Value`, changed in place. For pod-shaped objects with arbitrary
//! members, keys and strings (escapes, unicode), container lists and template metadata at any
//! depth (under members the pass always descends into and under any other), member names
//! spelled with `\u` escapes, and last-applied copies, both give the same JSON; for anything
//! else, both refuse.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

const LAST_APPLIED: &str = super::LAST_APPLIED;
/// An annotation and a label the generated configs may name.
const TOKEN: &str = "example.com/token";

use super::RedactConfig;
use super::model::{full_by_value, normalized};
use super::{Shape, full_data};

/// Any JSON value, a few levels deep, with strings that need escaping.
fn any_json() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        "[a-z]{0,6}",
        Just("with \"quotes\" and \\ backslash".to_string()),
        Just("line\nbreak\t\u{1} and <tags> & é ✓".to_string()),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        text.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((text.clone(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A member name: the interesting ones, or any (with escapes).
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("kubectl.kubernetes.io/last-applied-configuration".to_string()),
        Just("secret".to_string()),
        Just("value".to_string()),
        Just("env".to_string()),
        Just("containers".to_string()),
        Just("metadata".to_string()),
        Just(TOKEN.to_string()),
        Just("k\"ey\\/\u{7}".to_string()),
        "[a-z.]{1,8}",
    ]
}

fn object_of(
    fixed: Vec<(&'static str, BoxedStrategy<Value>)>,
    other: impl Strategy<Value = Value> + 'static,
) -> BoxedStrategy<Value> {
    let fixed: Vec<_> = fixed
        .into_iter()
        .map(|(k, s)| prop::option::of(s).prop_map(move |v| (k, v)))
        .collect();
    (fixed, prop::collection::vec((key(), other), 0..3))
        .prop_map(|(fixed, extra)| {
            let mut m = Map::new();
            for (k, v) in extra {
                m.insert(k, v);
            }
            for (k, v) in fixed {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            Value::Object(m)
        })
        .boxed()
}

/// A Pod-shaped value: every member on the redaction paths may be present, absent, or of
/// the wrong type, next to arbitrary others.
fn pod() -> impl Strategy<Value = Value> {
    let env_var = object_of(
        vec![
            ("name", "[A-Z]{1,4}".prop_map(Value::String).boxed()),
            ("value", any_json().boxed()),
        ],
        any_json(),
    );
    let env = prop_oneof![
        prop::collection::vec(env_var, 0..4).prop_map(Value::Array),
        any_json()
    ];
    let container = object_of(vec![("env", env.boxed())], any_json());
    let list = prop_oneof![
        prop::collection::vec(container, 0..3).prop_map(Value::Array),
        any_json()
    ]
    .boxed();
    let spec = object_of(
        vec![
            ("containers", list.clone()),
            ("initContainers", list.clone()),
            ("ephemeralContainers", list),
        ],
        any_json(),
    );
    let map_of_strings = prop_oneof![
        prop::collection::vec((key(), any_json()), 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        any_json()
    ]
    .boxed();
    let plain_metadata = object_of(
        vec![
            ("annotations", map_of_strings.clone()),
            ("labels", map_of_strings.clone()),
        ],
        any_json(),
    );
    // A pod spec deeper down, as a template or a custom resource holds one, with the
    // template's own metadata.
    let spec = prop_oneof![
        spec.clone(),
        (spec.clone(), plain_metadata.clone()).prop_map(
            |(s, m)| json!({"template": {"metadata": m, "spec": s}, "tasks": [{"podTemplate": {"spec": {}}}]})
        ),
        (spec, plain_metadata).prop_map(
            |(s, m)| json!({"jobTemplate": {"metadata": m, "spec": {"template": {"metadata": m, "spec": s}}}})
        ),
    ]
    .boxed();
    // A last-applied copy of an object like this one, with or without a Secret's data.
    let copy = object_of(
        vec![("spec", spec.clone()), ("data", any_json().boxed())],
        any_json(),
    )
    .prop_map(|c| json!({LAST_APPLIED: c.to_string()}))
    .boxed();
    let metadata = object_of(
        vec![
            ("managedFields", any_json().boxed()),
            (
                "annotations",
                prop_oneof![map_of_strings.clone(), copy].boxed(),
            ),
            ("labels", map_of_strings),
        ],
        any_json(),
    );
    object_of(
        vec![
            ("apiVersion", Just(json!("v1")).boxed()),
            ("kind", Just(json!("Pod")).boxed()),
            ("metadata", prop_oneof![metadata, any_json()].boxed()),
            ("spec", prop_oneof![spec.clone(), any_json()].boxed()),
            // Where the pass descends only when the bytes may hold something to redact.
            ("status", prop_oneof![spec, any_json()].boxed()),
            ("data", any_json().boxed()),
        ],
        any_json(),
    )
}

/// `bytes` with the member names the pass looks for spelled with a `\u` escape, wherever
/// `escape` says: the pass must find them all the same.
fn escaped(bytes: Vec<u8>, escape: bool) -> Vec<u8> {
    if !escape {
        return bytes;
    }
    let text = String::from_utf8(bytes).expect("serde_json writes UTF-8");
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text.as_str();
    let names = [
        ("\"metadata\":", "\"m\\u0065tadata\":"),
        ("\"containers\":", "\"c\\u006fntainers\":"),
        ("\"initContainers\":", "\"initC\\u006fntainers\":"),
        ("\"env\":", "\"\\u0065nv\":"),
        ("\"annotations\":", "\"\\u0061nnotations\":"),
    ];
    while let Some((at, (from, to))) = names
        .iter()
        .filter_map(|n| rest.find(n.0).map(|at| (at, n)))
        .min_by_key(|(at, _)| *at)
    {
        // A name that ends a longer one (`x\"metadata`) is left as it is.
        let after_backslash = rest[..at].ends_with('\\');
        out.push_str(&rest[..at]);
        out.push_str(if after_backslash { from } else { to });
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out.into_bytes()
}

/// `v` with `marker` as the value of annotation and label [`TOKEN`] in every `metadata`
/// object at any depth, and a last-applied copy of the marked object on its own metadata.
fn marked_metadata(mut v: Value, marker: &str) -> Value {
    fn walk(v: &mut Value, marker: &str) {
        match v {
            Value::Object(m) => {
                for (k, v) in m.iter_mut() {
                    if let (true, Value::Object(meta)) = (k == "metadata", &mut *v) {
                        for list in ["annotations", "labels"] {
                            if let Value::Object(a) = meta.entry(list).or_insert_with(|| json!({}))
                            {
                                a.insert(TOKEN.into(), json!(marker));
                            }
                        }
                    }
                    walk(v, marker);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| walk(v, marker)),
            _ => {}
        }
    }
    walk(&mut v, marker);
    let copy = v.to_string();
    if let Some(Value::Object(meta)) = v.get_mut("metadata")
        && let Some(Value::Object(a)) = meta.get_mut("annotations")
    {
        a.insert(LAST_APPLIED.into(), json!(copy));
    }
    v
}

fn redact_config() -> impl Strategy<Value = RedactConfig> {
    (
        any::<bool>(),
        prop::collection::vec(key(), 0..3),
        prop::collection::vec(key(), 0..2),
    )
        .prop_map(|(env_values, annotations, labels)| RedactConfig {
            env_values,
            annotations,
            labels,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn full_data_equals_the_value_model_for_pod_shaped_objects(
        pod in pod(),
        redact in redact_config(),
        secret in any::<bool>(),
        escape in any::<bool>(),
    ) {
        let bytes = escaped(serde_json::to_vec(&pod).expect("a Value serializes"), escape);
        let shape = Shape { secret };
        let out = full_data(&bytes, &redact, shape, "v1", "Pod").expect("an object is accepted");
        let got: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("full_data wrote invalid JSON ({e}): {}", String::from_utf8_lossy(&out)));
        let want = full_by_value(&bytes, &redact, secret).expect("the model accepts it");
        prop_assert_eq!(normalized(got), normalized(want));
    }

    #[test]
    fn full_data_refuses_what_is_not_an_object(v in any_json(), junk in "[\\[{\"a-z0-9,:]{0,12}") {
        let redact = RedactConfig::default();
        if !v.is_object() {
            let bytes = serde_json::to_vec(&v).expect("a Value serializes");
            prop_assert!(full_data(&bytes, &redact, Shape::default(), "v1", "Pod").is_err());
        }
        // Damaged input never panics and is refused exactly when the model refuses it.
        let model = full_by_value(junk.as_bytes(), &redact, false);
        prop_assert_eq!(full_data(junk.as_bytes(), &redact, Shape::default(), "v1", "Pod").is_ok(), model.is_ok(), "{}", junk);
    }

    #[test]
    fn a_marker_in_any_env_value_secret_value_or_last_applied_copy_never_survives(
        pod in pod(),
        secret in any::<bool>(),
        escape in any::<bool>(),
    ) {
        let marker = "kubecast-redaction-marker";
        let marked = super::model::marked(pod, marker, secret);
        let bytes = escaped(serde_json::to_vec(&marked).expect("a Value serializes"), escape);
        let out = full_data(&bytes, &RedactConfig::default(), Shape { secret }, "v1", "Pod").expect("an object");
        prop_assert!(!String::from_utf8_lossy(&out).contains(marker), "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn a_configured_annotation_or_label_in_any_metadata_at_any_depth_never_survives(
        pod in pod(),
        env_values in any::<bool>(),
        escape in any::<bool>(),
    ) {
        let marker = "kubecast-annotation-marker";
        let bytes = escaped(serde_json::to_vec(&marked_metadata(pod, marker)).expect("a Value serializes"), escape);
        let redact = RedactConfig { env_values, annotations: vec![TOKEN.into()], labels: vec![TOKEN.into()] };
        let out = full_data(&bytes, &redact, Shape::default(), "v1", "Pod").expect("an object");
        prop_assert!(!String::from_utf8_lossy(&out).contains(marker), "{}", String::from_utf8_lossy(&out));
    }
}
