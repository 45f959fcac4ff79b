//! The alerts standing at the Alertmanagers: each active one, and each resolved one for
//! [`super::RESOLVED_RESEND`] after its resolve, by label set. Every change takes the next
//! version, so a sender knows what it has not yet confirmed. Entry point: [`Table`].

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::alert::AmAlert;

struct Entry {
    alert: AmAlert,
    version: u64,
}

/// The standing alerts.
#[derive(Default)]
pub struct Table {
    alerts: HashMap<String, Entry>,
    version: u64,
}

/// What a sender sends: the alerts as posted, and the version they bring it up to.
pub struct Batch {
    pub alerts: Vec<Value>,
    pub upto: u64,
}

impl Table {
    /// Puts `alert` in (replacing the one of its label set) and returns the new version.
    pub fn put(&mut self, alert: AmAlert) -> u64 {
        self.version += 1;
        let version = self.version;
        self.alerts.insert(alert.key(), Entry { alert, version });
        version
    }

    /// Active alerts.
    pub fn active(&self) -> usize {
        self.alerts.values().filter(|e| e.alert.resolved_at.is_none()).count()
    }

    /// What to send at `now`: every standing alert (`all`), or those changed after version
    /// `after`; active ones ending `horizon` ahead. Resolved alerts past their resend window
    /// go first.
    pub fn batch(&mut self, all: bool, after: u64, now: jiff::Timestamp, horizon: Duration) -> Batch {
        let keep = jiff::SignedDuration::try_from(super::RESOLVED_RESEND).unwrap_or_default();
        self.alerts.retain(|_, e| {
            e.alert
                .resolved_at
                .is_none_or(|at| now.duration_since(at) <= keep)
        });
        let alerts = self
            .alerts
            .values()
            .filter(|e| all || e.version > after)
            .map(|e| e.alert.posted(now, horizon))
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
        let now = jiff::Timestamp::from_millisecond(1_000_000).expect("a time");
        let h = Duration::from_secs(240);
        assert_eq!(t.put(alert("a", None)), 1);
        assert_eq!(t.put(alert("b", None)), 2);
        assert_eq!(t.put(alert("a", Some(999_000))), 3, "the same label set: replaced");
        assert_eq!(t.active(), 1);
        let changed = t.batch(false, 2, now, h);
        assert_eq!((changed.alerts.len(), changed.upto), (1, 3));
        assert_eq!(changed.alerts[0]["endsAt"], "1970-01-01T00:16:39Z");
        assert_eq!(t.batch(true, 3, now, h).alerts.len(), 2);
        // 15 minutes after its resolve, a resolved alert is no longer sent.
        let later = jiff::Timestamp::from_millisecond(999_000 + 900_001).expect("a time");
        assert_eq!(t.batch(true, 0, later, h).alerts.len(), 1);
    }
}
