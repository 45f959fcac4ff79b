//! `scripts/stack compact` really makes old resourceVersions unservable: a watch from before
//! the compaction gets `410 Gone`, while a watch from a fresh resourceVersion works.
//!
//! This is a test binary of its own because compacting restarts kube-apiserver; cargo runs
//! test binaries one after another, so no other test sees the restart.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use support::{NO_SCHEDULER, Stack, unique_name, within};

const LIMIT: Duration = Duration::from_secs(60);

async fn relabel(pods: &Api<Pod>, name: &str, value: &str) -> String {
    let patch = json!({ "metadata": { "labels": { "step": value } } });
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patching labels")
        .metadata
        .resource_version
        .expect("a resourceVersion")
}

#[tokio::test]
async fn a_watch_from_before_a_compaction_gets_410_gone() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    let ns = unique_name("compact");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let old_rv = within(LIMIT, "creating a pod and changing it", async {
        let namespace: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "p" },
            "spec": { "schedulerName": NO_SCHEDULER, "containers": [{ "name": "c", "image": "registry.invalid/c:1" }] }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("creating the pod");
        let old = relabel(&pods, "p", "1").await;
        relabel(&pods, "p", "2").await;
        old
    })
    .await;

    // Before compacting, the old resourceVersion is still watchable: the check below could fail.
    let before = within(
        LIMIT,
        "the first event of a watch from the old resourceVersion",
        async {
            let stream = pods
                .watch(&WatchParams::default().timeout(5), &old_rv)
                .await
                .expect("watch");
            Box::pin(stream).try_next().await.expect("watch stream")
        },
    )
    .await;
    assert!(
        matches!(before, Some(WatchEvent::Modified(_))),
        "got {before:?}"
    );

    let revision = stack.script(&["compact"]);
    assert!(
        revision.trim().parse::<u64>().is_ok(),
        "compact prints the revision: {revision:?}"
    );

    // kube-apiserver was restarted; a new client connects afresh.
    let client = stack.kube_client().await;
    let pods = Api::<Pod>::namespaced(client, &ns);
    let outcome = within(
        LIMIT,
        "the answer to a watch from the compacted resourceVersion",
        async {
            match pods
                .watch(&WatchParams::default().timeout(5), &old_rv)
                .await
            {
                Err(kube::Error::Api(status)) => Some(status.code),
                Err(e) => panic!("unexpected error starting the watch: {e}"),
                Ok(stream) => match Box::pin(stream).next().await {
                    Some(Ok(WatchEvent::Error(status))) => Some(status.code),
                    other => panic!("expected a 410 error event, got {other:?}"),
                },
            }
        },
    )
    .await;
    assert_eq!(
        outcome,
        Some(410),
        "a watch from resourceVersion {old_rv} after compaction"
    );

    // A watch from a fresh resourceVersion still sees the next change.
    let fresh_rv = relabel(&pods, "p", "3").await;
    let stream = pods
        .watch(&WatchParams::default().timeout(10), &fresh_rv)
        .await
        .expect("watch");
    let mut stream = Box::pin(stream);
    let next = relabel(&pods, "p", "4").await;
    let event = within(
        LIMIT,
        "the change after the fresh resourceVersion",
        stream.try_next(),
    )
    .await
    .expect("watch stream");
    match event {
        Some(WatchEvent::Modified(p)) => assert_eq!(p.metadata.resource_version, Some(next)),
        other => panic!("expected the relabel to step 4, got {other:?}"),
    }
}
