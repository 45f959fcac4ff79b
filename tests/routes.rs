//! Routes against the real stack, in-process: three sinks, three routes, one watch.
//! - `audit` → Kafka: every change, full data, the sink's topic;
//! - `edge` → MQTT: pods labelled `tier=edge`, a `modified` only when the phase or readiness
//!   changed, summary data, the route's own topic template;
//! - `oncall` → a file: alert events only.
//!
//! Each sink receives exactly its slice; a change outside the edge predicate (an annotation,
//! a label, the deletion timestamp) produces nothing on edge; per route, every pod's chain of
//! `k8sprevrv` links has no gap.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::consume::{KafkaTopic, MqttSubscriber, wait_for};
use support::scene::{InProcess, Scene, file_events, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

/// `(name, type word, rv, prevrv)` of one event.
type Seen = (String, String, String, String);

fn word(t: &str) -> String {
    t.rsplit('.').next().unwrap_or_default().to_string()
}

/// Per pod, its events' `(type, rv, prevrv)`, checking that each links to the one before.
fn chains(events: &[Seen], route: &str) -> BTreeMap<String, Vec<(String, String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String, String)>> = BTreeMap::new();
    for (name, kind, rv, prev) in events {
        let chain = out.entry(name.clone()).or_default();
        let expected = chain
            .last()
            .map(|(_, rv, _)| rv.clone())
            .unwrap_or_default();
        assert_eq!(
            prev, &expected,
            "{route}: {name}'s {kind} at {rv} links to {prev}, not to its previous event {expected}"
        );
        chain.push((kind.clone(), rv.clone(), prev.clone()));
    }
    out
}

fn kinds(chain: &[(String, String, String)]) -> Vec<&str> {
    chain.iter().map(|(k, _, _)| k.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sinks_receive_exactly_their_routes_slices_with_gapless_chains_per_route() {
    let scene = Scene::new("routes").await;
    let topic = unique_name("kc-routes");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let prefix = unique_name("kc-routes");
    let edge = MqttSubscriber::subscribe(&scene.stack, &format!("{prefix}-edge/#")).await;
    let oncall = scene.dir.join("oncall.jsonl");
    let routes = format!(
        "alerts:\n  not_ready: {{for: 1h}}\n  unscheduled: {{for: 1h}}\nroutes:\n  audit: {{sinks: [kafka]}}\n  edge: {{sinks: [mqtt], selector: 'tier in (edge)', changes: [phase, readiness], data: summary, topic: '{prefix}-edge/{{namespace}}/{{name}}'}}\n  oncall: {{sinks: [oncall], types: [alerts]}}\n"
    );
    let text = scene.config(
        &routes,
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}-own/{{name}}"), &[]),
            file_sink("oncall", &oncall),
        ],
    );
    let kubecast = InProcess::start(&scene, &text);
    wait_for(LIMIT, "kubecast to start", || {
        std::fs::metadata(&oncall).is_ok().then_some(())
    })
    .await;

    let pods = &scene.pods;
    let edge_label = json!({"tier": "edge"});
    pods.create_with("e1", json!({}), edge_label.clone()).await;
    pods.create_with("e2", json!({}), edge_label).await;
    pods.create_with("c1", json!({}), json!({})).await;
    pods.running("e1", 0).await;
    pods.running("c1", 0).await;
    // Outside the edge predicate: nothing on edge.
    pods.annotate("e1", "note", "x").await;
    pods.label("e1", "version", "2").await;
    pods.annotate("e2", "note", "y").await;
    // The phase changes, and the `failed` rule fires.
    pods.status("e1", json!({"phase": "Failed", "reason": "Evicted"}))
        .await;
    for name in ["e1", "e2", "c1"] {
        pods.delete(name).await;
    }

    let audit = kafka
        .wait_until("every pod's delete", LIMIT, |r| {
            r.iter()
                .filter(|r| r.ce("type").ends_with(".deleted"))
                .count()
                == 3
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let edge_msgs = edge
        .wait_until("e1's and e2's deletes", LIMIT, |m| {
            m.iter()
                .filter(|m| m.prop("type").ends_with(".deleted"))
                .count()
                == 2
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let alerts = wait_for(LIMIT, "the alert to resolve", || {
        let ev = file_events(&oncall);
        ev.iter()
            .any(|e| e["type"] == "io.kubecast.alert.resolved")
            .then_some(ev)
    })
    .await
    .unwrap_or_else(|| panic!("oncall: {:#?}", file_events(&oncall)));

    // audit: every change of every pod, nothing else.
    let seen: Vec<Seen> = audit
        .iter()
        .map(|r| {
            (
                r.ce("k8sname").to_string(),
                word(r.ce("type")),
                r.ce("k8srv").to_string(),
                r.ce("k8sprevrv").to_string(),
            )
        })
        .collect();
    // Kafka keeps order per partition (per pod): sort by pod, stably.
    let mut by_pod = seen.clone();
    by_pod.sort_by(|a, b| a.0.cmp(&b.0));
    let audit_chains = chains(&by_pod, "audit");
    assert!(
        audit
            .iter()
            .all(|r| r.ce("dataschema") == "urn:kubecast:schema:pod-full:v1")
    );
    assert_eq!(audit_chains.len(), 3, "{audit_chains:?}");
    // e1: added, Running, annotated, labelled, Failed, deletion timestamp, deleted.
    assert_eq!(
        kinds(&audit_chains["e1"]),
        vec![
            "added", "modified", "modified", "modified", "modified", "modified", "deleted"
        ]
    );

    // edge: only tier=edge pods, only phase/readiness changes, its own chain, its own topic.
    let seen: Vec<Seen> = edge_msgs
        .iter()
        .map(|m| {
            (
                m.prop("k8sname").to_string(),
                word(m.prop("type")),
                m.prop("k8srv").to_string(),
                m.prop("k8sprevrv").to_string(),
            )
        })
        .collect();
    let edge_chains = chains(&seen, "edge");
    assert_eq!(
        edge_chains.keys().collect::<Vec<_>>(),
        vec!["e1", "e2"],
        "only the edge pods"
    );
    assert_eq!(
        kinds(&edge_chains["e1"]),
        vec!["added", "modified", "modified", "deleted"],
        "{:?}",
        edge_chains["e1"]
    );
    assert_eq!(
        kinds(&edge_chains["e2"]),
        vec!["added", "deleted"],
        "an annotation alone says nothing"
    );
    // The Failed event links over the annotation and label changes to the Running one.
    let audit_e1 = &audit_chains["e1"];
    assert_eq!(
        edge_chains["e1"][2].2, audit_e1[1].1,
        "edge's link skips what edge did not emit"
    );
    assert!(
        edge_msgs
            .iter()
            .all(|m| m.topic.starts_with(&format!("{prefix}-edge/{}/", scene.ns))),
        "the route's topic"
    );
    assert!(
        edge_msgs
            .iter()
            .all(|m| m.prop("dataschema") == "urn:kubecast:schema:pod-summary:v1")
    );
    assert!(edge_msgs.iter().all(|m| !m.prop("type").contains("alert")));

    // oncall: the alert's firing and resolved, nothing else.
    let types: Vec<&str> = alerts.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        vec!["io.kubecast.alert.firing", "io.kubecast.alert.resolved"],
        "{alerts:#?}"
    );
    assert_eq!(alerts[0]["k8sname"], "e1");
    assert_eq!(alerts[0]["data"]["rule"], "failed");
    assert!(
        audit.iter().all(|r| !r.ce("type").contains("alert")),
        "audit takes no alerts"
    );

    kubecast.stop(LIMIT).await;
}
