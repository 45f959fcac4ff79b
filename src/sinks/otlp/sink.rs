//! Sending log records to an OTLP receiver and turning its answers into acks. Entry point:
//! [`run`], the [`Sink`] of a validated [`OtlpSettings`].
//!
//! Records are batched by the HTTP sink's [`Window`] (up to `in_flight` requests at once, the
//! records of one object never overtaking each other, settled in sequence order) and sent by
//! its [`Client`]; what an answer means is [`answer::outcome`]. A record is delivered only
//! when the receiver accepted its request; retried ones go back in their places and sending
//! pauses for a backoff with jitter, or for what the receiver asked when that is longer.
//! Until the first request, and while the receiver is away with nothing to send, an empty
//! export request every few seconds (over TLS after a handshake of its own, which sees a
//! refused client certificate) tells readiness whether it is there: accepted (or "come back
//! later") it is ready; refused it is not, and is asked again. Before the receiver accepted
//! a request with records, refused credentials or an answer that no OTLP logs service is at
//! the URL (404, 405, 415, `UNIMPLEMENTED`), to the probe or a request, stop the sink naming
//! the URL: every record would be refused.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use http::{HeaderMap, HeaderValue, header};
use tokio::time::Instant;

use super::answer::{self, Outcome};
use super::config::{OtlpSettings, Protocol};
use super::encode;
use crate::event::Event;
use crate::sinks::http::{Answer, Client, Link, Positions, SendError, Window, maybe};
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, Sink, SinkError};

/// Why the OTLP sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum OtlpSinkError {
    /// The first connection's TLS handshake was refused (either side's certificate).
    #[error("{0}")]
    TlsRefused(String),
    /// The receiver refused kubecast's credentials before it ever accepted a record.
    #[error("the OTLP receiver at {url} refused kubecast's credentials: {why}")]
    Unauthorized { url: String, why: String },
    /// The receiver answered, before it ever accepted a record, that it takes no OTLP logs
    /// at the URL: a wrong path, port or protocol, or no logs pipeline.
    #[error(
        "no OTLP logs receiver at {url}: it answered {why}; check the sink's `endpoint` (over HTTP `/v1/logs` is appended unless its path ends in it) and `protocol`"
    )]
    Misdirected { url: String, why: String },
}

/// Why `outcome` stops the sink before the receiver ever accepted a record, if it does.
fn fatal(
    s: &OtlpSettings,
    link: &Link,
    outcome: &Outcome,
    answer: &Answer,
) -> Option<OtlpSinkError> {
    if link.accepted {
        return None;
    }
    let Answer::Status { moved_to, .. } = answer;
    // Named where it was answered when a redirect took the request elsewhere.
    let url = match moved_to {
        Some(to) => format!(
            "{} (redirected to {})",
            s.shown_url,
            crate::sinks::url::shown(&to.to_string())
        ),
        None => s.shown_url.clone(),
    };
    match outcome {
        Outcome::Unauthorized { why } => Some(OtlpSinkError::Unauthorized {
            url,
            why: why.clone(),
        }),
        Outcome::Misdirected { why } => Some(OtlpSinkError::Misdirected {
            url,
            why: why.clone(),
        }),
        _ => None,
    }
}

impl Sink for OtlpSettings {
    fn run(self: Box<Self>, rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        Box::pin(run(*self, rx, acks))
    }
}

type Flight = BoxFuture<'static, (Positions, usize, Result<Answer, SendError>)>;

/// Runs the sink until its queue closes and every record taken was answered.
pub async fn run(s: OtlpSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let client = Arc::new(Client::new(&s.client).map_err(|e| acks.failed(e))?);
    let mut window = Window::default();
    let mut flights: FuturesUnordered<Flight> = FuturesUnordered::new();
    let mut link = Link::default();
    let mut probe: Option<BoxFuture<'static, Result<Answer, SendError>>> = None;
    let mut probe_at = Some(Instant::now());
    let capacity = (s.client.in_flight * s.max_records * 2).max(256);
    let mut open = true;
    loop {
        if !open && window.is_empty() && flights.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        if link.paused_until.is_some_and(|t| t <= now) {
            link.paused_until = None;
        }
        if link.paused_until.is_none() {
            while flights.len() < s.client.in_flight {
                let lingering = open && window.oldest_waiting().is_some_and(|t| now < t + s.linger);
                let Some((positions, events)) =
                    window.next_request(s.max_records, s.max_bytes, lingering)
                else {
                    break;
                };
                let body = encode::request(s.encoding(), s.shape, &s.cluster, &events);
                let (client, n) = (client.clone(), events.len());
                let (headers, body, gzip) = request_parts(&s, body);
                flights.push(Box::pin(async move {
                    (positions, n, client.send(headers, body, gzip).await)
                }));
            }
        }
        if probe.is_none()
            && probe_at.is_some_and(|t| t <= now)
            && flights.is_empty()
            && !link.connected
        {
            let client = client.clone();
            let (headers, body, gzip) =
                request_parts(&s, encode::request(s.encoding(), s.shape, &s.cluster, &[]));
            probe = Some(Box::pin(async move {
                client.handshake().await?;
                client.send(headers, body, gzip).await
            }));
            probe_at = None;
        }
        let linger_at = link
            .paused_until
            .is_none()
            .then(|| window.oldest_waiting().map(|t| t + s.linger))
            .flatten()
            .filter(|t| *t > now);
        // The next probe, when one is due and may go: woken for it with nothing else to do.
        let probe_due =
            probe_at.filter(|_| probe.is_none() && flights.is_empty() && !link.connected);
        tokio::select! {
            Some((positions, n, result)) = flights.next(), if !flights.is_empty() => {
                answered(&s, &acks, &mut link, &mut window, &positions, n, result)?;
                acks.settle(window.settle()).await?;
            }
            Some(result) = maybe(&mut probe) => {
                probe = None;
                let wait = probed(&s, &acks, &mut link, result)?;
                probe_at = wait.map(|w| Instant::now() + w);
            }
            _ = crate::backoff::sleep_until(link.paused_until), if link.paused_until.is_some() => {}
            _ = crate::backoff::sleep_until(linger_at), if linger_at.is_some() => {}
            _ = crate::backoff::sleep_until(probe_due), if probe_due.is_some() => {}
            next = rx.recv(), if open && window.len() < capacity => match next {
                None => open = false,
                Some(event) => take(&s, &acks, &mut window, event),
            },
        }
        if !link.connected
            && probe.is_none()
            && probe_at.is_none()
            && flights.is_empty()
            && window.waiting() == 0
        {
            probe_at = Some(Instant::now() + Duration::from_secs(2));
        }
    }
}

/// The headers and body of a request holding the encoded `ExportLogsServiceRequest`, and
/// whether the client gzips the body (gRPC compresses its message itself).
fn request_parts(s: &OtlpSettings, message: Bytes) -> (HeaderMap, Bytes, bool) {
    let mut headers = HeaderMap::new();
    let content_type = match s.protocol {
        Protocol::HttpProtobuf => "application/x-protobuf",
        Protocol::HttpJson => "application/json",
        Protocol::Grpc => "application/grpc",
    };
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if s.protocol != Protocol::Grpc {
        return (headers, message, s.gzip);
    }
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    let message = if s.gzip {
        headers.insert("grpc-encoding", HeaderValue::from_static("gzip"));
        crate::sinks::http::gzip(&message)
    } else {
        message
    };
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(u8::from(s.gzip));
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    (headers, framed.into(), false)
}

/// Holds `event` in the window as its encoded record; one too large for a request goes in
/// reference mode (`too_large: reference`) or to the dead letter.
fn take(s: &OtlpSettings, acks: &Acks, window: &mut Window, mut event: Arc<Event>) {
    let encoding = s.encoding();
    let mut record = encode::record_bytes(encoding, s.shape, &event);
    // A request's envelope (resource, scope) is small beside this margin.
    let fits = |r: &Bytes| r.len() + 512 <= s.max_request_bytes;
    if !fits(&record) && s.too_large_reference {
        tracing::warn!(sink = %acks.sink(), id = %event.id, subject = %event.subject(),
            "event too large for max_request_bytes: sent as reference data (k8struncated)");
        event = Arc::new(event.as_reference());
        record = encode::record_bytes(encoding, s.shape, &event);
    }
    if fits(&record) {
        window.push(event, record);
    } else {
        let reason = format!(
            "OTLP record of {} bytes exceeds max_request_bytes {}",
            record.len(),
            s.max_request_bytes
        );
        window.push_refused(event, reason);
    }
}

/// Acts on the answer to the readiness probe; the wait before the next one, if any.
fn probed(
    s: &OtlpSettings,
    acks: &Acks,
    link: &mut Link,
    result: Result<Answer, SendError>,
) -> Result<Option<Duration>, SinkError> {
    match result {
        Ok(a) => {
            let outcome = answer::outcome(s.protocol, &a);
            if let Some(e) = fatal(s, link, &outcome, &a) {
                return Err(acks.failed(e));
            }
            let why = match outcome {
                Outcome::Delivered { .. } => {
                    tracing::info!(sink = %acks.sink(), url = %s.shown_url, "OTLP receiver accepted an empty request");
                    link.up(acks, true);
                    return Ok(None);
                }
                Outcome::Retry { why, .. } => {
                    // It is there and will take records later; they wait in the window.
                    tracing::info!(sink = %acks.sink(), url = %s.shown_url, answer = %why, "OTLP receiver answered");
                    link.up(acks, true);
                    return Ok(None);
                }
                Outcome::Refused { reason } => reason,
                Outcome::Unauthorized { why } | Outcome::Misdirected { why } => why,
            };
            // It answered (a refused handshake is no longer fatal), but a refusal says nothing
            // of whether it takes records: not ready, and asked again.
            link.answered = true;
            link.up(acks, false);
            acks.down_because(format!(
                "{} refused an empty export request: {why}",
                s.shown_url
            ));
            let wait = link.backoff.next_delay().max(Duration::from_secs(1));
            tracing::warn!(sink = %acks.sink(), url = %s.shown_url, answer = %why, retry_in_ms = wait.as_millis() as u64,
                "OTLP receiver refused an empty export request; not ready");
            Ok(Some(wait))
        }
        Err(e) => {
            link.refused_tls(acks, &e, OtlpSinkError::TlsRefused)?;
            link.up(acks, false);
            let wait = link.backoff.next_delay().max(Duration::from_secs(1));
            tracing::warn!(sink = %acks.sink(), url = %s.shown_url, error = %crate::error_chain(&e),
                retry_in_ms = wait.as_millis() as u64, "OTLP receiver unreachable");
            Ok(Some(wait))
        }
    }
}

/// Acts on the answer to one request of `n` records.
fn answered(
    s: &OtlpSettings,
    acks: &Acks,
    link: &mut Link,
    window: &mut Window,
    positions: &Positions,
    n: usize,
    result: Result<Answer, SendError>,
) -> Result<(), SinkError> {
    let sink = acks.sink();
    let mut retry = |link: &mut Link, wait: Option<Duration>| {
        window.retry(positions);
        acks.retried(n as u64);
        link.pause(wait)
    };
    let answer = match result {
        Ok(a) => a,
        Err(e) => {
            link.refused_tls(acks, &e, OtlpSinkError::TlsRefused)?;
            link.up(acks, false);
            let wait = retry(link, None);
            tracing::warn!(sink = %sink, url = %s.shown_url, error = %crate::error_chain(&e), records = n,
                retry_in_ms = wait.as_millis() as u64, "OTLP request failed; will send again");
            return Ok(());
        }
    };
    let Answer::Status { code, .. } = &answer;
    if s.protocol != Protocol::Grpc {
        link.count(acks, code.as_u16());
    }
    let outcome = answer::outcome(s.protocol, &answer);
    // Before readiness: a sink about to stop is never reported ready.
    if let Some(e) = fatal(s, link, &outcome, &answer) {
        return Err(acks.failed(e));
    }
    link.up(acks, true);
    match outcome {
        Outcome::Delivered { rejected } => {
            link.accepted = true;
            link.backoff.reset();
            window.finish(positions, None);
            if let Some((rejected, message)) = rejected {
                acks.otlp_rejected(rejected.max(0) as u64);
                tracing::error!(sink = %sink, url = %s.shown_url, rejected, records = n, error_message = %message,
                    "OTLP receiver accepted the request but rejected some of its records (partial success); not sent again");
            }
        }
        Outcome::Retry { wait, why } => {
            let wait = retry(link, wait);
            tracing::warn!(sink = %sink, url = %s.shown_url, answer = %why, records = n,
                retry_in_ms = wait.as_millis() as u64, "OTLP receiver not ready; will send again");
        }
        Outcome::Unauthorized { why } => {
            // It accepted kubecast before: a key being rotated. Nothing is given up.
            let wait = retry(link, None);
            tracing::error!(sink = %sink, url = %s.shown_url, answer = %why, records = n,
                retry_in_ms = wait.as_millis() as u64, "OTLP receiver refused kubecast's credentials; will send again");
        }
        // After it accepted records here, as any other final answer: the records' fault or
        // the receiver's, never fixed by sending them again.
        Outcome::Refused { reason } | Outcome::Misdirected { why: reason } => {
            window.finish(positions, Some(&reason))
        }
    }
    Ok(())
}
