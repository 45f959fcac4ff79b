//! The local kube-apiserver is the real thing: kube lists and creates Pods through the
//! generated kubeconfig, a test can drive a Pod's status as a kubelet would, and RBAC is on.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{NO_SCHEDULER, Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(30);

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))
        .expect("a namespace literal");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": "stack-test" } },
        "spec": { "schedulerName": NO_SCHEDULER, "containers": [{ "name": "main", "image": "registry.invalid/app:1" }] }
    }))
    .expect("a pod literal")
}

#[tokio::test]
async fn lists_pods_through_the_generated_kubeconfig() {
    let client = Stack::load().kube_client().await;
    let ns = unique_name("list");
    within(LIMIT, "creating a namespace and a pod", async {
        namespace(&client, &ns).await;
        Api::<Pod>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pod("one"))
            .await
            .expect("creating a pod");
    })
    .await;

    let in_ns = within(LIMIT, "listing pods in the namespace", async {
        Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .expect("listing pods in the namespace")
    })
    .await;
    let names: Vec<_> = in_ns
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["one"]);
    assert!(
        in_ns
            .metadata
            .resource_version
            .is_some_and(|rv| !rv.is_empty()),
        "a list carries the collection's resourceVersion"
    );

    let everywhere = within(LIMIT, "listing pods in all namespaces", async {
        Api::<Pod>::all(client.clone())
            .list(&ListParams::default().labels("app=stack-test"))
            .await
            .expect("listing pods in all namespaces")
    })
    .await;
    assert!(
        everywhere
            .items
            .iter()
            .any(|p| p.metadata.namespace.as_deref() == Some(ns.as_str())),
        "the all-namespaces list includes the pod in {ns}"
    );
}

#[tokio::test]
async fn creates_a_pod_and_drives_its_status_like_a_kubelet() {
    let client = Stack::load().kube_client().await;
    let ns = unique_name("status");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let created = within(LIMIT, "creating a pod", async {
        namespace(&client, &ns).await;
        pods.create(&PostParams::default(), &pod("web"))
            .await
            .expect("creating a pod")
    })
    .await;
    let phase = created.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Pending"), "a new pod starts Pending");

    let status = json!({
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.2",
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{ "type": "Ready", "status": "True",
                             "lastTransitionTime": "2026-01-01T00:00:01Z" }],
            "containerStatuses": [{
                "name": "main", "image": "registry.invalid/app:1", "imageID": "",
                "ready": true, "restartCount": 2, "started": true,
                "state": { "running": { "startedAt": "2026-01-01T00:00:01Z" } }
            }]
        }
    });
    let patched = within(LIMIT, "patching the status subresource", async {
        pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("patching pod status")
    })
    .await;
    assert_ne!(
        patched.metadata.resource_version, created.metadata.resource_version,
        "a status change gives the pod a new resourceVersion"
    );

    let read = within(LIMIT, "reading the pod back", pods.get("web"))
        .await
        .expect("getting the pod");
    let status = read.status.expect("the pod has a status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.2"));
    let container = &status.container_statuses.expect("container statuses")[0];
    assert_eq!(container.restart_count, 2);
    assert!(
        container
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some()
    );
}

#[tokio::test]
async fn rbac_denies_an_identity_without_bindings() {
    let stack = Stack::load();
    let kubeconfig = kube::config::Kubeconfig::read_from(&stack.kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    // The admin may impersonate; the impersonated account has no role bindings at all.
    config.auth_info.impersonate = Some("system:serviceaccount:default:nobody".to_string());
    let client = kube::Client::try_from(config).expect("client");
    let result = within(LIMIT, "listing pods as an unbound identity", async {
        Api::<Pod>::all(client).list(&ListParams::default()).await
    })
    .await;
    match result {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden from RBAC, got {other:?}"),
    }
}

/// The demo's "try it by hand" session: `source target/stack/env` puts the stack's own
/// kubectl (the apiserver's release) first on PATH, and it creates, labels and deletes a pod.
#[tokio::test]
async fn kubectl_from_the_stack_env_is_the_apiservers_release_and_changes_pods() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    let ns = unique_name("kubectl");
    namespace(&client, &ns).await;
    let session = r#"
        set -eu
        source "$1/env"
        command -v kubectl
        kubectl version -o json | tr -d ' \n'; echo
        kubectl -n "$2" run hello --image=nginx:1.27
        kubectl -n "$2" label pod hello tier=web
        kubectl -n "$2" get pod hello -o 'jsonpath={.metadata.labels.tier}'; echo
        kubectl -n "$2" delete pod hello
    "#;
    let out = std::process::Command::new("bash")
        .args(["-c", session, "session"])
        .arg(&stack.dir)
        .arg(&ns)
        .output()
        .expect("running bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the session failed:\n{stdout}{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(stack.dir.join("bin/kubectl").to_string_lossy().as_ref()),
        "kubectl is not the stack's:\n{stdout}"
    );
    let version: serde_json::Value =
        serde_json::from_str(lines.get(1).copied().unwrap_or_default()).expect("version JSON");
    assert_eq!(
        version["clientVersion"]["gitVersion"], version["serverVersion"]["gitVersion"],
        "{version}"
    );
    for expected in [
        "pod/hello created",
        "pod/hello labeled",
        "web",
        "pod \"hello\" deleted",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(expected)),
            "no line starting `{expected}` in:\n{stdout}"
        );
    }
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let gone = within(LIMIT, "the pod's deletion", async {
        loop {
            match pods.get_opt("hello").await {
                Ok(None) => return,
                Ok(Some(_)) => {}
                Err(e) => panic!("reading pod hello: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    gone.await;
}
