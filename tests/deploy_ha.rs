//! `deploy/ha` (kustomize overlay): two replicas, leader election, an exactly-once Kafka sink
//! and no state volume. Rendered by the real kustomize and applied to the real apiserver;
//! then two kubecast replicas with deploy/'s ServiceAccount token elect a leader on the Lease
//! `kubecast/kubecast` and publish, while the same identity is refused every other Lease
//! operation (403). `deploy/ha-shards` the same with shards: three replicas with its identity
//! share its six shards (each a Lease the overlay's Role names) and publish each change once.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use support::consume::KafkaTopic;
use support::deploy;
use support::kubecast::{Kubecast, run_to_end, scratch_dir};
use support::scene::Scene;
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

/// The overlays apply Roles of the same name: one test at a time holds them.
static ROLE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Role rule's resources, verbs and resource names.
type Rule<'a> = (Vec<&'a str>, Vec<&'a str>, Option<Vec<&'a str>>);

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_overlay_runs_two_replicas_without_a_state_volume_and_may_touch_one_lease() {
    let stack = support::Stack::load();
    let objects = deploy::kustomize(&stack, "deploy/ha");
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(!kinds.contains("PersistentVolumeClaim"), "{kinds:?}");
    let deployment = deploy::of_kind(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .is_some_and(|v| v.iter().all(|v| v["name"] != "state")),
        "no state volume: {}",
        pod["volumes"]
    );
    let mounts: Vec<&str> = pod["containers"][0]["volumeMounts"]
        .as_array()
        .map(|m| m.iter().filter_map(|v| v["mountPath"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        mounts,
        vec!["/etc/kubecast"],
        "the config stays mounted, the state does not"
    );
    let env: BTreeSet<&str> = pod["containers"][0]["env"]
        .as_array()
        .map(|e| e.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(env, BTreeSet::from(["POD_NAME", "POD_NAMESPACE"]));

    let role = deploy::of_kind(&objects, "Role");
    assert_eq!(role["metadata"]["namespace"], "kubecast");
    let rules: Vec<Rule> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            (
                strs(&r["resources"]),
                strs(&r["verbs"]),
                r.get("resourceNames").map(strs),
            )
        })
        .collect();
    assert_eq!(
        rules,
        vec![
            (
                vec!["leases"],
                vec!["get", "update"],
                Some(vec!["kubecast"])
            ),
            (vec!["leases"], vec!["create"], None),
        ]
    );
    let binding = deploy::of_kind(&objects, "RoleBinding");
    assert_eq!(binding["subjects"][0]["name"], "kubecast");
    assert_eq!(binding["roleRef"]["name"], "kubecast-leader-election");

    // kubecast accepts the config the overlay deploys.
    let dir = scratch_dir("deploy-ha");
    let file = dir.join("kubecast.yaml");
    std::fs::write(&file, deploy::config_text(&objects)).expect("writing the config");
    let (code, out, err) = run_to_end(&["validate-config", file.to_str().unwrap_or_default()], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
}

#[test]
fn the_on_call_example_takes_the_overlays_shape_and_is_accepted() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/oncall.yaml");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let config: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(config["leader_election"]["enabled"], true, "{path}");
    assert!(config.get("state").is_none(), "{path}: no state directory");
    assert_eq!(config["sinks"]["pager"]["exactly_once"], true, "{path}");
    assert!(
        config["alerts"].get("rules").is_some() && config.get("routes").is_some(),
        "{path}: routes and alerts beside the exactly-once sink"
    );
    let (code, out, err) = run_to_end(&["validate-config", path], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
}

#[tokio::test]
async fn two_replicas_with_the_overlays_identity_elect_a_leader_and_publish() {
    let _role = ROLE.lock().await;
    let scene = Scene::new("deploy-ha").await;
    let client = &scene.client;
    let objects = deploy::kustomize(&scene.stack, "deploy/ha");
    deploy::apply_all(client, &objects)
        .await
        .unwrap_or_else(|e| panic!("applying deploy/ha: {e}"));
    let (kubeconfig, as_kubecast) =
        deploy::as_service_account(&scene.stack, client, &scene.dir).await;
    // Another run may have left the Lease; a fresh one makes this run's election its own.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kubecast");
    let _ = leases.delete("kubecast", &Default::default()).await;

    // The overlay's settings, pointed at the test's namespace, brokers and topics.
    let topic = unique_name("kc-deploy-ha");
    let committed = KafkaTopic::create(&scene.stack, &topic).await;
    let eos = support::scene::exactly_once("deploy-ha");
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    let config = |identity: &str| {
        scene.config(
            &format!(
                "kubernetes:\n  kubeconfig: {}\nleader_election:\n  enabled: true\n  lease: kubecast\n  namespace: kubecast\n  identity: {identity}\n  lease_duration_ms: 2000\n  retry_period_ms: 250\n",
                kubeconfig.display()
            ),
            &[scene.kafka_sink("kafka", &topic, &eos)],
        )
    };
    let a = Kubecast::start(
        &scene.stack,
        &scratch_dir("deploy-ha-a"),
        &config("deploy-ha-a"),
    );
    let b = Kubecast::start(
        &scene.stack,
        &scratch_dir("deploy-ha-b"),
        &config("deploy-ha-b"),
    );
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let arrived = committed
        .wait_until("the pod's event", LIMIT, |r| {
            r.iter().any(|x| x.ce("k8suid") == uid)
        })
        .await;
    if let Err(e) = arrived {
        panic!("{e}\nreplica a:\n{}\nreplica b:\n{}", a.log(), b.log());
    }
    let leaders = [&a, &b]
        .iter()
        .filter(|k| k.count_in_log("took over the exactly-once sink") > 0)
        .count();
    assert_eq!(leaders, 1, "one leader:\n{}\n----\n{}", a.log(), b.log());
    for k in [a, b] {
        let (code, log) = k.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{log}");
    }

    // Any other Lease operation is refused.
    let forbidden = |what: &str, r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    let lease = |name: &str| Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: None,
    };
    let mine: Api<Lease> = Api::namespaced(as_kubecast.clone(), "kubecast");
    let elsewhere: Api<Lease> = Api::namespaced(as_kubecast.clone(), &scene.ns);
    forbidden(
        "creating a Lease in another namespace",
        elsewhere
            .create(&PostParams::default(), &lease("kubecast"))
            .await
            .map(drop),
    );
    let other = unique_name("other");
    leases
        .create(&PostParams::default(), &lease(&other))
        .await
        .expect("the admin creates another Lease");
    forbidden("reading another Lease", mine.get(&other).await.map(drop));
    let mut taken = leases.get(&other).await.expect("the other Lease");
    taken.metadata.managed_fields = None;
    forbidden(
        "updating another Lease",
        mine.replace(&other, &PostParams::default(), &taken)
            .await
            .map(drop),
    );
    forbidden(
        "deleting the Lease",
        mine.delete("kubecast", &Default::default()).await.map(drop),
    );
    forbidden(
        "listing Leases",
        mine.list(&Default::default()).await.map(drop),
    );
    let _ = leases.delete(&other, &Default::default()).await;
}

#[tokio::test]
async fn three_replicas_with_the_shards_overlays_identity_share_its_six_shards_and_publish_each_change_once()
 {
    let _role = ROLE.lock().await;
    let scene = Scene::new("deploy-shards").await;
    let client = &scene.client;
    let objects = deploy::kustomize(&scene.stack, "deploy/ha-shards");
    let deployed: Value = serde_saphyr::from_str(&deploy::config_text(&objects))
        .expect("the overlay's config is YAML");
    let shards = deployed["sharding"]["shards"]
        .as_u64()
        .expect("the overlay's sharding.shards") as u32;
    deploy::apply_all(client, &objects)
        .await
        .unwrap_or_else(|e| panic!("applying deploy/ha-shards: {e}"));
    let (kubeconfig, _) = deploy::as_service_account(&scene.stack, client, &scene.dir).await;
    // Another run may have left the Leases; fresh ones make this run's shares its own.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kubecast");
    for name in (0..shards)
        .map(|i| format!("kubecast-shard-{i}"))
        .chain(["kubecast-members".to_string()])
    {
        let _ = leases.delete(&name, &Default::default()).await;
    }
    let topic = unique_name("kc-deploy-shards");
    let committed = KafkaTopic::create(&scene.stack, &topic).await;
    let eos = support::scene::exactly_once("deploy-shards");
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    let config = |identity: &str| {
        scene.config(
            &format!(
                "kubernetes:\n  kubeconfig: {}\nleader_election:\n  enabled: true\n  lease: kubecast\n  namespace: kubecast\n  identity: {identity}\n  lease_duration_ms: 2000\n  retry_period_ms: 250\nsharding:\n  shards: {shards}\n",
                kubeconfig.display()
            ),
            &[scene.kafka_sink("kafka", &topic, &eos)],
        )
    };
    let names = ["deploy-shards-a", "deploy-shards-b", "deploy-shards-c"];
    let replicas: Vec<Kubecast> = names
        .iter()
        .map(|n| Kubecast::start(&scene.stack, &scratch_dir(n), &config(n)))
        .collect();
    let logs = || {
        replicas
            .iter()
            .map(|k| k.log())
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let alive: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let held =
        support::shards::wait_balanced(client, "kubecast", "kubecast", shards, &alive, LIMIT).await;
    if let Err(e) = held {
        panic!("{e}\n{}", logs());
    }
    scene.pods.create_each("p", 12).await;
    let arrived = committed
        .wait_until("the pods' events", LIMIT, |r| r.len() >= 12)
        .await;
    if let Err(e) = arrived {
        panic!("{e}\n{}", logs());
    }
    for k in &replicas {
        assert!(
            k.count_in_log("took over the exactly-once sink") > 0,
            "every replica publishes a share:\n{}",
            logs()
        );
        // An apiserver refusal reads "… is forbidden: …" with reason Forbidden (code 403); a
        // bare "403" also occurs in uids and resourceVersions, so the word is what is counted.
        let refused = k
            .log()
            .lines()
            .filter(|l| l.to_lowercase().contains("forbidden"))
            .count();
        assert_eq!(refused, 0, "the overlay's Role lacks a right:\n{}", logs());
    }
    let ids: BTreeSet<String> = committed
        .records()
        .iter()
        .map(|r| r.ce("id").to_string())
        .collect();
    assert_eq!(ids.len(), committed.records().len(), "each change once");
    for k in replicas {
        let (code, log) = k.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{log}");
    }
}
