//! A Pod's JSON as routes and rules read it: everything but `metadata.managedFields`, which
//! no predicate, selector or rule reads and which is often half of the object. Skipping it
//! while parsing (no value is built for it) halves the parse. Entry point: [`parse`]; [`labels`]
//! reads its labels.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The Pod in `bytes` without `metadata.managedFields`; `None` if it is not a JSON object.
pub fn parse(bytes: &[u8]) -> Option<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Object {
        skip: Some(("metadata", "managedFields")),
    }
    .deserialize(&mut de)
    .ok()?;
    de.end().ok()?;
    Some(v)
}

/// The labels of an object as JSON (string values only).
pub fn labels(pod: &Value) -> std::collections::BTreeMap<String, String> {
    pod["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A JSON object; within the member named `skip.0`, the member `skip.1` is left out.
struct Object {
    skip: Option<(&'static str, &'static str)>,
}

impl<'de> DeserializeSeed<'de> for Object {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Object {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.skip {
                Some((outer, inner)) if key == outer => {
                    let v = map.next_value_seed(Skipping(inner))?;
                    out.insert(key, v);
                }
                Some((_, inner)) if key == inner => {
                    // Only reached inside the outer member (see `Skipping`).
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let v = map.next_value::<Value>()?;
                    out.insert(key, v);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// The value of the outer member: an object without `self.0` (anything else as it is).
struct Skipping(&'static str);

impl<'de> DeserializeSeed<'de> for Skipping {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skipping {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                map.next_value::<IgnoredAny>()?;
            } else {
                out.insert(key, map.next_value::<Value>()?);
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn managed_fields_are_left_out_and_everything_else_kept() {
        let pod = json!({
            "metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"}},
            "spec": {"managedFields": "kept: not in metadata"},
            "status": {"phase": "Running"}
        });
        let got = parse(pod.to_string().as_bytes()).expect("an object");
        let mut want = pod.clone();
        if let Some(m) = want["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        assert_eq!(got, want);
        assert_eq!(parse(b"[1]"), None);
        assert_eq!(parse(b"{\"a\":1} trailing"), None);
        assert_eq!(
            parse(b"{\"metadata\": null}"),
            Some(json!({"metadata": null}))
        );
    }
}
