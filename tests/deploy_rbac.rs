//! `deploy/` against the real kube-apiserver: kubecast running with a token of deploy/'s
//! ServiceAccount, bound to deploy/'s ClusterRole (the objects `kustomize build deploy/base`
//! renders, applied), bridges pods, while the same identity is refused reading Secrets,
//! writing Pods and watching other resources (403).

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::{ListParams, WatchParams};
use support::deploy;
use support::kubecast::Kubecast;
use support::scene::{Scene, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_base_identity_bridges_pods_and_nothing_else() {
    let scene = Scene::new("deploy").await;
    let client = &scene.client;
    // The base's objects: its identity for real, all of them as a dry run.
    let objects = deploy::kustomize_base(&scene.stack);
    deploy::apply_all(client, &objects)
        .await
        .unwrap_or_else(|e| panic!("applying deploy/base: {e}"));

    // A token of deploy/'s ServiceAccount, in a kubeconfig of its own.
    let (kubeconfig, as_kubecast) =
        deploy::as_service_account(&scene.stack, client, &scene.dir).await;

    // kubecast with that identity, watching all namespaces as deployed, bridges a pod.
    let out = scene.dir.join("events.jsonl");
    let config = format!(
        "cluster: test\nkubernetes:\n  kubeconfig: {}\nsinks:\n{}",
        kubeconfig.display(),
        file_sink("out", &out)
    );
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let arrived = support::consume::wait_for(LIMIT, "the pod's event", || {
        file_events(&out)
            .iter()
            .any(|e| e["k8suid"] == uid.as_str())
            .then_some(())
    })
    .await;
    kubecast.check(arrived.ok_or_else(|| format!("pod {uid} never reached the file sink")));
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");

    // The same identity may do nothing else.
    let forbidden = |what: &str, r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    let secrets: Api<Secret> = Api::namespaced(as_kubecast.clone(), &scene.ns);
    forbidden(
        "listing secrets",
        secrets.list(&ListParams::default()).await.map(drop),
    );
    let pods: Api<Pod> = Api::namespaced(as_kubecast.clone(), &scene.ns);
    forbidden("reading one pod (get)", pods.get("p").await.map(drop));
    forbidden(
        "deleting a pod",
        pods.delete("p", &Default::default()).await.map(drop),
    );
    let configmaps: Api<ConfigMap> = Api::all(as_kubecast.clone());
    forbidden(
        "watching configmaps",
        configmaps
            .watch(&WatchParams::default(), "0")
            .await
            .map(drop),
    );
    assert!(
        pods.list(&ListParams::default()).await.is_ok(),
        "listing pods is what it is for"
    );
}
