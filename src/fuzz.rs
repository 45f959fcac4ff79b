//! The fuzz targets' bodies: each takes any bytes, never panics, and checks the property its
//! target names. `fuzz/` holds the `cargo fuzz` targets that call them (`bench/run fuzz
//! SECONDS`), and `tests/fuzz_corpus.rs` runs every file of `fuzz/corpus/` and
//! `fuzz/regressions/` through them on every test run. Entry points: one function per
//! target, and [`TARGETS`].

use bytes::Bytes;
use serde_json::Value;

use crate::redact::{RedactConfig, Shape, full_data, model};

/// A target's body: any bytes in, a panic when its property breaks.
pub type Body = fn(&[u8]);

/// Every target by name (the `fuzz/fuzz_targets/` file and the corpus folder of each).
pub const TARGETS: [(&str, Body); 8] = [
    ("watch_line", watch_line),
    ("list_page", list_page),
    ("redaction", redaction),
    ("config", config),
    ("replay_record", replay_record),
    ("http_answer", http_answer),
    ("merge_patch", merge_patch),
    ("otlp_answer", otlp_answer),
];

/// A watch line: parsed, and each object's `full` data and Pod summary written from it.
pub fn watch_line(data: &[u8]) {
    if let Ok(crate::watch::WatchLine::Added(o) | crate::watch::WatchLine::Modified(o)) =
        crate::watch::parse_watch_line(Bytes::copy_from_slice(data))
    {
        object(&o.bytes);
    }
}

/// A list page: parsed, and each object as for a watch line.
pub fn list_page(data: &[u8]) {
    if let Ok((page, _)) = crate::watch::parse_list_page(Bytes::copy_from_slice(data)) {
        for o in &page.objects {
            object(&o.bytes);
        }
    }
}

/// An object's own passes: the Pod summary's shell (which must agree with the summary of the
/// parsed object) and `full` data.
fn object(bytes: &[u8]) {
    let pods = crate::kinds::Resource::pods();
    let kind = crate::kinds::of(&pods);
    // A number beyond f64 is valid JSON that only a parse of the whole object refuses: the
    // shell never reads it, so there is nothing to compare the shell with.
    if let Some(shell) = kind.summary_from_slice(bytes, &pods)
        && let Ok(parsed) = serde_json::from_slice::<Value>(bytes)
    {
        let whole = kind.summary(&parsed, &pods);
        let shell: Value = serde_json::from_slice(&shell).expect("the shell writes JSON");
        assert_eq!(
            shell, whole,
            "the summary's shell and the parsed object's summary differ"
        );
    }
    let _ = full_data(
        bytes,
        &RedactConfig::default(),
        Shape::default(),
        "v1",
        "Pod",
    );
}

/// The redaction pass: agrees with its model on any bytes (the first byte picks the Secret
/// shape and whether env values are redacted), and a marker put in every env value, Secret
/// value and last-applied copy of the object never survives.
pub fn redaction(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let secret = flags & 1 == 1;
    let redact = RedactConfig {
        env_values: flags & 2 == 0,
        annotations: if flags & 4 == 4 {
            vec!["a".into()]
        } else {
            Vec::new()
        },
        labels: if flags & 8 == 8 {
            vec!["l".into()]
        } else {
            Vec::new()
        },
    };
    let got = full_data(rest, &redact, Shape { secret }, "v1", "Pod");
    let want = model::full_by_value(rest, &redact, secret);
    match (&got, &want) {
        // A last-applied copy holding a number beyond f64: the pass redacts the copy it can
        // read without that number, the model cannot read it and redacts it whole. The marker
        // property below still holds the pass to what matters.
        (Ok(_), Ok(_)) if copy_beyond_f64(rest) => {}
        (Ok(out), Ok(want)) => {
            let out: Value = serde_json::from_slice(out).expect("full data is JSON");
            assert_eq!(
                model::normalized(out),
                model::normalized(want.clone()),
                "the pass and its model differ"
            );
        }
        (Err(_), Err(_)) => {}
        // The model parses every number; the pass copies those it never reads as the bytes
        // they are, so a number beyond f64 outside what it redacts stops only the model.
        (Ok(_), Err(why)) if why.contains("number out of range") => {}
        _ => {
            panic!("the pass and its model disagree on whether this is an object: {got:?} {want:?}")
        }
    }
    let marker = "kubecast-fuzz-marker";
    let Ok(obj @ Value::Object(_)) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    if obj.to_string().contains(marker) {
        return;
    }
    let marked = model::marked(obj, marker, secret);
    let bytes = serde_json::to_vec(&marked).expect("a Value serializes");
    let out = full_data(
        &bytes,
        &RedactConfig::default(),
        Shape { secret },
        "v1",
        "Pod",
    )
    .expect("an object");
    assert!(
        !String::from_utf8_lossy(&out).contains(marker),
        "a marked secret survived: {}",
        String::from_utf8_lossy(&out)
    );
}

/// Whether `obj` has a last-applied copy that only a number beyond f64 keeps from parsing.
fn copy_beyond_f64(obj: &[u8]) -> bool {
    serde_json::from_slice::<Value>(obj)
        .ok()
        .and_then(|v| {
            let copy = v.pointer(
                "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration",
            )?;
            let err = serde_json::from_str::<Value>(copy.as_str()?).err()?;
            Some(err.to_string().contains("number out of range"))
        })
        .unwrap_or(false)
}

/// A config file: loaded and validated; errors are fine, panics are not.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = crate::config::load_str("fuzz.yaml", text, Vec::new()) {
        let _ = c.validate();
    }
}

/// A Kafka record as replay reads it. The bytes are split at the first two NUL bytes into
/// header lines (`name=value`, newline-separated), a content type, and the payload; each event
/// decoded is also written as `--follow`'s compact and JSON change lines.
pub fn replay_record(data: &[u8]) {
    let mut parts = data.splitn(3, |b| *b == 0);
    let (head, content_type, payload) =
        (parts.next().unwrap_or_default(), parts.next(), parts.next());
    let mut headers: Vec<(String, &[u8])> = head
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let at = line.iter().position(|b| *b == b'=')?;
            Some((
                String::from_utf8_lossy(&line[..at]).into_owned(),
                &line[at + 1..],
            ))
        })
        .collect();
    if let Some(ct) = content_type {
        headers.push(("content-type".into(), ct));
    }
    if let Ok(events) = crate::replay::events_of(
        crate::replay::Record::from_parts(headers, payload),
        &crate::redact::RedactConfig::default(),
    ) {
        for e in &events {
            let _ = crate::replay::decode_facts(e);
        }
        // Writing to nowhere cannot fail: an error here is a bug in the lines.
        if let Err(e) = crate::replay::write_change_lines(&events) {
            panic!("writing the change lines failed: {e}");
        }
    }
}

/// An OTLP receiver's answer: the status (two bytes), the body's length (two bytes) and
/// the body (protobuf `Status`, partial success, gRPC framing), then `grpc-status` and
/// `grpc-status-details-bin` split at a NUL. Read by every protocol's rules; a retry never
/// waits past its cap.
pub fn otlp_answer(data: &[u8]) {
    let (status, len, rest) = match data {
        [a, b, c, d, rest @ ..] => (
            u16::from_be_bytes([*a, *b]),
            usize::from(u16::from_be_bytes([*c, *d])),
            rest,
        ),
        _ => (200, data.len(), data),
    };
    let (body, rest) = rest.split_at(len.min(rest.len()));
    let mut parts = rest.splitn(2, |b| *b == 0);
    let text = |p: Option<&[u8]>| String::from_utf8_lossy(p.unwrap_or_default()).into_owned();
    let (grpc_status, details) = (text(parts.next()), text(parts.next()));
    for wait in crate::sinks::otlp::classify_any(status, body, &grpc_status, &details)
        .into_iter()
        .flatten()
    {
        assert!(
            wait <= std::time::Duration::from_secs(600),
            "a retry delay above its cap"
        );
    }
}

/// An HTTP receiver's answer: a `Retry-After` value (capped at ten minutes) and a `Location`
/// resolved against a URL (never from https to http). The bytes are split at the first NUL.
pub fn http_answer(data: &[u8]) {
    let (retry, location) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(v) = http::HeaderValue::from_bytes(retry)
        && let Some(wait) = crate::sinks::http::retry_after(&v)
    {
        assert!(
            wait <= std::time::Duration::from_secs(600),
            "Retry-After above its cap"
        );
    }
    let Ok(location) = std::str::from_utf8(location) else {
        return;
    };
    for from in [
        "https://events.example:8443/in/hook?x=1",
        "http://events.example/",
    ] {
        let from: http::Uri = from.parse().expect("a URL");
        if let Some(to) = crate::sinks::http::follow(&from, location) {
            assert!(
                !(from.scheme_str() == Some("https") && to.scheme_str() != Some("https")),
                "https downgraded to {to}"
            );
            assert!(to.host().is_some(), "a redirect without a host: {to}");
        }
    }
    let _ = crate::sinks::url::shown(location);
}

/// Two JSON values (split at the first NUL): the merge patch between them turns the first
/// into the second (members that are `null` count as absent).
pub fn merge_patch(data: &[u8]) {
    let at = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    let (Ok(a), Ok(b)) = (
        serde_json::from_slice::<Value>(&data[..at]),
        serde_json::from_slice::<Value>(data.get(at + 1..).unwrap_or_default()),
    ) else {
        return;
    };
    let mut rebuilt = a.clone();
    if let Some(p) = crate::replay::merge_patch(&a, &b) {
        crate::replay::apply_patch(&mut rebuilt, &p);
    }
    assert_eq!(
        without_nulls(rebuilt),
        without_nulls(b),
        "the patch does not rebuild the version"
    );
}

/// `v` without object members whose value is `null` (a merge patch cannot carry them).
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    //! The inputs the fuzz targets found, each kept in `fuzz/regressions/` too.

    #[test]
    fn a_pod_with_a_number_beyond_f64_is_summarised_and_redacted_without_a_panic() {
        super::watch_line(include_bytes!(
            "../fuzz/regressions/watch_line/number-beyond-f64"
        ));
    }

    #[test]
    fn a_last_applied_copy_with_a_number_beyond_f64_is_redacted_as_far_as_it_is_read() {
        super::redaction(include_bytes!(
            "../fuzz/regressions/redaction/last-applied-number-beyond-f64"
        ));
    }

    #[test]
    fn a_float_where_redaction_reads_keeps_its_value() {
        super::redaction(include_bytes!(
            "../fuzz/regressions/redaction/float-in-annotations"
        ));
    }

    #[test]
    fn a_number_beyond_f64_outside_what_is_redacted_is_copied_as_it_is() {
        super::redaction(include_bytes!(
            "../fuzz/regressions/redaction/number-beyond-f64"
        ));
        let obj = br#"{"apiVersion":"v1","kind":"Pod","n":1e400,"spec":{"containers":[{"env":[{"value":"s"}]}]}}"#;
        let out = crate::redact::full_data(
            obj,
            &crate::redact::RedactConfig::default(),
            crate::redact::Shape::default(),
            "v1",
            "Pod",
        )
        .expect("valid JSON");
        assert_eq!(
            String::from_utf8_lossy(&out),
            r#"{"apiVersion":"v1","kind":"Pod","n":1e400,"spec":{"containers":[{"env":[{"value":"<redacted>"}]}]}}"#
        );
    }
}
