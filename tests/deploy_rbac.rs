//! `deploy/` against the real kube-apiserver: every manifest of the kustomize base is accepted
//! (server-side apply, dry run), and kubecast running with a token of deploy/'s ServiceAccount,
//! bound to deploy/'s ClusterRole, bridges pods, while the same identity is refused reading
//! Secrets, writing Pods and watching other resources (403).

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client};
use serde_json::Value;
use support::kubecast::Kubecast;
use support::scene::{Scene, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(60);

/// The base's manifests (every `*.yaml` but kustomization.yaml), parsed.
fn manifests() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("kustomization.yaml")
        })
        .collect();
    paths.sort();
    for p in paths {
        let text =
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        let v: Value =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        out.push((p.display().to_string(), v));
    }
    out
}

/// Server-side applies `obj` (`dry_run`: validated and admitted, not stored).
async fn apply(
    client: &Client,
    discovery: &Discovery,
    obj: &Value,
    dry_run: bool,
) -> Result<(), String> {
    let (group, version) = match obj["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .split_once('/')
    {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap_or_default().to_string(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap_or_default());
    let (ar, caps) = discovery
        .resolve_gvk(&gvk)
        .ok_or_else(|| format!("the apiserver does not serve {gvk:?}"))?;
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            obj["metadata"]["namespace"].as_str().unwrap_or("default"),
            &ar,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let mut params = PatchParams::apply("kubecast-test").force();
    if dry_run {
        params = params.dry_run();
    }
    api.patch(name, &params, &Patch::Apply(obj))
        .await
        .map(drop)
        .map_err(|e| format!("{} {name}: {e}", gvk.kind))
}

fn manifest(kind: &str) -> Value {
    manifests()
        .into_iter()
        .map(|(_, v)| v)
        .find(|v| v["kind"] == kind)
        .unwrap_or_else(|| panic!("deploy/base has no {kind}"))
}

#[tokio::test]
async fn the_base_is_accepted_and_its_identity_bridges_pods_and_nothing_else() {
    let scene = Scene::new("deploy").await;
    let client = &scene.client;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("API discovery");
    // The namespace and the identity for real (the rest needs the namespace to exist)...
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    ] {
        apply(client, &discovery, &manifest(kind), false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // ...and every manifest of the base, dry run.
    for (path, obj) in manifests() {
        apply(client, &discovery, &obj, true)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }

    // A token of deploy/'s ServiceAccount, in a kubeconfig of its own.
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "kubecast");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sa
        .create_token_request("kubecast", &PostParams::default(), &request)
        .await
        .expect("a token for the kubecast ServiceAccount")
        .status
        .expect("the token request's status")
        .token
        .expect("the token request's token");
    let server = std::fs::read_to_string(&scene.stack.kubeconfig)
        .expect("the stack's kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
        .expect("the stack's kubeconfig names its server");
    let kubeconfig = scene.dir.join("sa.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: kubecast\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: kubecast}}\ncurrent-context: x\n",
            scene.stack.dir.join("pki/ca.crt").display()
        ),
    )
    .expect("writing the kubeconfig");

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
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("reading the kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("loading the kubeconfig");
    let as_kubecast = Client::try_from(config).expect("a client as kubecast");
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
