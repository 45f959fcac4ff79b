//! Sending events to an HTTP receiver and turning its 2xx answers into acks. Entry point:
//! [`run`], the [`Sink`] of a validated [`HttpSettings`].
//!
//! Up to `in_flight` requests run at once ([`Window`] keeps each object's events in order).
//! An event is delivered only on a 2xx answer. 5xx, 408, 429, redirects the client does not
//! follow (it follows 307 and 308), timeouts and connection errors put the request's events
//! back in line and pause sending for a backoff with jitter, or for the receiver's
//! `Retry-After` when that is longer; any other status sends them to the dead letter with the
//! status and the start of the answer. URLs are logged as [`url::shown`] writes them. Nothing is dropped while the receiver is away: the
//! window stops taking events, the queue fills, and `when_full` decides.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use http::StatusCode;
use tokio::time::Instant;

use super::client::{Answer, Client, SendError};
use super::link::{Link, maybe};
use super::encode;
use super::window::{Positions, Window};
use super::HttpSettings;
use crate::event::Event;
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, Sink, SinkError, url};

/// Why the HTTP sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpSinkError {
    /// The first connection's TLS handshake was refused (either side's certificate).
    #[error("{0}")]
    TlsRefused(String),
    /// The receiver refused kubecast's credentials before it ever accepted an event.
    #[error("the receiver refused kubecast's credentials: HTTP {code} {body}")]
    Unauthorized { code: StatusCode, body: String },
}

impl Sink for HttpSettings {
    fn run(self: Box<Self>, rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        Box::pin(run(*self, rx, acks))
    }
}

type Flight = BoxFuture<'static, (Positions, usize, Result<Answer, SendError>)>;

/// Runs the sink until its queue closes and every event taken was answered.
pub async fn run(s: HttpSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let client = Arc::new(Client::new(&(&s).into()).map_err(|e| acks.failed(e))?);
    let mut window = Window::default();
    let mut flights: FuturesUnordered<Flight> = FuturesUnordered::new();
    let mut link = Link::default();
    // Where 307/308 redirects last led, as shown in logs (a new place is logged once).
    let mut moved_to: Option<String> = None;
    // While the receiver has not answered and nothing is being sent, an OPTIONS request
    // every few seconds tells readiness whether it is there.
    let mut probe: Option<BoxFuture<'static, Result<Answer, SendError>>> = None;
    let mut probe_at = Some(Instant::now());
    let capacity = (s.in_flight * s.max_events * 2).max(256);
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
            while flights.len() < s.in_flight {
                // Only batch mode lingers; the scan for the oldest waiting event is its cost.
                let lingering = open
                    && s.linger > Duration::ZERO
                    && window.oldest_waiting().is_some_and(|t| now < t + s.linger);
                let Some((positions, events)) = window.next_request(s.max_events, s.max_bytes, lingering) else {
                    break;
                };
                let (headers, body) = encode::request_of(s.mode, &events, &s.overrides);
                let (client, gzip, n) = (client.clone(), s.gzip, events.len());
                flights.push(Box::pin(async move { (positions, n, client.send(headers, body, gzip).await) }));
            }
        }
        if probe.is_none() && probe_at.is_some_and(|t| t <= now) && flights.is_empty() && !link.connected {
            let client = client.clone();
            probe = Some(Box::pin(async move { client.probe().await }));
            probe_at = None;
        }
        // Only a linger still to come: once it is over, what could not be sent waits for an
        // answer (its object is in flight), which wakes the loop.
        let linger_at = (s.linger > Duration::ZERO && link.paused_until.is_none())
            .then(|| window.oldest_waiting().map(|t| t + s.linger))
            .flatten()
            .filter(|t| *t > now);
        tokio::select! {
            Some((positions, n, result)) = flights.next(), if !flights.is_empty() => {
                answered(&s, &acks, &mut link, &mut moved_to, &mut window, &positions, n, result)?;
                acks.settle(window.settle()).await?;
            }
            Some(result) = maybe(&mut probe) => {
                probe = None;
                match result {
                    Ok(Answer::Status { code, .. }) => {
                        tracing::info!(sink = %acks.sink(), url = %s.shown_url, status = code.as_u16(), "HTTP receiver answered");
                        link.up(&acks, true);
                    }
                    Err(e) => {
                        link.refused_tls(&acks, &e, HttpSinkError::TlsRefused)?;
                        link.up(&acks, false);
                        let wait = link.backoff.next_delay().max(Duration::from_secs(1));
                        tracing::warn!(sink = %acks.sink(), url = %s.shown_url, error = %crate::error_chain(&e), retry_in_ms = wait.as_millis() as u64, "HTTP receiver unreachable");
                        probe_at = Some(Instant::now() + wait);
                    }
                }
            }
            _ = crate::backoff::sleep_until(link.paused_until), if link.paused_until.is_some() => {}
            _ = crate::backoff::sleep_until(linger_at), if linger_at.is_some() => {}
            next = rx.recv(), if open && window.len() < capacity => match next {
                None => open = false,
                Some(event) => take(&s, &acks, &mut window, event),
            },
        }
        if !link.connected && probe.is_none() && probe_at.is_none() && flights.is_empty() && window.waiting() == 0 {
            probe_at = Some(Instant::now() + Duration::from_secs(2));
        }
    }
}

/// Holds `event` in the window, encoded; one too large for a request goes in reference mode
/// (`too_large: reference`) or to the dead letter.
fn take(s: &HttpSettings, acks: &Acks, window: &mut Window, mut event: Arc<Event>) {
    let size = |e: &Event| {
        let body = encode::body_of(s.mode, e, &s.overrides);
        let n = body.len() + encode::header_bytes(s.mode, e, &s.overrides);
        (body, n)
    };
    let (mut body, mut n) = size(&event);
    if n > s.max_request_bytes && s.too_large_reference {
        tracing::warn!(sink = %acks.sink(), id = %event.id, subject = %event.subject(),
            "event too large for max_request_bytes: sent as reference data (k8struncated)");
        event = Arc::new(event.as_reference());
        (body, n) = size(&event);
    }
    if n > s.max_request_bytes {
        let reason = format!("HTTP request of about {n} bytes exceeds max_request_bytes {}", s.max_request_bytes);
        window.push_refused(event, reason);
    } else {
        window.push(event, body);
    }
}

/// Acts on the answer to one request.
#[allow(clippy::too_many_arguments)] // the loop's state, each piece borrowed on its own
fn answered(
    s: &HttpSettings,
    acks: &Acks,
    link: &mut Link,
    moved: &mut Option<String>,
    window: &mut Window,
    positions: &Positions,
    n: usize,
    result: Result<Answer, SendError>,
) -> Result<(), SinkError> {
    let sink = acks.sink();
    let retry = |link: &mut Link, window: &mut Window, wait: Option<Duration>| {
        window.retry(positions);
        acks.retried(n as u64);
        link.pause(wait)
    };
    match result {
        Ok(Answer::Status { code, retry_after, body, location, moved_to, .. }) => {
            let c = code.as_u16();
            link.count(acks, c);
            link.up(acks, true);
            let moved_to = moved_to.map(|u| url::shown(&u.to_string()));
            if moved_to.is_some() && moved_to != *moved {
                tracing::warn!(sink = %sink, url = %s.shown_url, location = moved_to.as_deref().unwrap_or_default(),
                    "HTTP receiver redirects (307/308); following it there");
            }
            *moved = moved_to;
            if code.is_success() {
                link.accepted = true;
                link.backoff.reset();
                window.finish(positions, None);
            } else if matches!(code.as_u16(), 500..=599 | 408 | 429) {
                let wait = retry(link, window, retry_after);
                tracing::warn!(sink = %sink, url = %s.shown_url, status = code.as_u16(), body = %body, events = n,
                    retry_in_ms = wait.as_millis() as u64, "HTTP receiver not ready; will send again");
            } else if matches!(code, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                if !link.accepted {
                    return Err(acks.failed(HttpSinkError::Unauthorized { code, body }));
                }
                // It accepted kubecast before: a token being rotated. Nothing is given up.
                let wait = retry(link, window, retry_after);
                tracing::error!(sink = %sink, url = %s.shown_url, status = code.as_u16(), body = %body, events = n,
                    retry_in_ms = wait.as_millis() as u64, "HTTP receiver refused kubecast's credentials; will send again");
            } else if code.is_redirection() {
                // Another redirect than 307/308 (whose POST would become a GET), one that
                // goes from https to http, or too many hops: nothing is given up.
                let wait = retry(link, window, retry_after);
                let location = location.as_deref().map(url::shown).unwrap_or_default();
                tracing::error!(sink = %sink, url = %s.shown_url, status = c, location = %location, events = n,
                    retry_in_ms = wait.as_millis() as u64,
                    "HTTP receiver redirects where kubecast does not follow (only 307 and 308, at most 3 hops, never https to http); will send again");
            } else {
                let reason = format!("HTTP {code}: {body}");
                window.finish(positions, Some(&reason));
            }
        }
        Err(e) => {
            link.refused_tls(acks, &e, HttpSinkError::TlsRefused)?;
            link.up(acks, false);
            let wait = retry(link, window, None);
            let error = crate::error_chain(&e);
            if e.tls_refusal().is_some() {
                tracing::error!(sink = %sink, url = %s.shown_url, error = %error, events = n, retry_in_ms = wait.as_millis() as u64,
                    "HTTP receiver's TLS handshake refused; will send again");
            } else {
                tracing::warn!(sink = %sink, url = %s.shown_url, error = %error, events = n, retry_in_ms = wait.as_millis() as u64,
                    "HTTP request failed; will send again");
            }
        }
    }
    Ok(())
}

