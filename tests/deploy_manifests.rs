//! `deploy/` as users install it: the Helm chart renders the objects of the kustomize base
//! (compared as parsed objects), its values reach the objects they name, every rendered object
//! is accepted by the real kube-apiserver (server-side apply, dry run), and the config both
//! carry is one kubecast accepts.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::deploy::{self, config_text, helm_template, key, kustomize_base, of_kind};
use support::{Stack, kubecast::run_to_end, unique_name};

/// Labels Helm charts add by convention (which chart, managed by Helm); the only difference
/// the chart is allowed to have from the base.
const HELM_LABELS: [&str; 2] = ["helm.sh/chart", "app.kubernetes.io/managed-by"];

/// An object as compared: Helm's own labels removed, and the ConfigMap's config file parsed,
/// so key order and YAML style do not count.
fn comparable(mut obj: Value) -> Value {
    if let Some(labels) = obj["metadata"]["labels"].as_object_mut() {
        for l in HELM_LABELS {
            labels.remove(l);
        }
    }
    if obj["kind"] == "ConfigMap"
        && let Some(data) = obj["data"].as_object_mut()
    {
        for (file, text) in data.iter_mut() {
            if file.ends_with(".yaml")
                && let Some(t) = text.as_str()
            {
                *text = serde_saphyr::from_str(t)
                    .unwrap_or_else(|e| panic!("the ConfigMap's {file} is not YAML: {e}\n{t}"));
            }
        }
    }
    obj
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for obj in objects {
        let k = key(&obj);
        assert!(
            out.insert(k.clone(), comparable(obj)).is_none(),
            "{k} rendered twice"
        );
    }
    out
}

#[test]
fn helm_template_renders_the_objects_of_the_kustomize_base() {
    let stack = Stack::load();
    let rendered = helm_template(&stack, "kubecast", "kubecast", &[]);
    assert_renders(kustomize_base(&stack), rendered, "deploy/base");
}

#[test]
fn helm_with_high_availability_renders_the_objects_of_deploy_ha() {
    let stack = Stack::load();
    let rendered = helm_template(
        &stack,
        "kubecast",
        "kubecast",
        &[
            "--set",
            "highAvailability.enabled=true",
            "--set",
            "config.sinks.kafka.exactly_once=true",
        ],
    );
    assert_renders(
        deploy::kustomize(&stack, "deploy/ha"),
        rendered,
        "deploy/ha",
    );
}

#[test]
fn helm_with_shards_and_replicas_renders_the_objects_of_deploy_ha_shards() {
    let stack = Stack::load();
    let rendered = helm_template(
        &stack,
        "kubecast",
        "kubecast",
        &[
            "--set",
            "highAvailability.enabled=true,highAvailability.shards=6,highAvailability.replicas=3",
            "--set",
            "config.sinks.kafka.exactly_once=true",
        ],
    );
    assert_renders(
        deploy::kustomize(&stack, "deploy/ha-shards"),
        rendered,
        "deploy/ha-shards",
    );
}

/// The chart's `rendered` objects are `kustomized`'s (built from `dir`), Helm's labels aside.
fn assert_renders(kustomized: Vec<Value>, rendered: Vec<Value>, dir: &str) {
    let base = by_key(kustomized);
    let chart = by_key(rendered.clone());
    assert_eq!(
        base.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "the chart renders other objects than {dir}"
    );
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    for (k, b) in &base {
        let c = &chart[k];
        assert!(
            b == c,
            "{k} differs\n--- kustomize build {dir}\n{}\n--- helm template\n{}",
            pretty(b),
            pretty(c)
        );
    }
    // Every object the chart renders carries Helm's labels (and the comparison did remove
    // something).
    for obj in rendered {
        let labels = &obj["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/managed-by"],
            "Helm",
            "{}",
            key(&obj)
        );
        assert_eq!(labels["helm.sh/chart"], "kubecast-0.1.0", "{}", key(&obj));
    }
}

#[test]
fn helm_values_reach_the_objects_they_name() {
    let stack = Stack::load();
    let objects = helm_template(
        &stack,
        "edge",
        "observability",
        &[
            "--set",
            "image.repository=registry.example/kubecast,image.tag=1.2.3",
            "--set",
            "metrics.port=9500,config.cluster=prod-eu-1,config.shutdown.grace_seconds=40",
            "--set",
            "state.size=5Gi,state.storageClassName=fast",
            "--set",
            "credentials.secretName=broker-passwords,credentials.optional=false",
            "--set",
            "namespace.create=false",
        ],
    );
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(
        !kinds.contains(&"Namespace"),
        "namespace.create=false still renders a Namespace: {kinds:?}"
    );
    for obj in &objects {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with("edge-kubecast"),
            "{} is not named after the release",
            key(obj)
        );
        if obj["kind"] != "ClusterRole" && obj["kind"] != "ClusterRoleBinding" {
            assert_eq!(
                obj["metadata"]["namespace"],
                "observability",
                "{}",
                key(obj)
            );
        }
    }
    let deployment = of_kind(&objects, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/kubecast:1.2.3");
    assert_eq!(container["ports"][0]["containerPort"], 9500);
    assert_eq!(
        container["envFrom"][0]["secretRef"],
        serde_json::json!({"name": "broker-passwords", "optional": false})
    );
    assert_eq!(pod["serviceAccountName"], "edge-kubecast");
    assert_eq!(pod["terminationGracePeriodSeconds"], 50, "grace + 10 s");
    let config: Value = serde_saphyr::from_str(&config_text(&objects)).expect("config YAML");
    assert_eq!(config["cluster"], "prod-eu-1");
    assert_eq!(config["metrics"]["address"], "0.0.0.0:9500");
    assert_eq!(config["state"]["dir"], "/var/lib/kubecast");
    let claim = of_kind(&objects, "PersistentVolumeClaim");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    let service = of_kind(&objects, "Service");
    assert_eq!(
        service["metadata"]["annotations"]["prometheus.io/port"],
        "9500"
    );
    assert_eq!(service["spec"]["ports"][0]["port"], 9500);
    let binding = of_kind(&objects, "ClusterRoleBinding");
    assert_eq!(
        binding["subjects"][0],
        serde_json::json!({"kind": "ServiceAccount", "name": "edge-kubecast", "namespace": "observability"})
    );

    // Without RBAC and without a credentials Secret.
    let objects = helm_template(
        &stack,
        "kubecast",
        "kubecast",
        &["--set", "rbac.create=false,credentials.secretName="],
    );
    assert!(
        objects
            .iter()
            .all(|o| o["kind"] != "ClusterRole" && o["kind"] != "ClusterRoleBinding"),
        "rbac.create=false still renders RBAC"
    );
    let container = &of_kind(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container.get("envFrom").is_none(),
        "an empty credentials.secretName still renders envFrom: {container}"
    );
}

#[tokio::test]
async fn every_rendered_object_is_accepted_by_the_apiserver() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    deploy::apply_all(&client, &kustomize_base(&stack))
        .await
        .unwrap_or_else(|e| panic!("kustomize build deploy/base: {e}"));
    deploy::apply_all(&client, &helm_template(&stack, "kubecast", "kubecast", &[]))
        .await
        .unwrap_or_else(|e| panic!("helm template (defaults): {e}"));
    // Another release in a namespace of its own: nothing in the chart assumes the base's names.
    let ns = unique_name("helm");
    let release = unique_name("r");
    deploy::apply_all(&client, &helm_template(&stack, &release, &ns, &[]))
        .await
        .unwrap_or_else(|e| panic!("helm template {release} --namespace {ns}: {e}"));
}

#[test]
fn kubecast_accepts_the_config_that_both_deploy() {
    let stack = Stack::load();
    let dir = support::kubecast::scratch_dir("deploy-config");
    for (what, objects) in [
        ("kustomize", kustomize_base(&stack)),
        ("helm", helm_template(&stack, "kubecast", "kubecast", &[])),
    ] {
        let file = dir.join(format!("{what}.yaml"));
        std::fs::write(&file, config_text(&objects)).expect("writing the config");
        let path = file.to_string_lossy();
        let (code, stdout, stderr) = run_to_end(&["validate-config", &path], &[]);
        assert_eq!(
            code,
            Some(0),
            "kubecast validate-config rejects the config {what} deploys:\n{stdout}{stderr}"
        );
    }
}
