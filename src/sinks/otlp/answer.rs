//! What a receiver's answer means, by OTLP's rules. Entry point: [`outcome`].
//!
//! OTLP/HTTP: 2xx delivers (a `partial_success` in the body is reported, never retried);
//! 429, 502, 503 and 504 are retried, after `Retry-After` when given; any other status is
//! final and its `Status` message the reason. OTLP/gRPC: `OK` delivers; `CANCELLED`,
//! `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS` are retried,
//! `RESOURCE_EXHAUSTED` only with a `RetryInfo` (whose delay is honoured); the rest are final.
//! Two exceptions to both: a refusal of kubecast's credentials (401, 403, `UNAUTHENTICATED`,
//! `PERMISSION_DENIED`) is [`Outcome::Unauthorized`], which the sink treats as the HTTP sink
//! does (fatal before the first delivery, retried after: a rotated key) rather than dropping
//! every event while a credential is being fixed; and an answer that no OTLP logs service is
//! at the URL (404, 405, 415, `UNIMPLEMENTED`: a wrong path, port or protocol, a Collector
//! with no logs pipeline) is [`Outcome::Misdirected`], fatal before the first delivery; its
//! text is the status without the body. What an outcome quotes from an answer (a message, a
//! body's text) has every URL in it shown as kubecast shows URLs: an error page may echo the
//! request URL with its userinfo and query.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;

use super::config::Protocol;
use super::proto;
use crate::sinks::http::Answer;

/// What to do with a request's records.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Accepted; `rejected` is a partial success: how many records the receiver dropped, and
    /// its message.
    Delivered { rejected: Option<(i64, String)> },
    /// Send them again after at least `wait` (the receiver's, when it asked), saying `why`.
    Retry { wait: Option<Duration>, why: String },
    /// Never accepted: to the dead letter with `reason`.
    Refused { reason: String },
    /// The receiver refused kubecast's credentials.
    Unauthorized { why: String },
    /// Nothing at the URL takes OTLP logs (the request's records are not the cause).
    Misdirected { why: String },
}

/// The outcome of `answer` to a request over `protocol`.
pub fn outcome(protocol: Protocol, answer: &Answer) -> Outcome {
    let Answer::Status {
        code,
        retry_after,
        raw,
        trailers,
        ..
    } = answer;
    let c = code.as_u16();
    if protocol == Protocol::Grpc && c == 200 {
        return grpc(trailers, raw);
    }
    let json = protocol == Protocol::HttpJson;
    match c {
        200..=299 if protocol != Protocol::Grpc => Outcome::Delivered {
            rejected: partial(json, raw).map(|(n, m)| (n, one_line(&m))),
        },
        429 | 502 | 503 | 504 => Outcome::Retry {
            wait: *retry_after,
            why: format!("HTTP {code}: {}", message(json, raw)),
        },
        401 | 403 => Outcome::Unauthorized {
            why: format!("HTTP {code}: {}", message(json, raw)),
        },
        // Without the body: the status and the URL (shown without its secrets) say that
        // nothing takes logs there, and a proxy's error page may echo the URL as written.
        404 | 405 | 415 => Outcome::Misdirected {
            why: format!("HTTP {code}"),
        },
        _ => Outcome::Refused {
            reason: format!("HTTP {code}: {}", message(json, raw)),
        },
    }
}

/// A gRPC answer: the status in the trailers (or in the headers, trailers-only).
fn grpc(trailers: &HeaderMap, raw: &Bytes) -> Outcome {
    let text = |k: &str| trailers.get(k).and_then(|v| v.to_str().ok());
    let Some(code) = text("grpc-status").and_then(|s| s.parse::<u32>().ok()) else {
        return Outcome::Retry {
            wait: None,
            why: "gRPC answer without grpc-status".into(),
        };
    };
    let details = text("grpc-status-details-bin")
        .and_then(base64)
        .map(|b| proto::status(&b))
        .unwrap_or_default();
    // `grpc-message` is percent-encoded.
    let message = text("grpc-message")
        .map(crate::sinks::url::decode)
        .filter(|m| !m.is_empty())
        .unwrap_or(details.message);
    let message = one_line(&message);
    let why = format!("gRPC {} {}: {message}", code, name(code));
    match code {
        0 => Outcome::Delivered {
            rejected: grpc_message(raw)
                .and_then(|m| proto::partial_success(&m))
                .map(|(n, m)| (n, one_line(&m))),
        },
        1 | 4 | 10 | 11 | 14 | 15 => Outcome::Retry {
            wait: details.retry_delay,
            why,
        },
        8 if details.retry_delay.is_some() => Outcome::Retry {
            wait: details.retry_delay,
            why,
        },
        7 | 16 => Outcome::Unauthorized { why },
        12 => Outcome::Misdirected { why },
        _ => Outcome::Refused { reason: why },
    }
}

fn name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("UNKNOWN")
}

/// The message of a gRPC response body: a 5-byte prefix (compressed flag, length), then the
/// message, gzip'd when flagged.
fn grpc_message(raw: &[u8]) -> Option<Vec<u8>> {
    let (&flag, rest) = raw.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let message = rest.get(4..4 + len)?;
    if flag == 0 {
        return Some(message.to_vec());
    }
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(message)
        .take(16 << 20)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// The partial success of a 2xx body (protobuf, or JSON's `partialSuccess`).
fn partial(json: bool, raw: &[u8]) -> Option<(i64, String)> {
    if !json {
        return proto::partial_success(raw);
    }
    let v: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let p = v.get("partialSuccess")?;
    let rejected = match p.get("rejectedLogRecords") {
        Some(serde_json::Value::String(s)) => s.parse().unwrap_or(0),
        Some(n) => n.as_i64().unwrap_or(0),
        None => 0,
    };
    let message = p
        .get("errorMessage")
        .and_then(|m| m.as_str())
        .unwrap_or_default()
        .to_string();
    (rejected != 0 || !message.is_empty()).then_some((rejected, message))
}

/// The message of an error body: a `google.rpc.Status` (protobuf or JSON), else its text.
fn message(json: bool, raw: &[u8]) -> String {
    let from_status = if json {
        serde_json::from_slice::<serde_json::Value>(raw)
            .ok()
            .and_then(|v| {
                v.get("message")
                    .and_then(|m| m.as_str())
                    .map(str::to_string)
            })
    } else {
        Some(proto::status(raw).message).filter(|m| !m.is_empty())
    };
    let text = from_status.unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned());
    one_line(&text)
}

/// A receiver's `text` as one line for logs, reasons and dead letters (a Go server's "404
/// page not found\n"), at most 200 characters, with every URL in it shown as kubecast shows
/// URLs ([`crate::sinks::url::shown`]): an error page may echo the request URL with its
/// userinfo and query. Shortened after that, so no URL is cut before it is shown.
fn one_line(text: &str) -> String {
    // A JSON body escapes slashes (`http:\/\/user:pw@host\/x`): unescaped first, so such a
    // URL is seen and shown like any other.
    let text: String = text
        .trim()
        .replace("\\/", "/")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    // Words end where no URL goes on: whitespace, quotes, angle brackets.
    let ends = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let end = rest.find(ends).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        // `?` ends a sentence as well as starting a query.
        let query = word.trim_end_matches('?').contains('?');
        if word.contains("://") || word.contains('@') || query {
            out.push_str(&crate::sinks::url::shown(word));
        } else {
            out.push_str(word);
        }
        let mut chars = after.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out.chars().take(200).collect()
}

/// Standard base64, padded or not (gRPC's `-bin` metadata is sent unpadded).
fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Fuzzing's entry: every protocol's classification of a made-up answer (which must never
/// panic), as the waits it asks for.
#[doc(hidden)]
pub fn classify_any(
    status: u16,
    body: &[u8],
    grpc_status: &str,
    details: &str,
) -> Vec<Option<Duration>> {
    let mut trailers = HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(grpc_status) {
        trailers.insert("grpc-status", v.clone());
        trailers.insert("grpc-message", v);
    }
    if let Ok(v) = http::HeaderValue::from_str(details) {
        trailers.insert("grpc-status-details-bin", v);
    }
    let code = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    let raw = Bytes::copy_from_slice(body);
    let answer = Answer::Status {
        code,
        retry_after: None,
        body: String::new(),
        location: None,
        moved_to: None,
        raw,
        trailers,
    };
    [Protocol::HttpProtobuf, Protocol::HttpJson, Protocol::Grpc]
        .into_iter()
        .map(|p| match outcome(p, &answer) {
            Outcome::Retry { wait, .. } => wait,
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(code: u16, raw: &[u8], trailers: &[(&'static str, &str)]) -> Answer {
        let mut t = HeaderMap::new();
        for (k, v) in trailers {
            t.insert(*k, v.parse().unwrap());
        }
        Answer::Status {
            code: http::StatusCode::from_u16(code).unwrap(),
            retry_after: (code == 503).then(|| Duration::from_secs(3)),
            body: String::new(),
            location: None,
            moved_to: None,
            raw: Bytes::copy_from_slice(raw),
            trailers: t,
        }
    }

    #[test]
    fn http_answers_follow_otlps_retry_rules() {
        let http = |code, raw: &[u8]| outcome(Protocol::HttpJson, &answer(code, raw, &[]));
        assert_eq!(http(200, b"{}"), Outcome::Delivered { rejected: None });
        assert_eq!(
            http(
                200,
                br#"{"partialSuccess":{"rejectedLogRecords":"2","errorMessage":"too old"}}"#
            ),
            Outcome::Delivered {
                rejected: Some((2, "too old".into()))
            }
        );
        assert!(
            matches!(http(503, b""), Outcome::Retry { wait: Some(w), .. } if w == Duration::from_secs(3))
        );
        for code in [429, 502, 504] {
            assert!(
                matches!(http(code, b""), Outcome::Retry { wait: None, .. }),
                "{code}"
            );
        }
        assert_eq!(
            http(400, br#"{"code":3,"message":"bad body"}"#),
            Outcome::Refused {
                reason: "HTTP 400 Bad Request: bad body".into()
            }
        );
        assert!(
            matches!(http(500, b"oops"), Outcome::Refused { .. }),
            "500 is not retried by OTLP's rules"
        );
        assert!(matches!(http(401, b""), Outcome::Unauthorized { .. }));
    }

    #[test]
    fn grpc_answers_follow_otlps_retry_rules() {
        let grpc = |status: &str, extra: &[(&'static str, &str)]| {
            let mut t = vec![("grpc-status", status)];
            t.extend_from_slice(extra);
            outcome(Protocol::Grpc, &answer(200, &[], &t))
        };
        assert_eq!(grpc("0", &[]), Outcome::Delivered { rejected: None });
        assert!(
            matches!(grpc("14", &[("grpc-message", "no%20backend")]), Outcome::Retry { why, .. } if why.ends_with("UNAVAILABLE: no backend"))
        );
        assert!(
            matches!(grpc("8", &[]), Outcome::Refused { .. }),
            "RESOURCE_EXHAUSTED without RetryInfo is final"
        );
        // google.rpc.Status{code 8, details [Any{RetryInfo{retry_delay{seconds 4}}}]}, base64 unpadded.
        let details = "CAgaMAoodHlwZS5nb29nbGVhcGlzLmNvbS9nb29nbGUucnBjLlJldHJ5SW5mbxIECgIIBA";
        assert!(matches!(grpc("8", &[("grpc-status-details-bin", details)]),
            Outcome::Retry { wait: Some(w), .. } if w == Duration::from_secs(4)));
        assert!(
            matches!(grpc("3", &[]), Outcome::Refused { reason } if reason.contains("INVALID_ARGUMENT"))
        );
        assert!(matches!(grpc("16", &[]), Outcome::Unauthorized { .. }));
        assert!(matches!(
            outcome(Protocol::Grpc, &answer(200, &[], &[])),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            outcome(Protocol::Grpc, &answer(503, &[], &[])),
            Outcome::Retry { .. }
        ));
    }

    #[test]
    fn no_logs_service_at_the_url_is_misdirected_over_both_protocols() {
        for code in [404, 405, 415] {
            for p in [Protocol::HttpProtobuf, Protocol::HttpJson, Protocol::Grpc] {
                assert!(
                    matches!(outcome(p, &answer(code, b"404 page not found\n", &[])),
                    Outcome::Misdirected { why } if why.starts_with(&format!("HTTP {code}"))),
                    "{code} over {p:?}"
                );
            }
        }
        assert_eq!(
            outcome(
                Protocol::HttpProtobuf,
                &answer(404, b"404 page not found\n", &[])
            ),
            Outcome::Misdirected {
                why: "HTTP 404 Not Found".into()
            },
            "the status without the body (which may echo the URL as written)"
        );
        assert_eq!(
            outcome(Protocol::HttpProtobuf, &answer(400, b"bad\nrequest\n", &[])),
            Outcome::Refused {
                reason: "HTTP 400 Bad Request: bad request".into()
            },
            "one line"
        );
        let t = [
            ("grpc-status", "12"),
            (
                "grpc-message",
                "unknown service opentelemetry.proto.collector.logs.v1.LogsService",
            ),
        ];
        assert!(matches!(outcome(Protocol::Grpc, &answer(200, &[], &t)),
            Outcome::Misdirected { why } if why == "gRPC 12 UNIMPLEMENTED: unknown service opentelemetry.proto.collector.logs.v1.LogsService"));
        assert!(
            matches!(
                outcome(Protocol::HttpProtobuf, &answer(400, &[], &[])),
                Outcome::Refused { .. }
            ),
            "400 is a refusal of the records"
        );
        assert!(
            matches!(
                outcome(Protocol::Grpc, &answer(200, &[], &[("grpc-status", "5")])),
                Outcome::Refused { .. }
            ),
            "NOT_FOUND is the records'"
        );
    }

    /// The text an outcome puts in a log line, a readiness reason or a dead letter.
    fn text(o: &Outcome) -> String {
        match o {
            Outcome::Delivered { rejected } => format!("{rejected:?}"),
            Outcome::Retry { why, .. }
            | Outcome::Unauthorized { why }
            | Outcome::Misdirected { why } => why.clone(),
            Outcome::Refused { reason } => reason.clone(),
        }
    }

    #[test]
    fn a_url_with_credentials_in_an_answer_never_reaches_the_outcomes_text() {
        // A proxy's error page echoing the request URL as it was written.
        let url = "http://user:secret@host/x?token=abc";
        let bodies = [
            format!("404 page not found: {url}\n"),
            format!("<a href=\"{url}\">{url}</a>"),
            format!(r#"{{"code":3,"message":"no route to {url}"}}"#),
            "Cannot POST /v1/logs?token=abc (user:secret@host)".to_string(),
            // JSON with its slashes escaped, as some encoders write it.
            format!(r#"{{"error":"no route to {}"}}"#, url.replace('/', "\\/")),
        ];
        let leaks = |t: &str| {
            ["secret", "token=abc", "user:"]
                .iter()
                .any(|s| t.contains(s))
        };
        for body in &bodies {
            for code in [400, 401, 404, 405, 415, 429, 500, 503] {
                for p in [Protocol::HttpProtobuf, Protocol::HttpJson, Protocol::Grpc] {
                    let got = text(&outcome(p, &answer(code, body.as_bytes(), &[])));
                    assert!(!leaks(&got), "{code} over {p:?} with {body:?}: {got}");
                }
            }
            let encoded = body.replace(' ', "%20").replace('\n', "%0A");
            for status in ["3", "12", "14", "16"] {
                let t = [("grpc-status", status), ("grpc-message", encoded.as_str())];
                let got = text(&outcome(Protocol::Grpc, &answer(200, &[], &t)));
                assert!(!leaks(&got), "gRPC {status} with {body:?}: {got}");
            }
        }
        let partial = format!(
            r#"{{"partialSuccess":{{"rejectedLogRecords":"1","errorMessage":"dropped at {url}"}}}}"#
        );
        let got = text(&outcome(
            Protocol::HttpJson,
            &answer(200, partial.as_bytes(), &[]),
        ));
        assert!(!leaks(&got), "a partial success's message: {got}");
        assert_eq!(
            text(&outcome(
                Protocol::HttpJson,
                &answer(400, format!("bad request to {url}").as_bytes(), &[])
            )),
            "HTTP 400 Bad Request: bad request to http://host/x?…",
            "the URL is shown as kubecast shows URLs"
        );
    }

    #[test]
    fn a_grpc_partial_success_is_read_from_the_framed_response() {
        let mut inner = proto::Writer::default();
        inner.uint(1, 5);
        inner.bytes(2, b"dropped");
        let mut m = proto::Writer::default();
        m.bytes(1, &inner.buf);
        let mut framed = vec![0];
        framed.extend_from_slice(&(m.buf.len() as u32).to_be_bytes());
        framed.extend_from_slice(&m.buf);
        let a = answer(200, &framed, &[("grpc-status", "0")]);
        assert_eq!(
            outcome(Protocol::Grpc, &a),
            Outcome::Delivered {
                rejected: Some((5, "dropped".into()))
            }
        );
    }

    #[test]
    fn base64_reads_padded_and_unpadded_text() {
        assert_eq!(
            base64("QWxhZGRpbjpvcGVuIHNlc2FtZQ==").as_deref(),
            Some(&b"Aladdin:open sesame"[..])
        );
        assert_eq!(base64("YWI").as_deref(), Some(&b"ab"[..]));
        assert_eq!(base64("a*b"), None);
    }
}
