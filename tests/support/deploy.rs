//! `deploy/` rendered by the real tools and applied to the real apiserver: the kustomize base
//! (`kustomize build`), the Helm chart (`helm template`), both built by `scripts/stack tool`,
//! and server-side apply of any rendered object.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client};
use serde_json::Value;

use super::{Stack, repo};

/// The cached binary (or directory) of a `scripts/stack tool` (built on first use), asked of
/// the script once per test binary.
pub fn tool(stack: &Stack, name: &str) -> PathBuf {
    static KNOWN: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    // A test that panicked while holding the lock left the map intact.
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    known
        .entry(name.to_string())
        .or_insert_with(|| PathBuf::from(stack.script(&["tool", name]).trim()))
        .clone()
}

/// Runs a tool and parses the YAML stream it prints into objects (empty documents dropped).
fn render(program: &Path, args: &[&str]) -> Vec<Value> {
    let out = Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let what = format!("{} {}", program.display(), args.join(" "));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `kustomize build deploy/base`.
pub fn kustomize_base(stack: &Stack) -> Vec<Value> {
    kustomize(stack, "deploy/base")
}

/// `kustomize build DIR` (a path in the repository).
pub fn kustomize(stack: &Stack, dir: &str) -> Vec<Value> {
    render(&tool(stack, "kustomize"), &["build", dir])
}

/// A kubeconfig (written into `dir`) with a fresh token of deploy/'s ServiceAccount
/// `kubecast/kubecast`, and a client with it.
pub async fn as_service_account(stack: &Stack, admin: &Client, dir: &Path) -> (PathBuf, Client) {
    as_service_account_named(stack, admin, dir, "kubecast", "kubecast").await
}

/// The same for the ServiceAccount `namespace/name` (which must exist).
pub async fn as_service_account_named(
    stack: &Stack,
    admin: &Client,
    dir: &Path,
    namespace: &str,
    name: &str,
) -> (PathBuf, Client) {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sa: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = sa
        .create_token_request(name, &Default::default(), &request)
        .await
        .expect("a token for the kubecast ServiceAccount")
        .status
        .expect("the token request's status")
        .token
        .expect("the token request's token");
    let server = std::fs::read_to_string(&stack.kubeconfig)
        .expect("the stack's kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
        .expect("the stack's kubeconfig names its server");
    let kubeconfig = dir.join("sa.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: kubecast\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: kubecast}}\ncurrent-context: x\n",
            stack.dir.join("pki/ca.crt").display()
        ),
    )
    .expect("writing the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("reading the kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("loading the kubeconfig");
    (
        kubeconfig,
        Client::try_from(config).expect("a client as kubecast"),
    )
}

/// `helm template RELEASE deploy/helm/kubecast --namespace NAMESPACE EXTRA...`.
pub fn helm_template(stack: &Stack, release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        release,
        "deploy/helm/kubecast",
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(extra);
    render(&tool(stack, "helm"), &args)
}

/// `Kind/namespace/name` of a rendered object.
pub fn key(obj: &Value) -> String {
    format!(
        "{}/{}/{}",
        obj["kind"].as_str().unwrap_or("?"),
        obj["metadata"]["namespace"].as_str().unwrap_or(""),
        obj["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The object of `kind` among `objects`; fails the test if there is none.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| {
            panic!(
                "no {kind} among {:?}",
                objects.iter().map(key).collect::<Vec<_>>()
            )
        })
}

/// The config file a rendered ConfigMap carries (`data["kubecast.yaml"]`).
pub fn config_text(objects: &[Value]) -> String {
    of_kind(objects, "ConfigMap")["data"]["kubecast.yaml"]
        .as_str()
        .unwrap_or_else(|| panic!("the ConfigMap has no data key kubecast.yaml"))
        .to_string()
}

/// Server-side applies `obj` as field manager `kubecast-test` (`dry_run`: validated and
/// admitted by the apiserver, not stored).
pub async fn apply(
    client: &Client,
    discovery: &Discovery,
    obj: &Value,
    dry_run: bool,
) -> Result<(), String> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, obj["kind"].as_str().unwrap_or_default());
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
        .map_err(|e| format!("{}: {e}", key(obj)))
}

/// Applies the Namespaces and the identity (ServiceAccount, ClusterRole, its binding) among
/// `objects` for real, since the rest needs them to exist, then every object as a dry run.
pub async fn apply_all(client: &Client, objects: &[Value]) -> Result<(), String> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| format!("API discovery: {e}"))?;
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ] {
        for obj in objects.iter().filter(|o| o["kind"] == kind) {
            apply(client, &discovery, obj, false).await?;
        }
    }
    for obj in objects {
        apply(client, &discovery, obj, true).await?;
    }
    Ok(())
}
