//! What only the binary shows about resources, against the real apiserver: a name it does not
//! serve and Secrets without `allow_secrets` exit 2 naming the entry; Secrets with it are
//! watched and every value of their data redacted; `kubecast schema` prints a built-in's
//! schema offline-generated and a custom resource's from the apiserver.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::http::{free_port, wait_for};
use support::kubecast::Kubecast;
use support::objects::Objects;
use support::scene::{InProcess, Scene, file_events, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_name_the_apiserver_does_not_serve_exits_2_naming_the_entry_and_the_closest_names() {
    let scene = Scene::new("kinds-unknown").await;
    let out = scene.dir.join("events.jsonl");
    let config = scene
        .config("", &[file_sink("out", &out)])
        .replace("watch:\n", "watch:\n  resources: [pods, deploymnets]\n");
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let (code, log) = kubecast.exited(LIMIT).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("watch.resources[1]")
            && log.contains("`deploymnets`")
            && log.contains("did you mean deployments.apps"),
        "{log}"
    );
}

#[tokio::test]
async fn secrets_need_allow_secrets_and_then_every_value_is_redacted() {
    let scene = Scene::new("kinds-secrets").await;
    let out = scene.dir.join("events.jsonl");
    let refused = scene
        .config("", &[file_sink("out", &out)])
        .replace("watch:\n", "watch:\n  resources: [secrets]\n");
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &refused);
    let (code, log) = kubecast.exited(LIMIT).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("watch.resources[0]") && log.contains("allow_secrets: true"),
        "{log}"
    );

    let port = free_port();
    let allowed = scene
        .config(
            &format!("metrics: {{address: '127.0.0.1:{port}'}}\n"),
            &[file_sink("out", &out)],
        )
        .replace(
            "watch:\n",
            "watch:\n  resources: [{resource: secrets, allow_secrets: true}]\n",
        );
    let kubecast = InProcess::start(&scene, &allowed);
    wait_for(port, "/readyz", LIMIT, "kubecast ready", |c, _| c == 200).await;
    let objects = Objects::new(&scene.client);
    objects
        .create(
            &format!("/api/v1/namespaces/{}/secrets", scene.ns),
            &json!({"metadata": {"name": "db"}, "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "t0k3n"}}),
        )
        .await;
    let got = support::consume::wait_for(LIMIT, "the secret's event", || {
        file_events(&out).into_iter().find(|e| e["k8sname"] == "db")
    })
    .await
    .expect("the secret's event");
    kubecast.stop(LIMIT).await;
    assert_eq!(got["type"], "io.k8s.core.v1.secret.added");
    // The apiserver folds stringData into data: every value is redacted, the keys stay.
    assert_eq!(
        got["data"]["data"],
        json!({"password": "<redacted>", "token": "<redacted>"})
    );
    assert!(
        !got.to_string().contains("aHVudGVyMg") && !got.to_string().contains("t0k3n"),
        "{got}"
    );
}

/// `kubecast schema ARGS...`: the schema it printed.
fn schema(scene: &Scene, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kubecast"))
        .arg("schema")
        .args(args)
        .env("KUBECONFIG", &scene.stack.kubeconfig)
        .output()
        .expect("running kubecast schema");
    assert!(
        out.status.success(),
        "kubecast schema {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON schema")
}

#[tokio::test]
async fn kubecast_schema_prints_a_built_ins_and_a_custom_resources_schema() {
    let scene = Scene::new("kinds-schema").await;
    let deploy = schema(&scene, &["deploy"]);
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(support::repo().join("schemas/deployment.v1.apps-full.v1.json"))
            .expect("the shipped file"),
    )
    .expect("JSON");
    assert_eq!(deploy, shipped, "the built-in's schema is the shipped one");
    let summary = schema(&scene, &["nodes", "--mode", "summary"]);
    assert_eq!(summary["$id"], "urn:kubecast:schema:node-summary:v1");

    let group = format!("{}.example.com", unique_name("s"));
    let crd = format!("gadgets.{group}");
    let objects = Objects::new(&scene.client);
    let at = objects
        .create_crd(
            &group,
            json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}),
            json!({"type": "object", "properties": {
                "spec": {"type": "object", "required": ["size"],
                    "properties": {"size": {"type": "integer", "minimum": 1}}}}}),
            LIMIT,
        )
        .await;
    // Discovery and the OpenAPI document follow the CRD within moments.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let custom = loop {
        let out = Command::new(env!("CARGO_BIN_EXE_kubecast"))
            .args(["schema", &crd])
            .env("KUBECONFIG", &scene.stack.kubeconfig)
            .output()
            .expect("running kubecast schema");
        if out.status.success() {
            break serde_json::from_slice::<Value>(&out.stdout).expect("a JSON schema");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    objects.delete(&at).await;
    assert_eq!(
        custom["$id"],
        format!("urn:kubecast:schema:gadget.v1.{group}-full:v1")
    );
    assert_eq!(custom["properties"]["kind"]["const"], "Gadget");
    // `size` is required within `spec`, which is optional (so may be null).
    let size = &custom["properties"]["spec"]["anyOf"][0]["properties"]["size"];
    assert_eq!(size["type"], "integer", "{custom:#}");
    // The schema takes a Gadget as the apiserver would send it, and refuses a broken one.
    let v = jsonschema::validator_for(&custom).expect("a valid schema");
    let good = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "spec": {"size": 2}});
    assert!(
        v.is_valid(&good),
        "{:?}",
        v.iter_errors(&good)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );
    let bad = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": "two"}});
    assert!(!v.is_valid(&bad));
}
