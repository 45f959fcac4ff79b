//! An alert event (`io.kubecast.alert.firing` or `.resolved`) as an Alertmanager alert.
//!
//! Labels: `alertname` (the rule), `severity`, `cluster`, `namespace`, the object's kind in
//! lower case with its name as the value (`pod: web-1`, `node: n1`), `reason` for a
//! `warning_event`, and the rule's own `labels` (which cannot replace those). Nothing in them
//! changes within an episode, so Alertmanager's fingerprint is the episode's. Annotations:
//! `summary` and `description` (the message), `evidence` (the evidence as JSON, redacted
//! like every output), `alert_id` (the episode) and `event_id` (the event).
//! `startsAt` is the episode's begin, the same in every send and after a restart.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::event::Event;
use crate::model::ChangeKind;
use crate::sinks::{Placeholder, Template, Vars};

/// What `generator_url` may name: the cluster and the object the alert is about.
pub const GENERATOR_PLACEHOLDERS: [Placeholder; 5] = [
    Placeholder::Cluster,
    Placeholder::Namespace,
    Placeholder::Name,
    Placeholder::Kind,
    Placeholder::Resource,
];

/// One alert as the table keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct AmAlert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: jiff::Timestamp,
    /// When it resolved; `None` while it fires.
    pub resolved_at: Option<jiff::Timestamp>,
    pub generator_url: Option<String>,
}

/// Why an event cannot become an alert.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("its data is not an alert's JSON object: {0}")]
    Data(#[from] serde_json::Error),
    #[error("its data has no `{0}`")]
    Missing(&'static str),
}

impl AmAlert {
    /// The alert of `event`, or `None` when the event is not an alert.
    pub fn of(
        event: &Event,
        cluster: &str,
        generator: Option<&Template>,
    ) -> Option<Result<AmAlert, AlertError>> {
        let resolved = match event.kind {
            ChangeKind::AlertFiring => false,
            ChangeKind::AlertResolved => true,
            _ => return None,
        };
        Some(Self::parse(event, resolved, cluster, generator))
    }

    fn parse(
        event: &Event,
        resolved: bool,
        cluster: &str,
        generator: Option<&Template>,
    ) -> Result<AmAlert, AlertError> {
        let data: Value = serde_json::from_slice(&event.data)?;
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let rule = data["rule"].as_str().ok_or(AlertError::Missing("rule"))?;
        let object = &data["object"];
        let kind = object["kind"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut labels: BTreeMap<String, String> = data["labels"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
            .unwrap_or_default();
        labels.insert("alertname".into(), rule.to_string());
        labels.insert("severity".into(), text(&data["severity"]));
        labels.insert("cluster".into(), cluster.to_string());
        labels.insert("namespace".into(), text(&object["namespace"]));
        if !kind.is_empty() {
            labels.insert(kind.clone(), text(&object["name"]));
        }
        if rule == "warning_event" {
            labels.insert("reason".into(), text(&data["evidence"]["reason"]));
        }
        // Alertmanager drops empty values itself; dropping them here keeps the key stable.
        labels.retain(|_, v| !v.is_empty());
        let message = text(&data["message"]);
        let alert = text(&data["alert"]);
        let mut annotations = BTreeMap::new();
        annotations.insert("summary".into(), message.clone());
        annotations.insert("description".into(), message);
        annotations.insert("evidence".into(), data["evidence"].to_string());
        annotations.insert("alert_id".into(), alert.clone());
        annotations.insert("event_id".into(), event.id.clone());
        let starts_at = data["beganAt"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or(event.time);
        let generator_url = generator.map(|g| g.render(&Vars::of(event)));
        Ok(AmAlert {
            labels,
            annotations,
            starts_at,
            resolved_at: resolved.then_some(event.time),
            generator_url,
        })
    }

    /// Its key: the label set, which Alertmanager fingerprints.
    pub fn key(&self) -> String {
        self.labels
            .iter()
            .map(|(k, v)| format!("{k}\u{0}{v}\u{0}"))
            .collect()
    }

    /// What a refusal of it is remembered by: its episode (label set, `alert_id`, start) and
    /// state. Not the label set alone, which every episode of an object and rule shares: a
    /// refused episode must not hold back the next one, nor a refused firing its resolve.
    pub fn refusal_key(&self) -> String {
        let episode = self.annotations.get("alert_id").map_or("", String::as_str);
        let state = if self.resolved_at.is_some() {
            "resolved"
        } else {
            "firing"
        };
        format!("{}{episode}\u{0}{}\u{0}{state}", self.key(), self.starts_at)
    }

    /// The alert as Alertmanager takes it at `now`: an active one ends `horizon` from now
    /// unless it is sent again, a resolved one at its resolve time.
    pub fn posted(&self, now: jiff::Timestamp, horizon: std::time::Duration) -> Value {
        let ends = match self.resolved_at {
            Some(at) => at,
            None => now
                .checked_add(
                    jiff::SignedDuration::try_from(horizon)
                        .unwrap_or(jiff::SignedDuration::from_secs(240)),
                )
                .unwrap_or(now),
        };
        let mut v = json!({
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": self.starts_at.to_string(),
            "endsAt": ends.to_string(),
        });
        if let Some(g) = &self.generator_url {
            v["generatorURL"] = Value::String(g.clone());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::builtin::Evidence;
    use crate::alert::config::AlertsConfig;
    use crate::alert::episode::{Episodes, Seen, Timing, Transition};
    use crate::alert::rule::Rule;
    use crate::sinks::alertmanager::table::Table;

    /// The crash-loop rule (with labels of its own) and what it says of a crash-looping pod.
    fn crash_loop() -> (Rule, Option<(Evidence, String)>) {
        let rules = AlertsConfig::default()
            .validate()
            .expect("the built-in rules");
        let rule = rules
            .iter()
            .find(|r| r.name == "crash_loop_backoff")
            .expect("the rule");
        let mut rule = rule.clone();
        rule.labels.insert("team".into(), "payments".into());
        rule.labels.insert("severity".into(), "page".into());
        let pod = json!({"metadata": {"namespace": "shop", "name": "web-1"},
            "status": {"containerStatuses": [{"name": "app", "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]}});
        let holds = rule.evaluate(&pod).map(|e| rule.published(e, &pod));
        (rule, holds)
    }

    fn seen(rv: &str, now: i64) -> Seen<'_> {
        Seen {
            uid: "u1",
            namespace: "shop",
            name: "web-1",
            rv,
            now,
        }
    }

    /// The `firing` and `resolved` events of a crash-looping pod's episode.
    fn events() -> (Event, Event) {
        let (rule, holds) = crash_loop();
        let mut eps = Episodes::default();
        let timing = crate::alert::episode::Timing {
            for_ms: 0,
            keep_ms: 0,
        };
        let fired = eps.observe(&rule.name, timing, &seen("5", 1_000), holds);
        let resolved = eps.observe(&rule.name, timing, &seen("9", 61_000), None);
        let event = |t: &Transition| match t {
            Transition::Firing(ep) => {
                crate::event::alert_event("prod", ChangeKind::AlertFiring, ep, &rule)
            }
            Transition::Resolved(ep) => {
                crate::event::alert_event("prod", ChangeKind::AlertResolved, ep, &rule)
            }
        };
        (event(&fired[0]), event(&resolved[0]))
    }

    #[test]
    fn an_episode_is_one_label_set_with_its_begin_as_start() {
        let (firing, resolved) = events();
        let ui = Template::parse(
            "https://ui/{cluster}/{namespace}/{name}",
            &GENERATOR_PLACEHOLDERS,
            "prod",
        )
        .expect("valid");
        let f = AmAlert::of(&firing, "prod", Some(&ui))
            .expect("an alert")
            .expect("valid");
        let r = AmAlert::of(&resolved, "prod", None)
            .expect("an alert")
            .expect("valid");
        let labels: Vec<String> = f.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            labels,
            [
                "alertname=crash_loop_backoff",
                "cluster=prod",
                "namespace=shop",
                "pod=web-1",
                "severity=warning",
                "team=payments"
            ],
            "the rule's labels do not replace kubecast's"
        );
        assert_eq!(f.key(), r.key(), "the same fingerprint for both");
        assert_eq!(f.starts_at, r.starts_at);
        assert_eq!(f.starts_at.as_millisecond(), 1_000, "the episode's begin");
        assert_eq!(f.resolved_at, None);
        assert_eq!(r.resolved_at.map(|t| t.as_millisecond()), Some(61_000));
        assert_eq!(
            f.generator_url.as_deref(),
            Some("https://ui/prod/shop/web-1")
        );
        assert_eq!(f.annotations["alert_id"], "u1:5:alert:crash_loop_backoff");
        assert!(f.annotations["evidence"].contains("CrashLoopBackOff"));
        let now = jiff::Timestamp::from_millisecond(100_000).expect("a time");
        let posted = f.posted(now, std::time::Duration::from_secs(240));
        assert_eq!(
            posted["endsAt"], "1970-01-01T00:05:40Z",
            "four intervals ahead"
        );
        assert_eq!(
            r.posted(now, std::time::Duration::from_secs(240))["endsAt"],
            "1970-01-01T00:01:01Z"
        );
    }

    #[test]
    fn an_event_that_is_not_an_alert_is_none() {
        let (mut firing, _) = events();
        firing.kind = ChangeKind::Modified;
        assert!(AmAlert::of(&firing, "prod", None).is_none());
    }

    #[test]
    fn an_episode_kept_firing_past_a_20_minute_stop_is_sent_only_as_its_resolve() {
        let (rule, holds) = crash_loop();
        let keep = Timing {
            for_ms: 0,
            keep_ms: 60_000,
        };
        let mut eps = Episodes::default();
        eps.observe(&rule.name, keep, &seen("5", 1_000), holds);
        // Cleared at 2 s: kept firing until 62 s. kubecast stops with that state saved.
        eps.observe(&rule.name, keep, &seen("9", 2_000), None);
        let saved = serde_json::to_string(&eps).expect("episodes serialize");
        // Started again 20 minutes after the keep ran out: the standing alerts, then the
        // first tick, go into the table, as the sink takes them.
        let mut restored: Episodes = serde_json::from_str(&saved).expect("and read back");
        let now_ms = 62_000 + 20 * 60_000;
        let now = jiff::Timestamp::from_millisecond(now_ms).expect("a time");
        let window = i64::try_from(super::super::RESOLVED_RESEND.as_millis()).expect("small");
        let mut table = Table::default();
        let alert = |kind, ep: &crate::alert::episode::Episode| {
            let event = crate::event::alert_event("prod", kind, ep, &rule);
            let alert = AmAlert::of(&event, "prod", None).expect("an alert");
            alert.expect("valid")
        };
        for ep in restored.standing(now_ms - window, now_ms) {
            let kind = if ep.is_active() {
                ChangeKind::AlertFiring
            } else {
                ChangeKind::AlertResolved
            };
            table.put_at(alert(kind, &ep), now);
        }
        let h = std::time::Duration::from_secs(240);
        let first = table.batch(true, 0, now, h);
        assert!(
            first.alerts.is_empty(),
            "the sender's first send, before the tick: nothing firing (and the resolve is older \
             than the window): {:?}",
            first.alerts.iter().map(|a| &a.body).collect::<Vec<_>>()
        );
        for t in restored.tick(now_ms) {
            let a = match t {
                Transition::Firing(ep) => alert(ChangeKind::AlertFiring, &ep),
                Transition::Resolved(ep) => alert(ChangeKind::AlertResolved, &ep),
            };
            table.put_at(a, now);
        }
        let sent = table.batch(true, 0, now, h);
        let ends: Vec<&Value> = sent.alerts.iter().map(|a| &a.body["endsAt"]).collect();
        assert_eq!(
            ends,
            ["1970-01-01T00:01:02Z"],
            "its resolve, at its time; nothing firing"
        );
    }
}
