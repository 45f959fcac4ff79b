//! Resume after `410 Gone`: kubecast is killed (`kill -9`), pods are deleted, changed and
//! created while it is away, and etcd is compacted, so the resourceVersion it saved is gone.
//! On restart it restores its known state, gets `410 Gone`, lists again and emits only the
//! differences: the deletes (flagged inferred), the change, the new pod; never the pods
//! that did not change. This binary restarts kube-apiserver, so it holds this one test.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::scene::{Scene, describe, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_restart_after_compaction_emits_only_the_differences_with_inferred_deletes() {
    let scene = Scene::new("chaos-compact").await;
    let (stack, pods) = (&scene.stack, &scene.pods);
    for name in ["a", "b", "c", "d"] {
        pods.create(name).await;
    }
    let file = scene.dir.join("events.jsonl");
    let config = scene.config(
        &format!("state:\n  dir: {}\n", scene.dir.join("state").display()),
        &[file_sink("file", &file)],
    );
    let kubecast = Kubecast::start(stack, &scene.dir, &config);
    let seen = |n: usize| {
        let f = file.clone();
        move || (file_events(&f).len() >= n).then_some(())
    };
    kubecast.check(
        wait_for(LIMIT, "the initial list", seen(4))
            .await
            .ok_or("4 initial events".to_string()),
    );
    let before: Vec<Value> = file_events(&file);
    let before_ids: BTreeSet<String> = before
        .iter()
        .filter_map(|e| e["id"].as_str().map(String::from))
        .collect();
    let log1 = kubecast.kill().await;

    pods.delete("b").await;
    pods.delete("d").await;
    let c = pods.label("c", "changed", "while-away").await;
    pods.create("e").await;
    stack.script(&["compact"]);
    // A client of its own: the old one's connections died with the apiserver.
    let client = stack.kube_client().await;
    let pods = support::pods::Pods::new(&client, &scene.ns);

    let kubecast = Kubecast::start(stack, &scene.dir, &config);
    // Events redelivered after the kill carry their old ids; the differences are the new ids.
    let new_ids = |f: &Path| -> Vec<Value> {
        file_events(f)
            .into_iter()
            .filter(|e| !before_ids.contains(e["id"].as_str().unwrap_or_default()))
            .collect()
    };
    let f = file.clone();
    kubecast.check(
        wait_for(LIMIT, "the differences", || {
            (new_ids(&f).len() >= 4).then_some(())
        })
        .await
        .ok_or("4 differences".to_string()),
    );
    // A pod created now comes after all the re-list had to say.
    pods.create("z").await;
    let f = file.clone();
    kubecast.check(
        wait_for(LIMIT, "the sentinel", || {
            new_ids(&f)
                .iter()
                .any(|e| e["k8sname"] == "z")
                .then_some(())
        })
        .await
        .ok_or("z's event".to_string()),
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("fresh=false"),
        "the state was restored:\n{log}"
    );
    assert!(
        log.contains("410 Gone"),
        "the saved resourceVersion was gone:\n{log}\nbefore the kill:\n{log1}"
    );

    let after = file_events(&file);
    let fresh = new_ids(&file);
    assert_eq!(
        describe(&fresh[fresh.len() - 1]),
        "added z inferred=null initial=false"
    );
    let new: BTreeSet<String> = fresh[..fresh.len() - 1].iter().map(describe).collect();
    let want: BTreeSet<String> = [
        "deleted b inferred=true initial=null",
        "deleted d inferred=true initial=null",
        "modified c inferred=null initial=null",
        "added e inferred=null initial=false",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        new, want,
        "exactly the differences; nothing for a, which did not change"
    );
    let mod_c = after
        .iter()
        .find(|e| describe(e).starts_with("modified c"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(mod_c["k8srv"], c["metadata"]["resourceVersion"]);
    let prev_c = before
        .iter()
        .find(|e| e["k8sname"] == "c")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        mod_c["k8sprevrv"], prev_c["k8srv"],
        "the chain goes on across the restart"
    );
}
