//! Reading the apiserver's list pages and watch lines, for any kind. Only each object's
//! metadata is parsed; the object itself stays the bytes the apiserver sent (sliced, not
//! copied).

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::classify::Object;

/// A response the watch cannot use.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("the apiserver sent malformed JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("a {what} has no {field}")]
    Missing {
        what: &'static str,
        field: &'static str,
    },
    #[error("unknown watch event type `{0}`")]
    UnknownType(String),
    #[error("the apiserver sent a {what} that is not UTF-8")]
    Utf8 {
        what: &'static str,
        #[source]
        source: std::str::Utf8Error,
    },
}

/// The identity fields of an object's metadata. `Cow` because a JSON string with escapes
/// cannot be borrowed; the rest of the metadata (labels, annotations) is skipped unparsed.
#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WithMetadata<'a> {
    #[serde(borrow)]
    metadata: Metadata<'a>,
}

/// A bookmark's metadata: its resourceVersion and annotations.
#[derive(Deserialize)]
struct BookmarkObject<'a> {
    #[serde(borrow)]
    metadata: BookmarkMeta<'a>,
}

#[derive(Deserialize)]
struct BookmarkMeta<'a> {
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    annotations: Option<std::collections::HashMap<Cow<'a, str>, Cow<'a, str>>>,
}

/// Where the value of a top-level `metadata` member starts in an object that opens with it,
/// optionally after `kind` and `apiVersion` with plain string values: the order the
/// apiserver writes (`{"kind":"Pod","apiVersion":"v1","metadata":{...`; list items start
/// with `metadata`). `None` for any other shape.
fn metadata_offset(obj: &str) -> Option<usize> {
    let b = obj.as_bytes();
    let mut i = 1; // past `{`
    if b.first() != Some(&b'{') {
        return None;
    }
    loop {
        let rest = &b[i..];
        if rest.starts_with(br#""metadata":"#) {
            return Some(i + br#""metadata":"#.len());
        }
        let key = [&br#""kind":""#[..], br#""apiVersion":""#]
            .into_iter()
            .find(|k| rest.starts_with(k))?;
        i += key.len();
        // A plain string: it ends at the next quote, unless it holds an escape.
        let end = b[i..].iter().position(|&c| c == b'"' || c == b'\\')?;
        if b[i + end] != b'"' {
            return None;
        }
        i += end + 1;
        if b.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

/// An object's metadata. The object was already validated as JSON (as part of its line or
/// page), so when the metadata comes first (the apiserver's order) only the metadata is
/// read, not the spec and status after it, and of the metadata only as far as the identity
/// fields go.
fn metadata_of(obj: &str) -> Result<Metadata<'_>, serde_json::Error> {
    if let Some(at) = metadata_offset(obj) {
        if let Some(m) = identity_first(&obj[at..]) {
            return Ok(m);
        }
        let mut values = serde_json::Deserializer::from_str(&obj[at..]).into_iter::<Metadata<'_>>();
        if let Some(m) = values.next() {
            return m;
        }
    }
    serde_json::from_str::<WithMetadata<'_>>(obj).map(|o| o.metadata)
}

/// The identity fields of the metadata object that `text` starts with, read only as far as
/// the last of the four: the apiserver writes them before labels, annotations and
/// managedFields, so the rest (most of the metadata) is not scanned again. `None` when the
/// reading stops before all four were found (another order, an escaped key, a field given
/// twice, a cluster-scoped object without a namespace): then the metadata is read whole. Only
/// for an object already validated as JSON.
fn identity_first(text: &str) -> Option<Metadata<'_>> {
    /// What was read so far; the reader stops when `complete`.
    #[derive(Default)]
    struct Found {
        uid: Option<String>,
        namespace: Option<String>,
        name: Option<String>,
        rv: Option<String>,
    }
    impl Found {
        fn complete(&self) -> bool {
            self.uid.is_some()
                && self.namespace.is_some()
                && self.name.is_some()
                && self.rv.is_some()
        }
    }
    struct Reader<'f>(&'f mut Found);
    impl<'de> DeserializeSeed<'de> for Reader<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Reader<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("the metadata object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<&'de str>()? {
                let slot = match key {
                    "uid" => &mut self.0.uid,
                    "namespace" => &mut self.0.namespace,
                    "name" => &mut self.0.name,
                    "resourceVersion" => &mut self.0.rv,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                };
                if slot.is_some() {
                    return Err(de::Error::custom("a field given twice"));
                }
                *slot = Some(map.next_value()?);
                if self.0.complete() {
                    // Stop here: serde_json then reports the object unfinished, which the
                    // caller ignores since it has what it needs.
                    return Err(de::Error::custom("complete"));
                }
            }
            Ok(())
        }
    }
    let mut found = Found::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let _ = Reader(&mut found).deserialize(&mut de);
    if !found.complete() {
        return None;
    }
    Some(Metadata {
        uid: found.uid.map(Cow::Owned),
        namespace: found.namespace.map(Cow::Owned),
        name: found.name.map(Cow::Owned),
        resource_version: found.rv.map(Cow::Owned),
    })
}

fn object_of(whole: &Bytes, raw: &RawValue) -> Result<Object, ParseError> {
    let m = metadata_of(raw.get())?;
    let need = |v: Option<Cow<'_, str>>, field| {
        v.map(Cow::into_owned).ok_or(ParseError::Missing {
            what: "object",
            field,
        })
    };
    Ok(Object {
        uid: need(m.uid, "metadata.uid")?,
        // Cluster-scoped objects have none.
        namespace: m.namespace.map(Cow::into_owned).unwrap_or_default(),
        name: need(m.name, "metadata.name")?,
        rv: need(m.resource_version, "metadata.resourceVersion")?,
        bytes: whole.slice_ref(raw.get().as_bytes()),
    })
}

/// One line of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchLine {
    Added(Object),
    Modified(Object),
    Deleted(Object),
    /// A bookmark at `rv`; `initial_end` marks the end of a streaming list's initial events.
    Bookmark {
        rv: String,
        initial_end: bool,
    },
    /// The apiserver ended the watch with an error status (410 when the resourceVersion is
    /// too old).
    Error {
        code: u16,
        message: String,
    },
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// Parses one watch line (the bytes of one JSON object).
pub fn parse_watch_line(line: Bytes) -> Result<WatchLine, ParseError> {
    let text = std::str::from_utf8(&line).map_err(|source| ParseError::Utf8 {
        what: "watch line",
        source,
    })?;
    let l: Line<'_> = serde_json::from_str(text)?;
    Ok(match l.kind {
        "ADDED" => WatchLine::Added(object_of(&line, l.object)?),
        "MODIFIED" => WatchLine::Modified(object_of(&line, l.object)?),
        "DELETED" => WatchLine::Deleted(object_of(&line, l.object)?),
        "BOOKMARK" => {
            let o: BookmarkObject<'_> = serde_json::from_str(l.object.get())?;
            let rv = o.metadata.resource_version.ok_or(ParseError::Missing {
                what: "bookmark",
                field: "metadata.resourceVersion",
            })?;
            let initial_end = o.metadata.annotations.is_some_and(|a| {
                a.get("k8s.io/initial-events-end")
                    .is_some_and(|v| v == "true")
            });
            WatchLine::Bookmark {
                rv: rv.into_owned(),
                initial_end,
            }
        }
        "ERROR" => {
            #[derive(Deserialize)]
            struct Status<'a> {
                #[serde(default)]
                code: Option<u16>,
                #[serde(borrow, default)]
                message: Option<Cow<'a, str>>,
            }
            let s: Status<'_> = serde_json::from_str(l.object.get())?;
            WatchLine::Error {
                code: s.code.unwrap_or(500),
                message: s.message.map(Cow::into_owned).unwrap_or_default(),
            }
        }
        other => return Err(ParseError::UnknownType(other.to_string())),
    })
}

/// One page of a list: its objects, the list's resourceVersion and the `continue` token.
#[derive(Debug)]
pub struct ListPage {
    pub objects: Vec<Object>,
    pub rv: String,
    pub continue_token: Option<String>,
    /// The apiserver echoed a shard selector (`metadata.shardInfo`): it filtered the list.
    pub sharded: bool,
}

#[derive(Deserialize)]
struct ListMeta<'a> {
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "continue")]
    continue_token: Option<Cow<'a, str>>,
    #[serde(default, rename = "shardInfo")]
    shard_info: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct List<'a> {
    #[serde(borrow)]
    metadata: ListMeta<'a>,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

/// Parses a list page. An object that lacks its identity is reported and skipped, not fatal.
pub fn parse_list_page(body: Bytes) -> Result<(ListPage, Vec<ParseError>), ParseError> {
    let text = std::str::from_utf8(&body).map_err(|source| ParseError::Utf8 {
        what: "list page",
        source,
    })?;
    let list: List<'_> = serde_json::from_str(text)?;
    let mut objects = Vec::with_capacity(list.items.len());
    let mut bad = Vec::new();
    for raw in list.items {
        match object_of(&body, raw) {
            Ok(p) => objects.push(p),
            Err(e) => bad.push(e),
        }
    }
    let rv = list
        .metadata
        .resource_version
        .ok_or(ParseError::Missing {
            what: "list",
            field: "metadata.resourceVersion",
        })?
        .into_owned();
    let sharded = list.metadata.shard_info.is_some();
    let continue_token = list
        .metadata
        .continue_token
        .filter(|c| !c.is_empty())
        .map(Cow::into_owned);
    Ok((
        ListPage {
            objects,
            rv,
            continue_token,
            sharded,
        },
        bad,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_the_apiserver_sharded_says_so_and_one_it_did_not_does_not() {
        let sharded = r#"{"metadata":{"resourceVersion":"5","shardInfo":{"selector":"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"}},"items":[]}"#;
        let (page, _) = parse_list_page(Bytes::from(sharded)).unwrap();
        assert!(page.sharded);
        let plain = r#"{"metadata":{"resourceVersion":"5"},"items":[]}"#;
        let (page, _) = parse_list_page(Bytes::from(plain)).unwrap();
        assert!(!page.sharded);
    }

    #[test]
    fn metadata_is_found_after_kind_and_api_version_in_either_order_or_first() {
        for (obj, found) in [
            (r#"{"kind":"Pod","apiVersion":"v1","metadata":{}}"#, true),
            (r#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#, true),
            (r#"{"metadata":{}}"#, true),
            (r#"{"kind":"P\"od","metadata":{}}"#, false),
            (r#"{"spec":{},"metadata":{}}"#, false),
            (r#"{ "metadata":{}}"#, false),
            (r#"{"kind":"Pod""#, false),
            ("", false),
        ] {
            let at = metadata_offset(obj);
            assert_eq!(at.is_some(), found, "{obj}");
            if let Some(at) = at {
                assert_eq!(&obj[at..at + 2], "{}", "{obj}");
            }
        }
    }

    #[test]
    fn metadata_read_alone_or_whole_gives_the_same_identity() {
        let first = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7"},"spec":{"x":[1,2]}}"#;
        let later = r#"{"spec":{"x":[1,2]},"metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7"}}"#;
        for obj in [first, later] {
            let m = metadata_of(obj).unwrap_or_else(|e| panic!("{obj}: {e}"));
            assert_eq!(
                (
                    m.uid.as_deref(),
                    m.namespace.as_deref(),
                    m.name.as_deref(),
                    m.resource_version.as_deref()
                ),
                (Some("u"), Some("ns"), Some("p"), Some("7"))
            );
        }
    }

    #[test]
    fn identity_reading_stops_after_the_four_fields_and_gives_up_on_other_shapes() {
        // Cut off after the identity: never scanned, so its truncation does not matter.
        let cut =
            r#"{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7","managedFields":[{"#;
        let m = identity_first(cut).expect("the four fields come first");
        assert_eq!(
            (
                m.uid.as_deref(),
                m.name.as_deref(),
                m.resource_version.as_deref()
            ),
            (Some("u"), Some("p"), Some("7"))
        );
        for other in [
            // resourceVersion missing: read whole instead.
            r#"{"name":"p","namespace":"ns","uid":"u"}"#,
            // A field given twice before the last one.
            r#"{"name":"p","name":"q","namespace":"ns","uid":"u","resourceVersion":"7"}"#,
            // An escaped key.
            r#"{"n\u0061me":"p","namespace":"ns","uid":"u","resourceVersion":"7"}"#,
            // Not a string.
            r#"{"name":"p","namespace":"ns","uid":7,"resourceVersion":"7"}"#,
        ] {
            assert!(identity_first(other).is_none(), "{other}");
        }
    }

    const POD: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u-1","resourceVersion":"17","labels":{"a":"b"}},"spec":{"containers":[]}}"#;

    #[test]
    fn a_watch_line_yields_the_pod_identity_and_its_exact_bytes() {
        let line = Bytes::from(format!(r#"{{"type":"MODIFIED","object":{POD}}}"#));
        let WatchLine::Modified(p) = parse_watch_line(line).unwrap() else {
            panic!("not modified")
        };
        assert_eq!(
            (
                p.uid.as_str(),
                p.namespace.as_str(),
                p.name.as_str(),
                p.rv.as_str()
            ),
            ("u-1", "ns", "p", "17")
        );
        assert_eq!(&p.bytes[..], POD.as_bytes());
    }

    #[test]
    fn escaped_strings_in_metadata_are_read() {
        let pod = r#"{"metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"3","annotations":{"last":"{\"a\":\"b\"}"}}}"#;
        let line = Bytes::from(format!(r#"{{"type":"ADDED","object":{pod}}}"#));
        let WatchLine::Added(p) = parse_watch_line(line).unwrap() else {
            panic!("not added")
        };
        assert_eq!(&p.bytes[..], pod.as_bytes());
    }

    #[test]
    fn bookmarks_and_the_end_of_initial_events_are_recognised() {
        let b = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"99","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert_eq!(
            parse_watch_line(Bytes::from(b)).unwrap(),
            WatchLine::Bookmark {
                rv: "99".into(),
                initial_end: true
            }
        );
        let b = r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"100"}}}"#;
        assert_eq!(
            parse_watch_line(Bytes::from(b)).unwrap(),
            WatchLine::Bookmark {
                rv: "100".into(),
                initial_end: false
            }
        );
    }

    #[test]
    fn an_error_message_with_quotes_is_read() {
        let e = r#"{"type":"ERROR","object":{"kind":"Status","message":"resource \"pods\" expired","code":410}}"#;
        assert_eq!(
            parse_watch_line(Bytes::from(e)).unwrap(),
            WatchLine::Error {
                code: 410,
                message: r#"resource "pods" expired"#.into()
            }
        );
    }

    #[test]
    fn a_gone_error_carries_its_code() {
        let e = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (80)","reason":"Expired","code":410}}"#;
        assert_eq!(
            parse_watch_line(Bytes::from(e)).unwrap(),
            WatchLine::Error {
                code: 410,
                message: "too old resource version: 5 (80)".into()
            }
        );
    }

    #[test]
    fn a_pod_without_uid_is_an_error_naming_the_field() {
        let line = r#"{"type":"ADDED","object":{"metadata":{"name":"p","namespace":"ns","resourceVersion":"1"}}}"#;
        let e = parse_watch_line(Bytes::from(line)).unwrap_err().to_string();
        assert!(e.contains("metadata.uid"), "{e}");
    }

    #[test]
    fn a_cluster_scoped_object_has_an_empty_namespace() {
        let node = r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","uid":"u","resourceVersion":"5","labels":{"a":"b"}}}"#;
        let line = Bytes::from(format!(r#"{{"type":"ADDED","object":{node}}}"#));
        let WatchLine::Added(n) = parse_watch_line(line).unwrap() else {
            panic!("not added")
        };
        assert_eq!(
            (n.namespace.as_str(), n.name.as_str(), n.rv.as_str()),
            ("", "n1", "5")
        );
    }

    #[test]
    fn a_list_page_keeps_good_pods_and_reports_bad_ones() {
        let body = format!(
            r#"{{"kind":"PodList","metadata":{{"resourceVersion":"50","continue":"tok"}},"items":[{POD},{{"metadata":{{"name":"x"}}}}]}}"#
        );
        let (page, bad) = parse_list_page(Bytes::from(body)).unwrap();
        assert_eq!(page.objects.len(), 1);
        assert_eq!(&page.objects[0].bytes[..], POD.as_bytes());
        assert_eq!(
            (page.rv.as_str(), page.continue_token.as_deref()),
            ("50", Some("tok"))
        );
        assert_eq!(bad.len(), 1);
    }
}
