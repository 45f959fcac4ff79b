//! `alerts:` in the config: the built-in rules (each on unless `enabled: false`, with its
//! thresholds) and user rules in the shape of a Prometheus alerting rule (`expr`, `for`,
//! `labels`, a message template). A pure [`AlertsConfig::validate`] turns it into [`Rule`]s,
//! naming the field of each problem (`alerts.rules.NAME.expr`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::builtin::Condition;
use super::duration::duration;
use super::expr::Expr;
use super::rule::{Message, Rule, When};
use crate::vocab::Issue;

/// The alert rules. Present (even empty: `alerts: {}`) turns the built-in rules on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// A container restarted more than `threshold` times (default 5). Severity `warning`.
    #[serde(default)]
    pub restarts: Builtin,
    /// The pod's phase is `Failed`. Severity `critical`.
    #[serde(default)]
    pub failed: Builtin,
    /// A pod that has not finished is not Ready for `for` (default `5m`), firing on time
    /// with no further change needed. Severity `warning`.
    #[serde(default)]
    pub not_ready: Builtin,
    /// A container was OOMKilled. Severity `warning`.
    #[serde(default)]
    pub oom_killed: Builtin,
    /// A container was OOMKilled in a pod that requests a GPU (`resources`, default
    /// `[nvidia.com/gpu, amd.com/gpu]`). Severity `critical`.
    #[serde(default)]
    pub oom_killed_gpu: Builtin,
    /// A container waits in `CrashLoopBackOff`. Severity `warning`.
    #[serde(default)]
    pub crash_loop_backoff: Builtin,
    /// A container waits in `ImagePullBackOff` or `ErrImagePull`. Severity `warning`.
    #[serde(default)]
    pub image_pull_backoff: Builtin,
    /// The pod is Pending and unscheduled for `for` (default `5m`). Severity `warning`.
    #[serde(default)]
    pub unscheduled: Builtin,
    /// A Node's `Ready` condition is not `True` for `for` (default `2m`). Severity
    /// `critical`. Judges Nodes, so it fires only where `nodes` are watched.
    #[serde(default)]
    pub node_not_ready: Builtin,
    /// A Deployment's `Progressing` condition is `False` (ProgressDeadlineExceeded), or fewer
    /// replicas are available than desired, for `for` (default `10m`). Severity `warning`.
    /// Judges Deployments (`deployments.apps` watched).
    #[serde(default)]
    pub rollout_stuck: Builtin,
    /// A Job's `Failed` condition is `True`. Severity `warning`. Judges Jobs (`jobs.batch`
    /// watched).
    #[serde(default)]
    pub job_failed: Builtin,
    /// A core/v1 Event of type `Warning` with one of `reasons`: fires once per involved
    /// object and reason, and resolves when no such Event was seen for `quiet` (default
    /// `10m`). No `for`. Severity `warning`. Judges Events (`events` watched).
    #[serde(default)]
    pub warning_event: Builtin,
    /// Your own rules, keyed by the rule's name (which goes into the alert's id).
    #[serde(default)]
    pub rules: BTreeMap<String, UserRule>,
}

/// The settings of a built-in rule; each has its own defaults (above).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Builtin {
    /// Whether the rule runs. Default: true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How long the condition must hold before the alert fires (`30s`, `5m`, `1h`).
    /// Default: the rule's (`5m` for `not_ready` and `unscheduled`, else `0s`).
    #[serde(default, rename = "for")]
    pub for_: Option<String>,
    /// The alert's severity. Default: the rule's.
    #[serde(default)]
    pub severity: Option<String>,
    /// `restarts` only: the restart count to exceed. Default: 5.
    #[serde(default)]
    pub threshold: Option<u64>,
    /// `oom_killed_gpu` only: the extended resources that make a pod a GPU pod.
    /// Default: `[nvidia.com/gpu, amd.com/gpu]`.
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    /// `warning_event` only: the Event reasons that alert. Default: FailedScheduling,
    /// FailedMount, FailedAttachVolume, Evicted, BackOff, OOMKilling, FailedCreatePodSandBox,
    /// Unhealthy.
    #[serde(default)]
    pub reasons: Option<Vec<String>>,
    /// `warning_event` only: how long no such Event must be seen before the alert resolves.
    /// Default: `10m`.
    #[serde(default)]
    pub quiet: Option<String>,
    /// How long a firing alert's condition must have stopped holding before the alert
    /// resolves; if it holds again meanwhile, the same episode goes on (Prometheus's
    /// `keep_firing_for`). Default: the rule's: `10m` for `restarts`, `crash_loop_backoff`,
    /// `image_pull_backoff`, `oom_killed` and `oom_killed_gpu` (the kubelet forgets a
    /// container's back-off after it has run 10 minutes, twice its 5-minute cap: a container
    /// that fails again within that is the same loop), `5m` for `not_ready` and
    /// `rollout_stuck` (a flapping probe, a rollout's replicas coming and going), `2m` for
    /// `node_not_ready` (a kubelet that heartbeats now and then), `0s` for `failed`,
    /// `job_failed` and `unscheduled` (they do not come back). For `warning_event` it is
    /// `quiet`, under its Prometheus name (set one or the other).
    #[serde(default)]
    pub keep_firing_for: Option<String>,
    /// Labels copied into the alert's data (`team: payments`). Default: none.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl Default for Builtin {
    fn default() -> Self {
        Builtin {
            enabled: true,
            for_: None,
            severity: None,
            threshold: None,
            resources: None,
            reasons: None,
            quiet: None,
            keep_firing_for: None,
            labels: BTreeMap::new(),
        }
    }
}

/// A rule of your own.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserRule {
    /// The resource whose objects the rule judges, as kubectl names it (`pods`, `deploy`,
    /// `nodes`, `widgets.example.com`); it must be one of `watch.resources`. Default: `pods`.
    #[serde(default)]
    pub resource: Option<String>,
    /// The condition: field comparisons with `and`, `or`, `not`
    /// (`status.phase == "Pending" and status.containerStatuses[*].restartCount > 3`).
    /// Required.
    pub expr: String,
    /// How long `expr` must hold before the alert fires. Default: `0s`.
    #[serde(default, rename = "for")]
    pub for_: Option<String>,
    /// How long `expr` must have stopped holding before a firing alert resolves; if it holds
    /// again meanwhile, the same episode goes on (Prometheus's `keep_firing_for`).
    /// Default: `0s`.
    #[serde(default)]
    pub keep_firing_for: Option<String>,
    /// The alert's severity. Default: `warning`.
    #[serde(default)]
    pub severity: Option<String>,
    /// The alert's message; `{{ path }}` is replaced by the pod's field
    /// (`{{ metadata.name }} has restarted {{ status.containerStatuses[0].restartCount }} times`).
    /// Default: `{rule} holds for {namespace}/{name}`.
    #[serde(default)]
    pub message: Option<String>,
    /// Labels copied into the alert's data. Default: none.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// What a user rule's `resource` names, as far as it is known without the apiserver.
enum Target {
    Pods,
    /// A built-in kind kubecast ships a schema of: (its resource, "a Deployment", the API
    /// type's schema).
    Shipped(
        std::sync::Arc<crate::kinds::Resource>,
        String,
        serde_json::Value,
    ),
    /// Anything else (a custom resource): bound and checked at start.
    Later,
}

impl Target {
    fn of(name: Option<&str>) -> Target {
        let Some(name) = name else {
            return Target::Pods;
        };
        if crate::kinds::Resource::pods().answers_to(name) {
            return Target::Pods;
        }
        match crate::kinds::schema::shipped_resource(name) {
            Some((r, what, schema)) => Target::Shipped(std::sync::Arc::new(r), what, schema),
            None => Target::Later,
        }
    }

    fn is_pods(&self) -> bool {
        matches!(self, Target::Pods)
    }

    fn check(&self, p: &crate::model::FieldPath) -> Result<(), String> {
        match self {
            Target::Pods => super::fields::check(p),
            Target::Shipped(_, what, schema) => super::fields::check_in(schema, what, p),
            Target::Later => Ok(()),
        }
    }

    /// The resource until the rule is bound (a custom resource's is known at start).
    fn resource(&self) -> std::sync::Arc<crate::kinds::Resource> {
        match self {
            Target::Shipped(r, ..) => r.clone(),
            Target::Pods | Target::Later => crate::kinds::Resource::pods(),
        }
    }
}

/// The resource a built-in condition judges, by its key.
fn builtin_resource(key: &str) -> std::sync::Arc<crate::kinds::Resource> {
    use crate::kinds::Resource;
    let r = match key {
        "nodes" => Resource::new("", "v1", "Node", "nodes", false),
        "deployments.apps" => Resource::new("apps", "v1", "Deployment", "deployments", true),
        "jobs.batch" => Resource::new("batch", "v1", "Job", "jobs", true),
        "events" => Resource::new("", "v1", "Event", "events", true),
        _ => return Resource::pods(),
    };
    std::sync::Arc::new(r)
}

/// The GPU resources of `oom_killed_gpu` by default.
const GPU_RESOURCES: [&str; 2] = ["nvidia.com/gpu", "amd.com/gpu"];

impl AlertsConfig {
    /// The rules, checked without any I/O.
    pub fn validate(&self) -> Result<Vec<Rule>, Vec<Issue>> {
        let mut issues = Vec::new();
        let mut rules = Vec::new();
        // Each built-in: its name, settings, default `for`, `keep_firing_for` and severity.
        let builtins: [(&str, &Builtin, &str, &str, &str); 12] = [
            ("restarts", &self.restarts, "0s", "10m", "warning"),
            ("failed", &self.failed, "0s", "0s", "critical"),
            ("not_ready", &self.not_ready, "5m", "5m", "warning"),
            ("oom_killed", &self.oom_killed, "0s", "10m", "warning"),
            (
                "oom_killed_gpu",
                &self.oom_killed_gpu,
                "0s",
                "10m",
                "critical",
            ),
            (
                "crash_loop_backoff",
                &self.crash_loop_backoff,
                "0s",
                "10m",
                "warning",
            ),
            (
                "image_pull_backoff",
                &self.image_pull_backoff,
                "0s",
                "10m",
                "warning",
            ),
            ("unscheduled", &self.unscheduled, "5m", "0s", "warning"),
            (
                "node_not_ready",
                &self.node_not_ready,
                "2m",
                "2m",
                "critical",
            ),
            ("rollout_stuck", &self.rollout_stuck, "10m", "5m", "warning"),
            ("job_failed", &self.job_failed, "0s", "0s", "warning"),
            ("warning_event", &self.warning_event, "0s", "10m", "warning"),
        ];
        for (name, b, default_for, default_keep, default_severity) in builtins {
            let at = format!("alerts.{name}");
            if b.threshold.is_some() && name != "restarts" {
                issues.push(Issue::new(
                    format!("{at}.threshold"),
                    "only `restarts` has a threshold",
                ));
            }
            if b.resources.is_some() && name != "oom_killed_gpu" {
                issues.push(Issue::new(
                    format!("{at}.resources"),
                    "only `oom_killed_gpu` has resources",
                ));
            }
            if name != "warning_event" {
                for (field, set) in [
                    ("reasons", b.reasons.is_some()),
                    ("quiet", b.quiet.is_some()),
                ] {
                    if set {
                        issues.push(Issue::new(
                            format!("{at}.{field}"),
                            "only `warning_event` has it",
                        ));
                    }
                }
            } else if b.for_.is_some() {
                issues.push(Issue::new(
                    format!("{at}.for"),
                    "`warning_event` fires at the first matching Event; `quiet` says when it resolves",
                ));
            }
            if b.reasons.as_ref().is_some_and(Vec::is_empty) {
                issues.push(Issue::new(
                    format!("{at}.reasons"),
                    "is empty; leave it out for the default reasons",
                ));
            }
            if b.quiet.is_some() && b.keep_firing_for.is_some() {
                issues.push(Issue::new(
                    format!("{at}.keep_firing_for"),
                    "`quiet` is `warning_event`'s keep_firing_for: set one or the other",
                ));
            }
            // `warning_event` resolves by quiet, which is its keep_firing_for.
            let (keep, keep_at) = match (&b.keep_firing_for, &b.quiet) {
                (Some(k), _) => (k.as_str(), "keep_firing_for"),
                (None, Some(q)) => (q.as_str(), "quiet"),
                (None, None) => (default_keep, "keep_firing_for"),
            };
            let keep_ms = duration(keep, &format!("{at}.{keep_at}"), &mut issues);
            if b.resources.as_ref().is_some_and(Vec::is_empty) {
                issues.push(Issue::new(
                    format!("{at}.resources"),
                    "is empty; leave it out for the default GPU resources",
                ));
            }
            let for_ms = duration(
                b.for_.as_deref().unwrap_or(default_for),
                &format!("{at}.for"),
                &mut issues,
            );
            let severity = severity(
                b.severity.as_deref().unwrap_or(default_severity),
                &at,
                &mut issues,
            );
            if !b.enabled {
                continue;
            }
            let condition = match name {
                "restarts" => Condition::RestartsAbove(b.threshold.unwrap_or(5)),
                "failed" => Condition::PhaseFailed,
                "not_ready" => Condition::NotReady,
                "oom_killed" => Condition::OomKilled { gpu: None },
                "oom_killed_gpu" => Condition::OomKilled {
                    gpu: Some(
                        b.resources
                            .clone()
                            .unwrap_or_else(|| GPU_RESOURCES.map(String::from).to_vec()),
                    ),
                },
                "crash_loop_backoff" => Condition::CrashLoopBackOff,
                "image_pull_backoff" => Condition::ImagePullBackOff,
                "node_not_ready" => Condition::NodeNotReady,
                "rollout_stuck" => Condition::RolloutStuck,
                "job_failed" => Condition::JobFailed,
                "warning_event" => Condition::WarningEvent {
                    reasons: b.reasons.clone().unwrap_or_else(|| {
                        super::builtin::WARNING_REASONS.map(String::from).to_vec()
                    }),
                },
                _ => Condition::Unscheduled,
            };
            rules.push(Rule {
                name: name.to_string(),
                resource: builtin_resource(condition.resource()),
                resource_name: None,
                quiet_ms: if name == "warning_event" { keep_ms } else { 0 },
                when: When::Builtin(condition),
                for_ms,
                keep_ms: if name == "warning_event" { 0 } else { keep_ms },
                severity,
                message: Message::builtin(name),
                labels: b.labels.clone(),
            });
        }
        for (name, r) in &self.rules {
            let at = format!("alerts.rules.{name}");
            if !crate::vocab::is_dns_label(&name.replace('_', "-")) {
                issues.push(Issue::new(at.clone(), format!("`{name}` is not a rule name (lower-case letters, digits, `-`, `_`; at most 63)")));
            }
            if builtins.iter().any(|(b, ..)| b == name) {
                issues.push(Issue::new(
                    at.clone(),
                    format!("`{name}` is a built-in rule's name; configure it as `alerts.{name}`"),
                ));
            }
            let expr = match Expr::parse(&r.expr) {
                Ok(e) => Some(e),
                Err(e) => {
                    issues.push(Issue::new(
                        format!("{at}.expr"),
                        format!("`{}` {e}", r.expr),
                    ));
                    None
                }
            };
            // Paths are checked here against a Pod's or a shipped built-in kind's schema; a
            // custom resource's are checked at start, against the apiserver's (`bind`).
            let target = Target::of(r.resource.as_deref());
            if let Some(e) = &expr {
                for p in e.paths() {
                    if let Err(why) = target.check(p) {
                        issues.push(Issue::new(format!("{at}.expr"), why));
                    }
                }
            }
            let for_ms = duration(
                r.for_.as_deref().unwrap_or("0s"),
                &format!("{at}.for"),
                &mut issues,
            );
            let keep_ms = duration(
                r.keep_firing_for.as_deref().unwrap_or("0s"),
                &format!("{at}.keep_firing_for"),
                &mut issues,
            );
            let severity = severity(r.severity.as_deref().unwrap_or("warning"), &at, &mut issues);
            let message = match Message::parse_with(
                r.message
                    .as_deref()
                    .unwrap_or("{{ metadata.namespace }}/{{ metadata.name }}: rule `RULE` holds")
                    .replace("RULE", name)
                    .as_str(),
                |p| target.check(p),
            ) {
                Ok(m) => Some(m),
                Err(why) => {
                    issues.push(Issue::new(format!("{at}.message"), why));
                    None
                }
            };
            if let (Some(expr), Some(message)) = (expr, message) {
                rules.push(Rule {
                    name: name.clone(),
                    resource: target.resource(),
                    resource_name: r.resource.clone().filter(|_| !target.is_pods()),
                    quiet_ms: 0,
                    when: When::Expr(expr),
                    for_ms,
                    keep_ms,
                    severity,
                    message,
                    labels: r.labels.clone(),
                });
            }
        }
        if issues.is_empty() {
            Ok(rules)
        } else {
            Err(issues)
        }
    }
}

fn severity(s: &str, at: &str, issues: &mut Vec<Issue>) -> String {
    if s.is_empty()
        || s.len() > 63
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    {
        issues.push(Issue::new(format!("{at}.severity"), format!("`{s}` is not a severity (letters, digits, `-`, `_`, such as `warning` or `critical`)")));
    }
    s.to_string()
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
