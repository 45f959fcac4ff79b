//! `410 Gone` for real: kubecast is frozen (SIGSTOP) while pods are deleted, changed and
//! created, etcd is compacted and kube-apiserver restarted; when kubecast thaws, its watch
//! from the old resourceVersion gets `410 Gone`, it lists again, and it emits exactly the
//! real differences: the change, the new pod, and the delete flagged as inferred. Pods that
//! did not change emit nothing.
//!
//! This binary restarts kube-apiserver, so it holds this one test only (cargo runs test
//! binaries one after another).

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::consume::{KafkaTopic, wait_for};
use support::kubecast::Kubecast;
use support::pods::Pods;
use support::scene::{Scene, describe, file_events, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn after_410_gone_only_the_real_differences_are_emitted_with_inferred_deletes() {
    let scene = Scene::new("relist").await;
    let (stack, ns, pods) = (&scene.stack, &scene.ns, &scene.pods);
    let mut uids = std::collections::BTreeMap::new();
    for name in ["a", "b", "c"] {
        let p = pods.create(name).await;
        uids.insert(
            name,
            p["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let topic = unique_name("kc-relist");
    let kafka = KafkaTopic::create(stack, &topic).await;
    let events_file = scene.dir.join("events.jsonl");
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            file_sink("file", &events_file),
        ],
    );
    let kubecast = Kubecast::start(stack, &scene.dir, &config);
    let count = |n: usize| {
        let f = events_file.clone();
        move || (file_events(&f).len() >= n).then_some(())
    };
    let wait = |n: usize, what: &str| {
        let what = what.to_string();
        let c = count(n);
        async move { wait_for(LIMIT, &what, c).await.is_some() }
    };
    assert!(
        wait(3, "the initial list").await,
        "3 initial events; log:\n{}",
        kubecast.log()
    );
    pods.create("d").await;
    assert!(
        wait(4, "d's added").await,
        "d's event; log:\n{}",
        kubecast.log()
    );
    let before = file_events(&events_file);
    let initial: Vec<String> = before.iter().map(describe).collect();
    assert_eq!(
        initial,
        [
            "added a inferred=null initial=true",
            "added b inferred=null initial=true",
            "added c inferred=null initial=true",
            "added d inferred=null initial=false"
        ],
        "pods that existed at start are flagged initial"
    );

    // Freeze kubecast and cut its watch, then change the cluster behind its back.
    kubecast.signal("STOP");
    stack.script(&["stop", "kube-apiserver"]);
    stack.script(&["start", "kube-apiserver"]);
    // A client of its own: the old one's connections died with the apiserver.
    let client = stack.kube_client().await;
    let pods = Pods::new(&client, ns);
    pods.delete("b").await;
    let c = pods.label("c", "changed", "while-away").await;
    let e = pods.create("e").await;
    // Compact etcd and restart kube-apiserver: the old resourceVersion is now gone.
    stack.script(&["compact"]);
    kubecast.signal("CONT");

    assert!(
        wait(7, "the differences").await,
        "three differences; log:\n{}",
        kubecast.log()
    );
    // A pod created now comes after everything the re-list emitted: when it shows up,
    // whatever else the re-list had to say was said.
    pods.create("z").await;
    assert!(
        wait(8, "the sentinel").await,
        "z's event; log:\n{}",
        kubecast.log()
    );
    let after = file_events(&events_file);
    let gap: BTreeSet<String> = after[4..after.len() - 1].iter().map(describe).collect();
    let want: BTreeSet<String> = [
        "modified c inferred=null initial=null",
        "added e inferred=null initial=false",
        "deleted b inferred=true initial=null",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        gap, want,
        "exactly the real differences, and nothing for a and d"
    );
    assert_eq!(describe(&after[7]), "added z inferred=null initial=false");
    assert!(
        kubecast.count_in_log("410 Gone") >= 1,
        "the re-list was caused by 410; log:\n{}",
        kubecast.log()
    );

    let by_name = |n: &str| {
        after[4..7]
            .iter()
            .find(|e| e["k8sname"] == n)
            .cloned()
            .unwrap_or_default()
    };
    let del_b = by_name("b");
    assert_eq!(
        del_b["id"],
        format!("{}:deleted", uids["b"]),
        "an inferred delete has the same id as a watched one"
    );
    assert_eq!(
        del_b["k8sprevrv"], before[1]["k8srv"],
        "the inferred delete links to b's last event"
    );
    assert_eq!(
        del_b["data"]["metadata"]["uid"], uids["b"],
        "an inferred delete carries the pod's identity"
    );
    assert_eq!(del_b["dataschema"], "urn:kubecast:schema:pod-reference:v1");
    for e in &after {
        support::schema::assert_follows(
            e["dataschema"].as_str().unwrap_or_default(),
            &e["data"],
            &describe(e),
        );
    }
    let mod_c = by_name("c");
    assert_eq!(mod_c["k8srv"], c["metadata"]["resourceVersion"]);
    assert_eq!(mod_c["k8sprevrv"], before[2]["k8srv"]);
    assert_eq!(by_name("e")["k8srv"], e["metadata"]["resourceVersion"]);

    // Kafka got the same events, each once.
    let records = kubecast.check(
        kafka
            .wait_until("all 8 events", LIMIT, |r| r.len() >= 8)
            .await,
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    let kafka_ids: Vec<&str> = records.iter().map(|r| r.ce("id")).collect();
    let file_ids: BTreeSet<&str> = after.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(kafka_ids.len(), 8, "{kafka_ids:?}");
    assert_eq!(kafka_ids.iter().copied().collect::<BTreeSet<_>>(), file_ids);
}
