//! Least privilege that follows the config, against the real apiserver: `kubecast rbac`
//! prints exactly `list` and `watch` on the configured resources; applied for a
//! ServiceAccount of the test's own, that identity runs kubecast on several kinds until it is
//! ready; with one verb taken away, kubecast exits 1 naming the verb and the resource. The
//! Helm chart renders the same rules from its values.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::deploy;
use support::http::{free_port, wait_for};
use support::kubecast::Kubecast;
use support::scene::{Scene, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

/// `kubecast rbac --config PATH ARGS...`: its objects.
fn rbac(scene: &Scene, config: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_kubecast"))
        .args(["rbac", "--config"])
        .arg(config)
        .args(args)
        .env("KUBECONFIG", &scene.stack.kubeconfig)
        .output()
        .expect("running kubecast rbac");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubecast rbac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split("---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

fn rules_of(objects: &[Value], kind: &str) -> Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .map(|o| o["rules"].clone())
        .unwrap_or_else(|| panic!("no {kind} among {objects:?}"))
}

#[tokio::test]
async fn the_printed_role_suffices_and_without_a_verb_kubecast_names_what_it_lacks() {
    let scene = Scene::new("rbac").await;
    let name = unique_name("kc-rbac");
    let port = free_port();
    let out = scene.dir.join("events.jsonl");
    let config = |kubeconfig: &str| {
        format!(
            "cluster: test\nkubernetes: {{{kubeconfig}}}\nwatch:\n  resources: [deploy, pods, nodes, {{resource: events, namespaces: [{}]}}]\nmetrics: {{address: '127.0.0.1:{port}'}}\nsinks:\n{}",
            scene.ns,
            file_sink("out", &out)
        )
    };
    let path = scene.dir.join("rbac.yaml");
    std::fs::write(&path, config("")).expect("writing the config");
    let sa = format!("{}/{name}", scene.ns);
    let objects = rbac(&scene, &path, &["--service-account", &sa, "--name", &name]);
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["ClusterRole", "ClusterRoleBinding"],
        "nodes are cluster-scoped"
    );
    let rules = rules_of(&objects, "ClusterRole");
    assert_eq!(
        rules,
        json!([
            {"apiGroups": [""], "resources": ["events", "nodes", "pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]}
        ])
    );

    // Applied with a ServiceAccount of the test's own, that identity makes kubecast ready.
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": scene.ns}});
    let mut all = vec![account.clone()];
    all.extend(objects.iter().cloned());
    deploy::apply_all(&scene.client, &all)
        .await
        .unwrap_or_else(|e| panic!("applying: {e}"));
    let (kubeconfig, sa_client) =
        deploy::as_service_account_named(&scene.stack, &scene.client, &scene.dir, &scene.ns, &name)
            .await;
    let as_sa = config(&format!("kubeconfig: {}", kubeconfig.display()));
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &as_sa);
    wait_for(
        port,
        "/readyz",
        LIMIT,
        "kubecast ready with the printed role",
        |c, _| c == 200,
    )
    .await;
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");

    // Without `watch` on deployments: exit 1 naming the verb and the resource.
    let mut cut = objects.clone();
    for o in cut.iter_mut().filter(|o| o["kind"] == "ClusterRole") {
        o["rules"][1]["verbs"] = json!(["list"]);
    }
    deploy::apply_all(&scene.client, &cut)
        .await
        .unwrap_or_else(|e| panic!("applying: {e}"));
    // The authorizer sees the change within moments: wait until the identity is refused.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> = kube::Api::all(sa_client);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match deployments
            .watch(&kube::api::WatchParams::default(), "0")
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the cut role never took effect: {:?}",
                    other.map(drop)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &as_sa);
    let (code, log) = kubecast.exited(LIMIT).await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("may not watch deployments.apps")
            && log.contains("grant `list` and `watch` on `deployments.apps`"),
        "the error names the verb and the resource: {log}"
    );
}

#[test]
fn the_helm_chart_renders_the_rules_kubecast_rbac_prints() {
    let stack = support::Stack::load();
    let objects = deploy::helm_template(
        &stack,
        "kinds",
        "kubecast",
        &[
            "--set-json",
            r#"rbac.resources=[{"apiGroup":"","resources":["events","nodes","pods"]},{"apiGroup":"apps","resources":["deployments"]}]"#,
        ],
    );
    assert_eq!(
        rules_of(&objects, "ClusterRole"),
        json!([
            {"apiGroups": [""], "resources": ["events", "nodes", "pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]}
        ])
    );
}
