//! Validation of `routes:` and `alerts:` (part of [`super::Config::validate`]): each route and
//! rule checked on its own, then against the sinks (a route's sinks exist, a route's topic
//! suits each of its sinks, every sink is fed by a route, a sink that takes only alerts by
//! routes that carry both firing and resolved alerts, no exactly-once sink among them).

use std::collections::{BTreeMap, BTreeSet};

use super::{Config, Issue};
use crate::alert::rule::Rule;
use crate::route::config::Route;
use crate::sinks::{SinkKind, Takes, ValidSink};

/// The validated routes and rules, and which sinks each route feeds.
#[derive(Debug, Clone)]
pub struct Routing {
    pub routes: Vec<Route>,
    pub rules: Vec<Rule>,
    /// Per route, its sinks as indices into the validated sinks (config order).
    pub feeds: Vec<Vec<usize>>,
}

/// The most routes a config may have (a route's sinks are a bit set of this size).
pub const MAX_ROUTES: usize = 64;

/// The routes and rules of `config`, or `None` when it has neither.
pub(super) fn routes_and_rules(
    config: &Config,
    issues: &mut Vec<Issue>,
) -> Option<(Vec<Route>, Vec<Rule>)> {
    if config.routes.is_empty() && config.alerts.is_none() {
        return None;
    }
    let names: Vec<&str> = config.sinks.keys().map(String::as_str).collect();
    if config.routes.len() > MAX_ROUTES {
        issues.push(Issue::new("routes", format!("at most {MAX_ROUTES} routes")));
    }
    let watched: Vec<&str> = config
        .watch
        .resources
        .iter()
        .map(|r| r.resource.as_str())
        .collect();
    let mut routes = Vec::new();
    for (name, r) in &config.routes {
        if !crate::vocab::is_name(name) {
            issues.push(Issue::new(
                format!("routes.{name}"),
                "route names are letters, digits, '-' and '_'",
            ));
        }
        match r.validate(name, &names, &watched) {
            Ok(r) => routes.push(r),
            Err(more) => issues.extend(more),
        }
    }
    let rules = match config.alerts.as_ref().map(|a| a.validate()) {
        None => Vec::new(),
        Some(Ok(rules)) => rules,
        Some(Err(more)) => {
            issues.extend(more);
            Vec::new()
        }
    };
    Some((routes, rules))
}

/// Per sink, the (route, topic) of each route that feeds it and sets a topic.
pub(super) fn route_topics(config: &Config) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (name, r) in &config.routes {
        if let Some(t) = &r.topic {
            for s in &r.sinks {
                out.entry(s.clone())
                    .or_default()
                    .push((name.clone(), t.clone()));
            }
        }
    }
    out
}

/// Per sink, the (route, shape) of each route that feeds it and sets a `compat`.
pub(super) fn route_compat(
    config: &Config,
) -> BTreeMap<String, Vec<(String, crate::vocab::Compat)>> {
    let mut out: BTreeMap<String, Vec<(String, crate::vocab::Compat)>> = BTreeMap::new();
    for (name, r) in &config.routes {
        if let Some(c) = r.compat {
            for s in &r.sinks {
                out.entry(s.clone()).or_default().push((name.clone(), c));
            }
        }
    }
    out
}

/// Checks the routes against the validated sinks and says which sinks each feeds.
pub(super) fn feeds(
    config: &Config,
    routes: Vec<Route>,
    rules: Vec<Rule>,
    sinks: &[(String, ValidSink)],
    issues: &mut Vec<Issue>,
) -> Routing {
    let index = |s: &str| sinks.iter().position(|(n, _)| n == s);
    let feeds: Vec<Vec<usize>> = routes
        .iter()
        .map(|r| r.sinks.iter().filter_map(|s| index(s)).collect())
        .collect();
    if !config.routes.is_empty() {
        // From the config, so that a route with other problems still counts as feeding.
        let fed: BTreeSet<&str> = config
            .routes
            .values()
            .flat_map(|r| r.sinks.iter().map(String::as_str))
            .collect();
        for (name, _) in sinks {
            if !fed.contains(name.as_str()) {
                issues.push(Issue::new(
                    format!("sinks.{name}"),
                    "no route feeds it: with `routes`, a sink gets only what a route sends it",
                ));
            }
        }
        for (name, v) in sinks {
            if v.sink.takes() == Takes::Alerts && fed.contains(name.as_str()) {
                alert_types(config, name, issues);
            }
        }
    }
    for r in &routes {
        let Some(topic) = &r.topic else { continue };
        for s in &r.sinks {
            if let Some(SinkKind::Stdout(_) | SinkKind::File(_)) =
                config.sinks.get(s).map(|c| &c.kind)
            {
                issues.push(Issue::new(
                    format!("routes.{}.topic", r.name),
                    format!("`{topic}`: sinks.{s} writes JSON lines and has no topic"),
                ));
            }
        }
    }
    Routing {
        routes,
        rules,
        feeds,
    }
}

/// Checks that the routes feeding `sink` (one that takes only alerts) carry both alert types
/// between them: with no alert it would get nothing, and with only `alert.firing` an alert
/// would never resolve there (Alertmanager has it firing, sent again every resend for ever).
fn alert_types(config: &Config, sink: &str, issues: &mut Vec<Issue>) {
    const FIRING: &str = "alert.firing";
    const RESOLVED: &str = "alert.resolved";
    let mut carried: BTreeSet<&str> = BTreeSet::new();
    let mut routes: Vec<&str> = Vec::new();
    for (name, r) in &config.routes {
        if !r.sinks.iter().any(|s| s == sink) {
            continue;
        }
        for t in &r.types {
            match t.as_str() {
                "alerts" => carried.extend([FIRING, RESOLVED]),
                FIRING | RESOLVED => {
                    carried.insert(t.as_str());
                }
                _ => continue,
            }
            if !routes.contains(&name.as_str()) {
                routes.push(name);
            }
        }
    }
    let message = match (carried.contains(FIRING), carried.contains(RESOLVED)) {
        (true, true) => return,
        (false, false) => "no route sends it alerts, the only events it takes: name `alerts` (or `alert.firing`, `alert.resolved`) in the `types` of a route that feeds it".to_string(),
        (true, false) => format!(
            "the routes that send it alerts ({}) carry only `{FIRING}`: name `{RESOLVED}` too (or `alerts`) in the `types` of a route that feeds it, or an alert never resolves there and is sent as firing for ever",
            routes.join(", ")
        ),
        (false, true) => format!(
            "the routes that send it alerts ({}) carry only `{RESOLVED}`: name `{FIRING}` too (or `alerts`) in the `types` of a route that feeds it, or an alert never fires there",
            routes.join(", ")
        ),
    };
    issues.push(Issue::new(format!("sinks.{sink}"), message));
}

/// The label selector the apiserver can apply for every route: the requirements all routes'
/// selectors share (a pod none of them takes is then not sent at all). `None` when a route
/// has no selector, or alert rules read every pod.
pub fn union_selector(routing: &Routing) -> Option<String> {
    if !routing.rules.is_empty() || routing.routes.is_empty() {
        return None;
    }
    let mut common: Option<BTreeSet<kube::core::Expression>> = None;
    for r in &routing.routes {
        let exprs: BTreeSet<_> = r.selector.clone()?.into_iter().collect();
        common = Some(match common {
            None => exprs,
            Some(c) => c.intersection(&exprs).cloned().collect(),
        });
    }
    let common = common?;
    (!common.is_empty()).then(|| {
        common
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    })
}

#[cfg(test)]
mod tests {
    use super::super::load_str;

    fn issues_of(text: &str) -> Vec<String> {
        match load_str("t.yaml", text, Vec::new())
            .unwrap_or_else(|e| panic!("{e}"))
            .validate()
        {
            Ok(_) => Vec::new(),
            Err(e) => e
                .issues
                .iter()
                .map(|i| format!("{}: {}", i.field, i.message))
                .collect(),
        }
    }

    const SINKS: &str = "sinks:\n  k: {type: kafka, brokers: 'b:1'}\n  m: {type: mqtt, url: 'mqtt://b:1'}\n  o: {type: stdout}\n";

    #[test]
    fn routes_and_rules_with_problems_are_named_by_their_paths() {
        let text = format!(
            "cluster: c\n{SINKS}routes:\n  a: {{sinks: [k, nowhere], selector: 'app in'}}\n  b: {{sinks: [m, o], topic: 'x/{{pod}}'}}\nalerts:\n  rules:\n    r: {{expr: 'status.colour == \"red\"'}}\n"
        );
        let fields: Vec<String> = issues_of(&text)
            .into_iter()
            .map(|i| i.split(':').next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            fields,
            vec![
                "routes.a.sinks[1]",
                "routes.a.selector",
                "alerts.rules.r.expr",
                "routes.b.topic",
                "routes.b.topic"
            ]
        );
    }

    #[test]
    fn a_sink_no_route_feeds_is_named() {
        let text = format!("cluster: c\n{SINKS}routes:\n  a: {{sinks: [k, m]}}\n");
        assert_eq!(
            issues_of(&text),
            vec![
                "sinks.o: no route feeds it: with `routes`, a sink gets only what a route sends it"
            ]
        );
    }

    #[test]
    fn an_alertmanager_sink_fed_only_by_routes_of_changes_is_named() {
        let am = "  am: {type: alertmanager, urls: ['http://127.0.0.1:9093']}\n";
        let text = format!("cluster: c\n{SINKS}{am}routes:\n  a: {{sinks: [k, m, o, am]}}\n");
        assert_eq!(
            issues_of(&text),
            vec![
                "sinks.am: no route sends it alerts, the only events it takes: name `alerts` (or `alert.firing`, `alert.resolved`) in the `types` of a route that feeds it"
            ]
        );
        for types in ["[alerts]", "[added, alert.firing, alert.resolved]"] {
            let text = format!(
                "cluster: c\n{SINKS}{am}routes:\n  a: {{sinks: [k, m, o, am]}}\n  b: {{sinks: [am], types: {types}}}\n"
            );
            assert_eq!(issues_of(&text), Vec::<String>::new(), "{types}");
        }
    }

    #[test]
    fn an_alertmanager_sink_whose_routes_carry_only_firing_or_only_resolved_alerts_is_named() {
        let am = "  am: {type: alertmanager, urls: ['http://127.0.0.1:9093']}\n";
        let cases = [
            (
                "  a: {sinks: [am], types: [alert.firing]}\n  b: {sinks: [k, m, o]}\n",
                "sinks.am: the routes that send it alerts (a) carry only `alert.firing`: name `alert.resolved` too (or `alerts`) in the `types` of a route that feeds it, or an alert never resolves there and is sent as firing for ever",
            ),
            (
                "  a: {sinks: [am, k], types: [added, alert.resolved]}\n  b: {sinks: [m, o, am]}\n  c: {sinks: [am], types: [alert.resolved]}\n",
                "sinks.am: the routes that send it alerts (a, c) carry only `alert.resolved`: name `alert.firing` too (or `alerts`) in the `types` of a route that feeds it, or an alert never fires there",
            ),
        ];
        for (routes, want) in cases {
            let text = format!("cluster: c\n{SINKS}{am}routes:\n{routes}");
            assert_eq!(issues_of(&text), vec![want], "{routes}");
        }
        // Together, two routes carry both.
        let text = format!(
            "cluster: c\n{SINKS}{am}routes:\n  a: {{sinks: [am], types: [alert.firing]}}\n  b: {{sinks: [k, m, o, am], types: [added, alert.resolved]}}\n"
        );
        assert_eq!(issues_of(&text), Vec::<String>::new());
    }

    #[test]
    fn unknown_fields_of_routes_and_rules_are_refused() {
        let err = load_str(
            "t.yaml",
            &format!("cluster: c\n{SINKS}routes:\n  a: {{sinks: [k], colour: red}}\n"),
            Vec::new(),
        )
        .expect_err("unknown field");
        assert!(err.to_string().contains("routes.a"), "{err}");
        let err = load_str(
            "t.yaml",
            &format!("cluster: c\n{SINKS}alerts:\n  restarts: {{limit: 3}}\n"),
            Vec::new(),
        )
        .expect_err("unknown field");
        assert!(err.to_string().contains("alerts.restarts"), "{err}");
    }

    #[test]
    fn the_apiserver_gets_the_requirements_every_route_shares() {
        let routing = |routes: &str| {
            let c = load_str(
                "t.yaml",
                &format!("cluster: c\n{SINKS}routes:\n{routes}"),
                Vec::new(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let v = c.validate().unwrap_or_else(|e| panic!("{e}"));
            v.routing.as_ref().and_then(super::union_selector)
        };
        assert_eq!(
            routing(
                "  a: {sinks: [k], selector: 'team=pay,app=web'}\n  b: {sinks: [m, o], selector: 'team=pay'}\n"
            ),
            Some("team=pay".to_string())
        );
        assert_eq!(
            routing("  a: {sinks: [k], selector: 'app=web'}\n  b: {sinks: [m, o]}\n"),
            None
        );
    }

    #[test]
    fn the_examples_of_each_use_case_are_valid() {
        for (name, text) in [
            ("audit", include_str!("../../examples/audit.yaml")),
            ("edge", include_str!("../../examples/edge.yaml")),
            ("oncall", include_str!("../../examples/oncall.yaml")),
        ] {
            let v = load_str(name, text, Vec::new())
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .validate()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(v.routing.is_some(), "{name} has routes");
        }
    }
}
