//! The CloudEvents HTTP binding (version 1.0): an event's part of a request body, and a
//! request's headers and body. Entry points: [`body_of`] and [`request_of`].
//!
//! Binary mode puts every attribute in a `ce-` header (its value percent-encoded where the
//! binding says so) and `datacontenttype` in `Content-Type`, with `data` as the body;
//! structured mode sends one `application/cloudevents+json` object; batch mode a JSON array
//! of such objects (`application/cloudevents-batch+json`).

use std::io::Write;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::config::Mode;
use crate::event::Event;

pub const STRUCTURED: &str = "application/cloudevents+json; charset=UTF-8";
pub const BATCH: &str = "application/cloudevents-batch+json; charset=UTF-8";

/// What `event` adds to a request body: its `data` (binary), or its JSON object with the
/// `overrides` extensions (structured, batch).
pub fn body_of(mode: Mode, event: &Event, overrides: &[(String, String)]) -> Bytes {
    match mode {
        Mode::Binary => event.data.clone(),
        Mode::Structured | Mode::Batch => Bytes::from(event.structured_json_with(overrides)),
    }
}

/// Upper bound of the header bytes binary mode adds to an event's body, from the event's
/// fields (without building its attributes: the request does that, once): every value at
/// most tripled by percent-encoding, 1 KiB for the names, the fixed values and the compat
/// shape's type.
pub fn header_bytes(mode: Mode, event: &Event, overrides: &[(String, String)]) -> usize {
    match mode {
        Mode::Binary => {
            let values = [
                event.id.len(),
                event.source.len(),
                event.ty.len(),
                event.object.namespace.len() + event.object.name.len() + 1,
                // RFC 3339 with nanoseconds.
                35,
                event.dataschema.len(),
                3 * event.object.uid.len(),
                event.k8s_kind.len(),
                event.api_version.len(),
                event.object.namespace.len(),
                event.object.name.len(),
                event.rv.len(),
                event.prev_rv.len(),
            ];
            // The compat shape repeats kind, apiVersion, name and namespace.
            let compat = event.k8s_kind.len() + event.api_version.len() + event.object.name.len() + event.object.namespace.len();
            let over: usize = overrides.iter().map(|(k, v)| k.len() + 3 * v.len() + 8).sum();
            3 * (values.iter().sum::<usize>() + compat) + 1024 + over
        }
        Mode::Structured | Mode::Batch => 0,
    }
}

/// The headers and body of a request carrying `events` (one in binary and structured
/// mode), each with its part from [`body_of`].
pub fn request_of(
    mode: Mode,
    events: &[(std::sync::Arc<Event>, Bytes)],
    overrides: &[(String, String)],
) -> (HeaderMap, Bytes) {
    let mut headers = HeaderMap::with_capacity(24);
    match (mode, events) {
        (Mode::Binary, [(event, body)]) => {
            for (name, value) in event.attributes() {
                if name == "datacontenttype" {
                    headers.insert(header::CONTENT_TYPE, value_of(&value));
                } else {
                    headers.insert(ce_header(name), value_of(&value));
                }
            }
            for (name, value) in overrides {
                headers.insert(ce_header(name), value_of(value));
            }
            (headers, body.clone())
        }
        (Mode::Structured, [(_, body)]) => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(STRUCTURED));
            (headers, body.clone())
        }
        _ => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(BATCH));
            let len = events.iter().map(|(_, b)| b.len() + 1).sum::<usize>() + 1;
            let mut out = Vec::with_capacity(len);
            out.push(b'[');
            for (i, (_, b)) in events.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b);
            }
            out.push(b']');
            (headers, Bytes::from(out))
        }
    }
}

/// `ce-{name}`: attribute and extension names are lower-case letters and digits, so always
/// a valid header name.
fn ce_header(name: &str) -> HeaderName {
    HeaderName::from_bytes(format!("ce-{name}").as_bytes())
        .unwrap_or_else(|_| HeaderName::from_static("ce-invalid"))
}

/// A header value as the binding wants it: bytes outside printable ASCII, space, `"` and
/// `%` percent-encoded (UTF-8), so any value is a valid header.
fn value_of(v: &str) -> HeaderValue {
    let plain = v.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%');
    if plain {
        // Checked just above: visible ASCII only.
        return HeaderValue::from_str(v).unwrap_or_else(|_| HeaderValue::from_static(""));
    }
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        if (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `body` gzip-compressed.
pub fn gzip(body: &[u8]) -> Bytes {
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4 + 64), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(body);
    Bytes::from(enc.finish().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Compat;
use crate::model::ChangeKind;
    use std::sync::Arc;

    fn event() -> Arc<Event> {
        let mut e = crate::store::record_tests_event(3, "u1", "7", ChangeKind::Added);
        e.data = Bytes::from_static(br#"{"kind":"Pod"}"#);
        Arc::new(e)
    }

    #[test]
    fn binary_mode_sends_attributes_as_ce_headers_and_data_as_the_body() {
        let e = event();
        let over = [("team".to_string(), "shop floor".to_string())];
        let (h, body) = request_of(Mode::Binary, &[(e.clone(), body_of(Mode::Binary, &e, &over))], &over);
        assert_eq!(&body[..], &e.data[..]);
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["ce-id"], e.id.as_str());
        assert_eq!(h["ce-specversion"], "1.0");
        assert_eq!(h["ce-k8sinitial"], "false");
        assert_eq!(h["ce-team"], "shop%20floor", "a space is percent-encoded");
        assert!(!h.contains_key("ce-datacontenttype"));
    }

    #[test]
    fn structured_and_batch_bodies_hold_whole_events() {
        let e = event();
        let over = [("team".to_string(), "shop".to_string())];
        let one = body_of(Mode::Structured, &e, &over);
        let v: serde_json::Value = serde_json::from_slice(&one).unwrap();
        assert_eq!((v["id"].as_str(), v["team"].as_str(), v["data"]["kind"].as_str()), (Some(e.id.as_str()), Some("shop"), Some("Pod")));
        let parts = vec![(e.clone(), one.clone()), (e.clone(), one.clone())];
        let (h, body) = request_of(Mode::Batch, &parts, &over);
        assert_eq!(h["content-type"], BATCH);
        let v: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn apiserversource_compat_gives_knatives_types_and_extensions_beside_kubecasts() {
        let mut e = (*event()).clone();
        e.compat = Some(Compat::Apiserversource);
        let attrs: std::collections::BTreeMap<_, _> = e.attributes().into_iter().collect();
        assert_eq!(attrs["type"], "dev.knative.apiserver.resource.add");
        assert_eq!((&*attrs["kind"], &*attrs["name"]), (&*e.k8s_kind, e.object.name.as_str()));
        assert_eq!(attrs["apiversion"], &*e.api_version);
        assert_eq!(attrs["namespace"], &*e.object.namespace);
        assert_eq!(attrs["id"], e.id, "kubecast's id is kept");
        assert_eq!(attrs["k8suid"], e.object.uid, "kubecast's extensions are kept");
        e.kind = ChangeKind::Modified;
        assert_eq!(e.as_reference().attributes()[3].1, "dev.knative.apiserver.ref.update");
        e.kind = ChangeKind::Deleted;
        assert_eq!(e.attributes()[3].1, "dev.knative.apiserver.resource.delete");
    }

    #[test]
    fn gzip_bodies_decompress_to_the_original() {
        use std::io::Read;
        let z = gzip(b"hello hello hello");
        let mut out = String::new();
        flate2::read::GzDecoder::new(&z[..]).read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello hello hello");
    }

    #[test]
    fn the_header_estimate_bounds_the_headers_really_sent() {
        let mut e = (*event()).clone();
        e.compat = Some(Compat::Apiserversource);
        let over = [("team".to_string(), "shop floor \"x\"".to_string())];
        let (h, _) = request_of(Mode::Binary, &[(Arc::new(e.clone()), e.data.clone())], &over);
        let sent: usize = h.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
        assert!(sent <= header_bytes(Mode::Binary, &e, &over), "{sent}");
    }
}
