//! `kubecast replay` over a fleet on the real stack: two kubecasts with different `cluster`
//! names, each watching its own namespace's ConfigMaps into its own topic
//! (`k8s.{cluster}.configmaps`). A pattern read sees both clusters in the order the changes
//! were made; `--cluster` picks one; `--verify`, `--state-at` (table and JSON) and the HTML
//! report (opened in Chromium) name the clusters; `--follow` on a pseudo-terminal prints a
//! change made after it started within a second, with the field that changed, and ends on
//! Ctrl-C with its summary; `--diff-clusters` names what drifted between two clusters'
//! records of the same namespace.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::consume::{KafkaTopic, Record, copy_records};
use support::kubecast::{Kubecast, replay_command, run_to_end, scratch_dir};
use support::objects::Objects;
use support::page::{elements, open};
use support::pods::namespace;
use support::pty::Terminal;
use support::{Stack, unique_name};

const LIMIT: Duration = Duration::from_secs(60);

/// The ConfigMaps each kubecast watches: the test's own (not the namespace's
/// `kube-root-ca.crt`, which its controller writes at a moment of its choosing).
const SELECTED: &str = "{resource: configmaps, label_selector: 'kubecast-test=fleet'}";

/// One cluster of the fleet: its kubecast, namespace and topic.
struct Cluster {
    name: String,
    ns: String,
    topic: KafkaTopic,
    kubecast: Kubecast,
}

impl Cluster {
    /// Creates the namespace and the topic and starts kubecast as cluster `name`.
    async fn start(stack: &Stack, client: &kube::Client, name: &str, ns: &str) -> Cluster {
        namespace(client, ns).await;
        let topic = KafkaTopic::create(stack, &format!("k8s.{name}.configmaps")).await;
        let kubecast = run_cluster(stack, name, ns, &topic.topic);
        Cluster {
            name: name.to_string(),
            ns: ns.to_string(),
            topic,
            kubecast,
        }
    }

    fn path(&self) -> String {
        format!("/api/v1/namespaces/{}/configmaps", self.ns)
    }

    /// Waits until this cluster's topic holds `n` events.
    async fn wait_for_events(&self, n: usize) -> Vec<Record> {
        self.topic
            .wait_until(&format!("{n} event(s) of {}", self.name), LIMIT, |rs| {
                rs.len() >= n
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.kubecast.log()))
    }
}

/// kubecast as cluster `name`, watching the test's ConfigMaps in `ns` into `topic`.
fn run_cluster(stack: &Stack, name: &str, ns: &str, topic: &str) -> Kubecast {
    let config = format!(
        "cluster: {name}\nwatch:\n  namespaces: [{ns}]\n  resources: [{SELECTED}]\nsinks:\n  kafka:\n    type: kafka\n    brokers: {}\n    topic: {topic}\n",
        stack.kafka_bootstrap
    );
    Kubecast::start(stack, &scratch_dir(name), &config)
}

/// A ConfigMap named `name` with `data`.
fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"kubecast-test": "fleet"}}, "data": data})
}

fn replay(stack: &Stack, args: &[&str]) -> (Option<i32>, String, String) {
    let mut argv = vec!["replay", "--brokers", &stack.kafka_bootstrap];
    argv.extend_from_slice(args);
    run_to_end(&argv, &[])
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_reads_as_one_record_in_time_order_named_by_cluster_everywhere_and_followed_live() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    let objects = Objects::new(&client);
    let fleet = unique_name("fleet");
    let tag = fleet
        .split_once('-')
        .map(|(_, t)| t.to_string())
        .unwrap_or_default();
    let since = jiff::Timestamp::now().to_string();
    let eu = Cluster::start(
        &stack,
        &client,
        &format!("eu-{tag}"),
        &format!("{fleet}-eu"),
    )
    .await;
    let us = Cluster::start(
        &stack,
        &client,
        &format!("us-{tag}"),
        &format!("{fleet}-us"),
    )
    .await;
    let pattern = format!(r"^k8s\..*-{tag}\.configmaps$");

    // Changes one after the other, alternating clusters, each in its topic before the next:
    // the record's order across the fleet is the order they were made in.
    let mut made: Vec<(String, String, String)> = Vec::new();
    let steps: [(&Cluster, &str, &str); 7] = [
        (&eu, "web", "added"),
        (&us, "web", "added"),
        (&eu, "web", "modified"),
        (&us, "api", "added"),
        (&us, "web", "modified"),
        (&eu, "web", "deleted"),
        (&eu, "db", "added"),
    ];
    let mut counts = [0usize, 0usize];
    for (i, (c, name, change)) in steps.iter().enumerate() {
        match *change {
            "added" => {
                objects
                    .create(&c.path(), &configmap(name, json!({"mode": "a"})))
                    .await
            }
            "modified" => {
                let to = format!("b{i}");
                objects
                    .patch(
                        &format!("{}/{name}", c.path()),
                        &json!({"data": {"mode": to}}),
                    )
                    .await
            }
            _ => objects.delete(&format!("{}/{name}", c.path())).await,
        };
        let side = usize::from(c.name == us.name);
        counts[side] += 1;
        c.wait_for_events(counts[side]).await;
        made.push((c.name.clone(), name.to_string(), change.to_string()));
    }

    // One pattern, both topics, as one stream in the order of the changes.
    let (code, out, err) = replay(&stack, &["--topic", &pattern]);
    assert_eq!(code, Some(0), "{out}{err}");
    let read: Vec<(String, String, String)> = lines(&out)
        .iter()
        .map(|e| {
            let cluster = s(&e["source"])
                .trim_start_matches("k8s://")
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string();
            let ty = s(&e["type"])
                .rsplit('.')
                .next()
                .unwrap_or_default()
                .to_string();
            (cluster, s(&e["k8sname"]), ty)
        })
        .collect();
    assert_eq!(
        read, made,
        "the fleet's record in the order the changes were made\n{err}"
    );
    assert!(
        err.contains("2 topics (`k8s.eu-"),
        "the summary names both topics: {err}"
    );

    // `--cluster` keeps one cluster (a glob too); events of other producers have none.
    let (code, out, err) = replay(
        &stack,
        &["--topic", &pattern, "--cluster", "us-*", "--format", "json"],
    );
    assert_eq!(code, Some(0), "{err}");
    let us_only = lines(&out);
    assert_eq!(us_only.len(), 3, "{out}");
    assert!(
        us_only.iter().all(|l| l["cluster"] == us.name.as_str()),
        "{out}"
    );
    let modified = &us_only[2];
    assert_eq!(modified["change"], "modified");
    assert_eq!(
        modified["fields"],
        json!([{"kind": "changed", "path": "data.mode", "old": "a", "new": "b4"}])
    );

    // --verify keys chains by (cluster, uid) and names the clusters.
    let (code, report, err) = replay(&stack, &["--topic", &pattern, "--verify"]);
    assert_eq!(code, Some(0), "{report}{err}");
    assert!(
        report.contains(&format!(
            "of 4 object(s) in 2 clusters ({}, {})",
            eu.name, us.name
        )),
        "{report}"
    );
    // A topic holding only us's `modified` of web, which links to an `added` it does not
    // hold, read with eu's whole topic: the gap is named with its cluster.
    let gap_topic = format!("gap-{tag}");
    let records = us.topic.records();
    let web_modified: Vec<&Record> = records
        .iter()
        .filter(|r| r.ce("k8sname") == "web" && r.ce("type").ends_with(".modified"))
        .collect();
    assert_eq!(web_modified.len(), 1, "us's web was modified once");
    support::consume::create_topic(&stack, &gap_topic, 1).await;
    copy_records(&stack, &gap_topic, &web_modified);
    let (code, report, _) = replay(
        &stack,
        &[
            "--topic",
            &gap_topic,
            "--topic",
            &eu.topic.topic,
            "--verify",
        ],
    );
    assert_eq!(code, Some(3), "{report}");
    assert!(
        report.contains(&format!(
            "INCOMPLETE ConfigMap {}/web (cluster {}, uid ",
            us.ns, us.name
        )),
        "{report}"
    );

    // --state-at: a CLUSTER column, a `cluster` field.
    let (code, table, err) = replay(
        &stack,
        &["--topic", &pattern, "--state-at", "0s", "--format", "table"],
    );
    assert_eq!(code, Some(0), "{err}");
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter().any(|r| r.first() == Some(&"CLUSTER")),
        "{table}"
    );
    let live: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r.len() > 3 && r[0] != "CLUSTER" && !r[0].starts_with('#'))
        .map(|r| (r[0], r[2]))
        .collect();
    assert_eq!(
        live,
        vec![
            (eu.name.as_str(), "db"),
            (us.name.as_str(), "api"),
            (us.name.as_str(), "web")
        ],
        "{table}"
    );
    let (_, doc, _) = replay(&stack, &["--topic", &pattern, "--state-at", "0s"]);
    let doc: Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
    let clusters: Vec<String> = doc["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| s(&p["cluster"]))
        .collect();
    assert_eq!(
        clusters,
        [eu.name.clone(), us.name.clone(), us.name.clone()]
    );

    // The HTML report: a section of lanes per cluster, counts per cluster, a cluster filter.
    let dir = scratch_dir("fleet-html");
    let file = dir.join("fleet.html");
    let (code, _, err) = replay(
        &stack,
        &["--topic", &pattern, "--html", &file.display().to_string()],
    );
    assert_eq!(code, Some(0), "{err}");
    let page = open(&dir, &file, "");
    let sections: Vec<String> = elements(&page.dom, "div", "cluster")
        .iter()
        .map(|a| a["data-cluster"].clone())
        .collect();
    assert_eq!(
        sections,
        [eu.name.clone(), us.name.clone()],
        "clusters are the top grouping"
    );
    let lanes = elements(&page.dom, "div", "lane");
    assert_eq!(lanes.len(), 4, "eu's web and db, us's api and web");
    for (c, n) in [(&eu, "4"), (&us, "3")] {
        let counted = page
            .dom
            .split(&format!("data-cluster=\"{}\" data-count=\"", c.name))
            .nth(1)
            .and_then(|r| r.split('"').next());
        assert_eq!(
            counted,
            Some(n),
            "the header counts {}'s {n} changes",
            c.name
        );
    }
    let filtered = open(&dir, &file, &format!("cluster={}", eu.name));
    let shown: Vec<String> = elements(&filtered.dom, "div", "lane")
        .into_iter()
        .filter(|a| !a["class"].contains("hidden"))
        .map(|a| a["data-cluster"].clone())
        .collect();
    assert_eq!(
        shown,
        [eu.name.clone(), eu.name.clone()],
        "the cluster filter shows eu's lanes only"
    );

    // --follow on a terminal, from the test's start: the record so far, then a change made
    // after it caught up, printed within a second with the field that changed.
    let mut command = replay_command(&stack, &pattern);
    command.args(["--follow", "--since", &since]);
    let mut terminal = Terminal::spawn(command);
    terminal.wait_for("following 2 topic(s)", LIMIT);
    let changed = Instant::now();
    objects
        .patch(
            &format!("{}/api", us.path()),
            &json!({"data": {"mode": "live"}}),
        )
        .await;
    let needle = "data.mode: \"a\" → \"live\"";
    let shown = terminal.wait_for(needle, LIMIT);
    let delay = shown.saturating_duration_since(changed);
    eprintln!("--follow printed the change {delay:?} after it was made");
    let text = terminal.text();
    let line = text
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains(&us.name) && line.contains(&format!("ConfigMap {}/api", us.ns)),
        "{line:?}"
    );
    assert!(
        line.contains("\x1b[33mmodified"),
        "coloured on a terminal: {line:?}"
    );
    let before: Vec<&str> = text.lines().filter(|l| l.contains("ConfigMap")).collect();
    assert_eq!(
        before.len(),
        8,
        "the seven changes read, then the one followed:\n{text}"
    );
    assert!(
        delay < Duration::from_secs(1),
        "printed {delay:?} after the change:\n{text}"
    );

    // A cluster joining the fleet while it is followed: its new topic matches the pattern
    // and its changes are printed too.
    let ap = Cluster::start(
        &stack,
        &client,
        &format!("ap-{tag}"),
        &format!("{fleet}-ap"),
    )
    .await;
    objects
        .create(&ap.path(), &configmap("zone", json!({"mode": "a"})))
        .await;
    terminal.wait_for(&format!("topic `{}` appeared", ap.topic.topic), LIMIT);
    terminal.wait_for(&format!("ConfigMap {}/zone", ap.ns), LIMIT);
    terminal.signal(libc::SIGINT);
    assert_eq!(
        terminal.exited(Duration::from_secs(10)),
        Some(0),
        "{}",
        terminal.text()
    );
    let text = terminal.text();
    assert!(
        text.contains(&format!("3 topics (`{}`, ", ap.topic.topic)),
        "the summary names the topic that joined: {text}"
    );
    assert!(
        text.contains("9 selected; followed until interrupted"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_clusters_names_the_fields_and_objects_that_drifted_between_two_records() {
    let stack = Stack::load();
    let client = stack.kube_client().await;
    let objects = Objects::new(&client);
    let fleet = unique_name("drift");
    let tag = fleet
        .split_once('-')
        .map(|(_, t)| t.to_string())
        .unwrap_or_default();
    let ns = format!("{fleet}-shop");
    namespace(&client, &ns).await;
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    objects
        .create(
            &path,
            &configmap("settings", json!({"mode": "a", "size": "1"})),
        )
        .await;
    objects
        .create(&path, &configmap("only-eu", json!({})))
        .await;
    objects
        .create(&path, &configmap("same", json!({"x": "1"})))
        .await;

    // eu records the namespace, then stops; the namespace drifts; us records it after.
    let eu_name = format!("eu-{tag}");
    let us_name = format!("us-{tag}");
    let start = |name: &str| {
        let topic = format!("k8s.{name}.configmaps");
        (topic.clone(), run_cluster(&stack, name, &ns, &topic))
    };
    let (eu_topic, eu) = start(&eu_name);
    let eu_read = KafkaTopic::read(&stack, &eu_topic, "read_committed");
    eu_read
        .wait_until("eu's initial list", LIMIT, |rs| rs.len() >= 3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, log) = eu.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    objects
        .patch(&format!("{path}/settings"), &json!({"data": {"mode": "b"}}))
        .await;
    objects.delete(&format!("{path}/only-eu")).await;
    objects
        .create(&path, &configmap("only-us", json!({})))
        .await;
    let (us_topic, us) = start(&us_name);
    let us_read = KafkaTopic::read(&stack, &us_topic, "read_committed");
    us_read
        .wait_until("us's initial list", LIMIT, |rs| rs.len() >= 3)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", us.log()));

    let pattern = format!(r"^k8s\..*-{tag}\.configmaps$");
    let (code, doc, err) = replay(
        &stack,
        &["--topic", &pattern, "--diff-clusters", &eu_name, &us_name],
    );
    assert_eq!(code, Some(4), "the clusters differ: exit 4\n{doc}{err}");
    let doc: Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
    assert_eq!(doc["clusters"], json!([eu_name, us_name]));
    let differ = doc["differ"].as_array().cloned().unwrap_or_default();
    assert_eq!(differ.len(), 1, "{doc:#}");
    assert_eq!(differ[0]["name"], "settings");
    assert_eq!(
        differ[0]["fields"],
        json!([{"path": "data.mode", "values": {eu_name.clone(): "a", us_name.clone(): "b"}}])
    );
    assert_eq!(doc["onlyIn"][&eu_name][0]["name"], "only-eu");
    assert_eq!(doc["onlyIn"][&us_name][0]["name"], "only-us");
    assert_eq!(doc["same"], 1, "{doc:#}");

    let (code, table, _) = replay(
        &stack,
        &[
            "--topic",
            &pattern,
            "--diff-clusters",
            &eu_name,
            &us_name,
            "--format",
            "table",
        ],
    );
    assert_eq!(code, Some(4));
    assert!(
        table.contains(&format!(
            "1 differ, 1 only in {eu_name}, 1 only in {us_name}, 1 the same"
        )),
        "{table}"
    );
    assert!(
        table.contains(&format!("DIFFERS  ConfigMap (v1) {ns}/settings")),
        "{table}"
    );
    assert!(
        table.contains(&format!("ONLY IN {us_name}  ConfigMap (v1) {ns}/only-us")),
        "{table}"
    );

    // A cluster the record does not hold is named, with the ones it does.
    let (code, _, err) = replay(
        &stack,
        &[
            "--topic",
            &pattern,
            "--diff-clusters",
            &eu_name,
            "nowhere-1",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cluster `nowhere-1` has no events in what was read"),
        "{err}"
    );
    drop(us);
}
