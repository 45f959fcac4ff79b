//! One resource's position lost, the others' kept: kubecast watching Pods and ConfigMaps is
//! killed, a ConfigMap is deleted and etcd alone is compacted (`scripts/stack compact etcd`).
//! The stack's apiserver serves ConfigMaps without a watch cache, straight from etcd, whose
//! history before the delete is gone: resuming there fails (the apiserver answers `410 Gone`,
//! or a 500 for the delete whose previous version etcd compacted away), while the Pods' watch
//! cache still serves theirs. The restart lists the ConfigMaps again (the delete arrives
//! inferred) and resumes the Pods' watch (nothing re-emitted, a new pod's change seen). This
//! binary compacts etcd, so it holds this one test.

mod support;

use std::time::Duration;

use serde_json::json;
use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::objects::Objects;
use support::scene::{Scene, file_events, file_sink};
use support::since::{describe, fresh, ids, wait_for_fresh};

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_position_lost_for_one_resource_re_lists_that_resource_only() {
    let scene = Scene::new("kinds-gone").await;
    let ns = scene.ns.clone();
    let objects = Objects::new(&scene.client);
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    for name in ["keep", "drop"] {
        objects
            .create(&cms, &json!({"metadata": {"name": name}}))
            .await;
    }
    scene.pods.create("p").await;
    let file = scene.dir.join("events.jsonl");
    let config = scene
        .config(
            &format!("state:\n  dir: {}\n", scene.dir.join("state").display()),
            &[file_sink("file", &file)],
        )
        .replace("watch:\n", "watch:\n  resources: [pods, configmaps]\n");
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let f = file.clone();
    kubecast.check(
        wait_for(LIMIT, "the initial lists", || {
            (file_events(&f).len() >= 3).then_some(())
        })
        .await
        .ok_or("three initial events".to_string()),
    );
    kubecast.kill().await;
    let before = ids(&file);

    objects.delete(&format!("{cms}/drop")).await;
    scene.stack.script(&["compact", "etcd"]);
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    wait_for_fresh(
        &kubecast,
        &file,
        &before,
        "drop",
        "drop's inferred delete",
        LIMIT,
    )
    .await;
    // The Pods' resumed watch sees what happens now.
    scene.pods.label("p", "after", "gone").await;
    wait_for_fresh(&kubecast, &file, &before, "p", "p's change", LIMIT).await;
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    let after: Vec<String> = fresh(&file, &before).iter().map(describe).collect();
    assert_eq!(
        after,
        [
            "ConfigMap deleted drop inferred=true",
            "Pod modified p inferred=null"
        ],
        "the ConfigMaps re-listed (keep not re-emitted), the Pods resumed"
    );
    // Listed again: the ConfigMaps, after a 410 or after the apiserver refused to resume
    // three times; the Pods never.
    let listed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("list complete"))
        .collect();
    assert!(
        listed
            .iter()
            .any(|l| l.contains(&format!("scope=configmaps/{ns}"))),
        "the ConfigMaps were listed again:\n{log}"
    );
    assert!(
        !listed.iter().any(|l| l.contains(&format!("scope={ns} "))),
        "the Pods were not listed again:\n{log}"
    );
}
