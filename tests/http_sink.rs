//! The HTTP sink against the CloudEvents Go SDK's receiver (not written here): a pod's and a
//! Deployment's life arrive in binary, structured and batch mode (and binary with gzip bodies), every event valid for the
//! SDK, with the ids, attributes and data the Kafka sink gives the same changes, each
//! object's events in order. And Knative's conventions through the real binary: `K_SINK`
//! and `K_CE_OVERRIDES` from the environment, `compat: apiserversource` on a sink and on a
//! route giving exactly knative/eventing's type strings and extension names.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::consume::{KafkaTopic, Record};
use support::kubecast::Kubecast;
use support::objects::Objects;
use support::receiver::{GoReceiver, Received};
use support::scene::{InProcess, Scene};
use support::{NO_SCHEDULER, unique_name};

const LIMIT: Duration = Duration::from_secs(90);

/// An event as attribute name -> value (strings; `time` as an instant, so that the SDK's
/// own formatting of it does not count) plus `data`.
type Flat = BTreeMap<String, Value>;

fn flat_attr(k: &str, v: &Value) -> Value {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if k == "time" {
        let t: jiff::Timestamp = text
            .parse()
            .unwrap_or_else(|e| panic!("time `{text}`: {e}"));
        return Value::from(t.as_nanosecond().to_string());
    }
    Value::String(text)
}

fn from_kafka(r: &Record) -> Flat {
    let mut out: Flat = r
        .headers
        .iter()
        .filter_map(|(k, v)| {
            let name = if k == "content-type" {
                "datacontenttype"
            } else {
                k.strip_prefix("ce_")?
            };
            Some((name.to_string(), flat_attr(name, &Value::String(v.clone()))))
        })
        .collect();
    out.insert("data".into(), r.json());
    out
}

fn from_sdk(r: &Received) -> Flat {
    let Value::Object(m) = &r.event else {
        panic!("not an event: {:?}", r.event)
    };
    m.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k == "data" {
                    v.clone()
                } else {
                    flat_attr(k, v)
                },
            )
        })
        .collect()
}

/// Per object (`k8suid`), its event ids in arrival order.
fn per_object(events: &[Flat]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        out.entry(s("k8suid")).or_default().push(s("id"));
    }
    out
}

fn http_sink(name: &str, url: &str, extra: &str) -> String {
    format!("  {name}:\n    type: http\n    url: '{url}'\n{extra}")
}

#[tokio::test]
async fn a_pods_and_a_deployments_life_arrive_at_the_go_sdk_receiver_in_every_mode_as_the_kafka_sink_sends_them()
 {
    let scene = Scene::new("http-modes").await;
    let topic = unique_name("http-modes");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let binary = GoReceiver::start(&scene.stack).await;
    let structured = GoReceiver::start(&scene.stack).await;
    let batch = GoReceiver::start(&scene.stack).await;
    let gzip = GoReceiver::start(&scene.stack).await;
    let sinks = [
        scene.kafka_sink("kafka", &topic, &[]),
        http_sink("binary", &binary.url, ""),
        http_sink("structured", &structured.url, "    mode: structured\n"),
        http_sink(
            "batch",
            &batch.url,
            "    mode: batch\n    batch: {max_events: 5, max_ms: 50}\n",
        ),
        http_sink("gzip", &gzip.url, "    compression: gzip\n"),
    ];
    let config = scene.config("", &sinks).replace(
        "watch:\n",
        "watch:\n  resources: [pods, deployments.apps]\n",
    );
    let kubecast = InProcess::start(&scene, &config);

    // Changes made before kubecast's first list would fold into it: wait for the pod's add.
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    kafka
        .wait_until("the pod's add, in Kafka", LIMIT, |r| {
            r.iter().any(|x| x.ce("k8suid") == uid)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    scene.pods.label(&pod_name(&pod), "stage", "two").await;
    scene.pods.delete(&pod_name(&pod)).await;
    let objects = Objects::new(&scene.client);
    let deployments = format!("/apis/apps/v1/namespaces/{}/deployments", scene.ns);
    objects
        .create(&deployments, &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27"}]}}}}))
        .await;
    objects
        .patch(
            &format!("{deployments}/web"),
            &json!({"spec": {"replicas": 2}}),
        )
        .await;
    objects.delete(&format!("{deployments}/web")).await;

    // Done when Kafka holds the Deployment's delete and as many pod deletes as pod adds.
    let done = |types: Vec<String>| {
        let n = |t: &str| types.iter().filter(|x| x.as_str() == t).count();
        n("io.k8s.apps.v1.deployment.deleted") == 1
            && n("io.k8s.core.v1.pod.added") >= 2
            && n("io.k8s.core.v1.pod.added") == n("io.k8s.core.v1.pod.deleted")
    };
    let records = kafka
        .wait_until("the pod and the Deployment deleted, in Kafka", LIMIT, |r| {
            done(r.iter().map(|x| x.ce("type").to_string()).collect())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let want: Vec<Flat> = records.iter().map(from_kafka).collect();
    let by_id: BTreeMap<String, Flat> = want
        .iter()
        .map(|e| (e["id"].as_str().unwrap_or_default().to_string(), e.clone()))
        .collect();

    for (mode, receiver) in [
        ("binary", &binary),
        ("structured", &structured),
        ("batch", &batch),
        ("binary", &gzip),
    ] {
        let got = receiver
            .wait_until(
                &format!("{} events in {mode} mode", want.len()),
                LIMIT,
                |e| e.len() >= want.len(),
            )
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        for r in &got {
            assert!(
                r.valid,
                "{mode}: the Go SDK finds the event invalid: {} {:?}",
                r.error, r.event
            );
            assert_eq!(
                r.gzip,
                std::ptr::eq(receiver, &gzip),
                "{mode}: gzip bodies come from the gzip sink only"
            );
            assert_eq!(
                r.mode, mode,
                "{mode}: the receiver saw another content mode"
            );
        }
        let flat: Vec<Flat> = got.iter().map(from_sdk).collect();
        for e in &flat {
            let id = e["id"].as_str().unwrap_or_default();
            let k = by_id
                .get(id)
                .unwrap_or_else(|| panic!("{mode}: event {id} is not among Kafka's"));
            assert_eq!(e, k, "{mode}: event {id} differs from the Kafka sink's");
        }
        assert_eq!(
            per_object(&flat),
            per_object(&want),
            "{mode}: each object's events, in order, as Kafka has them"
        );
    }
    kubecast.stop(LIMIT).await;
}

fn pod_name(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn k_sink_k_ce_overrides_and_apiserversource_compat_give_knatives_types_and_extensions() {
    let scene = Scene::new("http-knative").await;
    let sink = GoReceiver::start(&scene.stack).await;
    let refs = GoReceiver::start(&scene.stack).await;
    // The sink takes its url from K_SINK; a route sends reference data in the compat shape
    // to a second receiver.
    let config = format!(
        "cluster: test\nwatch:\n  namespaces: [{}]\nsinks:\n  knative:\n    type: http\n    compat: apiserversource\n{}routes:\n  all: {{sinks: [knative]}}\n  refs: {{sinks: [refs], data: reference, compat: apiserversource}}\n",
        scene.ns,
        http_sink("refs", &refs.url, "")
    );
    let overrides = r#"{"extensions": {"team": "shop", "tier": "gold"}}"#;
    let mut kubecast = Kubecast::start_env(
        &scene.stack,
        &scene.dir,
        &config,
        &[],
        &[("K_SINK", &sink.url), ("K_CE_OVERRIDES", overrides)],
    );
    // Changes made before kubecast's first list would fold into it.
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let pod = scene.pods.create("p").await;
    let name = pod_name(&pod);
    scene.pods.label(&name, "stage", "two").await;
    scene.pods.delete(&name).await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let types = |events: &[Received]| {
        events
            .iter()
            .map(|e| e.attr("type").to_string())
            .collect::<Vec<_>>()
    };
    let got = kubecast.check(
        sink.wait_until("the pod's delete", LIMIT, |e| {
            types(e).iter().any(|t| t.ends_with(".delete"))
        })
        .await,
    );
    let last = got.last().map(|e| e.attr("type").to_string());
    assert_eq!(
        types(&got).first().map(String::as_str),
        Some("dev.knative.apiserver.resource.add"),
        "{:?}",
        types(&got)
    );
    assert!(
        types(&got)
            .iter()
            .any(|t| t == "dev.knative.apiserver.resource.update"),
        "{:?}",
        types(&got)
    );
    assert_eq!(
        last.as_deref(),
        Some("dev.knative.apiserver.resource.delete")
    );
    for e in &got {
        assert!(e.valid, "{}", e.error);
        assert_eq!(
            (
                e.attr("kind"),
                e.attr("apiversion"),
                e.attr("name"),
                e.attr("namespace")
            ),
            ("Pod", "v1", name.as_str(), scene.ns.as_str()),
            "ApiServerSource's extensions"
        );
        assert_eq!(
            (e.attr("team"), e.attr("tier")),
            ("shop", "gold"),
            "K_CE_OVERRIDES' extensions"
        );
        assert_eq!(e.attr("k8suid"), uid, "kubecast's own extensions stay");
        assert!(
            e.attr("id").starts_with(&format!("{uid}:")),
            "kubecast's deterministic id: {}",
            e.attr("id")
        );
    }
    let refs_got = kubecast.check(
        refs.wait_until("the route's delete", LIMIT, |e| {
            types(e).iter().any(|t| t.ends_with(".delete"))
        })
        .await,
    );
    let t = types(&refs_got);
    assert!(
        t.first().map(String::as_str) == Some("dev.knative.apiserver.ref.add")
            && t.last().map(String::as_str) == Some("dev.knative.apiserver.ref.delete")
            && t.len() >= 3
            && t[1..t.len() - 1]
                .iter()
                .all(|x| x == "dev.knative.apiserver.ref.update"),
        "reference data on a compat route: the ref types: {t:?}"
    );
    assert!(
        refs_got.iter().all(|e| e.attr("team") == "shop"),
        "K_CE_OVERRIDES reach every HTTP sink"
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}
