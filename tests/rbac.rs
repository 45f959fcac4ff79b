//! Least privilege that follows the config, against the real apiserver: `kubecast rbac`
//! prints exactly `list` and `watch` on the configured resources; applied for a
//! ServiceAccount of the test's own, that identity runs kubecast on several kinds until it is
//! ready; with one verb taken away, kubecast exits 1 naming the verb and the resource. The
//! Helm chart derives from its config the rules `kubecast rbac` prints for that config. A
//! custom resource not installed yet, or any resource without the apiserver, is granted only
//! as the entry declares it (`PLURAL.GROUP` and `scope`), else exit 2 naming the entry.

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

#[tokio::test]
async fn the_helm_chart_derives_from_its_config_the_rules_kubecast_rbac_prints_for_it() {
    let scene = Scene::new("rbac-chart").await;
    let resources =
        json!(["pods", "nodes", {"resource": "events"}, "deployments.apps", "replicasets.apps"]);
    let path = scene.dir.join("chart.yaml");
    let text = format!(
        "cluster: test\nwatch:\n  resources: {resources}\nsinks:\n{}",
        file_sink("out", &scene.dir.join("out.jsonl"))
    );
    std::fs::write(&path, text).expect("the config");
    let printed = rbac(&scene, &path, &["--service-account", "kubecast/kubecast"]);
    let objects = deploy::helm_template(
        &scene.stack,
        "kinds",
        "kubecast",
        &["--set-json", &format!("config.watch.resources={resources}")],
    );
    assert_eq!(
        rules_of(&objects, "ClusterRole"),
        rules_of(&printed, "ClusterRole"),
        "the chart's rules for config.watch.resources"
    );
    // The chart's own default config watches Pods, and its rules say so.
    let default = deploy::helm_template(&scene.stack, "default", "kubecast", &[]);
    assert_eq!(
        rules_of(&default, "ClusterRole"),
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}])
    );
}

/// `kubecast rbac` on `resources` (a YAML flow list) with `kubeconfig`: exit code, stdout,
/// stderr.
fn rbac_of(
    scene: &Scene,
    resources: &str,
    kubeconfig: &std::path::Path,
) -> (Option<i32>, String, String) {
    let path = scene.dir.join(format!("rbac-{}.yaml", unique_name("c")));
    let text = format!(
        "cluster: test\nwatch:\n  namespaces: [{}]\n  resources: {resources}\nsinks:\n{}",
        scene.ns,
        file_sink("out", &scene.dir.join("out.jsonl"))
    );
    std::fs::write(&path, text).expect("the config");
    let out = Command::new(env!("CARGO_BIN_EXE_kubecast"))
        .args(["rbac", "--config"])
        .arg(&path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("running kubecast rbac");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_crd_not_installed_yet_or_an_unreachable_apiserver_needs_plural_group_and_scope() {
    let scene = Scene::new("rbac-pending").await;
    let group = format!("{}.example.com", unique_name("p"));
    let kubeconfig = scene.stack.kubeconfig.clone();
    // Named by its singular, or without a scope: no guess, exit 2 naming the entry.
    for entry in [format!("widget.{group}"), format!("widgets.{group}")] {
        let (code, out, err) = rbac_of(&scene, &format!("[pods, {entry}]"), &kubeconfig);
        assert_eq!(code, Some(2), "{entry}: {out}{err}");
        assert!(
            err.contains("watch.resources[1]") && err.contains("scope"),
            "{err}"
        );
    }
    // Declared: a cluster-scoped custom resource gets the ClusterRole, never a Role that
    // could not grant it; a namespaced one a Role in the watched namespace.
    let docs_of = |resources: String| {
        let (code, out, err) = rbac_of(&scene, &resources, &kubeconfig);
        assert_eq!(code, Some(0), "{resources}: {err}");
        out.split("---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect::<Vec<Value>>()
    };
    let cluster = docs_of(format!("[{{resource: gadgets.{group}, scope: Cluster}}]"));
    assert_eq!(
        rules_of(&cluster, "ClusterRole"),
        json!([{"apiGroups": [group], "resources": ["gadgets"], "verbs": ["list", "watch"]}])
    );
    assert!(!cluster.iter().any(|d| d["kind"] == "Role"), "{cluster:?}");
    let namespaced = docs_of(format!(
        "[{{resource: widgets.{group}, scope: Namespaced}}]"
    ));
    assert_eq!(
        rules_of(&namespaced, "Role"),
        json!([{"apiGroups": [group], "resources": ["widgets"], "verbs": ["list", "watch"]}])
    );
    assert!(
        namespaced
            .iter()
            .any(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == scene.ns.as_str()),
        "{namespaced:?}"
    );
    // A scope that contradicts discovery is an error.
    let (code, _, err) = rbac_of(
        &scene,
        "[{resource: nodes, scope: Namespaced}]",
        &kubeconfig,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("watch.resources[0].scope"), "{err}");
    // Without the apiserver (a kubeconfig pointing at a closed port), only declared entries.
    let closed = scene.dir.join("closed-kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).expect("the stack's kubeconfig");
    let pointed: Vec<String> = text
        .lines()
        .map(|l| match l.split_once("server:") {
            Some((indent, _)) => format!("{indent}server: https://127.0.0.1:1"),
            None => l.to_string(),
        })
        .collect();
    std::fs::write(&closed, pointed.join("\n")).expect("a kubeconfig");
    let (code, out, err) = rbac_of(
        &scene,
        "[{resource: pods, scope: Namespaced}, {resource: deployments.apps, scope: Namespaced}]",
        &closed,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("could not be asked"),
        "it says the rules come from the config: {err}"
    );
    assert!(
        out.contains("deployments") && out.contains("\"apps\""),
        "{out}"
    );
    let (code, _, err) = rbac_of(&scene, "[pods, deploy]", &closed);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("watch.resources[0]") && err.contains("PLURAL.GROUP"),
        "{err}"
    );
}
