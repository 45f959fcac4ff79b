//! `kubecast replay` against the real stack: topics written by kubecast (binary and
//! structured mode), a topic written with a gap on purpose, a transactional topic, and
//! records that are not CloudEvents. The replay runs as the binary (its output, exit codes
//! and messages are what users see); kubecast writes the topics in-process.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::Value;
use support::consume::{KafkaTopic, Record, copy_records, create_topic, wait_for};
use support::kubecast::{Kubecast, run_to_end};
use support::scene::{InProcess, Scene, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `kubecast replay` through the stack's SASL listener (PLAIN) with `password` in the
/// environment.
fn replay_sasl(scene: &Scene, topic: &str, password: &str) -> (Option<i32>, String, String) {
    let argv = [
        "replay",
        "--brokers",
        &scene.stack.kafka_sasl_bootstrap,
        "--topic",
        topic,
        "--sasl-mechanism",
        "PLAIN",
        "--sasl-username",
        &scene.stack.user,
    ];
    run_to_end(&argv, &[("KUBECAST_REPLAY_SASL_PASSWORD", password)])
}

/// The JSON lines of a replay's stdout.
fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("a line is not JSON ({e}): {l}"))
        })
        .collect()
}

/// Per pod uid, the ids of its events in order.
fn per_pod(events: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (uid, id) in events {
        out.entry(uid).or_default().push(id);
    }
    out
}

fn ids_of_lines(events: &[Value]) -> BTreeMap<String, Vec<String>> {
    per_pod(events.iter().map(|e| (s(&e["k8suid"]), s(&e["id"]))))
}

fn ids_of_binary(records: &[Record]) -> BTreeMap<String, Vec<String>> {
    per_pod(
        records
            .iter()
            .map(|r| (r.ce("k8suid").to_string(), r.ce("id").to_string())),
    )
}

/// `e` with its `time` written one way (the SDK and kubecast may write a different number of
/// fractional digits for the same instant).
fn same_time_text(e: &Value) -> Value {
    let mut e = e.clone();
    let t: jiff::Timestamp = s(&e["time"])
        .parse()
        .unwrap_or_else(|err| panic!("time of {e}: {err}"));
    e["time"] = Value::String(t.to_string());
    e
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Waits until kubecast's records on `topic` hold an event of every (pod name, rv) the
/// apiserver lists now and a delete of every pod in `deleted`: kubecast has caught up.
async fn caught_up(scene: &Scene, topic: &KafkaTopic, deleted: &[&str]) -> Vec<Record> {
    let listed = list(scene).await;
    topic
        .wait_until("kubecast to catch up with the apiserver", LIMIT, |rs| {
            let seen: BTreeSet<(String, String)> = rs
                .iter()
                .map(|r| (r.ce("k8sname").to_string(), r.ce("k8srv").to_string()))
                .collect();
            let gone: BTreeSet<&str> = rs
                .iter()
                .filter(|r| r.ce("type").ends_with(".deleted"))
                .map(|r| r.ce("k8sname"))
                .collect();
            listed.iter().all(|p| seen.contains(p)) && deleted.iter().all(|d| gone.contains(d))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Creates pod `a` and waits for its event: kubecast has listed and watches, so every
/// change after this is an event of its own. (Changes made before kubecast's first list
/// are folded into it: a pod created and deleted by then never appears, rightly.)
async fn started(scene: &Scene, topic: &KafkaTopic) {
    started_with(scene, topic, "a").await;
}

async fn started_with(scene: &Scene, topic: &KafkaTopic, name: &str) {
    scene.pods.create(name).await;
    caught_up(scene, topic, &[]).await;
}

/// (name, resourceVersion) of every pod the apiserver lists in the scene's namespace.
async fn list(scene: &Scene) -> BTreeSet<(String, String)> {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(scene.client.clone(), &scene.ns);
    let pods = api.list(&Default::default()).await.expect("listing pods");
    pods.items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect()
}

/// A producer of raw records (for topics written by hand).
fn producer(scene: &Scene, extra: &[(&str, &str)]) -> ThreadedProducer<DefaultProducerContext> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &scene.stack.kafka_bootstrap);
    for (k, v) in extra {
        config.set(*k, *v);
    }
    config.create().expect("Kafka producer")
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_a_recorded_lifecycle_with_identical_ids_in_per_pod_order_and_verifies_it() {
    let scene = Scene::new("replay-life").await;
    let binary = unique_name("kc-replay-bin");
    let structured = unique_name("kc-replay-str");
    let bin_topic = KafkaTopic::create(&scene.stack, &binary).await;
    let str_topic = KafkaTopic::create(&scene.stack, &structured).await;
    let text = scene.config(
        "",
        &[
            scene.kafka_sink("bin", &binary, &[]),
            scene.kafka_sink("str", &structured, &["mode: structured"]),
        ],
    );
    let kubecast = InProcess::start(&scene, &text);
    let pods = &scene.pods;
    started(&scene, &bin_topic).await;
    for name in ["b", "c"] {
        pods.create(name).await;
    }
    pods.label("a", "step", "1").await;
    pods.running("b", 0).await;
    pods.label("a", "step", "2").await;
    pods.delete("c").await;
    let records = caught_up(&scene, &bin_topic, &["c"]).await;
    let structured_records = str_topic
        .wait_until("the structured topic to hold as many events", LIMIT, |rs| {
            rs.len() >= records.len()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Binary mode: the same events, in per-pod order, with identical ids, and each line the
    // structured JSON kubecast itself writes for that event.
    let (code, out, err) = scene.replay(&binary, &[]);
    assert_eq!(code, Some(0), "{err}");
    let replayed = lines(&out);
    assert_eq!(ids_of_lines(&replayed), ids_of_binary(&records), "{err}");
    let written: BTreeMap<String, Value> = structured_records
        .iter()
        .map(|r| {
            let v = r.json();
            (s(&v["id"]), v)
        })
        .collect();
    for e in &replayed {
        let mine = written.get(&s(&e["id"])).map(same_time_text);
        assert_eq!(
            Some(same_time_text(e)),
            mine,
            "binary-mode replay of {} differs from kubecast's structured form",
            e["id"]
        );
    }
    assert!(err.contains("0 not CloudEvents"), "{err}");

    // Structured mode reads back to the same lines.
    let (code, out, err) = scene.replay(&structured, &[]);
    assert_eq!(code, Some(0), "{err}");
    let mut from_structured = lines(&out);
    let mut from_binary = replayed.clone();
    let by_id = |a: &Value, b: &Value| s(&a["id"]).cmp(&s(&b["id"]));
    from_structured.sort_by(by_id);
    from_binary.sort_by(by_id);
    assert_eq!(from_structured, from_binary);

    // Filters: one pod by name, one type, a label selector.
    let (_, out, _) = scene.replay(&binary, &["--name", "a"]);
    assert!(lines(&out).iter().all(|e| e["k8sname"] == "a") && !out.is_empty());
    let (_, out, _) = scene.replay(&binary, &["--type", "deleted"]);
    let deleted: Vec<String> = lines(&out).iter().map(|e| s(&e["k8sname"])).collect();
    assert_eq!(deleted, ["c"]);
    let (_, out, _) = scene.replay(&binary, &["--label", "step=2"]);
    let labelled = lines(&out);
    assert_eq!(labelled.len(), 1, "{out}");
    assert_eq!(labelled[0]["data"]["metadata"]["labels"]["step"], "2");

    // A complete topic verifies.
    let (code, out, err) = scene.replay(&binary, &["--verify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.trim_end().ends_with("PASSED"), "{out}");
    assert!(
        out.contains(&format!(
            "{} pod change event(s) of 3 object(s) from the beginning",
            records.len()
        )),
        "{out}"
    );

    // Re-published through a configured sink, ids kept; an exactly_once sink is refused.
    let copy_topic = unique_name("kc-replay-copy");
    let copied = KafkaTopic::create(&scene.stack, &copy_topic).await;
    let file = scene.dir.join("republished.jsonl");
    let config = scene.dir.join("republish.yaml");
    write(
        &config,
        &scene.config(
            "",
            &[
                scene.kafka_sink("copy", &copy_topic, &[]),
                scene.kafka_sink("eos", &copy_topic, &["exactly_once: true"]),
                file_sink("file", &file),
            ],
        ),
    );
    let config = config.display().to_string();
    let (code, _, err) = scene.replay(&binary, &["--config", &config, "--sink", "copy"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("re-published: {} delivered", records.len())),
        "{err}"
    );
    let again = copied
        .wait_until("the re-published events", LIMIT, |rs| {
            rs.len() >= records.len()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ids_of_binary(&again), ids_of_binary(&records));
    let (code, _, err) = scene.replay(&binary, &["--config", &config, "--sink", "file"]);
    assert_eq!(code, Some(0), "{err}");
    let in_file: Vec<Value> = support::scene::file_events(&file);
    assert_eq!(ids_of_lines(&in_file), ids_of_binary(&records));
    let (code, _, err) = scene.replay(&binary, &["--config", &config, "--sink", "eos"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("sinks.eos: an exactly_once sink"), "{err}");
    let (code, _, err) = scene.replay(&binary, &["--config", &config, "--sink", "nope"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("has no sink `nope` (its sinks: copy, eos, file)"),
        "{err}"
    );

    // Through the SASL listener, the password from the environment.
    let (code, out, err) = replay_sasl(&scene, &binary, &scene.stack.password);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(lines(&out).len(), replayed.len());
    assert!(
        !err.contains(&scene.stack.password),
        "the password shows: {err}"
    );
    let (code, _, err) = replay_sasl(&scene, &binary, "not-the-password");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("kubecast replay: the brokers refused the credentials"),
        "{err}"
    );
    kubecast.stop(LIMIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_exactly_the_object_whose_record_was_removed_and_counts_restarts_as_duplicates()
 {
    let scene = Scene::new("replay-gap").await;
    let topic = unique_name("kc-replay-src");
    let source = KafkaTopic::create(&scene.stack, &topic).await;
    let text = scene.config("", &[scene.kafka_sink("kafka", &topic, &[])]);
    let kubecast = InProcess::start(&scene, &text);
    let pods = &scene.pods;
    started_with(&scene, &source, "x").await;
    for name in ["y", "z"] {
        pods.create(name).await;
    }
    // Listed or watched, every pod is known before it changes: each change is an event.
    caught_up(&scene, &source, &[]).await;
    for step in ["1", "2", "3"] {
        pods.label("x", "step", step).await;
        pods.label("y", "step", step).await;
    }
    let records = caught_up(&scene, &source, &[]).await;
    kubecast.stop(LIMIT).await;

    // A restart without saved state lists every pod again: z (never modified) under its
    // very id, x and y as `added` at the version already delivered.
    let kubecast = InProcess::start(&scene, &text);
    let with_restart = source
        .wait_until("the re-list after the restart", LIMIT, |rs| {
            rs.len() >= records.len() + 3
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "duplicates are not gaps:\n{out}{err}");
    assert!(
        out.contains("0 incomplete, 0 out of order, 3 duplicate(s)"),
        "{out}"
    );
    for name in ["x", "y", "z"] {
        assert!(
            out.contains(&format!("DUPLICATES {}/{name}", scene.ns)),
            "{out}"
        );
    }
    // With dedup, z's second `added` (same id) is left out.
    let (_, out, err) = scene.replay(&topic, &[]);
    assert_eq!(lines(&out).len(), with_restart.len() - 1, "{err}");
    assert!(err.contains("1 duplicate(s) left out"), "{err}");

    // The same record without x's middle `modified`, and with a record that is not a
    // CloudEvent: exactly x is incomplete, naming the missing link; exit 3.
    let x_modified: Vec<&Record> = records
        .iter()
        .filter(|r| r.ce("k8sname") == "x" && r.ce("type").ends_with(".modified"))
        .collect();
    assert_eq!(x_modified.len(), 3, "x's three label changes");
    let removed = x_modified[1];
    let gappy = unique_name("kc-replay-gap");
    create_topic(&scene.stack, &gappy, 1).await;
    let mut kept: Vec<&Record> = records
        .iter()
        .filter(|r| r.ce("id") != removed.ce("id"))
        .collect();
    // Per pod the order of the source topic is kept (each pod lives in one partition).
    kept.sort_by_key(|r| (r.ce("k8srv").parse::<u64>().unwrap_or(0), r.offset));
    copy_records(&scene.stack, &gappy, &kept);
    let p = producer(&scene, &[]);
    p.send(
        BaseRecord::<(), _>::to(&gappy)
            .partition(0)
            .payload("not an event"),
    )
    .map_err(|(e, _)| e)
    .expect("queueing a record");
    p.flush(Duration::from_secs(30)).expect("flushing");
    let (code, out, err) = scene.replay(&gappy, &["--verify"]);
    assert_eq!(code, Some(3), "{out}{err}");
    let incomplete: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("INCOMPLETE"))
        .collect();
    let uid = removed.ce("k8suid");
    assert_eq!(
        incomplete,
        [format!("INCOMPLETE {}/x (uid {uid})", scene.ns)],
        "{out}"
    );
    let next = x_modified[2];
    assert!(
        out.contains(&format!("gap: event {} (partition 0 offset", next.ce("id")))
            && out.contains(&format!(
                "links to resourceVersion {}, which is not in the topic",
                removed.ce("k8srv")
            )),
        "{out}"
    );
    assert!(out.trim_end().ends_with("FAILED"), "{out}");
    assert!(err.contains("1 not CloudEvents (skipped)"), "{err}");
    assert!(
        err.contains("skipped the record at partition 0 offset"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_at_three_moments_equals_what_the_apiserver_listed_then() {
    let scene = Scene::new("replay-state").await;
    let topic = unique_name("kc-replay-state");
    let source = KafkaTopic::create(&scene.stack, &topic).await;
    let text = scene.config("", &[scene.kafka_sink("kafka", &topic, &[])]);
    let kubecast = InProcess::start(&scene, &text);
    let pods = &scene.pods;
    let mut moments = Vec::new();

    // A moment is taken once kubecast has every change up to now: whatever it observes
    // after it happened after it.
    async fn moment(
        scene: &Scene,
        source: &KafkaTopic,
        deleted: &[&str],
    ) -> (String, BTreeSet<(String, String)>) {
        caught_up(scene, source, deleted).await;
        let listed = list(scene).await;
        let at = jiff::Timestamp::now();
        // The next change is observed strictly after `at`.
        wait_for(LIMIT, "the clock to move past the moment", || {
            (jiff::Timestamp::now() > at).then_some(())
        })
        .await
        .expect("the clock moves");
        let at = at.to_string();
        (at, listed)
    }

    started(&scene, &source).await;
    pods.create("b").await;
    moments.push(moment(&scene, &source, &[]).await);
    pods.label("a", "v", "2").await;
    pods.create("c").await;
    pods.delete("b").await;
    moments.push(moment(&scene, &source, &["b"]).await);
    pods.delete("a").await;
    pods.running("c", 1).await;
    pods.create("d").await;
    moments.push(moment(&scene, &source, &["a", "b"]).await);
    pods.create("e").await;
    pods.label("c", "v", "3").await;
    caught_up(&scene, &source, &["a", "b"]).await;
    kubecast.stop(LIMIT).await;

    for (at, listed) in &moments {
        let (code, out, err) = scene.replay(&topic, &["--state-at", at]);
        assert_eq!(code, Some(0), "{err}");
        let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let state: BTreeSet<(String, String)> = doc["pods"]
            .as_array()
            .expect("pods")
            .iter()
            .map(|p| (s(&p["name"]), s(&p["resourceVersion"])))
            .collect();
        assert_eq!(&state, listed, "--state-at {at}");
        let (code, table, err) = scene.replay(&topic, &["--state-at", at, "--format", "table"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(table.lines().count(), listed.len() + 2, "{table}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_messages_and_transactional_topics_give_only_committed_records() {
    let scene = Scene::new("replay-bad").await;
    let missing = unique_name("kc-replay-missing");
    let (code, _, err) = scene.replay(&missing, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("topic `{missing}` does not exist")),
        "{err}"
    );
    let (code, _, err) = scene.replay(&missing, &["--since", "14:05"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--since: `14:05` is neither an RFC 3339 time"),
        "{err}"
    );
    let (code, _, err) = scene.replay(&missing, &["--from-offset", "x:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--from-offset: `x:1` is not"), "{err}");

    // One committed and one aborted transaction, each with an event and a non-event.
    let topic = unique_name("kc-replay-txn");
    create_topic(&scene.stack, &topic, 1).await;
    let p = producer(
        &scene,
        &[("transactional.id", &unique_name("kc-replay-test"))],
    );
    p.init_transactions(Duration::from_secs(30))
        .expect("init_transactions");
    let event = |id: &str| {
        format!(
            r#"{{"specversion":"1.0","id":"{id}","source":"test","type":"other.producer.event","data":{{"n":1}}}}"#
        )
    };
    for (id, commit) in [("kept", true), ("aborted", false)] {
        p.begin_transaction().expect("begin");
        for payload in [event(id), "plain text".to_string()] {
            p.send(BaseRecord::<(), _>::to(&topic).payload(&payload))
                .map_err(|(e, _)| e)
                .expect("queueing");
        }
        if commit {
            p.commit_transaction(Duration::from_secs(30))
                .expect("commit");
        } else {
            p.abort_transaction(Duration::from_secs(30)).expect("abort");
        }
    }
    let (code, out, err) = scene.replay(&topic, &[]);
    assert_eq!(code, Some(0), "{err}");
    let ids: Vec<String> = lines(&out).iter().map(|e| s(&e["id"])).collect();
    assert_eq!(ids, ["kept"], "{err}");
    assert!(
        err.contains("2 record(s), 1 event(s)") && err.contains("1 not CloudEvents (skipped)"),
        "{err}"
    );
    // Another producer's event has no chain: verify passes and says so.
    let (code, out, _) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 event(s) without a chain"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_filters_by_resource_verifies_and_shows_the_state_of_every_kind() {
    let scene = Scene::new("replay-kinds").await;
    let topic = unique_name("kc-replay-kinds");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let config = scene
        .config("", &[scene.kafka_sink("kafka", &topic, &[])])
        .replace("watch:\n", "watch:\n  resources: [pods, configmaps]\n");
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 2, LIMIT).await;
    let objects = support::objects::Objects::new(&scene.client);
    let cms = format!("/api/v1/namespaces/{}/configmaps", scene.ns);
    objects
        .create(
            &cms,
            &serde_json::json!({"metadata": {"name": "settings"}, "data": {"a": "1"}}),
        )
        .await;
    objects
        .patch(
            &format!("{cms}/settings"),
            &serde_json::json!({"data": {"a": "2"}}),
        )
        .await;
    scene.pods.create("web").await;
    kubecast.check(
        kafka
            .wait_until("three events", LIMIT, |r| r.len() >= 3)
            .await,
    );
    kubecast.stop(LIMIT).await;

    let (code, out, err) = scene.replay(&topic, &["--resource", "cm"]);
    assert_eq!(code, Some(0), "{err}");
    let kinds: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .map(|e| s(&e["type"]))
        .collect();
    assert_eq!(
        kinds,
        [
            "io.k8s.core.v1.configmap.added",
            "io.k8s.core.v1.configmap.modified"
        ]
    );
    let (code, out, _) = scene.replay(&topic, &["--resource", "pods", "--type", "added"]);
    assert_eq!((code, out.lines().count()), (Some(0), 1), "{out}");
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, table, err) = scene.replay(&topic, &["--state-at", "0s", "--format", "table"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(table.starts_with("# 2 object(s) at"), "{table}");
    assert!(
        table.contains("## Pod (v1): 1") && table.contains("## ConfigMap (v1): 1"),
        "{table}"
    );
    let settings = table
        .lines()
        .find(|l| l.contains("settings"))
        .unwrap_or_default();
    assert!(settings.starts_with(&scene.ns), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_follows_each_objects_alert_chain_and_names_a_removed_alert() {
    let scene = Scene::new("replay-alerts").await;
    let topic = unique_name("kc-replay-alerts");
    let source = KafkaTopic::create(&scene.stack, &topic).await;
    let text = scene.config(
        "alerts:\n  restarts: {threshold: 1, keep_firing_for: 0s}\n",
        &[scene.kafka_sink("kafka", &topic, &[])],
    );
    let kubecast = InProcess::start(&scene, &text);
    started_with(&scene, &source, "p").await;
    // Two episodes of `restarts`: above the threshold, below it, above, below.
    for restarts in [2, 0, 3, 0] {
        scene.pods.running("p", restarts).await;
    }
    let alerts = |rs: &[Record]| -> Vec<Record> {
        rs.iter()
            .filter(|r| r.ce("id").contains(":alert:restarts:"))
            .cloned()
            .collect()
    };
    let records = source
        .wait_until(
            "two firing and two resolved `restarts` alerts",
            LIMIT,
            |rs| alerts(rs).len() >= 4,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
    let chain = alerts(&records);
    let links: Vec<(&str, &str)> = chain
        .iter()
        .map(|r| (r.ce("k8srv"), r.ce("k8sprevrv")))
        .collect();
    assert_eq!(
        links[0].1, "",
        "the first alert starts the chain: {links:?}"
    );
    for w in links.windows(2) {
        assert_eq!(
            w[1].1, w[0].0,
            "each alert links to the one before: {links:?}"
        );
    }
    let (code, out, err) = scene.replay(&topic, &["--verify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("0 incomplete"), "{out}");

    // Without the first episode's `resolved`, the second `firing` names the missing link.
    let removed = &chain[1];
    assert!(
        removed.ce("type").ends_with(".resolved"),
        "{}",
        removed.ce("type")
    );
    let gappy = unique_name("kc-replay-alert-gap");
    create_topic(&scene.stack, &gappy, 1).await;
    let mut kept: Vec<&Record> = records
        .iter()
        .filter(|r| r.ce("id") != removed.ce("id"))
        .collect();
    kept.sort_by_key(|r| (r.partition, r.offset));
    copy_records(&scene.stack, &gappy, &kept);
    let (code, out, err) = scene.replay(&gappy, &["--verify"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        out.contains(&format!("INCOMPLETE {}/p (alert restarts)", scene.ns))
            && out.contains(&format!(
                "gap: event {} (partition 0 offset",
                chain[2].ce("id")
            ))
            && out.contains(&format!(
                "links to resourceVersion {}, which is not in the topic",
                removed.ce("k8srv")
            )),
        "{out}"
    );
}
