//! The alerts standing at the Alertmanagers: each active one, and each resolved one for
//! [`super::RESOLVED_RESEND`] after it was put, by label set. Counting from the put, not from
//! the resolve time, keeps a resolve that comes late (one that fell due while kubecast was
//! down) until it has been sent. Every change takes the next version, so a sender knows what
//! it has not yet confirmed. Entry point: [`Table`].

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::alert::AmAlert;

struct Entry {
    alert: AmAlert,
    version: u64,
    /// When it was put: a resolved one is sent for [`super::RESOLVED_RESEND`] from then.
    put_at: jiff::Timestamp,
}

/// The standing alerts.
#[derive(Default)]
pub struct Table {
    alerts: HashMap<String, Entry>,
    version: u64,
}

/// What a sender sends: the alerts as posted, and the version they bring it up to.
pub struct Batch {
    pub alerts: Vec<Posted>,
    pub upto: u64,
}

/// One alert as posted, with what a refusal of it is remembered by.
pub struct Posted {
    pub key: String,
    pub body: Value,
}

impl Table {
    /// Puts `alert` in (replacing the one of its label set) and returns the new version.
    pub fn put(&mut self, alert: AmAlert) -> u64 {
        self.put_at(alert, jiff::Timestamp::now())
    }

    /// [`Table::put`] at `now`.
    pub fn put_at(&mut self, alert: AmAlert, now: jiff::Timestamp) -> u64 {
        self.version += 1;
        let version = self.version;
        let entry = Entry {
            alert,
            version,
            put_at: now,
        };
        self.alerts.insert(entry.alert.key(), entry);
        version
    }

    /// Active alerts.
    pub fn active(&self) -> usize {
        self.alerts
            .values()
            .filter(|e| e.alert.resolved_at.is_none())
            .count()
    }

    /// What to send at `now`: every standing alert (`all`), or those changed after version
    /// `after`; active ones ending `horizon` ahead. Resolved alerts put longer ago than their
    /// resend window go first.
    pub fn batch(
        &mut self,
        all: bool,
        after: u64,
        now: jiff::Timestamp,
        horizon: Duration,
    ) -> Batch {
        let keep = jiff::SignedDuration::try_from(super::RESOLVED_RESEND).unwrap_or_default();
        self.alerts
            .retain(|_, e| e.alert.resolved_at.is_none() || now.duration_since(e.put_at) <= keep);
        let alerts = self
            .alerts
            .values()
            .filter(|e| all || e.version > after)
            .map(|e| Posted {
                key: e.alert.refusal_key(),
                body: e.alert.posted(now, horizon),
            })
            .collect();
        Batch {
            alerts,
            upto: self.version,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn alert(pod: &str, resolved_at: Option<i64>) -> AmAlert {
        let t = |ms| jiff::Timestamp::from_millisecond(ms).expect("a time");
        AmAlert {
            labels: BTreeMap::from([("alertname".into(), "x".into()), ("pod".into(), pod.into())]),
            annotations: BTreeMap::new(),
            starts_at: t(0),
            resolved_at: resolved_at.map(t),
            generator_url: None,
        }
    }

    #[test]
    fn a_sender_gets_what_changed_since_its_version_or_everything_and_old_resolves_go() {
        let mut t = Table::default();
        let at = |ms| jiff::Timestamp::from_millisecond(ms).expect("a time");
        let now = at(1_000_000);
        let h = Duration::from_secs(240);
        assert_eq!(t.put_at(alert("a", None), at(998_000)), 1);
        assert_eq!(t.put_at(alert("b", None), at(998_500)), 2);
        assert_eq!(
            t.put_at(alert("a", Some(999_000)), at(999_000)),
            3,
            "the same label set: replaced"
        );
        assert_eq!(t.active(), 1);
        let changed = t.batch(false, 2, now, h);
        assert_eq!((changed.alerts.len(), changed.upto), (1, 3));
        assert_eq!(changed.alerts[0].body["endsAt"], "1970-01-01T00:16:39Z");
        assert_eq!(t.batch(true, 3, now, h).alerts.len(), 2);
        // 15 minutes after its put, a resolved alert is no longer sent.
        assert_eq!(t.batch(true, 0, at(999_000 + 900_000), h).alerts.len(), 2);
        assert_eq!(t.batch(true, 0, at(999_000 + 900_001), h).alerts.len(), 1);
    }

    #[test]
    fn a_resolve_put_long_after_its_time_is_sent_for_15_minutes_from_its_put() {
        let mut t = Table::default();
        let at = |ms| jiff::Timestamp::from_millisecond(ms).expect("a time");
        let h = Duration::from_secs(240);
        // Resolved at 100 s, while kubecast was down, and put 20 minutes later it is back.
        let put = 100_000 + 20 * 60_000;
        let v = t.put_at(alert("a", Some(100_000)), at(put));
        let batch = t.batch(false, 0, at(put), h);
        assert_eq!(
            (batch.alerts.len(), batch.upto),
            (1, v),
            "the resolve is sent"
        );
        assert_eq!(
            batch.alerts[0].body["endsAt"], "1970-01-01T00:01:40Z",
            "at its time"
        );
        assert_eq!(t.batch(true, 0, at(put + 900_000), h).alerts.len(), 1);
        assert_eq!(t.batch(true, 0, at(put + 900_001), h).alerts.len(), 0);
    }
}
