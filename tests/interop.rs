//! Interoperability with clients no one here wrote: kubecast publishes the lives of a pod, a
//! Deployment and a Node (cluster-scoped) to Kafka (binary and structured mode), MQTT (5
//! binary, 3.1.1 structured) and HTTP (binary, structured, batch), and the Python suite
//! in `tests/interop/` decodes it with the official CloudEvents SDK, confluent-kafka and
//! paho-mqtt, comparing each event with what kubecast's file sink says it meant to send.
//!
//! The Python interpreter comes from `KUBECAST_TEST_PYTHON` (scripts/test sets it to a cached
//! venv with `tests/interop/requirements.txt`).

mod support;

use std::path::Path;
use std::time::Duration;

use support::consume::{KafkaTopic, wait_for};
use support::kubecast::Kubecast;
use support::scene::{Scene, file_sink};
use support::{NO_SCHEDULER, unique_name};

const LIMIT: Duration = Duration::from_secs(120);

fn python() -> String {
    std::env::var("KUBECAST_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("KUBECAST_TEST_PYTHON is not set: run the tests through scripts/test, or point it at a python with tests/interop/requirements.txt installed")
    })
}

fn run_python(args: &[&str], envs: &[(&str, String)]) -> (bool, String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let out = std::process::Command::new(python())
        .args(args)
        .current_dir(&dir)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", python()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn the_official_cloudevents_sdk_decodes_what_kubecast_publishes() {
    let scene = Scene::new("interop").await;
    let stack = &scene.stack;
    let binary = unique_name("kc-interop-bin");
    let structured = unique_name("kc-interop-str");
    let kafka_bin = KafkaTopic::create(stack, &binary).await;
    let kafka_str = KafkaTopic::create(stack, &structured).await;
    let prefix = unique_name("kc-interop");
    let session = unique_name("interop-session");
    let mqtt = format!("{}:{}", stack.mqtt_host, stack.mqtt_port);
    let (ok, out) = run_python(
        &[
            "mqtt_session.py",
            &stack.mqtt_host,
            &stack.mqtt_port.to_string(),
            &session,
            &format!("{prefix}/#"),
        ],
        &[],
    );
    assert!(ok, "opening the persistent MQTT session:\n{out}");

    // A recording HTTP receiver (the SDK decodes its records later).
    let http_log = scene.dir.join("http.jsonl");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let mut receiver = tokio::process::Command::new(python())
        .arg("http_receiver.py")
        .arg(&http_log)
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting http_receiver.py");
    let mut first = tokio::io::BufReader::new(receiver.stdout.take().expect("piped"));
    let mut port = String::new();
    support::within(
        Duration::from_secs(30),
        "http_receiver.py to listen",
        tokio::io::AsyncBufReadExt::read_line(&mut first, &mut port),
    )
    .await
    .expect("reading http_receiver.py's port");
    let http = |mode: &str, extra: &str| {
        format!(
            "  h{mode}:\n    type: http\n    url: http://127.0.0.1:{}/{mode}\n{extra}",
            port.trim()
        )
    };

    let expected = scene.dir.join("expected.jsonl");
    let node_label = unique_name("interop");
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("kb", &binary, &[]),
            scene.kafka_sink("ks", &structured, &["mode: structured"]),
            scene.mqtt_sink(
                "m5",
                &format!("{prefix}-v5"),
                &format!("{prefix}/v5/{{namespace}}/{{name}}"),
                &[],
            ),
            scene.mqtt_sink(
                "m3",
                &format!("{prefix}-v311"),
                &format!("{prefix}/v311/{{namespace}}/{{name}}"),
                &["protocol: v311"],
            ),
            file_sink("file", &expected),
            http("binary", ""),
            http("structured", "    mode: structured\n"),
            http("batch", "    mode: batch\n"),
        ],
    )
    .replace(
        "watch:\n",
        &format!("watch:\n  resources: [pods, deployments.apps, {{resource: nodes, label_selector: 'kubecast-test={node_label}'}}]\n"),
    );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    // Three resources listed (the nodes' scope is cluster-wide).
    kubecast.wait_for_log("list complete", 3, LIMIT).await;
    let pods = &scene.pods;
    pods.create("api").await;
    pods.running("api", 0).await;
    pods.label("api", "tier", "backend").await;
    pods.delete("api").await;
    let objects = support::objects::Objects::new(&scene.client);
    let deployments = format!("/apis/apps/v1/namespaces/{}/deployments", scene.ns);
    objects
        .create(&deployments, &serde_json::json!({"metadata": {"name": "api"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "api"}},
                "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "c", "image": "nginx:1.27"}]}}}}))
        .await;
    objects.delete(&format!("{deployments}/api")).await;
    let node = unique_name("interop-node");
    objects
        .create("/api/v1/nodes", &serde_json::json!({"metadata": {"name": node, "labels": {"kubecast-test": node_label}}}))
        .await;
    objects.delete(&format!("/api/v1/nodes/{node}")).await;
    // Each object's delete is its last event.
    let done = || {
        let text = std::fs::read_to_string(&expected).unwrap_or_default();
        [
            "io.k8s.core.v1.pod.deleted",
            "io.k8s.apps.v1.deployment.deleted",
            "io.k8s.core.v1.node.deleted",
        ]
        .iter()
        .all(|t| text.contains(t))
        .then(|| text.lines().count())
    };
    let written = wait_for(LIMIT, "the file sink", done).await;
    let n = kubecast
        .check(written.ok_or_else(|| format!("the three deletes in {}", expected.display())));
    kubecast.check(
        kafka_bin
            .wait_until("binary records", LIMIT, |r| r.len() >= n)
            .await,
    );
    kubecast.check(
        kafka_str
            .wait_until("structured records", LIMIT, |r| r.len() >= n)
            .await,
    );
    // Stopping drains the MQTT sinks: every publish is acknowledged before kubecast exits.
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains(&format!("sink=m5 delivered={n}"))
            && log.contains(&format!("sink=m3 delivered={n}")),
        "{log}"
    );

    let (ok, out) = run_python(
        &[
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_interop.py",
        ],
        &[
            ("KUBECAST_INTEROP_EXPECTED", expected.display().to_string()),
            ("KUBECAST_INTEROP_KAFKA", stack.kafka_bootstrap.clone()),
            ("KUBECAST_INTEROP_BINARY", binary),
            ("KUBECAST_INTEROP_STRUCTURED", structured),
            ("KUBECAST_INTEROP_MQTT", mqtt),
            ("KUBECAST_INTEROP_SESSION", session),
            ("KUBECAST_INTEROP_PREFIX", prefix),
            ("KUBECAST_INTEROP_HTTP", http_log.display().to_string()),
        ],
    );
    println!("{out}");
    assert!(ok, "the Python interop suite failed:\n{out}");
    assert!(
        out.contains("5 passed"),
        "all five interop checks ran:\n{out}"
    );
}
