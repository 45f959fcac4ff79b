//! The OTLP sink by OTLP's retry rules when its receiver fails: real Collectors of the test's
//! own stopped for a minute during churn (over gRPC and over HTTP: nothing lost, every
//! record a change the apiserver reported), and a test server named as the fake it is
//! ([`FakeReceiver`]: no real Collector answers 503, 400 or a partial success on demand)
//! for a 503 with `Retry-After`, a 400 and a partial success, and for requests in flight at
//! a kill -9 (sent again after the restart with their original `cloudevents.event_id`).
//! An endpoint where no OTLP logs service answers (a wrong path on the stack's Collector, a
//! Collector of the test's own that takes only traces: 404, gRPC `UNIMPLEMENTED`) stops
//! kubecast naming the URL without `/readyz` ever answering 200; a probe the fake refuses
//! (400) leaves the sink not ready; a Collector that comes up after kubecast makes the sink
//! ready with no change to send.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::churn::Churn;
use support::kubecast::Kubecast;
use support::observer::{Observer, check_received, has_all};
use support::otlp::{Collector, CollectorFile, OtlpRecord, endpoints, otlp_sink, records_of};
use support::receiver::{FakeReceiver, Script, Seen};
use support::scene::Scene;

const LIMIT: Duration = Duration::from_secs(120);
const OUTAGE: Duration = Duration::from_secs(60);

/// The change records (not alerts) of the scene's namespace.
fn changes_of(ns: &str) -> impl Fn(&OtlpRecord) -> bool + Clone + '_ {
    move |r| {
        r.resource.get("k8s.namespace.name").and_then(Value::as_str) == Some(ns)
            && !r.event_name.starts_with("io.kubecast.alert")
    }
}

fn ids(records: &[OtlpRecord]) -> Vec<&str> {
    records
        .iter()
        .map(|r| r.attr("cloudevents.event_id"))
        .collect()
}

/// Waits until a pod made now reached every file: changes made before kubecast's first list
/// would fold into it.
async fn started(scene: &Scene, files: &[&CollectorFile]) {
    let pod = scene.pods.create("first").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for f in files {
        f.wait_until(
            "kubecast's first record",
            LIMIT,
            changes_of(&scene.ns),
            |r| r.iter().any(|x| x.attr("k8s.pod.uid") == uid),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test]
async fn a_collector_down_for_a_minute_during_churn_loses_nothing_over_grpc_and_http() {
    let scene = Scene::new("otlp-down").await;
    let mut grpc = Collector::start(&scene.stack, &scene.dir).await;
    let mut http = Collector::start(&scene.stack, &scene.dir).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let sinks = [
        otlp_sink("grpc", &grpc.grpc, "grpc", ""),
        otlp_sink("http", &http.http, "http/protobuf", ""),
    ];
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &scene.config("", &sinks));
    started(&scene, &[&grpc.file, &http.file]).await;
    let churn = Churn::start(&scene.client, &scene.ns, 8, Duration::from_millis(50));
    let ours = changes_of(&scene.ns);
    for c in [&grpc, &http] {
        c.file
            .wait_until("churn reaching the Collector", LIMIT, &ours, |r| {
                r.len() >= 20
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let failed = "OTLP request failed; will send again";
    let failed_before = kubecast.count_in_log(failed);
    let down_since = tokio::time::Instant::now();
    grpc.stop();
    http.stop();
    // kubecast meets the outage on both sinks (a request fails and is held to send again) ...
    kubecast
        .wait_for_log(failed, failed_before + 2, LIMIT)
        .await;
    // ... and the outage lasts the minute the scenario names.
    tokio::time::sleep_until(down_since + OUTAGE).await;
    let before: Vec<usize> = [&grpc, &http]
        .iter()
        .map(|c| c.file.records().len())
        .collect();
    grpc.resume().await;
    http.resume().await;
    for (c, n) in [&grpc, &http].into_iter().zip(before) {
        c.file
            .wait_until("churn reaching the Collector again", LIMIT, &ours, |r| {
                r.len() >= n + 20
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let ops = churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    for (name, c) in [("http/protobuf", &http), ("grpc", &grpc)] {
        let got = c
            .file
            .wait_until(&format!("every change, over {name}"), LIMIT, &ours, |r| {
                has_all(&truth, ids(r).into_iter())
            })
            .await
            // Short of every change: the check names what is missing.
            .unwrap_or_else(|_| {
                let _ = std::fs::write(scene.dir.join("kubecast.log"), kubecast.log());
                c.file.records().into_iter().filter(|r| ours(r)).collect()
            });
        let dups = check_received(&truth, &ids(&got), name);
        println!(
            "{name}: {ops} changes, {} records, {dups} duplicates, Collector down 60 s: 0 lost",
            got.len()
        );
    }
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

/// The records of a fake's http/json request.
fn records(s: &Seen) -> Vec<OtlpRecord> {
    serde_json::from_slice::<Value>(&s.body)
        .map(|v| records_of(&v))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_503_with_retry_after_is_waited_out_a_400_dead_letters_and_a_partial_success_is_counted_not_resent()
 {
    let scene = Scene::new("otlp-answers").await;
    // The first request with records: 503, come back in 3 s. Records of the pod `bad`: 400.
    // Of the pod `half`: a partial success. An empty request (the probe): 200.
    let first = Arc::new(std::sync::Mutex::new(None::<usize>));
    let script: Arc<Script> = Arc::new(move |n, s| {
        let rs = records(s);
        let name = |r: &OtlpRecord| r.attr("k8s.pod.name").to_string();
        let mut first = first.lock().unwrap();
        if rs.is_empty() {
            (200, vec![], "{}".into())
        } else if first.is_none_or(|f| f == n) {
            *first = Some(n);
            (
                503,
                vec![("retry-after", "3".to_string())],
                r#"{"code":14,"message":"warming up"}"#.into(),
            )
        } else if rs.iter().any(|r| name(r) == "bad") {
            (
                400,
                vec![],
                r#"{"code":3,"message":"bad record: body too deep"}"#.into(),
            )
        } else if rs.iter().any(|r| name(r) == "half") {
            (200, vec![], r#"{"partialSuccess":{"rejectedLogRecords":"1","errorMessage":"1 record too old"}}"#.into())
        } else {
            (200, vec![], "{}".into())
        }
    });
    let fake = FakeReceiver::start(Duration::ZERO, script).await;
    let dead = scene.dir.join("dead.jsonl");
    let extra = format!(
        "    batch: {{max_records: 1}}\n    dead_letter: {{file: {}}}\n",
        dead.display()
    );
    let config = scene.config(
        "",
        &[otlp_sink(
            "otel",
            fake.url.trim_end_matches('/'),
            "http/json",
            &extra,
        )],
    );
    let port = support::http::free_port();
    let address = format!("127.0.0.1:{port}");
    let mut kubecast = Kubecast::start_with(
        &scene.stack,
        &scene.dir,
        &config,
        &["--metrics-address", &address],
    );
    let with_records = |p: &[Seen]| {
        p.iter()
            .filter(|s| !records(s).is_empty())
            .cloned()
            .collect::<Vec<_>>()
    };
    scene.pods.create("first").await;
    let tried = fake
        .wait_until("the first records, again", LIMIT, |p| {
            with_records(p).len() >= 2
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let tried = with_records(&tried);
    let waited = tried[1].at.duration_since(tried[0].at);
    assert!(
        waited >= Duration::from_millis(2900),
        "the next request came {waited:?} after a 503 with Retry-After: 3"
    );
    assert_eq!(
        ids(&records(&tried[0])),
        ids(&records(&tried[1])),
        "the same records, sent again after the wait"
    );
    assert!(
        tried.iter().all(|s| s.path == "/v1/logs"),
        "OTLP/HTTP's path: {:?}",
        tried[0].path
    );

    scene.pods.create("bad").await;
    scene.pods.create("half").await;
    let marker = scene.pods.create("marker").await;
    let marker_uid = marker["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let accepted = || fake.accepted().iter().flat_map(records).collect::<Vec<_>>();
    support::consume::wait_for(LIMIT, "the marker", || {
        accepted()
            .iter()
            .any(|r| r.attr("k8s.pod.uid") == marker_uid)
            .then_some(())
    })
    .await
    .expect("the marker's record was accepted");
    let text = std::fs::read_to_string(&dead).unwrap_or_default();
    let line: Value = serde_json::from_str(text.lines().next().unwrap_or("{}")).unwrap_or_default();
    let reason = line["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("400") && reason.contains("bad record: body too deep"),
        "the dead letter names the status and the Status message: {text}"
    );
    assert!(
        text.contains("\"bad\"") || text.contains("/bad"),
        "the dead letter is the bad pod's event: {text}"
    );
    let sent = |id: &str| {
        fake.posts()
            .iter()
            .flat_map(records)
            .filter(|r| r.attr("cloudevents.event_id") == id)
            .count()
    };
    let bad_id = line["event"]["id"]
        .as_str()
        .or(line["id"].as_str())
        .unwrap_or_default()
        .to_string();
    assert_eq!(sent(&bad_id), 1, "a 400 is never sent again ({bad_id})");
    let half: Vec<OtlpRecord> = accepted()
        .into_iter()
        .filter(|r| r.attr("k8s.pod.name") == "half")
        .collect();
    assert!(!half.is_empty(), "the half pod's records were accepted");
    for r in &half {
        assert_eq!(
            sent(r.attr("cloudevents.event_id")),
            1,
            "a partial success is never sent again"
        );
    }
    kubecast.wait_for_log("1 record too old", 1, LIMIT).await;
    let series = "kubecast_otlp_rejected_records_total{sink=\"otel\"}";
    support::http::wait_for(
        port,
        "/metrics",
        LIMIT,
        "the rejected record counted",
        |_, body| support::http::sample(body, series) == Some(1.0),
    )
    .await;
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn kill_9_with_requests_in_flight_then_a_restart_sends_them_again_with_their_original_event_ids()
 {
    let scene = Scene::new("otlp-kill").await;
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], "{}".into()));
    // Slow answers, so that requests are in flight at the kill.
    let fake = FakeReceiver::start(Duration::from_millis(300), script).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let state = scene.dir.join("state");
    let extra = "    in_flight: 2\n    batch: {max_records: 3}\n";
    let text = scene.config(
        &format!("state:\n  dir: {}\n", state.display()),
        &[otlp_sink(
            "otel",
            fake.url.trim_end_matches('/'),
            "http/json",
            extra,
        )],
    );
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    scene.pods.create_each("k", 12).await;
    fake.wait_until("a few accepted", LIMIT, |p| {
        p.iter().filter(|s| !records(s).is_empty()).count() >= 2
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    support::consume::wait_for(LIMIT, "a request in flight", || {
        (fake.in_flight() > 0).then_some(())
    })
    .await
    .expect("a request in flight before the kill");
    let in_flight = fake.in_flight();
    kubecast.kill().await;
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let accepted = || {
        fake.accepted()
            .iter()
            .flat_map(records)
            .filter(|r| !r.event_name.starts_with("io.kubecast.alert"))
            .collect::<Vec<_>>()
    };
    support::consume::wait_for(LIMIT, "every change", || {
        has_all(&truth, ids(&accepted()).into_iter()).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every change arrived after the kill; {} records",
            accepted().len()
        )
    });
    let got = accepted();
    let dups = check_received(&truth, &ids(&got), "the receiver");
    // What was in flight at the kill was taken but never acknowledged: the restart sent it
    // again, with the same id and the same body.
    let mut sent: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in fake.received().iter().flat_map(records) {
        sent.entry(r.attr("cloudevents.event_id").to_string())
            .or_default()
            .push(r.body.clone());
    }
    let again: Vec<_> = sent.iter().filter(|(_, b)| b.len() > 1).collect();
    assert!(
        !again.is_empty(),
        "no record was sent again after the kill, though {in_flight} request(s) were in flight at it"
    );
    for (id, bodies) in &again {
        assert!(
            bodies.windows(2).all(|w| w[0] == w[1]),
            "{id} was sent again with another body"
        );
    }
    println!(
        "{} records, {dups} duplicates accepted, {} ids sent more than once; each duplicate carries its original id",
        got.len(),
        again.len()
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

/// kubecast with `sink` (named `otel`) must exit 1 within [`MISDIRECTED_LIMIT`] with a fatal
/// line naming the sink and `url`, and `/readyz` must never answer 200 meanwhile.
async fn stops_naming_the_url_never_ready(scene: &Scene, sink: String, url: &str) {
    let port = support::http::free_port();
    let address = format!("127.0.0.1:{port}");
    let config = scene.config("", &[sink]);
    let mut kubecast = Kubecast::start_with(
        &scene.stack,
        &scene.dir,
        &config,
        &["--metrics-address", &address],
    );
    let deadline = tokio::time::Instant::now() + MISDIRECTED_LIMIT;
    let mut answers: BTreeMap<u16, usize> = BTreeMap::new();
    while kubecast.running() {
        if let Ok((code, body)) = support::http::get(port, "/readyz").await {
            assert_ne!(
                code,
                200,
                "/readyz answered 200 while the sink sends to {url}: {body}\nkubecast's log:\n{}",
                kubecast.log()
            );
            *answers.entry(code).or_default() += 1;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubecast still runs {MISDIRECTED_LIMIT:?} after it started sending to {url}; its log:\n{}",
            kubecast.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, log) = kubecast.exited(LIMIT).await;
    assert_eq!(code, Some(1), "{log}");
    let fatal = log
        .lines()
        .find(|l| l.contains("sink `otel` failed"))
        .unwrap_or_else(|| panic!("no fatal line naming the sink: {log}"));
    assert!(fatal.contains(url), "the fatal line names {url}: {fatal}");
    println!("{url}: exit 1; /readyz answered {answers:?} meanwhile; {fatal}");
}

const MISDIRECTED_LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_http_endpoint_with_a_wrong_path_stops_kubecast_naming_the_url_and_is_never_ready() {
    let scene = Scene::new("otlp-wrong-path").await;
    let (http, _) = endpoints(&scene.stack);
    // The traces URL pasted for the logs one, and a path nothing serves: the stack's
    // Collector answers 404 to both.
    for path in ["/v1/traces", "/nope"] {
        let endpoint = format!("{}{path}", http.trim_end_matches('/'));
        let sink = otlp_sink("otel", &endpoint, "http/protobuf", "");
        stops_naming_the_url_never_ready(&scene, sink, &format!("{endpoint}/v1/logs")).await;
    }
}

#[tokio::test]
async fn a_collector_that_takes_no_logs_stops_kubecast_over_http_and_grpc_naming_the_url() {
    let scene = Scene::new("otlp-no-logs").await;
    let collector = Collector::start_without_logs(&scene.stack, &scene.dir).await;
    let sink = otlp_sink("otel", &collector.http, "http/json", "");
    stops_naming_the_url_never_ready(&scene, sink, &format!("{}/v1/logs", collector.http)).await;
    let sink = otlp_sink("otel", &collector.grpc, "grpc", "");
    let method = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    stops_naming_the_url_never_ready(&scene, sink, &format!("{}{method}", collector.grpc)).await;
}

#[tokio::test]
async fn a_probe_the_receiver_refuses_leaves_the_sink_not_ready() {
    let scene = Scene::new("otlp-probe-refused").await;
    let script: Arc<Script> = Arc::new(|_, _| {
        (
            400,
            vec![],
            r#"{"code":3,"message":"empty requests are not taken here"}"#.into(),
        )
    });
    let fake = FakeReceiver::start(Duration::ZERO, script).await;
    let sink = otlp_sink("otel", fake.url.trim_end_matches('/'), "http/json", "");
    let port = support::http::free_port();
    let address = format!("127.0.0.1:{port}");
    let kubecast = Kubecast::start_with(
        &scene.stack,
        &scene.dir,
        &scene.config("", &[sink]),
        &["--metrics-address", &address],
    );
    // No change is made: only probes reach the fake. Each refused, it probes again, and
    // readiness names the sink and the answer.
    let (_, body) = support::http::wait_for(
        port,
        "/readyz",
        LIMIT,
        "/readyz naming the refused probe",
        |code, body| {
            assert_ne!(
                code, 200,
                "/readyz answered 200 after a refused probe: {body}"
            );
            body.contains("sink `otel` is not connected") && body.contains("400")
        },
    )
    .await;
    let probes = fake
        .wait_until("a second probe", LIMIT, |p| p.len() >= 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        probes.iter().all(|p| records(p).is_empty()),
        "only empty export requests"
    );
    let (code, _) = support::http::get(port, "/readyz")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code, 503, "still not ready after {} probes", probes.len());
    println!("{body}");
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn a_collector_that_comes_up_after_kubecast_makes_the_sink_ready_without_a_change() {
    let scene = Scene::new("otlp-late").await;
    let mut collector = Collector::start(&scene.stack, &scene.dir).await;
    collector.stop();
    let port = support::http::free_port();
    let address = format!("127.0.0.1:{port}");
    let sink = otlp_sink("otel", &collector.grpc, "grpc", "");
    let kubecast = Kubecast::start_with(
        &scene.stack,
        &scene.dir,
        &scene.config("", &[sink]),
        &["--metrics-address", &address],
    );
    support::http::wait_for(
        port,
        "/readyz",
        LIMIT,
        "/readyz naming the unreachable sink",
        |code, body| code == 503 && body.contains("sink `otel` is not connected"),
    )
    .await;
    // No change is made: only the probe, repeated on its own, can see the Collector come up.
    collector.resume().await;
    support::http::wait_for(port, "/readyz", LIMIT, "/readyz 200", |code, _| code == 200).await;
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}
