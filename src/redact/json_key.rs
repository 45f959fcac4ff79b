//! JSON member names as the redaction pass reads and writes them: borrowed from the input
//! when they hold no escapes, so a name is copied as the bytes it is. Entry points: [`Key`],
//! [`write_key`].

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A member name: borrowed from the input when it has no escapes, decoded when it has.
pub(super) struct Key<'a>(pub(super) Cow<'a, str>);

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

pub(super) fn write_key(out: &mut Vec<u8>, key: &Key<'_>) {
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
