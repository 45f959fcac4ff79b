//! `kubecast replay --html` opened in a real browser (Debian's chromium, headless): the report
//! of a scripted history on the real stack holds a lane per object with a mark per change,
//! the alert episode as a bar, the diff of a chosen change field by field, the objects at a
//! chosen moment exactly as `--state-at` prints them, and for a copy of the topic with one
//! change removed, one gap mark naming the missing resourceVersion. The page fetches nothing:
//! its Content-Security-Policy forbids it and Chromium's console is checked (the check itself
//! is shown to catch a request). A custom resource whose change adds members named
//! `__proto__`, `constructor` and `prototype` keeps them as data: no prototype is touched,
//! the state table and the diff stay right. Screenshots are kept in `target/test-artifacts/`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use support::consume::{KafkaTopic, Record, copy_records, create_topic, wait_for};
use support::page::{chromium, elements, open, rows, screenshot};
use support::scene::{InProcess, Scene};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);

/// Paths where two versions differ, as the page names them (`a.b[0].c`); a member that is
/// `null` counts as absent (a merge patch cannot carry null).
fn changed_paths(a: &Value, b: &Value, path: &str, out: &mut BTreeSet<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (u, v) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                if u.is_null() && v.is_null() {
                    continue;
                }
                if u.is_null() || v.is_null() {
                    out.insert(join(k));
                } else {
                    changed_paths(u, v, &join(k), out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(u), Some(v)) => changed_paths(u, v, &p, out),
                    _ => {
                        out.insert(p);
                    }
                }
            }
        }
        (a, b) if a != b => {
            out.insert(path.to_string());
        }
        _ => {}
    }
}

fn report(scene: &Scene, topic: &str, name: &str) -> PathBuf {
    let file = scene.dir.join(format!("{name}.html"));
    let path = file.display().to_string();
    let (code, out, err) = scene.replay(topic, &["--html", &path]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.is_empty(),
        "--html writes the events nowhere else: {out}"
    );
    file
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn the_console_check_catches_a_page_that_makes_a_request() {
    let dir = support::kubecast::scratch_dir("html-csp");
    let page = dir.join("request.html");
    std::fs::write(
        &page,
        "<!doctype html><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"><img src=\"http://127.0.0.1:9/x.png\">",
    )
    .expect("a page");
    let out = chromium(
        &dir.join("profile"),
        &["--dump-dom"],
        &format!("file://{}", page.display()),
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("violates the following Content Security Policy") && log.contains("blocked"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_shows_every_change_the_alert_the_diff_the_state_at_a_moment_and_a_gap() {
    let scene = Scene::new("replay-html").await;
    let topic = unique_name("kc-html");
    let source = KafkaTopic::create(&scene.stack, &topic).await;
    let rules = "alerts:\n  restarts: {enabled: false}\n  failed: {enabled: false}\n  not_ready: {enabled: false}\n  oom_killed: {enabled: false}\n  unscheduled: {enabled: false}\n  rules:\n    bad:\n      expr: 'metadata.labels.state == \"bad\"'\n";
    let text = scene.config(rules, &[scene.kafka_sink("kafka", &topic, &[])]);
    let kubecast = InProcess::start(&scene, &text);
    let pods = &scene.pods;
    let count = |n: usize| move |r: &[Record]| r.len() >= n;

    // Kubecast lists before the history starts: every change below is an event.
    pods.create("a").await;
    source
        .wait_until("a's first event", LIMIT, count(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pods.create("b").await;
    // Markup in an annotation must stay text in the page (the console check would see an
    // image request).
    pods.annotate("a", "note", "<img src=\"http://127.0.0.1:9/leak.png\">")
        .await;
    pods.label("a", "step", "1").await;
    pods.create_with(
        "c",
        serde_json::json!({}),
        serde_json::json!({"state": "bad"}),
    )
    .await;
    source
        .wait_until("a, b, c and the alert", LIMIT, count(6))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let at = jiff::Timestamp::now();
    wait_for(LIMIT, "the clock to pass the moment", || {
        (jiff::Timestamp::now() > at).then_some(())
    })
    .await
    .expect("the clock moves");
    pods.delete("b").await;
    pods.running("a", 0).await;
    pods.label("c", "state", "good").await;
    pods.label("a", "step", "2").await;
    // The history's last events: b's delete, the resolved alert, a's second label change.
    let records = source
        .wait_until("the rest of the history", LIMIT, |r| {
            r.iter()
                .any(|x| x.ce("k8sname") == "b" && x.ce("type").ends_with(".deleted"))
                && r.iter()
                    .any(|x| x.ce("type") == "io.kubecast.alert.resolved")
                && r.iter().any(|x| {
                    x.ce("k8sname") == "a" && x.json()["metadata"]["labels"]["step"] == "2"
                })
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;

    let file = report(&scene, &topic, "history");
    let changes: Vec<&Record> = records
        .iter()
        .filter(|r| r.ce("type").starts_with("io.k8s."))
        .collect();
    let a_step1 = changes
        .iter()
        .find(|r| {
            r.ce("k8sname") == "a"
                && r.json()["metadata"]["labels"]["step"] == "1"
                && r.ce("type").ends_with(".modified")
        })
        .expect("a's label change");
    let at_text = at.to_string();
    let page = open(
        &scene.dir,
        &file,
        &format!("select={}&at={at_text}", a_step1.ce("id")),
    );

    // A lane per object, a mark per change with its type and resourceVersion.
    let lanes: BTreeSet<String> = elements(&page.dom, "div", "lane")
        .into_iter()
        .filter_map(|l| l.get("data-name").cloned())
        .collect();
    assert_eq!(lanes, BTreeSet::from(["a".into(), "b".into(), "c".into()]));
    let marks: BTreeSet<(String, String, String)> = elements(&page.dom, "div", "mark")
        .into_iter()
        .filter(|m| m.contains_key("data-type"))
        .map(|m| {
            (
                m["data-id"].clone(),
                m["data-type"].clone(),
                m["data-rv"].clone(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String, String)> = changes
        .iter()
        .map(|r| {
            let ty = match (
                r.ce("type").rsplit('.').next().unwrap_or_default(),
                r.ce("k8sinitial"),
                r.ce("k8sinferred"),
            ) {
                ("added", "true", _) => "initial",
                ("deleted", _, "true") => "inferred",
                (ty, _, _) => ty,
            };
            (
                r.ce("id").to_string(),
                ty.to_string(),
                r.ce("k8srv").to_string(),
            )
        })
        .collect();
    assert_eq!(marks, want, "one mark per change");
    let bars = elements(&page.dom, "div", "alert-bar");
    assert_eq!(bars.len(), 1, "{bars:?}");
    assert_eq!(
        bars[0]["class"], "alert-bar",
        "a resolved episode: {bars:?}"
    );
    assert_eq!(bars[0]["data-rule"], "bad");
    assert!(
        !page.dom.contains("<img"),
        "the annotation became markup:\n{}",
        page.dom
    );

    // The selected change's diff: exactly the fields that changed.
    let previous = changes
        .iter()
        .rev()
        .find(|r| r.ce("k8srv") == a_step1.ce("k8sprevrv"))
        .expect("the version before a's label change");
    let mut want_paths = BTreeSet::new();
    changed_paths(&previous.json(), &a_step1.json(), "", &mut want_paths);
    assert!(
        want_paths.contains("metadata.labels.step"),
        "{want_paths:?}"
    );
    let diff: BTreeSet<String> = ["added", "removed", "changed"]
        .iter()
        .flat_map(|c| elements(&page.dom, "tr", c))
        .filter_map(|r| r.get("data-path").cloned())
        .collect();
    assert_eq!(diff, want_paths, "the diff of {}", a_step1.ce("id"));
    let added = elements(&page.dom, "tr", "added");
    assert!(
        added
            .iter()
            .any(|r| r["data-path"] == "metadata.labels.step"),
        "{added:?}"
    );

    // The slider's table at the moment equals --state-at's.
    let (code, out, err) = scene.replay(&topic, &["--state-at", &at_text]);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let dash = |v: &Value| v.as_str().map_or("-".to_string(), str::to_string);
    let state_at: Vec<Vec<String>> = doc["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .map(|p| {
            vec![
                s(&p["kind"]),
                s(&p["namespace"]),
                s(&p["name"]),
                dash(&p["phase"]),
                dash(&p["node"]),
                s(&p["resourceVersion"]),
                s(&p["lastEvent"]["time"]),
            ]
        })
        .collect();
    assert_eq!(state_at.len(), 3, "a, b and c lived then: {out}");
    assert_eq!(
        rows(&page.dom, "state-row"),
        state_at,
        "the slider at {at_text}"
    );
    screenshot(
        &scene.dir,
        &file,
        &format!("select={}&at={at_text}", a_step1.ce("id")),
        "replay-html-history",
    );

    // Lanes filtered by name; a window in time shows only the marks inside it.
    let page = open(&scene.dir, &file, "filter=b");
    let shown: Vec<String> = elements(&page.dom, "div", "lane")
        .into_iter()
        .filter(|l| !l["class"].contains("hidden"))
        .map(|l| l["data-name"].clone())
        .collect();
    assert_eq!(shown, ["b"], "filter=b");
    let since_moment: BTreeSet<String> = changes
        .iter()
        .filter(|r| {
            r.ce("time")
                .parse::<jiff::Timestamp>()
                .is_ok_and(|t| t > at)
        })
        .map(|r| r.ce("id").to_string())
        .collect();
    assert!(
        !since_moment.is_empty() && since_moment.len() < changes.len(),
        "some changes, not all, came after the moment: {since_moment:?}"
    );
    let end = jiff::Timestamp::now().to_string();
    let page = open(&scene.dir, &file, &format!("from={at_text}&to={end}"));
    let in_window: BTreeSet<String> = elements(&page.dom, "div", "mark")
        .into_iter()
        .filter(|m| m.contains_key("data-type"))
        .map(|m| m["data-id"].clone())
        .collect();
    assert_eq!(
        in_window, since_moment,
        "the marks of the window after the moment"
    );

    // A copy without a's change to Running (its label change links to it): one gap mark
    // naming that resourceVersion.
    let removed = changes
        .iter()
        .find(|r| r.ce("k8sname") == "a" && r.json()["status"]["phase"] == "Running")
        .expect("a's change to Running");
    assert!(
        changes
            .iter()
            .any(|r| r.ce("k8suid") == removed.ce("k8suid")
                && r.ce("k8sprevrv") == removed.ce("k8srv")),
        "a change links to the one removed"
    );
    let gappy = unique_name("kc-html-gap");
    create_topic(&scene.stack, &gappy, 1).await;
    let mut kept: Vec<&Record> = records
        .iter()
        .filter(|r| r.ce("id") != removed.ce("id"))
        .collect();
    kept.sort_by_key(|r| (r.ce("k8srv").parse::<u64>().unwrap_or(0), r.offset));
    copy_records(&scene.stack, &gappy, &kept);
    let file = report(&scene, &gappy, "gap");
    let page = open(&scene.dir, &file, "");
    let gaps = elements(&page.dom, "div", "mark");
    let gaps: Vec<&BTreeMap<String, String>> = gaps
        .iter()
        .filter(|m| m.contains_key("data-missing-rv"))
        .collect();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0]["data-missing-rv"], removed.ce("k8srv"));
    assert!(
        page.dom
            .contains(&format!("missing {}</div>", removed.ce("k8srv"))),
        "the mark names the version"
    );
    assert!(page.dom.contains("id=\"verdict\" class=\"failed\""));
    screenshot(&scene.dir, &file, "", "replay-html-gap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_named_proto_constructor_or_prototype_stay_data_in_the_lanes_the_diff_and_the_state_table()
 {
    use support::objects::Objects;
    let scene = Scene::new("replay-keys").await;
    let ns = scene.ns.clone();
    let topic = unique_name("kc-keys");
    let source = KafkaTopic::create(&scene.stack, &topic).await;
    let group = format!("{}.example.com", unique_name("k"));
    let objects = Objects::new(&scene.client);
    objects
        .create_crd(
            &group,
            serde_json::json!({"plural": "widgets", "singular": "widget", "kind": "Widget"}),
            serde_json::json!({"type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}),
            LIMIT,
        )
        .await;
    let text = scene
        .config("", &[scene.kafka_sink("kafka", &topic, &[])])
        .replace(
            "watch:\n",
            &format!("watch:\n  resources: [widgets.{group}]\n"),
        );
    let kubecast = InProcess::start(&scene, &text);
    let widgets = format!("/apis/{group}/v1/namespaces/{ns}/widgets");
    for name in ["forger", "plain"] {
        objects
            .create(
                &widgets,
                &serde_json::json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                    "metadata": {"name": name}, "spec": {"size": 1}}),
            )
            .await;
    }
    // A change that adds the keys: its merge patch carries them.
    let forged = serde_json::json!({"status": {"phase": "Forged"}, "polluted": "yes"});
    objects
        .patch(
            &format!("{widgets}/forger"),
            &serde_json::json!({"spec": {"__proto__": forged, "constructor": forged, "prototype": forged}}),
        )
        .await;
    let records = source
        .wait_until("both widgets and the forging change", LIMIT, |r| {
            r.len() >= 3
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    kubecast.stop(LIMIT).await;
    let change = records
        .iter()
        .find(|r| r.ce("type").ends_with(".modified"))
        .expect("the forging change");
    assert_eq!(
        change.json()["spec"]["__proto__"]["status"]["phase"],
        "Forged"
    );

    let file = report(&scene, &topic, "keys");
    let at = jiff::Timestamp::now().to_string();
    let page = open(
        &scene.dir,
        &file,
        &format!("select={}&at={at}", change.ce("id")),
    );
    let lanes: Vec<String> = elements(&page.dom, "div", "lane")
        .into_iter()
        .filter_map(|l| l.get("data-name").cloned())
        .collect();
    assert_eq!(lanes.len(), 2, "one lane per object: {lanes:?}");
    // Neither object has a status: a polluted prototype would give both the forged phase.
    let state = rows(&page.dom, "state-row");
    assert_eq!(state.len(), 2, "{state:?}");
    for row in &state {
        assert_eq!(
            row[3], "-",
            "the PHASE of {} is the object's own: {state:?}",
            row[2]
        );
    }
    // The change adds three members, each named as it is; the rest of its diff is metadata's.
    let paths = |kind: &str| -> BTreeSet<String> {
        elements(&page.dom, "tr", kind)
            .into_iter()
            .filter_map(|r| r.get("data-path").cloned())
            .collect()
    };
    let keys: BTreeSet<String> = BTreeSet::from([
        "spec.__proto__".into(),
        "spec.constructor".into(),
        "spec.prototype".into(),
    ]);
    assert_eq!(paths("added"), keys, "the diff of {}", change.ce("id"));
    let before = records
        .iter()
        .find(|r| r.ce("k8srv") == change.ce("k8sprevrv"))
        .expect("the version before the change");
    let mut want = BTreeSet::new();
    changed_paths(&before.json(), &change.json(), "", &mut want);
    let shown: BTreeSet<String> = ["added", "removed", "changed"]
        .iter()
        .flat_map(|k| paths(k))
        .collect();
    assert_eq!(shown, want, "the diff of {}", change.ce("id"));
}
