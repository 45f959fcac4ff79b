//! `full` data in one pass over the apiserver's bytes: the object as sent, without
//! `metadata.managedFields`, with the configured redactions (env values in every pod spec:
//! a Pod's, a workload's template, a CronJob's job template; every value of a Secret's
//! `data` and `stringData`), and with `apiVersion` and `kind` added when the object lacks them
//! (list items do). Entry point: [`full_data`].
//!
//! The object is read once, as a stream: a [`Place`] says where in it the reader is, and
//! each member is either copied through as the bytes it is (a borrowed
//! `serde_json::value::RawValue`), skipped, replaced, or descended into with the place it
//! leads to. Each byte is scanned once; the object's own bytes and key order are kept.
//! Building a `serde_json::Value` of the whole Pod (and, after that, parsing each level again
//! from its raw slice) cost most of the per-event time.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::config::RedactConfig;
use crate::kinds::PodSpecAt;

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

/// What the object's kind holds that is redacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Where its pod spec is.
    pub pod_spec: PodSpecAt,
    /// Whether `data` and `stringData` are secrets (a Secret).
    pub secret: bool,
}

#[cfg(test)]
impl Shape {
    /// A Pod's shape.
    pub const POD: Shape = Shape {
        pod_spec: PodSpecAt::Spec,
        secret: false,
    };
}

/// Where in the object a value is: what happens to its members or elements.
#[derive(Clone, Copy)]
enum Place<'r> {
    /// The object itself: `metadata`, the way to its pod spec (with env redaction) and a
    /// Secret's data are descended into.
    Root(Shape),
    Metadata,
    /// `labels` or `annotations`: the members named are redacted.
    Redact(&'r [String]),
    /// Every member's value is redacted (a Secret's `data` and `stringData`).
    RedactAll,
    /// A workload's `spec`, whose `template` holds the pod template.
    WorkloadSpec,
    /// A pod template, whose `spec` is a pod spec.
    Template,
    /// A CronJob's `spec`, whose `jobTemplate` holds a Job template.
    CronSpec,
    /// A Job template, whose `spec` is a Job's spec.
    JobTemplate,
    /// A pod spec.
    Spec,
    /// `containers`, `initContainers`, `ephemeralContainers`: each element is a container.
    Containers,
    Container,
    /// A container's `env`: each element is an env var.
    Env,
    /// One env var: its `value` is redacted.
    EnvVar,
}

/// What happens to one member.
enum Action<'r> {
    Copy,
    Drop,
    Redact,
    Into(Place<'r>),
}

impl<'r> Place<'r> {
    fn member(self, key: &str, redact: &'r RedactConfig) -> Action<'r> {
        match (self, key) {
            (Place::Root(_), "metadata") => Action::Into(Place::Metadata),
            (Place::Root(shape), "spec") if redact.env_values => match shape.pod_spec {
                PodSpecAt::None => Action::Copy,
                PodSpecAt::Spec => Action::Into(Place::Spec),
                PodSpecAt::Template => Action::Into(Place::WorkloadSpec),
                PodSpecAt::JobTemplate => Action::Into(Place::CronSpec),
            },
            (Place::Root(shape), "data" | "stringData") if shape.secret => {
                Action::Into(Place::RedactAll)
            }
            (Place::RedactAll, _) => Action::Redact,
            (Place::WorkloadSpec, "template") => Action::Into(Place::Template),
            (Place::Template, "spec") => Action::Into(Place::Spec),
            (Place::CronSpec, "jobTemplate") => Action::Into(Place::JobTemplate),
            (Place::JobTemplate, "spec") => Action::Into(Place::WorkloadSpec),
            (Place::Metadata, "managedFields") => Action::Drop,
            // Nothing to redact (labels, by default): copied, not even descended into.
            (Place::Metadata, "annotations") if !redact.annotations.is_empty() => {
                Action::Into(Place::Redact(&redact.annotations))
            }
            (Place::Metadata, "labels") if !redact.labels.is_empty() => {
                Action::Into(Place::Redact(&redact.labels))
            }
            (Place::Redact(keys), k) if keys.iter().any(|r| r == k) => Action::Redact,
            (Place::Spec, k) if CONTAINER_LISTS.contains(&k) => Action::Into(Place::Containers),
            (Place::Container, "env") => Action::Into(Place::Env),
            (Place::EnvVar, "value") => Action::Redact,
            _ => Action::Copy,
        }
    }

    /// The place of each element, where this place is an array.
    fn element(self) -> Option<Place<'r>> {
        match self {
            Place::Containers => Some(Place::Container),
            Place::Env => Some(Place::EnvVar),
            _ => None,
        }
    }
}

/// Writes the value at `place` to `out` as it is read. Which members the Pod itself had of
/// `apiVersion` and `kind` goes to `seen`.
struct Rewrite<'o, 'r> {
    out: &'o mut Vec<u8>,
    place: Place<'r>,
    redact: &'r RedactConfig,
    seen: Option<&'o mut (bool, bool)>,
}

impl<'de> DeserializeSeed<'de> for Rewrite<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Rewrite<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Rewrite {
            out,
            place,
            redact,
            mut seen,
        } = self;
        // An array place holding an object: copied member by member.
        let place = if place.element().is_some() {
            None
        } else {
            Some(place)
        };
        out.push(b'{');
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if let Some(seen) = seen.as_deref_mut() {
                seen.0 |= key.0 == "apiVersion";
                seen.1 |= key.0 == "kind";
            }
            let action = place.map_or(Action::Copy, |p| p.member(&key.0, redact));
            if matches!(action, Action::Drop) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if out.last() != Some(&b'{') {
                out.push(b',');
            }
            write_key(out, &key);
            match action {
                Action::Copy | Action::Drop => {
                    let raw = map.next_value::<&'de RawValue>()?;
                    out.extend_from_slice(raw.get().as_bytes());
                }
                Action::Redact => {
                    map.next_value::<IgnoredAny>()?;
                    out.extend_from_slice(REDACTED_JSON);
                }
                Action::Into(child) => map.next_value_seed(Rewrite {
                    out: &mut *out,
                    place: child,
                    redact,
                    seen: None,
                })?,
            }
        }
        out.push(b'}');
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if matches!(self.place, Place::Root(_)) {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let Rewrite {
            out, place, redact, ..
        } = self;
        out.push(b'[');
        let mut first = true;
        loop {
            if !first {
                out.push(b',');
            }
            let more = match place.element() {
                Some(child) => seq
                    .next_element_seed(Rewrite {
                        out: &mut *out,
                        place: child,
                        redact,
                        seen: None,
                    })?
                    .is_some(),
                // An object place holding an array: copied element by element.
                None => match seq.next_element::<&'de RawValue>()? {
                    Some(raw) => {
                        out.extend_from_slice(raw.get().as_bytes());
                        true
                    }
                    None => false,
                },
            };
            if !more {
                if !first {
                    out.pop(); // the comma before the end
                }
                break;
            }
            first = false;
        }
        out.push(b']');
        Ok(())
    }

    // A scalar where an object or array was expected is kept (as serde_json writes it); the
    // object itself must be an object.
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(&v, de::Unexpected::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(&v, de::Unexpected::Signed(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(&v, de::Unexpected::Unsigned(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(&v, de::Unexpected::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(&v, de::Unexpected::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar(&(), de::Unexpected::Unit)
    }
}

impl Rewrite<'_, '_> {
    fn scalar<E: de::Error>(
        self,
        v: &impl serde::Serialize,
        what: de::Unexpected<'_>,
    ) -> Result<(), E> {
        if matches!(self.place, Place::Root(_)) {
            return Err(E::invalid_type(what, &self));
        }
        // Booleans, numbers, strings and null always serialize.
        self.out
            .extend_from_slice(&serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec()));
        Ok(())
    }
}

/// The `full` data of an object of `shape`, whose apiVersion and kind are added when it
/// lacks them: see the module docs. Fails when `obj` is not a JSON object, with serde_json's
/// reason.
pub fn full_data(
    obj: &[u8],
    redact: &RedactConfig,
    shape: Shape,
    api_version: &str,
    kind: &str,
) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(obj).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(obj.len() + 64);
    let mut seen = (false, false);
    let mut de = serde_json::Deserializer::from_str(text);
    Rewrite {
        out: &mut out,
        place: Place::Root(shape),
        redact,
        seen: Some(&mut seen),
    }
    .deserialize(&mut de)
    .and_then(|()| de.end())
    .map_err(|e| e.to_string())?;
    // List items come without apiVersion and kind; watch events carry them.
    let (api_version_of, kind_of) = (api_version, kind);
    let (api_version, kind) = seen;
    if !(api_version && kind) {
        let (has_api_version, has_kind) = (api_version, kind);
        let mut head = Vec::with_capacity(64);
        // A string always serializes.
        let quoted = |s: &str| serde_json::to_vec(s).unwrap_or_default();
        if !has_api_version {
            head.extend_from_slice(br#""apiVersion":"#);
            head.extend_from_slice(&quoted(api_version_of));
            head.push(b',');
        }
        if !has_kind {
            head.extend_from_slice(br#""kind":"#);
            head.extend_from_slice(&quoted(kind_of));
            head.push(b',');
        }
        if out.len() == 2 {
            // `{}`: no member follows the added ones.
            head.pop();
        }
        out.splice(1..1, head);
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
        let out =
            full_data(pod, &RedactConfig::default(), Shape::POD, "v1", "Pod").expect("an object");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"z":"1","a":"2"}},"spec":{"containers":[{"env":[{"name":"A","value":"<redacted>"},{"name":"B","valueFrom":{"x":1}}],"name":"c"}]},"status":{"phase":"Running","n":1.50}}"#
        );
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    fn full(obj: serde_json::Value, pod_spec: PodSpecAt, secret: bool) -> serde_json::Value {
        let out = full_data(
            obj.to_string().as_bytes(),
            &RedactConfig::default(),
            Shape { pod_spec, secret },
            "x/v1",
            "X",
        )
        .expect("an object");
        serde_json::from_slice(&out).expect("JSON")
    }

    fn containers() -> serde_json::Value {
        serde_json::json!({"containers": [{"name": "c", "env": [{"name": "T", "value": "s3cr3t"}]}]})
    }

    #[test]
    fn env_values_are_redacted_in_workload_and_cron_job_templates() {
        let d = full(
            serde_json::json!({"spec": {"replicas": 2, "template": {"spec": containers()}}}),
            PodSpecAt::Template,
            false,
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
            "<redacted>"
        );
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(
            (d["apiVersion"].as_str(), d["kind"].as_str()),
            (Some("x/v1"), Some("X"))
        );
        let c = full(
            serde_json::json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": containers()}}}}}),
            PodSpecAt::JobTemplate,
            false,
        );
        assert_eq!(
            c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
            "<redacted>"
        );
        // A kind without a pod spec keeps a `spec.containers` of its own as it is.
        let w = full(
            serde_json::json!({"spec": containers()}),
            PodSpecAt::None,
            false,
        );
        assert_eq!(w["spec"]["containers"][0]["env"][0]["value"], "s3cr3t");
    }

    #[test]
    fn every_value_of_a_secret_is_redacted_and_its_keys_kept() {
        let s = full(
            serde_json::json!({"type": "Opaque", "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "t"}}),
            PodSpecAt::None,
            true,
        );
        assert_eq!(s["data"]["password"], "<redacted>");
        assert_eq!(s["stringData"]["token"], "<redacted>");
        assert_eq!(s["type"], "Opaque");
        // Only a Secret's data: a ConfigMap's stays.
        let c = full(
            serde_json::json!({"data": {"k": "v"}}),
            PodSpecAt::None,
            false,
        );
        assert_eq!(c["data"]["k"], "v");
    }
}
