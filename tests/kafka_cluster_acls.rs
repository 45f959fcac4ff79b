//! `kubecast kafka-acls` on the stack's three-node cluster, whose `kubecast` user may do
//! nothing until granted: what it prints is exactly sufficient. Granted whole, kubecast
//! publishes; with any one entry left out, kubecast exits 1 at start with an ERROR naming
//! the operation and the resource Kafka refused; a permission taken away while it runs makes
//! it not ready, naming it, and it keeps what it holds until the permission is back.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::http::{free_port, wait_for};
use support::kafka_cluster::{Cluster, kafka_acls_json};
use support::kubecast::Kubecast;
use support::observer::Observer;
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

/// The tests grant and revoke the `kubecast` user's ACLs: one at a time.
static USER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A config with an exactly-once sink (a literal topic) and an at-least-once sink (a topic
/// per namespace, so its ACLs are prefixed), every topic new and created by kubecast.
fn config(scene: &Scene, cluster: &Cluster, port: u16) -> (String, String, String) {
    let (eos_topic, alo_prefix) = (unique_name("kc-acl-eos"), unique_name("kc-acl-alo"));
    let eos = [
        "exactly_once: true".to_string(),
        "create_topics: {}".to_string(),
        format!(
            "transactions: {{id: {}, checkpoint_topic: {}, state_topic: {}, max_ms: 50}}",
            unique_name("kc-acl-txn"),
            unique_name("kc-acl-checkpoints"),
            unique_name("kc-acl-state")
        ),
    ];
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    let text = scene.config(
        &format!("metrics:\n  address: 127.0.0.1:{port}\n"),
        &[
            cluster.sink("eos", &eos_topic, &eos),
            cluster.sink(
                "alo",
                &format!("'{alo_prefix}.{{namespace}}'"),
                &["create_topics: {partitions: 3}"],
            ),
        ],
    );
    (text, eos_topic, format!("{alo_prefix}.{}", scene.ns))
}

/// `kubecast kafka-acls --format json` of `text`, as entries.
fn acls(scene: &Scene, text: &str) -> Vec<Value> {
    let path = scene.dir.join("acls.yaml");
    std::fs::write(&path, text).expect("writing the config");
    serde_json::from_str(&kafka_acls_json(&path)).expect("kafka-acls prints JSON")
}

/// How kubecast's errors name the resource type of an entry.
fn resource_word(entry: &Value) -> &'static str {
    match entry["resource_type"].as_str() {
        Some("transactional-id") => "TransactionalId",
        Some("group") => "Group",
        _ => "Topic",
    }
}

#[tokio::test]
async fn kafka_acls_grants_exactly_enough_and_each_entry_left_out_is_named() {
    let _one = USER.lock().await;
    let scene = Scene::new("kc-acls").await;
    let cluster = Cluster::up(&scene.stack);
    cluster.revoke_all();
    scene.pods.create_each("steady", 2).await;
    let port = free_port();
    let (text, _, _) = config(&scene, &cluster, port);
    let count = acls(&scene, &text).len();
    assert_eq!(
        count, 12,
        "kafka-acls printed {count} entries for two sinks:\n{text}"
    );
    for left_out in 0..count {
        // New topics and ids each round: Create is needed, and nothing is left from before.
        let (text, _, _) = config(&scene, &cluster, port);
        let mut entries = acls(&scene, &text);
        let missing = entries.remove(left_out);
        cluster.acls("grant", &Value::Array(entries).to_string());
        let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
        let (code, log) = kubecast.exited(LIMIT).await;
        let (op, name) = (
            missing["operation"].as_str().unwrap_or_default(),
            missing["resource_name"].as_str().unwrap_or_default(),
        );
        let named = format!("refused {op} on {} `{name}", resource_word(&missing));
        assert_eq!(code, Some(1), "without {missing} kubecast exits 1:\n{log}");
        assert!(
            log.lines()
                .any(|l| l.contains("ERROR") && l.contains(&named)),
            "without {missing} an ERROR names `{named}`:\n{log}"
        );
        println!(
            "kafka-acls: without {op} on {} {name}: exit 1, named",
            missing["resource_type"]
        );
        cluster.revoke_all();
    }

    // All of them: kubecast publishes on both sinks.
    let (text, eos_topic, alo_topic) = config(&scene, &cluster, port);
    let entries = acls(&scene, &text);
    cluster.acls("grant", &Value::Array(entries.clone()).to_string());
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness with every ACL granted",
        |code, _| code == 200,
    )
    .await;
    let eos = cluster.read(&eos_topic, 3);
    kubecast.check(
        eos.wait_until("the steady pods", LIMIT, |r| r.len() >= 2)
            .await,
    );
    let alo = cluster.read(&alo_topic, 3);
    kubecast.check(
        alo.wait_until("the steady pods", LIMIT, |r| r.len() >= 2)
            .await,
    );

    // Write on the at-least-once sink's topics taken away while it runs.
    let write = entries
        .iter()
        .find(|e| e["sink"] == "alo" && e["operation"] == "Write")
        .expect("an ALO Write entry")
        .clone();
    cluster.acls("revoke", &Value::Array(vec![write.clone()]).to_string());
    let pods = scene.pods.create_each("while-refused", 3).await;
    let (_, body) = wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness to name the refusal",
        |code, _| code == 503,
    )
    .await;
    assert!(body.contains("refused Write on Topic"), "{body}");
    cluster.acls("grant", &Value::Array(vec![write]).to_string());
    wait_for(
        port,
        "/readyz",
        LIMIT,
        "readiness once the permission is back",
        |code, _| code == 200,
    )
    .await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let want: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    kubecast.check(alo.wait_for_ids(&want, LIMIT).await);
    kubecast.check(eos.wait_for_ids(&want, LIMIT).await);
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("refuses kubecast's records")),
        "the refusal while running was an ERROR:\n{log}"
    );
    println!(
        "kafka-acls: {count} entries, each needed; with Write taken away while running /readyz said: {body}; {} pods made meanwhile all delivered",
        pods.len()
    );
    cluster.revoke_all();
}

#[tokio::test]
async fn a_topic_that_does_not_exist_stops_kubecast_naming_the_topic_and_the_setting() {
    let _one = USER.lock().await;
    let scene = Scene::new("kc-missing").await;
    let cluster = Cluster::up(&scene.stack);
    cluster.revoke_all();
    scene.pods.create_each("steady", 1).await;
    // Without `create_topics`, every ACL granted: the event topic, then (it made) the
    // exactly-once sink's checkpoint topic, are missing.
    let topic = unique_name("kc-missing");
    let txn = [
        "exactly_once: true".to_string(),
        format!(
            "transactions: {{id: {}, checkpoint_topic: {}, state_topic: {}}}",
            unique_name("kc-missing-txn"),
            unique_name("kc-missing-checkpoints"),
            unique_name("kc-missing-state")
        ),
    ];
    for (extra, missing) in [(vec![], topic.clone()), (txn.to_vec(), String::new())] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        if missing.is_empty() {
            cluster.create_topic(&topic, 3).await;
        }
        let text = scene.config("", &[cluster.sink("out", &topic, &extra)]);
        cluster.acls("grant", &Value::Array(acls(&scene, &text)).to_string());
        let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
        let (code, log) = kubecast.exited(LIMIT).await;
        assert_eq!(code, Some(1), "{log}");
        let named = log.lines().find(|l| {
            l.contains("ERROR")
                && l.contains("does not exist")
                && l.contains("`sinks.out.create_topics`")
        });
        let named = named
            .unwrap_or_else(|| panic!("an ERROR names the missing topic and the setting:\n{log}"));
        let want = if missing.is_empty() {
            "checkpoints"
        } else {
            missing.as_str()
        };
        assert!(named.contains(want), "the ERROR names {want}: {named}");
        println!("kafka cluster, a missing topic: {named}");
        cluster.revoke_all();
    }
}
