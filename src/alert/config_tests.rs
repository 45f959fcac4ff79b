use super::*;

fn alerts(yaml: &str) -> Result<Vec<Rule>, Vec<Issue>> {
    let c: AlertsConfig = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
    c.validate()
}

#[test]
fn an_empty_alerts_section_turns_every_builtin_on_with_its_defaults() {
    let rules = alerts("{}").expect("valid");
    let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "restarts",
            "failed",
            "not_ready",
            "oom_killed",
            "oom_killed_gpu",
            "crash_loop_backoff",
            "image_pull_backoff",
            "unscheduled",
            "node_not_ready",
            "rollout_stuck",
            "job_failed",
            "warning_event"
        ]
    );
    assert_eq!(
        rules[11].quiet_ms, 600_000,
        "warning_event resolves after 10m quiet"
    );
    assert_eq!(rules[11].resource.key().as_ref(), "events");
    let issues =
        alerts("restarts: {reasons: [X], quiet: 1m}\nwarning_event: {for: 1m, reasons: []}\n")
            .unwrap_err();
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "alerts.restarts.reasons",
            "alerts.restarts.quiet",
            "alerts.warning_event.for",
            "alerts.warning_event.reasons"
        ],
        "{issues:?}"
    );
    let node = &rules[8];
    assert_eq!(
        (
            node.for_ms,
            node.severity.as_str(),
            node.resource.key().as_ref()
        ),
        (120_000, "critical", "nodes")
    );
    assert_eq!(
        (rules[9].for_ms, rules[9].resource.key().as_ref()),
        (600_000, "deployments.apps")
    );
    let not_ready = &rules[2];
    assert_eq!(
        (not_ready.for_ms, not_ready.severity.as_str()),
        (300_000, "warning")
    );
    assert!(matches!(
        rules[0].when,
        When::Builtin(Condition::RestartsAbove(5))
    ));
}

#[test]
fn builtins_take_their_thresholds_and_can_be_turned_off() {
    let rules = alerts("restarts: {threshold: 2, severity: page}\nfailed: {enabled: false}\nnot_ready: {for: 10s}\n").expect("valid");
    assert!(matches!(
        rules[0].when,
        When::Builtin(Condition::RestartsAbove(2))
    ));
    assert_eq!(rules[0].severity, "page");
    assert!(rules.iter().all(|r| r.name != "failed"));
    assert_eq!(
        rules
            .iter()
            .find(|r| r.name == "not_ready")
            .map(|r| r.for_ms),
        Some(10_000)
    );
}

#[test]
fn every_bad_rule_entry_is_named_by_its_path() {
    let issues = alerts(concat!(
        "failed: {threshold: 3}\n",
        "not_ready: {for: soon}\n",
        "rules:\n",
        "  slow: {expr: 'status.phase ==', for: 1m}\n",
        "  tmpl: {expr: 'status.phase == \"Pending\"', message: '{{ status.nothing }}'}\n",
        "  field: {expr: 'status.colour == \"red\"', severity: 'very bad'}\n",
    ))
    .expect_err("invalid");
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "alerts.failed.threshold",
            "alerts.not_ready.for",
            "alerts.rules.field.expr",
            "alerts.rules.field.severity",
            "alerts.rules.slow.expr",
            "alerts.rules.tmpl.message"
        ]
    );
}

#[test]
fn a_user_rule_on_a_built_in_kind_is_checked_against_that_kinds_schema() {
    let ok = alerts(
        "rules:\n  short: {resource: deploy, expr: 'status.readyReplicas < 2', message: '{{ metadata.name }}: {{ status.readyReplicas }}'}\n",
    )
    .expect("valid");
    let short = ok.iter().find(|r| r.name == "short").expect("the rule");
    assert_eq!(short.resource.key().as_ref(), "deployments.apps");
    assert_eq!(short.resource_name.as_deref(), Some("deploy"));
    let issues = alerts("rules:\n  bad: {resource: deployments, expr: 'status.phase == \"x\"'}\n")
        .unwrap_err();
    assert!(
        issues
            .iter()
            .any(|i| i.field == "alerts.rules.bad.expr" && i.message.contains("has no `phase`")),
        "{issues:?}"
    );
    // A custom resource's paths wait for the apiserver's schema at start.
    let later = alerts("rules:\n  big: {resource: widgets.example.com, expr: 'spec.size > 3'}\n")
        .expect("valid");
    assert_eq!(
        later
            .iter()
            .find(|r| r.name == "big")
            .and_then(|r| r.resource_name.as_deref()),
        Some("widgets.example.com")
    );
}

#[test]
fn every_rule_keeps_firing_for_its_own_default_or_what_is_set() {
    let rules = alerts("not_ready: {keep_firing_for: 1m}\nrules:\n  mine: {expr: 'status.phase == \"Pending\"', keep_firing_for: 30s}\n  plain: {expr: 'status.phase == \"Pending\"'}\n").expect("valid");
    let keep = |name: &str| {
        let r = rules.iter().find(|r| r.name == name).expect("the rule");
        (r.keep_ms, r.quiet_ms)
    };
    for (name, ms) in [
        ("restarts", 600_000),
        ("crash_loop_backoff", 600_000),
        ("image_pull_backoff", 600_000),
        ("oom_killed", 600_000),
        ("node_not_ready", 120_000),
        ("rollout_stuck", 300_000),
        ("failed", 0),
        ("job_failed", 0),
        ("unscheduled", 0),
        ("not_ready", 60_000),
        ("mine", 30_000),
        ("plain", 0),
    ] {
        assert_eq!(keep(name), (ms, 0), "{name}");
    }
    assert_eq!(keep("warning_event"), (0, 600_000), "its keep is its quiet");
    let named = alerts("warning_event: {keep_firing_for: 2m}\n").expect("valid");
    let w = named
        .iter()
        .find(|r| r.name == "warning_event")
        .expect("the rule");
    assert_eq!(w.quiet_ms, 120_000);
    let issues = alerts("warning_event: {keep_firing_for: 2m, quiet: 1m}\nrules:\n  x: {expr: 'status.phase == \"Pending\"', keep_firing_for: soon}\n").unwrap_err();
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "alerts.warning_event.keep_firing_for",
            "alerts.rules.x.keep_firing_for"
        ],
        "{issues:?}"
    );
}
