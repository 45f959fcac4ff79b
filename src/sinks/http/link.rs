//! What a sink that sends HTTP requests (the HTTP and OTLP sinks) knows about its receiver:
//! connected or not, whether it ever answered or accepted, the shared backoff and the pause
//! it sets, and the answers counted by status. Entry point: [`Link`].

use std::collections::HashMap;
use std::time::Duration;

use futures::future::BoxFuture;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::client::SendError;
use crate::backoff::Backoff;
use crate::sinks::{Acks, SinkError};

/// The receiver as the sink's loop sees it.
pub struct Link {
    pub connected: bool,
    /// It answered once (any status): a refused handshake is no longer fatal.
    pub answered: bool,
    /// It accepted a request once: refused credentials are no longer fatal.
    pub accepted: bool,
    pub backoff: Backoff,
    pub paused_until: Option<Instant>,
    /// `kubecast_http_responses_total` by status code.
    responses: HashMap<u16, Counter>,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            connected: false,
            answered: false,
            accepted: false,
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(30)),
            paused_until: None,
            responses: HashMap::new(),
        }
    }
}

impl Link {
    /// The receiver is reachable (`true`, it answered) or not: readiness follows.
    pub fn up(&mut self, acks: &Acks, connected: bool) {
        self.answered |= connected;
        if self.connected != connected {
            self.connected = connected;
            acks.connected(connected);
        }
    }

    /// Counts an answer with HTTP status `code`.
    pub fn count(&mut self, acks: &Acks, code: u16) {
        self.responses.entry(code).or_insert_with(|| acks.responses(code)).inc();
    }

    /// Pauses sending after a failed request: the larger of the next backoff step and what
    /// the receiver asked (`wait`), so that `Retry-After: 0` or a date gone by never makes a
    /// tight loop. Requests in flight together fail together: while a pause runs, a failure
    /// without a wait of its own adds no step. Returns how long sending pauses.
    pub fn pause(&mut self, wait: Option<Duration>) -> Duration {
        let now = Instant::now();
        if let Some(t) = self.paused_until.filter(|t| *t > now)
            && wait.is_none()
        {
            return t - now;
        }
        let backoff = self.backoff.next_delay();
        let wait = wait.map_or(backoff, |w| w.max(backoff));
        let until = now + wait;
        self.paused_until = Some(self.paused_until.map_or(until, |t| t.max(until)));
        wait
    }

    /// A refused TLS handshake before the receiver ever answered stops the sink with
    /// `fatal(why)`.
    pub fn refused_tls<E>(&self, acks: &Acks, e: &SendError, fatal: impl FnOnce(String) -> E) -> Result<(), SinkError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        match e.tls_refusal() {
            Some(why) if !self.answered => Err(acks.failed(fatal(why))),
            _ => Ok(()),
        }
    }
}

/// Awaits `f` if there is one; never ends otherwise (a `select!` branch that is off).
pub async fn maybe<T>(f: &mut Option<BoxFuture<'static, T>>) -> Option<T> {
    match f {
        Some(f) => Some(f.await),
        None => std::future::pending().await,
    }
}
