//! `full` data in one pass over the apiserver's bytes: the Pod as sent, without
//! `metadata.managedFields`, with the configured redactions, and with `apiVersion` and `kind`
//! added when the object lacks them (list items do). Entry point: [`full_data`].
//!
//! Only the members on the way to what changes are parsed, as borrowed slices of the input
//! (`serde_json::value::RawValue`); every other value is copied through as the bytes it is.
//! Building a `serde_json::Value` of the whole Pod and serializing it again cost most of the
//! per-event time; this keeps the object's own bytes and key order.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::config::RedactConfig;

/// What replaces a redacted value, as JSON: the string `<redacted>`.
const REDACTED_JSON: &[u8] = b"\"<redacted>\"";

/// The container lists whose env values are redacted.
const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// A member name: borrowed from the input when it has no escapes, decoded when it has.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON object's members in document order, values unparsed.
struct Members<'a>(Vec<(Key<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON array's elements, unparsed.
struct Elements<'a>(Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for Elements<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Elements<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elements<'de>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(8));
                while let Some(v) = seq.next_element::<&'de RawValue>()? {
                    out.push(v);
                }
                Ok(Elements(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// The members of `raw` if it is an object (else `None`: it is copied as it is).
fn members(raw: &RawValue) -> Option<Members<'_>> {
    serde_json::from_str(raw.get()).ok()
}

fn elements(raw: &RawValue) -> Option<Elements<'_>> {
    serde_json::from_str(raw.get()).ok()
}

fn write_key(out: &mut Vec<u8>, key: &Key<'_>) {
    match &key.0 {
        // Borrowed: the input's own name, which needed no escaping.
        Cow::Borrowed(k) => {
            out.push(b'"');
            out.extend_from_slice(k.as_bytes());
            out.push(b'"');
        }
        // A string always serializes.
        Cow::Owned(k) => out.extend_from_slice(&serde_json::to_vec(k).unwrap_or_default()),
    }
    out.push(b':');
}

/// Writes an object of `members`, each value through `value` (which returns false to drop
/// the member).
fn write_object<'a>(
    out: &mut Vec<u8>,
    members: &[(Key<'a>, &'a RawValue)],
    mut value: impl FnMut(&mut Vec<u8>, &str, &'a RawValue) -> bool,
) {
    out.push(b'{');
    for (key, raw) in members {
        let mark = out.len();
        if out.last() != Some(&b'{') {
            out.push(b',');
        }
        write_key(out, key);
        if !value(out, &key.0, raw) {
            out.truncate(mark);
        }
    }
    out.push(b'}');
}

fn copy(out: &mut Vec<u8>, raw: &RawValue) -> bool {
    out.extend_from_slice(raw.get().as_bytes());
    true
}

fn redacted(out: &mut Vec<u8>) -> bool {
    out.extend_from_slice(REDACTED_JSON);
    true
}

/// `raw` with each member's value written by `value`, if it is an object; else as it is.
fn rewrite_object<'a>(
    out: &mut Vec<u8>,
    raw: &'a RawValue,
    value: impl FnMut(&mut Vec<u8>, &str, &'a RawValue) -> bool,
) -> bool {
    match members(raw) {
        Some(m) => write_object(out, &m.0, value),
        None => {
            copy(out, raw);
        }
    }
    true
}

/// `raw` with each element written by `item`, if it is an array; else as it is.
fn rewrite_array<'a>(
    out: &mut Vec<u8>,
    raw: &'a RawValue,
    mut item: impl FnMut(&mut Vec<u8>, &'a RawValue) -> bool,
) -> bool {
    let Some(items) = elements(raw) else {
        return copy(out, raw);
    };
    out.push(b'[');
    for (i, raw) in items.0.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, raw);
    }
    out.push(b']');
    true
}

/// An object whose members named in `keys` have their values replaced.
fn redact_members(out: &mut Vec<u8>, raw: &RawValue, keys: &[String]) -> bool {
    if keys.is_empty() {
        // Nothing to redact (labels, by default): not even parsed.
        return copy(out, raw);
    }
    rewrite_object(out, raw, |out, k, v| {
        if keys.iter().any(|r| r == k) {
            redacted(out)
        } else {
            copy(out, v)
        }
    })
}

fn metadata(out: &mut Vec<u8>, raw: &RawValue, redact: &RedactConfig) -> bool {
    rewrite_object(out, raw, |out, k, v| match k {
        "managedFields" => false,
        "annotations" => redact_members(out, v, &redact.annotations),
        "labels" => redact_members(out, v, &redact.labels),
        _ => copy(out, v),
    })
}

/// One env var: its `value` replaced.
fn env_var(out: &mut Vec<u8>, raw: &RawValue) -> bool {
    rewrite_object(out, raw, |out, k, v| {
        if k == "value" {
            redacted(out)
        } else {
            copy(out, v)
        }
    })
}

/// One container: its env values redacted.
fn container(out: &mut Vec<u8>, raw: &RawValue) -> bool {
    rewrite_object(out, raw, |out, k, v| {
        if k == "env" {
            rewrite_array(out, v, env_var)
        } else {
            copy(out, v)
        }
    })
}

fn spec(out: &mut Vec<u8>, raw: &RawValue) -> bool {
    rewrite_object(out, raw, |out, k, v| {
        if CONTAINER_LISTS.contains(&k) {
            rewrite_array(out, v, container)
        } else {
            copy(out, v)
        }
    })
}

/// The `full` data of a Pod object: see the module docs. Fails when `obj` is not a JSON
/// object, with serde_json's reason.
pub fn full_data(obj: &[u8], redact: &RedactConfig) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(obj).map_err(|e| e.to_string())?;
    let top: Members<'_> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(obj.len() + 64);
    let has = |name: &str| top.0.iter().any(|(k, _)| k.0 == name);
    let (api_version, kind) = (has("apiVersion"), has("kind"));
    write_object(&mut out, &top.0, |out, k, v| match k {
        "metadata" => metadata(out, v, redact),
        "spec" if redact.env_values => spec(out, v),
        _ => copy(out, v),
    });
    // List items come without apiVersion and kind; watch events carry them.
    if !(api_version && kind) {
        let mut head = Vec::with_capacity(out.len() + 32);
        head.push(b'{');
        if !api_version {
            head.extend_from_slice(br#""apiVersion":"v1","#);
        }
        if !kind {
            head.extend_from_slice(br#""kind":"Pod","#);
        }
        if out.len() == 2 {
            // `{}`: no member follows the added ones.
            head.pop();
        }
        head.extend_from_slice(&out[1..]);
        out = head;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redacted_marker_is_the_same_text_as_json() {
        assert_eq!(
            serde_json::to_vec("<redacted>").expect("a string serializes"),
            REDACTED_JSON
        );
    }

    #[test]
    fn keeps_the_objects_own_bytes_and_order_and_adds_what_list_items_lack() {
        let pod = br#"{"metadata":{"name":"p","managedFields":[{"m":1}],"labels":{"z":"1","a":"2"}},"spec":{"containers":[{"env":[{"name":"A","value":"s3cr3t"},{"name":"B","valueFrom":{"x":1}}],"name":"c"}]},"status":{"phase":"Running","n":1.50}}"#;
        let out = full_data(pod, &RedactConfig::default()).expect("an object");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"z":"1","a":"2"}},"spec":{"containers":[{"env":[{"name":"A","value":"<redacted>"},{"name":"B","valueFrom":{"x":1}}],"name":"c"}]},"status":{"phase":"Running","n":1.50}}"#
        );
    }
}
