//! Several kinds across restarts, with the real controllers: kubecast watching Deployments,
//! ConfigMaps and Pods is killed (`kill -9`); what changed while it was away arrives once on
//! restart and nothing unchanged is emitted again. Then, killed again, a Deployment (with
//! the ReplicaSet and Pod its controllers made) and a ConfigMap are deleted and etcd is
//! compacted: the restart gets `410 Gone`, lists each resource again, and the deletes arrive
//! inferred. This binary restarts kube-apiserver, so it holds this one test.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use support::NO_SCHEDULER;
use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::objects::Objects;
use support::scene::{Scene, file_events, file_sink};
use support::since::{attr, describe, fresh, ids, wait_for_fresh};

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn several_kinds_resume_after_kill_and_410_without_re_emitting_unchanged_objects() {
    let scene = Scene::new("kinds-restart").await;
    let ns = scene.ns.clone();
    let objects = Objects::new(&scene.client);
    let (cms, deploys) = (
        format!("/api/v1/namespaces/{ns}/configmaps"),
        format!("/apis/apps/v1/namespaces/{ns}/deployments"),
    );
    for name in ["a", "b", "c"] {
        objects
            .create(
                &cms,
                &json!({"metadata": {"name": name}, "data": {"v": "1"}}),
            )
            .await;
    }
    objects
        .create(
            &deploys,
            &json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27"}]}}}}),
        )
        .await;
    let file = scene.dir.join("events.jsonl");
    let config = scene
        .config(
            &format!("state:\n  dir: {}\n", scene.dir.join("state").display()),
            &[file_sink("file", &file)],
        )
        .replace("watch:\n", "watch:\n  resources: [deploy, cm, po]\n");
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    // The three ConfigMaps, the Deployment and the controllers' Pod.
    let listed = |f: &std::path::Path| {
        let ev = file_events(f);
        ev.iter()
            .filter(|e| attr(e, "k8skind") == "ConfigMap")
            .count()
            >= 3
            && ev.iter().any(|e| attr(e, "k8skind") == "Deployment")
            && ev.iter().any(|e| attr(e, "k8skind") == "Pod")
    };
    let f = file.clone();
    kubecast.check(
        wait_for(LIMIT, "every kind", || listed(&f).then_some(()))
            .await
            .ok_or("every kind listed".to_string()),
    );
    kubecast.kill().await;
    let before = ids(&file);

    // Away: one ConfigMap changes. The restart resumes every resource's watch.
    objects
        .patch(&format!("{cms}/a"), &json!({"data": {"v": "2"}}))
        .await;
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    wait_for_fresh(&kubecast, &file, &before, "a", "a's change", LIMIT).await;
    // A sentinel made now comes after all the restart had to say.
    objects
        .create(&cms, &json!({"metadata": {"name": "z1"}}))
        .await;
    wait_for_fresh(&kubecast, &file, &before, "z1", "the sentinel z1", LIMIT).await;
    let resumed: Vec<String> = fresh(&file, &before).iter().map(describe).collect();
    assert_eq!(
        resumed,
        [
            "ConfigMap modified a inferred=null",
            "ConfigMap added z1 inferred=null"
        ],
        "only the change and the sentinel: nothing unchanged of any kind again"
    );
    let log = kubecast.kill().await;
    let before = ids(&file);

    // Away: the Deployment (the controllers delete its ReplicaSet and Pod) and a ConfigMap
    // go, and etcd forgets the history: the saved positions are gone.
    objects.delete(&format!("{deploys}/web")).await;
    objects.delete(&format!("{cms}/b")).await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    objects
        .wait_until(&pods, LIMIT, "the controllers to delete the pod", |l| {
            l.and_then(|l| l["items"].as_array().map(Vec::is_empty))
                .unwrap_or(false)
        })
        .await;
    scene.stack.script(&["compact"]);
    let client = scene.stack.kube_client().await;
    let objects = Objects::new(&client);
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let f = file.clone();
    kubecast.check(
        wait_for(LIMIT, "the inferred deletes", || {
            (fresh(&f, &before)
                .iter()
                .filter(|e| e["k8sinferred"] == true)
                .count()
                >= 3)
                .then_some(())
        })
        .await
        .ok_or(format!("three inferred deletes; before the kill:\n{log}")),
    );
    objects
        .create(&cms, &json!({"metadata": {"name": "z2"}}))
        .await;
    wait_for_fresh(&kubecast, &file, &before, "z2", "the sentinel z2", LIMIT).await;
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("410 Gone"),
        "the saved positions were gone:\n{log}"
    );
    let after: Vec<Value> = fresh(&file, &before);
    let described: BTreeSet<String> = after.iter().map(describe).collect();
    let pod = after
        .iter()
        .find(|e| attr(e, "k8skind") == "Pod")
        .map(describe)
        .unwrap_or_default();
    assert!(
        pod.starts_with("Pod deleted ") && pod.ends_with("inferred=true"),
        "{described:?}"
    );
    for want in [
        "Deployment deleted web inferred=true",
        "ConfigMap deleted b inferred=true",
        "ConfigMap added z2 inferred=null",
    ] {
        assert!(
            described.contains(want),
            "{want} missing from {described:?}"
        );
    }
    assert_eq!(after.len(), 4, "nothing else, of any kind: {described:?}");
    let web = after
        .iter()
        .find(|e| attr(e, "k8sname") == "web")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        attr(&web, "source"),
        format!("k8s://test/apis/apps/v1/namespaces/{ns}/deployments")
    );
    assert_eq!(
        attr(&web, "dataschema"),
        "urn:kubecast:schema:deployment.v1.apps-reference:v1"
    );
}
