//! A validated alert rule: its condition (built-in or a user expression), `for`, severity,
//! labels and message template. Entry points: [`Rule::evaluate`] (does the condition hold for
//! this Pod, with what evidence), [`Rule::published`] (the evidence and message as they go
//! out, redacted) and [`Message::render`].

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::builtin::{self, Condition, Evidence};
use super::expr::Expr;
use crate::model::FieldPath;

/// What makes a rule hold.
#[derive(Debug, Clone)]
pub enum When {
    Builtin(Condition),
    Expr(Expr),
}

/// One rule, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule's name (`restarts`, or the key under `alerts.rules`); part of alert ids.
    pub name: String,
    pub when: When,
    /// How long the condition must hold before the alert fires, in milliseconds.
    pub for_ms: i64,
    /// How long a firing alert's condition must have stopped holding before it resolves
    /// (`keep_firing_for`), in milliseconds.
    pub keep_ms: i64,
    pub severity: String,
    pub message: Message,
    pub labels: BTreeMap<String, String>,
    /// The resource whose objects the rule judges (Pods for every rule but the built-ins of
    /// other kinds): a change of another resource is not evaluated, and the rule's alert
    /// events carry this resource's kind, apiVersion and source.
    pub resource: std::sync::Arc<crate::kinds::Resource>,
    /// A user rule's `resource` as written, when it names another kind than Pods: the
    /// pipeline binds it to the watched resource it names at start ([`Rule::bind`]).
    pub resource_name: Option<String>,
    /// `warning_event`: how long no matching Event must be seen before its alert resolves,
    /// in milliseconds (0 for every other rule).
    pub quiet_ms: i64,
}

impl Rule {
    /// Its `for` and `keep_firing_for`, as episodes take them.
    pub fn timing(&self) -> super::episode::Timing {
        super::episode::Timing {
            for_ms: self.for_ms,
            keep_ms: self.keep_ms,
        }
    }

    /// Whether the rule's condition holds for `pod` (a Pod as JSON), with its evidence. A user
    /// rule's evidence is the value of every field its expression reads.
    pub fn evaluate(&self, pod: &Value) -> Option<Evidence> {
        match &self.when {
            When::Builtin(c) => builtin::holds(c, pod),
            When::Expr(e) => e.eval(pod).then(|| Evidence {
                container: None,
                facts: facts_of(e, pod),
            }),
        }
    }

    /// The evidence and message as they are published, for a rule that holds: a user rule's
    /// facts and every `{{ path }}` of the message are read from `shown`, the object as
    /// redaction leaves it, so a value at a redacted path reads `"<redacted>"` though the
    /// rule judged the real one.
    pub fn published(&self, evidence: Evidence, shown: &Value) -> (Evidence, String) {
        let evidence = match &self.when {
            When::Expr(e) => Evidence {
                container: evidence.container,
                facts: facts_of(e, shown),
            },
            When::Builtin(_) => evidence,
        };
        let message = self.message.render(shown, &evidence);
        (evidence, message)
    }
}

/// The value of every field `e` reads, in `obj`.
fn facts_of(e: &Expr, obj: &Value) -> Map<String, Value> {
    e.paths()
        .into_iter()
        .map(|p| (p.as_str().to_string(), one_or_many(p.select(obj))))
        .collect()
}

impl Rule {
    /// Binds a user rule's `resource` to the watched resource it names, and returns whether
    /// its paths still need checking against that resource's schema (a custom resource's,
    /// which only the apiserver has). `Err` says why it cannot be bound.
    pub fn bind(
        &mut self,
        watched: &[std::sync::Arc<crate::kinds::Resource>],
    ) -> Result<bool, String> {
        let Some(name) = &self.resource_name else {
            return Ok(false);
        };
        let found = watched.iter().find(|r| r.answers_to(name)).ok_or_else(|| {
            format!("`{name}` is not among the watched resources (watch.resources); the rule would never be judged")
        })?;
        self.resource = found.clone();
        Ok(!crate::kinds::schema::ships(found))
    }

    /// Every field path the rule reads: its expression's and its message's.
    pub fn paths(&self) -> Vec<&FieldPath> {
        let mut out = match &self.when {
            When::Expr(e) => e.paths(),
            When::Builtin(_) => Vec::new(),
        };
        out.extend(self.message.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(f),
            _ => None,
        }));
        out
    }
}

fn one_or_many(values: Vec<&Value>) -> Value {
    match values.as_slice() {
        [] => Value::Null,
        [one] => (*one).clone(),
        many => Value::Array(many.iter().map(|v| (*v).clone()).collect()),
    }
}

/// A message template: text with `{{ path }}` replaced by the pod's field (several values
/// joined with `, `; a missing one is empty), and, for built-in rules, `{{ container }}` and
/// `{{ evidence.KEY }}`.
#[derive(Debug, Clone)]
pub struct Message {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Field(FieldPath),
    Container,
    Fact(String),
}

impl Message {
    /// Parses a user template; every field must be one a Pod has.
    pub fn parse(text: &str) -> Result<Message, String> {
        Message::parse_with(text, super::fields::check)
    }

    /// Parses a user template whose fields `check` accepts.
    pub fn parse_with(
        text: &str,
        check: impl Fn(&FieldPath) -> Result<(), String>,
    ) -> Result<Message, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find("}}")
                .ok_or_else(|| format!("`{text}`: a `{{{{` without its `}}}}`"))?;
            let inner = rest[open + 2..open + close].trim();
            let path = FieldPath::parse(inner).map_err(|e| e.to_string())?;
            check(&path)?;
            parts.push(Part::Field(path));
            rest = &rest[open + close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Message { parts })
    }

    /// The message of a built-in rule.
    pub fn builtin(rule: &str) -> Message {
        let field = |p: &str| {
            // The paths below are fixed and valid.
            Part::Field(FieldPath::parse(p).unwrap_or_else(|_| unreachable!("fixed path {p}")))
        };
        let text = |t: &str| Part::Text(t.to_string());
        let pod = || {
            [
                field("metadata.namespace"),
                text("/"),
                field("metadata.name"),
            ]
        };
        let mut parts: Vec<Part> = pod().into();
        match rule {
            "restarts" => parts.extend([
                text(": container "),
                Part::Container,
                text(" restarted "),
                Part::Fact("restartCount".into()),
                text(" times (last: "),
                Part::Fact("lastReason".into()),
                text(")"),
            ]),
            "failed" => parts.extend([text(" failed: "), Part::Fact("reason".into())]),
            "node_not_ready" => {
                // A Node has no namespace: its name alone.
                parts = vec![
                    text("node "),
                    field("metadata.name"),
                    text(" is not Ready ("),
                    Part::Fact("status".into()),
                    text(": "),
                    Part::Fact("reason".into()),
                    text(") since "),
                    Part::Fact("since".into()),
                ];
            }
            "rollout_stuck" => parts.extend([
                text(": rollout stuck, "),
                Part::Fact("available".into()),
                text(" of "),
                Part::Fact("desired".into()),
                text(" replicas available, "),
                Part::Fact("updated".into()),
                text(" updated"),
            ]),
            "warning_event" => {
                // About the involved object, not the Event.
                parts = vec![
                    Part::Fact("reason".into()),
                    text(": "),
                    Part::Fact("message".into()),
                    text(" ("),
                    Part::Fact("count".into()),
                    text(" times)"),
                ];
            }
            "job_failed" => parts.extend([
                text(" failed: "),
                Part::Fact("reason".into()),
                text(" ("),
                Part::Fact("failed".into()),
                text(" failed pods)"),
            ]),
            "not_ready" => parts.extend([text(" is not Ready since "), Part::Fact("since".into())]),
            "oom_killed" | "oom_killed_gpu" => parts.extend([
                text(": container "),
                Part::Container,
                text(" was OOMKilled"),
            ]),
            "crash_loop_backoff" | "image_pull_backoff" => parts.extend([
                text(": container "),
                Part::Container,
                text(" waits in "),
                Part::Fact("reason".into()),
            ]),
            _ => parts.extend([text(" is unscheduled: "), Part::Fact("message".into())]),
        }
        Message { parts }
    }

    /// The message for `pod` (`Value::Null` when only the evidence is known).
    pub fn render(&self, pod: &Value, evidence: &Evidence) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(p) => {
                    let values: Vec<String> = p.select(pod).into_iter().map(plain).collect();
                    out.push_str(&values.join(", "));
                }
                Part::Container => out.push_str(evidence.container.as_deref().unwrap_or("")),
                Part::Fact(k) => {
                    out.push_str(&evidence.facts.get(k).map(plain).unwrap_or_default())
                }
            }
        }
        out
    }
}

/// A value as text: strings without quotes, `null` as nothing.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_template_substitutes_fields_and_refuses_unknown_ones() {
        let m = Message::parse(
            "{{ metadata.name }} restarted {{status.containerStatuses[*].restartCount}} times",
        )
        .expect("valid");
        let pod = json!({"metadata": {"name": "web"}, "status": {"containerStatuses": [{"restartCount": 3}, {"restartCount": 0}]}});
        let none = Evidence {
            container: None,
            facts: Map::new(),
        };
        assert_eq!(m.render(&pod, &none), "web restarted 3, 0 times");
        assert!(
            Message::parse("{{ status.nothing }}")
                .unwrap_err()
                .contains("`status` has no `nothing`")
        );
        assert!(Message::parse("{{ metadata.name").is_err());
    }

    #[test]
    fn a_user_rule_gives_the_fields_it_read_as_evidence() {
        let rule = Rule {
            name: "pending".into(),
            when: When::Expr(
                Expr::parse(
                    r#"status.phase == "Pending" and spec.containers[*].image =~ ".*:latest""#,
                )
                .expect("valid"),
            ),
            for_ms: 0,
            keep_ms: 0,
            severity: "warning".into(),
            message: Message::parse("x").expect("valid"),
            labels: BTreeMap::new(),
            resource: crate::kinds::Resource::pods(),
            resource_name: None,
            quiet_ms: 0,
        };
        let pod = json!({"status": {"phase": "Pending"}, "spec": {"containers": [{"image": "a:latest"}, {"image": "b:1"}]}});
        let e = rule.evaluate(&pod).expect("holds");
        assert_eq!(
            Value::Object(e.facts),
            json!({"status.phase": "Pending", "spec.containers[*].image": ["a:latest", "b:1"]})
        );
        assert!(
            rule.evaluate(&json!({"status": {"phase": "Running"}}))
                .is_none()
        );
    }
}
