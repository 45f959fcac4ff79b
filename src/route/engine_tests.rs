use bytes::Bytes;
use serde_json::json;

use super::*;
use crate::alert::config::AlertsConfig;
use crate::route::config::RouteConfig;

fn routes(yaml: &str) -> Vec<Route> {
    let map: BTreeMap<String, RouteConfig> =
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
    map.iter()
        .map(|(n, r)| {
            r.validate(n, &["a", "b"], &["pods"])
                .unwrap_or_else(|e| panic!("{e:?}"))
        })
        .collect()
}

fn rules(yaml: &str) -> Vec<Rule> {
    let c: AlertsConfig = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
    c.validate().unwrap_or_else(|e| panic!("{e:?}"))
}

fn change(kind: ChangeKind, rv: &str, prev: &str, pod: Option<Value>) -> Change {
    Change {
        kind,
        resource: crate::kinds::Resource::pods(),
        scope: "*".into(),
        uid: "u1".into(),
        namespace: "prod".into(),
        name: "web".into(),
        rv: rv.into(),
        prev_rv: prev.into(),
        inferred: pod.is_none(),
        initial: false,
        object: pod.map(|p| Bytes::from(p.to_string())),
    }
}

fn pod(phase: &str, ready: &str, app: &str) -> Value {
    json!({
        "metadata": {"uid": "u1", "namespace": "prod", "name": "web", "labels": {"app": app}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready, "lastProbeTime": phase}]}
    })
}

/// (route, prev_rv) of each change that went out.
fn changes(r: &Routed) -> Vec<(Option<usize>, String)> {
    r.outs
        .iter()
        .filter_map(|o| match o {
            Out::Change { route, prev_rv } => Some((*route, prev_rv.clone())),
            Out::Alert { .. } => None,
        })
        .collect()
}

fn alerts(r: &Routed) -> Vec<(Option<usize>, String)> {
    r.outs
        .iter()
        .filter_map(|o| match o {
            Out::Alert {
                route, transition, ..
            } => Some((
                *route,
                match &**transition {
                    Transition::Firing(e) => format!("firing {} {}", e.rule, e.began_rv),
                    Transition::Resolved(e) => format!("resolved {} {}", e.rule, e.began_rv),
                },
            )),
            Out::Change { .. } => None,
        })
        .collect()
}

#[test]
fn without_routes_every_change_goes_to_every_sink_with_its_own_link() {
    let mut r = Router::new(Vec::new(), Vec::new());
    let out = r.on_change(
        &change(
            ChangeKind::Modified,
            "5",
            "4",
            Some(pod("Running", "True", "web")),
        ),
        0,
    );
    assert_eq!(changes(&out), vec![(None, "4".to_string())]);
    assert_eq!(out.states.len(), 1, "the known state is logged");
}

#[test]
fn a_predicate_route_skips_changes_outside_its_aspects_and_links_to_its_own_last_event() {
    // Route 0 (`all`) takes everything, route 1 (`phases`) only phase changes.
    let mut r = Router::new(
        routes("all: {sinks: [a]}\nphases: {sinks: [b], changes: [phase]}\n"),
        Vec::new(),
    );
    let added = r.on_change(
        &change(
            ChangeKind::Added,
            "1",
            "",
            Some(pod("Pending", "False", "web")),
        ),
        0,
    );
    assert_eq!(
        changes(&added),
        vec![(Some(0), String::new()), (Some(1), String::new())]
    );
    // Only a condition's probe time moves: phases says nothing.
    let mut p = pod("Pending", "False", "web");
    p["status"]["conditions"][0]["lastProbeTime"] = json!("later");
    let quiet = r.on_change(&change(ChangeKind::Modified, "2", "1", Some(p)), 0);
    assert_eq!(changes(&quiet), vec![(Some(0), "1".to_string())]);
    let running = r.on_change(
        &change(
            ChangeKind::Modified,
            "3",
            "2",
            Some(pod("Running", "True", "web")),
        ),
        0,
    );
    assert_eq!(
        changes(&running),
        vec![(Some(0), "2".to_string()), (Some(1), "1".to_string())],
        "phases links to the last event it emitted (1), not to 2"
    );
    let gone = r.on_change(&change(ChangeKind::Deleted, "4", "3", None), 0);
    assert_eq!(
        changes(&gone),
        vec![(Some(0), "3".to_string()), (Some(1), "3".to_string())]
    );
}

#[test]
fn selectors_namespaces_and_types_pick_a_routes_slice() {
    let mut r = Router::new(
        routes(
            "canary: {sinks: [a], selector: 'app in (canary)', types: [added, deleted]}\nother: {sinks: [b], namespaces: ['staging-*']}\n",
        ),
        Vec::new(),
    );
    let web = r.on_change(
        &change(
            ChangeKind::Added,
            "1",
            "",
            Some(pod("Pending", "False", "web")),
        ),
        0,
    );
    assert!(
        changes(&web).is_empty(),
        "neither the label nor the namespace matches"
    );
    // The label changes to canary: the route has not seen the pod, but `modified` is not its type.
    let relabelled = r.on_change(
        &change(
            ChangeKind::Modified,
            "2",
            "1",
            Some(pod("Pending", "False", "canary")),
        ),
        0,
    );
    assert!(changes(&relabelled).is_empty());
    // An inferred delete (no object) still reaches the route that selected the pod last.
    let gone = r.on_change(&change(ChangeKind::Deleted, "2", "2", None), 0);
    assert_eq!(changes(&gone), vec![(Some(0), String::new())]);
}

#[test]
fn an_alert_fires_once_resolves_once_and_goes_only_to_routes_that_take_alerts() {
    let mut r = Router::new(
        routes("audit: {sinks: [a]}\noncall: {sinks: [b], types: [alerts]}\n"),
        rules("not_ready: {for: 10s}\n"),
    );
    let mut failed = pod("Failed", "False", "web");
    failed["status"]["reason"] = json!("Evicted");
    let first = r.on_change(
        &change(ChangeKind::Added, "1", "", Some(failed.clone())),
        1_000,
    );
    assert_eq!(
        alerts(&first),
        vec![(Some(1), "firing failed 1".to_string())]
    );
    assert_eq!(
        changes(&first),
        vec![(Some(0), String::new())],
        "oncall takes no pod changes"
    );
    let again = r.on_change(&change(ChangeKind::Modified, "2", "1", Some(failed)), 2_000);
    assert!(alerts(&again).is_empty(), "once per episode");
    let back = r.on_change(
        &change(
            ChangeKind::Modified,
            "3",
            "2",
            Some(pod("Running", "False", "web")),
        ),
        3_000,
    );
    assert_eq!(
        alerts(&back),
        vec![(Some(1), "resolved failed 1".to_string())]
    );
    // Not Ready (a Failed pod is finished, so since 3): the timer fires with no further change.
    assert_eq!(r.next_deadline(), Some(13_000));
    assert!(alerts(&r.tick(12_999)).is_empty());
    let fired = r.tick(13_000);
    assert_eq!(
        alerts(&fired),
        vec![(Some(1), "firing not_ready 3".to_string())]
    );
    assert_eq!(fired.states.len(), 1, "the episode's new state is logged");
    let gone = r.on_change(&change(ChangeKind::Deleted, "4", "3", None), 14_000);
    assert_eq!(
        alerts(&gone),
        vec![(Some(1), "resolved not_ready 3".to_string())]
    );
}

#[test]
fn a_restored_router_continues_timers_predicates_and_chains_where_it_left_off() {
    let make = || {
        Router::new(
            routes("phases: {sinks: [a], changes: [phase]}\n"),
            rules("not_ready: {for: 10s}\n"),
        )
    };
    let mut first = make();
    let out = first.on_change(
        &change(
            ChangeKind::Added,
            "1",
            "",
            Some(pod("Pending", "False", "web")),
        ),
        1_000,
    );
    // Restored from the logged state alone, as a restart replays the log.
    let mut second = make();
    for s in &out.states {
        second.restore(s);
    }
    assert_eq!(
        second.next_deadline(),
        Some(11_000),
        "the original deadline"
    );
    let mut p = pod("Pending", "False", "web");
    p["status"]["conditions"][0]["lastProbeTime"] = json!("later");
    let quiet = second.on_change(&change(ChangeKind::Modified, "2", "1", Some(p)), 2_000);
    assert!(changes(&quiet).is_empty(), "the fingerprint came back");
    // And from a snapshot.
    let mut third = make();
    third.restore_snapshot(second.snapshot());
    assert_eq!(
        alerts(&third.tick(11_000)),
        alerts(&first.tick(11_000)),
        "the same alert"
    );
    let running = third.on_change(
        &change(
            ChangeKind::Modified,
            "3",
            "2",
            Some(pod("Running", "True", "web")),
        ),
        12_000,
    );
    assert_eq!(
        changes(&running),
        vec![(Some(0), "1".to_string())],
        "the chain came back"
    );
}

#[test]
fn alert_rules_judge_real_values_but_evidence_and_messages_show_them_redacted() {
    let mut r = Router::new(
        Vec::new(),
        rules(concat!(
            "rules:\n",
            "  leaked: {expr: 'spec.containers[*].env[*].value == \"hunter2\"', ",
            "message: 'token {{ spec.containers[*].env[*].value }} on {{ metadata.name }} ",
            "by {{ metadata.labels.owner }}'}\n",
        )),
    )
    .with_redaction(RedactConfig {
        labels: vec!["owner".into()],
        ..RedactConfig::default()
    });
    let mut p = pod("Running", "True", "web");
    p["metadata"]["labels"]["owner"] = json!("alice");
    p["spec"]["containers"] =
        json!([{"name": "c", "env": [{"name": "TOKEN", "value": "hunter2"}]}]);
    let out = r.on_change(&change(ChangeKind::Added, "1", "", Some(p)), 1_000);
    let fired = out
        .outs
        .iter()
        .find_map(|o| match o {
            Out::Alert { transition, .. } => match &**transition {
                Transition::Firing(e) => Some(e.clone()),
                Transition::Resolved(_) => None,
            },
            Out::Change { .. } => None,
        })
        .expect("the rule judged the real value and fired");
    assert_eq!(fired.message, "token <redacted> on web by <redacted>");
    assert_eq!(
        fired.facts["spec.containers[*].env[*].value"],
        json!("<redacted>")
    );
    let logged = serde_json::to_string(&out.states).expect("states serialize");
    assert!(
        !logged.contains("hunter2") && !logged.contains("alice"),
        "{logged}"
    );
}
