//! One Alertmanager instance's sender: it sends what changed as soon as it changes, and every
//! standing alert every `resend_interval`, in requests of at most `max_alerts`, and says which
//! table version the instance confirmed. Entry point: [`Sender::run`].
//!
//! A 2xx confirms. A 400 or 422 means Alertmanager refused some alerts of the request and
//! took the others (it stores every valid alert of a request): each alert of the request is
//! then sent alone once, to find the refused ones, which are logged once and counted and never
//! sent again; the request counts as confirmed. Anything else (5xx, a timeout, no connection)
//! waits for the next full send, as Prometheus's notifier does: an active alert's `endsAt`
//! lies four intervals ahead, so one missed send resolves nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::table::Table;
pub use crate::ops::AlertmanagerMetrics as InstanceMetrics;
use crate::sinks::http::{Answer, Client};

pub struct Sender {
    pub index: usize,
    /// The URL as logs show it.
    pub shown: String,
    pub client: Client,
    pub table: Arc<Mutex<Table>>,
    pub resend: Duration,
    pub max_alerts: usize,
    pub metrics: InstanceMetrics,
    /// (this sender, the version it confirmed, whether the instance answered).
    pub confirmed: mpsc::UnboundedSender<(usize, u64, bool)>,
}

/// Why a request was not taken.
enum Post {
    /// 400 or 422, with Alertmanager's answer: some alerts refused, the others taken.
    Refused(String),
    /// Anything else: the status and answer, or why there was none.
    Failed(String),
}

/// What one round of requests came to.
enum Outcome {
    Accepted,
    /// Some alerts refused (already logged); the rest taken.
    Refused,
    Failed(String),
}

impl Sender {
    /// Runs until `changes` closes (the sink stopped).
    pub async fn run(self, mut changes: watch::Receiver<u64>) {
        let horizon = self.resend * 4;
        let mut confirmed = 0u64;
        let mut next_full = Instant::now();
        let mut waiting = false;
        // Label sets refused (never sent again) and the refusals already logged.
        let mut refused: HashSet<String> = HashSet::new();
        loop {
            let full = tokio::select! {
                r = changes.changed(), if !waiting => {
                    if r.is_err() { return; }
                    Instant::now() >= next_full
                }
                () = tokio::time::sleep_until(next_full) => true,
            };
            let batch = {
                let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
                self.metrics.active.set(i64::try_from(t.active()).unwrap_or(i64::MAX));
                t.batch(full, confirmed, jiff::Timestamp::now(), horizon)
            };
            if full {
                next_full = Instant::now() + self.resend;
            }
            let alerts: Vec<Value> = batch
                .alerts
                .into_iter()
                .filter(|a| !refused.contains(&a["labels"].to_string()))
                .collect();
            if alerts.is_empty() {
                // Nothing to send: with each resend, an OPTIONS request tells readiness
                // whether the instance is there.
                let answered = if full {
                    self.client.probe().await.is_ok()
                } else {
                    !waiting
                };
                confirmed = batch.upto;
                let _ = self.confirmed.send((self.index, confirmed, answered));
                continue;
            }
            match self.send_all(&alerts, &mut refused).await {
                Outcome::Accepted | Outcome::Refused => {
                    if waiting {
                        tracing::info!(alertmanager = %self.shown, "the Alertmanager takes alerts again");
                    }
                    waiting = false;
                    confirmed = batch.upto;
                    let _ = self.confirmed.send((self.index, confirmed, true));
                }
                Outcome::Failed(why) => {
                    if !waiting {
                        tracing::warn!(alertmanager = %self.shown, error = %why, resend_in = ?self.resend, "the Alertmanager did not take the alerts; sending them again with the next resend");
                    }
                    waiting = true;
                    let _ = self.confirmed.send((self.index, confirmed, false));
                }
            }
        }
    }

    /// Sends `alerts` in requests of at most `max_alerts`.
    async fn send_all(&self, alerts: &[Value], refused: &mut HashSet<String>) -> Outcome {
        let mut outcome = Outcome::Accepted;
        for chunk in alerts.chunks(self.max_alerts) {
            match self.post(chunk).await {
                Ok(()) => {
                    self.metrics.sent.inc();
                }
                Err(Post::Refused(_)) if chunk.len() > 1 => {
                    // Which of them were refused: each alone.
                    for one in chunk {
                        match self.post(std::slice::from_ref(one)).await {
                            Ok(()) => {}
                            Err(Post::Refused(body)) => self.refuse(one, &body, refused),
                            Err(Post::Failed(why)) => return Outcome::Failed(why),
                        }
                    }
                    outcome = Outcome::Refused;
                }
                Err(Post::Refused(body)) => {
                    self.refuse(&chunk[0], &body, refused);
                    outcome = Outcome::Refused;
                }
                Err(Post::Failed(why)) => return Outcome::Failed(why),
            }
        }
        outcome
    }

    fn refuse(&self, alert: &Value, body: &str, refused: &mut HashSet<String>) {
        if refused.insert(alert["labels"].to_string()) {
            self.metrics.invalid.inc();
            tracing::error!(alertmanager = %self.shown, labels = %alert["labels"], answer = %body.trim(), "the Alertmanager refused an alert; it is not sent to it again");
        }
    }

    /// One request: `Ok` on a 2xx.
    async fn post(&self, alerts: &[Value]) -> Result<(), Post> {
        let body = Bytes::from(Value::Array(alerts.to_vec()).to_string());
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        match self.client.send(headers, body, false).await {
            Ok(Answer::Status { code, .. }) if code.is_success() => Ok(()),
            Ok(Answer::Status { code, body, .. }) if code.as_u16() == 400 || code.as_u16() == 422 => {
                Err(Post::Refused(body))
            }
            Ok(Answer::Status { code, body, .. }) => {
                self.metrics.failed.inc();
                Err(Post::Failed(format!("HTTP {code}: {}", body.trim())))
            }
            Err(e) => {
                self.metrics.failed.inc();
                Err(Post::Failed(crate::error_chain(&e)))
            }
        }
    }
}
