//! Each way of asking for the initial state gives the same events: `streaming_list: auto`
//! (paginated lists), `on` (a watch stream with `sendInitialEvents`) and `off` with pages of
//! three. Every existing pod once, flagged `k8sinitial`, then the watch's next change; each
//! run's log names the way it listed.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::scene::{Scene, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(60);
const PODS: usize = 7;

#[tokio::test]
async fn each_way_of_listing_emits_every_existing_pod_once_and_then_watches() {
    let scene = Scene::new("lists").await;
    let uids = scene.pods.create_each("p", PODS).await;
    let mut runs = Vec::new();
    for (label, watch, streamed) in [
        ("auto", "", false),
        ("on", "  streaming_list: on\n", true),
        ("pages", "  streaming_list: off\n  page_size: 3\n", false),
    ] {
        let dir = scene.dir.join(label);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let out = dir.join("events.jsonl");
        let config = scene.config(watch, &[file_sink("out", &out)]);
        let kubecast = Kubecast::start(&scene.stack, &dir, &config);
        runs.push((label, streamed, kubecast, out));
    }
    for (label, streamed, kubecast, _) in &mut runs {
        kubecast.wait_for_log("list complete", 1, LIMIT).await;
        assert_eq!(
            kubecast.log().contains("list complete (streamed)"),
            *streamed,
            "{label}: the way it listed:\n{}",
            kubecast.log()
        );
    }
    scene.pods.label("p-0", "after", "list").await;
    for (label, _, kubecast, out) in runs {
        let events = wait_for(LIMIT, "the change after the list", || {
            let ev = file_events(&out);
            (ev.len() > PODS).then_some(ev)
        })
        .await
        .unwrap_or_else(|| panic!("{label}: no change after the list:\n{}", kubecast.log()));
        let (listed, after) = events.split_at(PODS);
        let listed_uids: BTreeSet<String> = listed
            .iter()
            .map(|e| e["k8suid"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(listed_uids, uids, "{label}: every existing pod once");
        for e in listed {
            assert!(
                e["type"].as_str().is_some_and(|t| t.ends_with(".added"))
                    && (e["k8sinitial"] == "true" || e["k8sinitial"] == true),
                "{label}: {e}"
            );
        }
        assert_eq!(after.len(), 1, "{label}: {after:?}");
        assert!(
            after[0]["type"]
                .as_str()
                .is_some_and(|t| t.ends_with(".modified"))
                && after[0]["k8sname"] == "p-0",
            "{label}: {}",
            after[0]
        );
        let (code, log) = kubecast.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{label}: {log}");
    }
}
