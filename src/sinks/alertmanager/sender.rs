//! One Alertmanager instance's sender: it sends what changed as soon as it changes, and every
//! standing alert every `resend_interval`, in requests of at most `max_alerts`, and says which
//! table version the instance confirmed. Entry point: [`Sender::run`].
//!
//! A 2xx confirms. A 400 or 422 means Alertmanager refused some alerts of the request and
//! took the others (it stores every valid alert of a request): each alert of the request is
//! then sent alone once, to find the refused ones, which are logged once and counted and never
//! sent again; the request counts as confirmed. A refusal holds back that episode in that
//! state only (its firing, or its resolve), never the object's later episodes of the rule,
//! which share its label set. Anything else (5xx, a timeout, no connection) waits for the
//! next full send, as Prometheus's notifier does: an active alert's `endsAt` lies four
//! intervals ahead, so one missed send resolves nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::table::{Posted, Table};
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
        let mut refused = Refused::default();
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
                self.metrics
                    .active
                    .set(i64::try_from(t.active()).unwrap_or(i64::MAX));
                t.batch(full, confirmed, jiff::Timestamp::now(), horizon)
            };
            if full {
                next_full = Instant::now() + self.resend;
            }
            let alerts = refused.sendable(batch.alerts, full);
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
    async fn send_all(&self, alerts: &[Posted], refused: &mut Refused) -> Outcome {
        let mut outcome = Outcome::Accepted;
        for chunk in alerts.chunks(self.max_alerts) {
            let bodies: Vec<Value> = chunk.iter().map(|p| p.body.clone()).collect();
            match self.post(&bodies).await {
                Ok(()) => {
                    self.metrics.sent.inc();
                }
                Err(Post::Refused(_)) if chunk.len() > 1 => {
                    // Which of them were refused: each alone.
                    for one in chunk {
                        match self.post(std::slice::from_ref(&one.body)).await {
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

    fn refuse(&self, alert: &Posted, body: &str, refused: &mut Refused) {
        if refused.remember(alert) {
            self.metrics.invalid.inc();
            tracing::error!(alertmanager = %self.shown, labels = %alert.body["labels"], answer = %body.trim(), "the Alertmanager refused an alert; it is not sent to it again");
        }
    }

    /// One request: `Ok` on a 2xx.
    async fn post(&self, alerts: &[Value]) -> Result<(), Post> {
        let body = Bytes::from(Value::Array(alerts.to_vec()).to_string());
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        match self.client.send(headers, body, false).await {
            Ok(Answer::Status { code, .. }) if code.is_success() => Ok(()),
            Ok(Answer::Status { code, body, .. })
                if code.as_u16() == 400 || code.as_u16() == 422 =>
            {
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

/// The alerts an instance refused: never sent to it again, each refusal logged once.
#[derive(Default)]
struct Refused {
    keys: HashSet<String>,
}

impl Refused {
    /// `alerts` without those refused. When they are every standing alert (`all`), the
    /// refusals of alerts no longer standing are forgotten: they are not sent again anyway.
    fn sendable(&mut self, alerts: Vec<Posted>, all: bool) -> Vec<Posted> {
        if all {
            let standing: HashSet<&str> = alerts.iter().map(|a| a.key.as_str()).collect();
            self.keys.retain(|k| standing.contains(k.as_str()));
        }
        alerts
            .into_iter()
            .filter(|a| !self.keys.contains(&a.key))
            .collect()
    }

    /// Remembers that `alert` was refused; true the first time.
    fn remember(&mut self, alert: &Posted) -> bool {
        self.keys.insert(alert.key.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::alert::AmAlert;
    use super::*;

    /// An alert of pod `p`'s rule `bad`, of the episode `alert_id`, resolved at `resolved`.
    fn alert(alert_id: &str, starts: i64, resolved: Option<i64>) -> AmAlert {
        let t = |ms| jiff::Timestamp::from_millisecond(ms).expect("a time");
        AmAlert {
            labels: BTreeMap::from([
                ("alertname".into(), "bad".into()),
                ("pod".into(), "p".into()),
            ]),
            annotations: BTreeMap::from([("alert_id".into(), alert_id.into())]),
            starts_at: t(starts),
            resolved_at: resolved.map(t),
            generator_url: None,
        }
    }

    #[test]
    fn a_refusal_holds_back_only_that_episode_in_that_state() {
        let mut table = Table::default();
        let at = |ms| jiff::Timestamp::from_millisecond(ms).expect("a time");
        let now = at(1_000_000);
        let h = Duration::from_secs(240);
        let mut refused = Refused::default();
        let v = table.put_at(alert("u:5:alert:bad", 10_000, None), now);
        let sent = refused.sendable(table.batch(false, 0, now, h).alerts, false);
        assert_eq!(sent.len(), 1);
        assert!(refused.remember(&sent[0]), "a first refusal");
        assert!(!refused.remember(&sent[0]), "remembered: logged once");
        assert!(
            refused
                .sendable(table.batch(true, 0, now, h).alerts, true)
                .is_empty(),
            "not sent again"
        );
        // Its resolve, and the pod's next episode of the rule (the same label set), are sent.
        let r = table.put_at(alert("u:5:alert:bad", 10_000, Some(20_000)), now);
        let sent = refused.sendable(table.batch(false, v, now, h).alerts, false);
        assert_eq!(sent.len(), 1, "the episode's resolve is sent");
        assert!(refused.remember(&sent[0]), "its resolve refused too");
        let n = table.put_at(alert("u:9:alert:bad", 30_000, None), now);
        let sent = refused.sendable(table.batch(false, r, now, h).alerts, false);
        assert_eq!(sent.len(), 1, "the next episode is sent");
        // Once the refused resolve has left the table, its refusal is forgotten.
        let later = at(1_000_000 + 900_001);
        let all = refused.sendable(table.batch(true, n, later, h).alerts, true);
        assert_eq!(all.len(), 1, "the new episode");
        assert!(refused.keys.is_empty(), "{:?}", refused.keys);
    }
}
