//! Bad input and faults: an invalid config is refused with exit code 2 and the field named;
//! rejected credentials stop kubecast with a clear error; unreachable apiserver and brokers
//! are retried with the cause logged; a pod too large for a sink is dead-lettered with its
//! id and the pipeline goes on.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::consume::{KafkaTopic, wait_for};
use support::kubecast::{Kubecast, run_to_end, scratch_dir};
use support::scene::Scene;
use support::{Stack, unique_name};

const LIMIT: Duration = Duration::from_secs(60);

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path.display().to_string()
}

#[test]
fn an_unknown_field_is_refused_with_exit_code_2_naming_the_field_and_line() {
    let dir = scratch_dir("badcfg");
    let file = write(
        &dir,
        "bad.yaml",
        "cluster: c\nsinks:\n  out:\n    type: stdout\n    colour: red\n",
    );
    for args in [
        vec!["validate-config", file.as_str()],
        vec!["run", "--config", file.as_str()],
    ] {
        let (code, _, err) = run_to_end(&args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("colour"),
            "{args:?} names the unknown field: {err}"
        );
        // A sink is read as a whole (its `type` picks the shape, the envelope is taken out),
        // so the line is where the sink's fields begin.
        assert!(
            err.contains("sinks.out") && err.contains("line 4"),
            "{args:?} names the path and line: {err}"
        );
    }
}

#[test]
fn invalid_values_are_all_reported_with_their_paths() {
    let dir = scratch_dir("badcfg");
    let file = write(
        &dir,
        "bad.yaml",
        "cluster: Not_A_Label\nwatch:\n  page_size: 0\nsinks:\n  k:\n    type: kafka\n    brokers: 127.0.0.1:1\n    topic: 'a/{name}'\n  m:\n    type: mqtt\n    url: http://x\n",
    );
    let (code, _, err) = run_to_end(&["validate-config", &file], &[]);
    assert_eq!(code, Some(2), "{err}");
    for field in [
        "`cluster`",
        "`watch.page_size`",
        "`sinks.k.topic`",
        "`sinks.m.url`",
    ] {
        assert!(err.contains(field), "names {field}: {err}");
    }
}

#[test]
fn a_bad_environment_override_names_the_variable_and_a_good_one_applies() {
    let dir = scratch_dir("envcfg");
    let file = write(
        &dir,
        "ok.yaml",
        "cluster: c\nsinks:\n  out:\n    type: stdout\n",
    );
    let (code, out, err) = run_to_end(&["validate-config", &file], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("valid"), "{out}");
    let (code, _, err) = run_to_end(
        &["validate-config", &file],
        &[("KUBECAST_WATCH__PAGE_SIZE", "lots")],
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("KUBECAST_WATCH__PAGE_SIZE"), "{err}");
    let (code, _, err) = run_to_end(
        &["validate-config", &file],
        &[("KUBECAST_CLUSTER", "Bad Name")],
    );
    assert_eq!(
        code,
        Some(2),
        "an override is validated like the file: {err}"
    );
}

/// A kubeconfig for the stack's apiserver with a bearer token it does not know.
fn bogus_token_kubeconfig(stack: &Stack, dir: &std::path::Path, server: &str) -> String {
    let ca = stack.dir.join("pki/ca.crt");
    write(
        dir,
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: not-a-real-token\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            ca.display()
        ),
    )
}

#[tokio::test]
async fn credentials_the_apiserver_rejects_stop_kubecast_with_a_clear_error() {
    let stack = Stack::load();
    let dir = scratch_dir("badcreds");
    let kubeconfig = bogus_token_kubeconfig(
        &stack,
        &dir,
        &format!("https://127.0.0.1:{}", apiserver_port(&stack)),
    );
    let config = write(
        &dir,
        "c.yaml",
        &format!(
            "cluster: c\nkubernetes:\n  kubeconfig: {kubeconfig}\nsinks:\n  out:\n    type: stdout\n"
        ),
    );
    let (code, _, err) =
        tokio::task::spawn_blocking(move || run_to_end(&["run", "--config", &config], &[]))
            .await
            .expect("kubecast ran");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("401 Unauthorized") && err.contains("credentials"),
        "{err}"
    );
}

fn apiserver_port(stack: &Stack) -> String {
    let text = std::fs::read_to_string(&stack.kubeconfig).expect("reading the stack's kubeconfig");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .expect("the stack's kubeconfig names its server")
        .to_string()
}

/// A port on 127.0.0.1 where nothing listens.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    l.local_addr().expect("local address").port()
}

#[tokio::test]
async fn an_unreachable_apiserver_and_brokers_are_retried_with_the_cause_logged() {
    let stack = Stack::load();
    let dir = scratch_dir("unreachable");
    let kubeconfig = bogus_token_kubeconfig(
        &stack,
        &dir,
        &format!("https://127.0.0.1:{}", closed_port()),
    );
    let config = format!(
        "cluster: c\nkubernetes:\n  kubeconfig: {kubeconfig}\nwatch:\n  max_backoff_seconds: 1\nsinks:\n  k:\n    type: kafka\n    brokers: 127.0.0.1:{}\n  m:\n    type: mqtt\n    url: mqtt://127.0.0.1:{}\n",
        closed_port(),
        closed_port()
    );
    let mut kubecast = Kubecast::start(&stack, &dir, &config);
    kubecast
        .wait_for_log("watch failed; retrying", 3, LIMIT)
        .await;
    kubecast
        .wait_for_log("MQTT connection failed", 2, LIMIT)
        .await;
    kubecast
        .wait_for_log("Kafka unavailable, retrying", 1, LIMIT)
        .await;
    assert!(
        kubecast.log().contains("Connection refused")
            || kubecast.log().contains("onnection refused"),
        "the cause is logged:\n{}",
        kubecast.log()
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(
        code,
        Some(0),
        "still running until told to stop, then a clean exit:\n{log}"
    );
}

#[tokio::test]
async fn a_pod_too_large_for_a_sink_is_dead_lettered_and_the_pipeline_goes_on() {
    let scene = Scene::new("big").await;
    let stack = &scene.stack;
    let topic = unique_name("kc-big");
    let kafka = KafkaTopic::create(stack, &topic).await;
    let kafka_dead = scene.dir.join("kafka-dead.jsonl");
    let mqtt_dead = scene.dir.join("mqtt-dead.jsonl");
    let prefix = unique_name("kc-big");
    let kafka_extra = format!(
        "max_message_bytes: 6000\ndead_letter: {{file: {}}}",
        kafka_dead.display()
    );
    let mqtt_extra = format!(
        "max_packet_bytes: 6000\ndead_letter: {{file: {}}}",
        mqtt_dead.display()
    );
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("k", &topic, &[&kafka_extra]),
            scene.mqtt_sink("m", &prefix, &format!("{prefix}/{{name}}"), &[&mqtt_extra]),
        ],
    );
    let mut kubecast = Kubecast::start(stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let pods = &scene.pods;
    let big = pods.create("big").await;
    let big_uid = big["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Created small (delivered), then grown past both sinks' limits (dead-lettered).
    pods.annotate("big", "blob", &"y".repeat(8000)).await;
    let small = pods.create("small").await;
    let small_uid = small["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let records = kubecast.check(
        kafka
            .wait_until("the small pod's event", LIMIT, |r| {
                r.iter().any(|x| x.ce("k8suid") == small_uid)
            })
            .await,
    );
    let lines = |p: &std::path::Path| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    for (sink, file) in [("k", &kafka_dead), ("m", &mqtt_dead)] {
        let dead = wait_for(LIMIT, "a dead letter", || {
            Some(lines(file)).filter(|l| !l.is_empty())
        })
        .await;
        let dead =
            kubecast.check(dead.ok_or_else(|| format!("no dead letter in {}", file.display())));
        assert_eq!(
            dead.len(),
            1,
            "{sink}: exactly the oversized event: {dead:?}"
        );
        assert_eq!(dead[0]["sink"], sink);
        assert_eq!(dead[0]["event"]["k8suid"], big_uid.as_str());
        let reason = dead[0]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("exceeds"),
            "{sink}: the reason says why: {reason}"
        );
        assert!(
            dead[0]["event"]["id"]
                .as_str()
                .unwrap_or_default()
                .starts_with(&big_uid)
        );
    }
    assert!(
        !records
            .iter()
            .any(|r| r.ce("k8suid") == big_uid && r.payload.len() > 6000),
        "nothing over the limit reached Kafka"
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("dead_lettered=1"),
        "the dead letter is counted:\n{log}"
    );
}
