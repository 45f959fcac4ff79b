//! The one redaction pass every output goes through: `full` data, summaries with configured
//! labels, alert evidence and messages, and the data `kubecast replay` reads. Entry point:
//! [`full_data`] (an object as the apiserver sent it); [`redacted`] without adding what list
//! items lack, and [`redacted_value`] that parsed.
//!
//! What is redacted, by shape rather than by kind:
//! - the `value` of every env var of every container in a `containers`, `initContainers` or
//!   `ephemeralContainers` list, wherever such a list sits in an object of any kind (a Pod's
//!   spec, a workload's or a custom resource's pod template, a PodTemplate, a CronJob's job
//!   template), when `encoding.redact.env_values` is on;
//! - every value of a Secret's `data` and `stringData`, whatever the config says;
//! - `kubectl.kubernetes.io/last-applied-configuration`: parsed as the object it is, redacted
//!   by these same rules and written back (an annotation that does not parse is redacted
//!   whole), so a Secret's or a workload's copy of itself carries nothing the object does not;
//! - the annotations and labels the config names, whole;
//!
//! the last three in every `metadata` object anywhere in the document, not only the object's
//! own: a workload's pod template, a CronJob's job template, a custom resource's templates,
//! and each of those inside a last-applied copy. The object's own `metadata.managedFields` is
//! dropped, and `apiVersion` and `kind` are added when the object lacks them (list items do).
//!
//! The object is read once, as a stream: a `Place` says where in it the reader is, and
//! each member is either copied through as the bytes it is (a borrowed
//! `serde_json::value::RawValue`), skipped, replaced, or descended into with the place it
//! leads to. A member that may hold a `metadata` object or a container list somewhere below
//! it (its bytes name one, or hold a `\u` escape that could spell one) is descended into; any
//! other is copied as it is, so status, data and the like cost one scan. The object's own
//! bytes and key order are kept.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

mod config;
mod json_key;
#[doc(hidden)]
pub mod model;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use config::RedactConfig;

use json_key::{Key, write_key};

/// What `r`'s objects hold that is redacted beyond what their shape shows.
pub fn shape_of(r: &crate::kinds::Resource) -> Shape {
    Shape {
        secret: crate::kinds::of(r).secret_data(),
    }
}

/// What replaces a redacted value, as JSON: the string `<redacted>`.
pub(crate) const REDACTED_JSON: &[u8] = b"\"<redacted>\"";

/// The annotation where `kubectl apply` keeps a copy of the object as applied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Members that usually hold a pod spec or a pod template (a Pod's `spec`, a workload's
/// `spec.template.spec`, a CronJob's `jobTemplate`): descended into as they are read. Every
/// other member is searched for a container list first, which costs a second scan of what
/// holds one.
const USUAL_HOLDERS: [&str; 3] = ["spec", "template", "jobTemplate"];

/// The container lists whose env values are redacted.
const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// What the object's kind holds that is redacted beyond what its shape shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// Whether `data` and `stringData` are secrets (a Secret).
    pub secret: bool,
}

/// What one pass redacts: the config, the kind's shape, and whether this is the copy inside
/// a last-applied annotation (whose own last-applied annotation is redacted whole).
struct Ctx<'r> {
    redact: &'r RedactConfig,
    shape: Shape,
    nested: bool,
}

/// Where in the object a value is: what happens to its members or elements.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The object itself: `metadata` and a Secret's data are its own; the rest is searched.
    Root,
    /// The object's own `metadata`.
    Metadata,
    /// Any other `metadata` object (a template's): as the object's own, but nothing dropped.
    InnerMetadata,
    /// `metadata.annotations`: the configured ones and the last-applied copy.
    Annotations,
    /// `metadata.labels`: the configured ones.
    Labels,
    /// Every member's value is redacted (a Secret's `data` and `stringData`).
    RedactAll,
    /// Anywhere else: `metadata` members are metadata; with env values redacted, members
    /// that name a container list are container lists; the others are searched.
    Any,
    /// `containers`, `initContainers`, `ephemeralContainers`: each element is a container.
    Containers,
    Container,
    /// A container's `env`: each element is an env var.
    Env,
    /// One env var: its `value` is redacted.
    EnvVar,
}

/// What happens to one member or element.
enum Action {
    Drop,
    Redact,
    Into(Place),
    /// Descended into as [`Place::Any`] when its bytes may hold a `metadata` object or a
    /// container list, else copied.
    Search,
    /// The last-applied annotation: parsed, redacted as the object, written back.
    LastApplied,
}

impl Place {
    fn member(self, key: &str, ctx: &Ctx<'_>) -> Action {
        let listed = |keys: &[String]| keys.iter().any(|r| r == key);
        match (self, key) {
            (Place::Root, "metadata") => Action::Into(Place::Metadata),
            (Place::Root, "data" | "stringData") if ctx.shape.secret => {
                Action::Into(Place::RedactAll)
            }
            (Place::RedactAll, _) => Action::Redact,
            (Place::Metadata, "managedFields") => Action::Drop,
            (Place::Metadata | Place::InnerMetadata, "annotations") => {
                Action::Into(Place::Annotations)
            }
            (Place::Metadata | Place::InnerMetadata, "labels") if !ctx.redact.labels.is_empty() => {
                Action::Into(Place::Labels)
            }
            (Place::Annotations, _) if listed(&ctx.redact.annotations) => Action::Redact,
            (Place::Annotations, LAST_APPLIED) if ctx.nested => Action::Redact,
            (Place::Annotations, LAST_APPLIED) => Action::LastApplied,
            (Place::Labels, _) if listed(&ctx.redact.labels) => Action::Redact,
            (Place::Container, "env") => Action::Into(Place::Env),
            (Place::EnvVar, "value") => Action::Redact,
            // A template's metadata, wherever it sits, is treated as the object's own.
            (_, "metadata") => Action::Into(Place::InnerMetadata),
            // Anywhere else, a container list is one; everything else is searched for one.
            (_, k) if ctx.redact.env_values && CONTAINER_LISTS.contains(&k) => {
                Action::Into(Place::Containers)
            }
            // Where pod specs usually sit, read as it comes instead of found first and read
            // again: the same rules, one scan instead of two.
            (Place::Root | Place::Any, k)
                if ctx.redact.env_values && USUAL_HOLDERS.contains(&k) =>
            {
                Action::Into(Place::Any)
            }
            _ => Action::Search,
        }
    }

    /// What happens to each element, where this place is an array.
    fn element(self) -> Action {
        match self {
            Place::Containers => Action::Into(Place::Container),
            Place::Env => Action::Into(Place::EnvVar),
            Place::RedactAll => Action::Redact,
            _ => Action::Search,
        }
    }

    /// The place of this value's members, where it is an object: a container list or an env
    /// list that is an object instead is searched like any other.
    fn as_object(self) -> Place {
        match self {
            Place::Containers | Place::Env => Place::Any,
            p => p,
        }
    }
}

/// Whether `raw` may hold a `metadata` object or (when `containers`) a container list: it is
/// an object or an array (a scalar holds neither) whose bytes name one, or hold a `\u` escape
/// (which could spell a member name).
fn may_hold(raw: &[u8], containers: bool) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Built once: a finder's set-up costs more than searching a small member. Three SIMD
    // scans of a small member cost less than one pass of a multi-pattern automaton.
    static METADATA: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"etadata\""));
    static LIST: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"ontainers\""));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    matches!(raw.first(), Some(b'{' | b'['))
        && (METADATA.find(raw).is_some()
            || (containers && LIST.find(raw).is_some())
            || ESCAPE.find(raw).is_some())
}

/// Writes the value at `place` to `out` as it is read. Which members the object itself had
/// of `apiVersion` and `kind` goes to `seen`.
struct Rewrite<'o, 'r> {
    out: &'o mut Vec<u8>,
    place: Place,
    ctx: &'r Ctx<'r>,
    seen: Option<&'o mut (bool, bool)>,
}

impl<'de> DeserializeSeed<'de> for Rewrite<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Does `action` for one value (a member's or an element), read as its raw bytes.
fn act<E: de::Error>(
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
    action: Action,
    raw: &RawValue,
) -> Result<(), E> {
    match action {
        // Dropped members never get here (the map visitor skips them); copied if one did.
        Action::Drop => out.extend_from_slice(raw.get().as_bytes()),
        Action::Redact => out.extend_from_slice(REDACTED_JSON),
        Action::Search if !may_hold(raw.get().as_bytes(), ctx.redact.env_values) => {
            out.extend_from_slice(raw.get().as_bytes())
        }
        Action::Search => rewrite_str(out, raw.get(), Place::Any, ctx).map_err(E::custom)?,
        Action::Into(place) => rewrite_str(out, raw.get(), place, ctx).map_err(E::custom)?,
        Action::LastApplied => last_applied(out, raw, ctx),
    }
    Ok(())
}

/// Rewrites `text` (one JSON value, already known to be well-formed) at `place`.
fn rewrite_str(out: &mut Vec<u8>, text: &str, place: Place, ctx: &Ctx<'_>) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_str(text);
    Rewrite {
        out,
        place,
        ctx,
        seen: None,
    }
    .deserialize(&mut de)
    .map_err(|e| e.to_string())
}

/// The last-applied annotation's value: the object it holds, redacted by the same rules and
/// written back as a string; `"<redacted>"` when it is not a string holding an object.
fn last_applied(out: &mut Vec<u8>, raw: &RawValue, ctx: &Ctx<'_>) {
    let rewritten = serde_json::from_str::<String>(raw.get())
        .ok()
        .and_then(|copy| {
            let inner = Ctx {
                redact: ctx.redact,
                shape: ctx.shape,
                nested: true,
            };
            let mut obj = Vec::with_capacity(copy.len());
            let mut de = serde_json::Deserializer::from_str(&copy);
            Rewrite {
                out: &mut obj,
                place: Place::Root,
                ctx: &inner,
                seen: None,
            }
            .deserialize(&mut de)
            .and_then(|()| de.end())
            .ok()?;
            // Slices of a `str` and ASCII punctuation: UTF-8; a string always serializes.
            String::from_utf8(obj)
                .ok()
                .and_then(|s| serde_json::to_vec(&s).ok())
        });
    out.extend_from_slice(rewritten.as_deref().unwrap_or(REDACTED_JSON));
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
            ctx,
            mut seen,
        } = self;
        let place = place.as_object();
        out.push(b'{');
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if let Some(seen) = seen.as_deref_mut() {
                seen.0 |= key.0 == "apiVersion";
                seen.1 |= key.0 == "kind";
            }
            let action = place.member(&key.0, ctx);
            if matches!(action, Action::Drop) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if out.last() != Some(&b'{') {
                out.push(b',');
            }
            write_key(out, &key);
            match action {
                Action::Into(child) => map.next_value_seed(Rewrite {
                    out: &mut *out,
                    place: child,
                    ctx,
                    seen: None,
                })?,
                other => act(out, ctx, other, map.next_value::<&'de RawValue>()?)?,
            }
        }
        out.push(b'}');
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.place == Place::Root {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let Rewrite {
            out, place, ctx, ..
        } = self;
        out.push(b'[');
        let mut first = true;
        loop {
            if !first {
                out.push(b',');
            }
            let more = match place.element() {
                Action::Into(child) => seq
                    .next_element_seed(Rewrite {
                        out: &mut *out,
                        place: child,
                        ctx,
                        seen: None,
                    })?
                    .is_some(),
                other => match seq.next_element::<&'de RawValue>()? {
                    Some(raw) => {
                        act(out, ctx, other, raw)?;
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

    // A scalar where an object or array was expected is kept (as serde_json writes it), but
    // for a Secret's data, which is redacted whatever it is; the object itself must be an
    // object.
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
        match self.place {
            Place::Root => Err(E::invalid_type(what, &self)),
            Place::RedactAll => {
                self.out.extend_from_slice(REDACTED_JSON);
                Ok(())
            }
            _ => {
                // Booleans, numbers, strings and null always serialize.
                self.out
                    .extend_from_slice(&serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec()));
                Ok(())
            }
        }
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
    let (mut out, seen) = pass(obj, redact, shape)?;
    // List items come without apiVersion and kind; watch events carry them.
    let (has_api_version, has_kind) = seen;
    if !(has_api_version && has_kind) {
        let mut head = Vec::with_capacity(64);
        // A string always serializes.
        let quoted = |s: &str| serde_json::to_vec(s).unwrap_or_default();
        if !has_api_version {
            head.extend_from_slice(br#""apiVersion":"#);
            head.extend_from_slice(&quoted(api_version));
            head.push(b',');
        }
        if !has_kind {
            head.extend_from_slice(br#""kind":"#);
            head.extend_from_slice(&quoted(kind));
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

/// The pass over `obj`, and whether it had `apiVersion` and `kind`.
fn pass(
    obj: &[u8],
    redact: &RedactConfig,
    shape: Shape,
) -> Result<(Vec<u8>, (bool, bool)), String> {
    let text = std::str::from_utf8(obj).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(obj.len() + 64);
    let mut seen = (false, false);
    let ctx = Ctx {
        redact,
        shape,
        nested: false,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    Rewrite {
        out: &mut out,
        place: Place::Root,
        ctx: &ctx,
        seen: Some(&mut seen),
    }
    .deserialize(&mut de)
    .and_then(|()| de.end())
    .map_err(|e| e.to_string())?;
    Ok((out, seen))
}

/// `obj` redacted as [`full_data`] does, without adding anything: what replay applies to the
/// data it reads, so that its outputs go through the same pass whoever wrote the topic. For
/// what kubecast wrote it changes nothing.
pub fn redacted(obj: &[u8], redact: &RedactConfig, shape: Shape) -> Result<Vec<u8>, String> {
    pass(obj, redact, shape).map(|(out, _)| out)
}

/// The object's JSON `obj` as [`redacted`] writes it, parsed: what alert evidence and
/// messages read their values from. `Null` when `obj` is not an object.
pub fn redacted_value(obj: &[u8], redact: &RedactConfig, shape: Shape) -> serde_json::Value {
    redacted(obj, redact, shape)
        .ok()
        .and_then(|out| serde_json::from_slice(&out).ok())
        .unwrap_or(serde_json::Value::Null)
}
