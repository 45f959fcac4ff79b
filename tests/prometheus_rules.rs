//! kubecast's own alerting rules (`deploy/prometheus/kubecast-rules.yaml`): promtool accepts
//! the rule group and its unit tests (`kubecast-rules.test.yaml`) pass; every metric the rules
//! name, and every series the unit tests feed them (name, label names, fixed label values),
//! is one a running kubecast exposes, so a renamed metric or label fails here; the Helm chart
//! renders the same rules as a PrometheusRule only when asked.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::deploy::{helm_template, of_kind};

use support::http::{free_port, wait_for};
use support::kubecast::Kubecast;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);
const RULES: &str = "deploy/prometheus/kubecast-rules.yaml";
const RULE_TESTS: &str = "deploy/prometheus/kubecast-rules.test.yaml";

/// Labels every scrape adds, and labels whose values are the user's names.
const SCRAPE_LABELS: [&str; 2] = ["job", "instance"];
const NAMED_BY_USER: [&str; 3] = ["sink", "resource", "scope"];

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("running promtool (Debian's prometheus package; scripts/test installs it)");
    assert!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A series as `name` and its labels.
type Series = (String, BTreeMap<String, String>);

/// Parses `name{a="x",b="y"}` (a sample line of the text format, or a promtool series).
fn series(text: &str) -> Series {
    let Some((name, rest)) = text.split_once('{') else {
        let name = text.split_whitespace().next().unwrap_or_default();
        return (name.to_string(), BTreeMap::new());
    };
    let body = rest.rsplit_once('}').map_or(rest, |(b, _)| b);
    let labels = body
        .split("\",")
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.trim().to_string(), v.trim_matches('"').to_string())
        })
        .collect();
    (name.to_string(), labels)
}

/// The sample series of a text exposition.
fn exposed(text: &str) -> Vec<Series> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| series(l.rsplit_once(' ').map_or(l, |(s, _)| s)))
        .collect()
}

/// Whether kubecast exposes a series like `want`: the same name and label names beside the
/// scrape's, the same values where kubecast (not the user) chooses them.
fn matches(want: &Series, have: &[Series]) -> bool {
    let labels: BTreeSet<&str> = want
        .1
        .keys()
        .map(String::as_str)
        .filter(|k| !SCRAPE_LABELS.contains(k))
        .collect();
    have.iter().any(|(name, l)| {
        name == &want.0
            && l.keys().map(String::as_str).collect::<BTreeSet<_>>() == labels
            && labels
                .iter()
                .filter(|k| !NAMED_BY_USER.contains(k))
                .all(|k| l.get(*k) == want.1.get(*k))
    })
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `kubecast_*` metric name in the rules' expressions.
fn metric_names_in_rules() -> BTreeSet<String> {
    let rules = yaml(RULES);
    let mut names = BTreeSet::new();
    for rule in rules["groups"][0]["rules"].as_array().into_iter().flatten() {
        let expr = rule["expr"].as_str().unwrap_or_default();
        let mut rest = expr;
        while let Some(at) = rest.find("kubecast_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    names
}

#[test]
fn the_rule_group_passes_promtool_check_and_its_unit_tests() {
    promtool(&["check", "rules", RULES]);
    promtool(&["test", "rules", RULE_TESTS]);
    let alerts: Vec<String> = yaml(RULES)["groups"][0]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some(r["alert"].as_str()?.to_string()))
        .collect();
    let tested: BTreeSet<String> = yaml(RULE_TESTS)["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
        .filter(|t| t["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|t| Some(t["alertname"].as_str()?.to_string()))
        .collect();
    for alert in &alerts {
        assert!(
            tested.contains(alert),
            "{RULE_TESTS} never sees {alert} fire"
        );
    }
    assert_eq!(alerts.len(), 8, "{alerts:?}");
}

#[tokio::test]
async fn the_rules_and_their_tests_name_only_series_a_running_kubecast_exposes() {
    let scene = Scene::new("prom-rules").await;
    let port = free_port();
    let state = scene.dir.join("state");
    let config = scene.config(
        &format!("state:\n  dir: {}\n", state.display()),
        &[scene.kafka_sink("kafka", &unique_name("kc-prom"), &[])],
    );
    let address = format!("127.0.0.1:{port}");
    let kubecast = Kubecast::start_with(
        &scene.stack,
        &scene.dir,
        &config,
        &["--metrics-address", &address],
    );
    scene.pods.create("a").await;
    // Delivered once: the delay histogram has its buckets; the watch has listed.
    let (_, text) = wait_for(port, "/metrics", LIMIT, "a delivery", |_, body| {
        body.contains("kubecast_delivery_delay_seconds_count{sink=\"kafka\"} 1")
    })
    .await;
    let have = exposed(&text);

    for name in metric_names_in_rules() {
        assert!(
            have.iter().any(|(n, _)| *n == name),
            "{RULES} uses {name}, which kubecast does not expose:\n{text}"
        );
    }
    let tests = yaml(RULE_TESTS);
    let mut checked = 0;
    for test in tests["tests"].as_array().into_iter().flatten() {
        for input in test["input_series"].as_array().into_iter().flatten() {
            let want = series(input["series"].as_str().unwrap_or_default());
            assert!(
                matches(&want, &have),
                "{RULE_TESTS} feeds {want:?}, which no series of kubecast's /metrics matches (name, label names, kubecast's label values):\n{text}"
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} series in {RULE_TESTS}");
    let leader = have.iter().find(|(n, _)| n == "kubecast_leader");
    assert!(
        text.lines().any(|l| l == "kubecast_leader 1"),
        "a kubecast without leader election publishes, so it leads: {leader:?}"
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn the_helm_chart_renders_the_same_rules_as_a_prometheus_rule_only_when_enabled() {
    let stack = support::Stack::load();
    let default = helm_template(&stack, "kubecast", "kubecast", &[]);
    assert!(
        !default.iter().any(|o| o["kind"] == "PrometheusRule"),
        "a PrometheusRule rendered by default"
    );
    let enabled = helm_template(
        &stack,
        "kubecast",
        "kubecast",
        &[
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.labels.release=prometheus",
        ],
    );
    let rule = of_kind(&enabled, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "kubecast");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        rule["spec"],
        yaml(RULES),
        "the PrometheusRule's spec is {RULES}"
    );
}
