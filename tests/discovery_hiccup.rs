//! Deletes are inferred only on proof. kubecast watches a custom resource through an API proxy
//! the test controls (a fault injector: the real apiserver will not fail one request on
//! demand). The watch is cut, its next request answers 404, and the discovery that the 404
//! makes kubecast ask fails once (a 500, as an apiserver in trouble or an aggregated API
//! answers). Nothing proves the resource gone, so no delete may come out: kubecast retries,
//! resumes the watch, and the next change arrives as usual.

mod support;

use std::time::Duration;

use serde_json::json;
use support::apiproxy::ApiProxy;
use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::objects::Objects;
use support::scene::{Scene, file_events, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(90);

fn types(events: &[serde_json::Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap_or("?"),
                e["k8sname"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[tokio::test]
async fn a_discovery_that_fails_after_a_404_infers_no_delete_and_the_watch_resumes() {
    let scene = Scene::new("discovery-hiccup").await;
    let ns = scene.ns.clone();
    let objects = Objects::new(&scene.client);
    // A group of this test's own, so that runs side by side never share the CRD.
    let group = format!("{}.example.com", unique_name("d"));
    objects
        .create_crd(
            &group,
            json!({"plural": "widgets", "singular": "widget", "kind": "Widget"}),
            json!({"type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
            LIMIT,
        )
        .await;
    let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    let widget = |name: &str| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": 1}})
    };
    for name in ["a", "b"] {
        objects.create(&widgets, &widget(name)).await;
    }

    let proxy = ApiProxy::start(&scene.stack).await;
    let kubeconfig = scene.dir.join("kubeconfig-proxied");
    proxy.kubeconfig(&kubeconfig);
    let file = scene.dir.join("events.jsonl");
    let config = scene.config("", &[file_sink("file", &file)]).replace(
        "watch:\n",
        &format!("watch:\n  resources: [widgets.{group}]\n"),
    );
    let mut kubecast = Kubecast::start_env(
        &scene.stack,
        &scene.dir,
        &config,
        &[],
        &[("KUBECONFIG", kubeconfig.to_str().expect("a UTF-8 path"))],
    );
    let f = file.clone();
    kubecast.check(
        wait_for(LIMIT, "the two widgets' added events", || {
            (file_events(&f).len() >= 2).then_some(())
        })
        .await
        .ok_or_else(|| {
            format!(
                "two added events; the file has {:?}",
                types(&file_events(&file))
            )
        }),
    );

    // The watch's next request answers 404, and the discovery it asks fails once.
    proxy.fail_once(&widgets, true, 404);
    proxy.fail_once(&format!("/apis/{group}/v1"), false, 500);
    proxy.cut();
    kubecast
        .wait_for_log("discovery did not prove the resource gone", 1, LIMIT)
        .await;
    let served = proxy.served();
    assert_eq!(served.len(), 2, "both faults answered: {served:?}");
    assert!(
        served[0].starts_with("404 ") && served[1].starts_with(&format!("500 /apis/{group}/v1?")),
        "the watch's 404, then discovery's 500: {served:?}"
    );

    // The watch resumes: the next change arrives, and no delete came before it.
    objects.create(&widgets, &widget("c")).await;
    let f = file.clone();
    let events = kubecast.check(
        wait_for(LIMIT, "c's added event after the fault", || {
            let events = file_events(&f);
            events.iter().any(|e| e["k8sname"] == "c").then_some(events)
        })
        .await
        .ok_or_else(|| format!("c added; the file has {:?}", types(&file_events(&file)))),
    );
    let (code, log) = kubecast.stop(Duration::from_secs(20)).await;
    assert_eq!(code, Some(0), "kubecast's exit; its log:\n{log}");
    let ty = |change: &str, name: &str| format!("io.k8s.{group}.v1.widget.{change} {name}");
    assert_eq!(
        types(&events),
        [ty("added", "a"), ty("added", "b"), ty("added", "c")],
        "nothing but the three adds: a failed discovery proves nothing gone"
    );
}
