//! The HTTP sink when its receiver fails, against a test server named as the fake it is
//! ([`FakeReceiver`]: no real receiver answers 503, 429, 400 or redirects on demand) and the Go SDK's
//! real receiver (stopped for a minute, and over mutual TLS). A Kafka sink in the same
//! kubecast is the reference: everything Kafka got, the receiver accepts, with the same
//! ids, each object's events in Kafka's order. A 308 is followed (logged once, the URL's
//! userinfo sent as basic auth and no token of any URL logged), a 301 holds the queue, and
//! `Retry-After: 0` still waits the backoff.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::churn::Churn;
use support::consume::KafkaTopic;
use support::kubecast::Kubecast;
use support::receiver::{FakeReceiver, GoReceiver, Script, Seen, pki};
use support::scene::{InProcess, Scene};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);

/// The (object uid, event id) pairs of one request, binary or batch.
fn ids(s: &Seen) -> Vec<(String, String)> {
    if s.header("content-type")
        .starts_with("application/cloudevents-batch+json")
    {
        let v: Vec<serde_json::Value> = serde_json::from_slice(&s.body).unwrap_or_default();
        v.iter()
            .map(|e| {
                (
                    e["k8suid"].as_str().unwrap_or_default().to_string(),
                    e["id"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    } else {
        vec![(
            s.header("ce-k8suid").to_string(),
            s.header("ce-id").to_string(),
        )]
    }
}

/// Per object, its event ids in order, each once (a repeat keeps its first place).
fn per_object(pairs: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (uid, id) in pairs {
        if seen.insert(id.clone()) {
            out.entry(uid).or_default().push(id);
        }
    }
    out
}

fn kafka_pairs(kafka: &KafkaTopic) -> Vec<(String, String)> {
    kafka
        .records()
        .iter()
        .map(|r| (r.ce("k8suid").to_string(), r.ce("id").to_string()))
        .collect()
}

/// Waits until every event Kafka holds (the marker pod's add among them) was accepted by
/// the receiver, then checks each object's order against Kafka's.
async fn everything_arrives(
    kafka: &KafkaTopic,
    accepted: impl Fn() -> Vec<(String, String)>,
    marker: &str,
    what: &str,
) -> usize {
    match arrives(kafka, accepted, marker, what).await {
        Ok(n) => n,
        Err(e) => panic!("{e}"),
    }
}

async fn arrives(
    kafka: &KafkaTopic,
    accepted: impl Fn() -> Vec<(String, String)>,
    marker: &str,
    what: &str,
) -> Result<usize, String> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let want = kafka_pairs(kafka);
        let got = accepted();
        let got_ids: BTreeSet<&str> = got.iter().map(|(_, id)| id.as_str()).collect();
        let has_marker = want.iter().any(|(u, _)| u == marker);
        let missing: Vec<&str> = want
            .iter()
            .map(|(_, id)| id.as_str())
            .filter(|id| !got_ids.contains(id))
            .collect();
        if has_marker && missing.is_empty() {
            let want_order = per_object(want.clone());
            let got_order = per_object(got.clone());
            for (uid, ids) in &want_order {
                if got_order.get(uid) != Some(ids) {
                    return Err(format!(
                        "{what}: object {uid}'s events {:?}, not in Kafka's order {ids:?}",
                        got_order.get(uid)
                    ));
                }
            }
            return Ok(want.len());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{what}: after {LIMIT:?}, {} of Kafka's {} events never accepted (marker in Kafka: {has_marker}), e.g. {:?}",
                missing.len(),
                want.len(),
                &missing[..missing.len().min(5)]
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A pod created last, whose add marks the end of the changes.
async fn marker(scene: &Scene) -> String {
    let pod = scene.pods.create("marker").await;
    pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn config(scene: &Scene, topic: &str, http: &str) -> String {
    scene.config(
        "",
        &[
            scene.kafka_sink("kafka", topic, &[]),
            format!("  web:\n    type: http\n{http}"),
        ],
    )
}

/// Waits for kubecast's first event (the `first` pod's add in Kafka): changes made before its
/// first list would fold into it.
async fn started(scene: &Scene, kafka: &KafkaTopic) {
    let pod = scene.pods.create("first").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    kafka
        .wait_until("kubecast's first event", LIMIT, |r| {
            r.iter().any(|x| x.ce("k8suid") == uid)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_receiver_answering_503_at_first_loses_nothing_and_keeps_order_and_ids() {
    let scene = Scene::new("http-503").await;
    let topic = unique_name("http-503");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let script: Arc<Script> = Arc::new(|n, _| {
        if n < 12 {
            (503, vec![], "warming up".into())
        } else {
            (202, vec![], String::new())
        }
    });
    let fake = FakeReceiver::start(Duration::ZERO, script).await;
    let kubecast = InProcess::start(
        &scene,
        &config(
            &scene,
            &topic,
            &format!("    url: '{}'\n    in_flight: 4\n", fake.url),
        ),
    );
    started(&scene, &kafka).await;
    let churn = Churn::start(&scene.client, &scene.ns, 6, Duration::from_millis(20));
    // Churn until the twelve 503s are behind and the receiver has accepted more since.
    fake.wait_until("the 503s answered, then changes accepted", LIMIT, |p| {
        p.iter().filter(|s| s.status == 503).count() == 12
            && p.iter().filter(|s| s.status == 202).count() >= 20
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    churn.stop().await;
    let m = marker(&scene).await;
    let n = everything_arrives(
        &kafka,
        || fake.accepted().iter().flat_map(ids).collect(),
        &m,
        "after 503s",
    )
    .await;
    let refused: Vec<Seen> = fake
        .posts()
        .into_iter()
        .filter(|s| s.status == 503)
        .collect();
    assert_eq!(
        refused.len(),
        12,
        "the first twelve requests were answered 503"
    );
    let accepted: BTreeSet<String> = fake
        .accepted()
        .iter()
        .flat_map(ids)
        .map(|(_, id)| id)
        .collect();
    for s in &refused {
        for (_, id) in ids(s) {
            assert!(
                accepted.contains(&id),
                "event {id}, refused with 503, was sent again with its id and accepted"
            );
        }
    }
    println!("{n} events, 12 answered 503 first: none lost");
    kubecast.stop(LIMIT).await;
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_a_400_goes_to_the_dead_letter_with_its_status() {
    let scene = Scene::new("http-4xx").await;
    let topic = unique_name("http-4xx");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    // The first request: 429, come back in 2 s. Events of the pod named `bad`: 400.
    let script: Arc<Script> = Arc::new(|n, s| {
        if n == 0 {
            (429, vec![("retry-after", "2".to_string())], String::new())
        } else if s.header("ce-k8sname") == "bad" {
            (400, vec![], "unknown event type for this trigger".into())
        } else {
            (200, vec![], String::new())
        }
    });
    let fake = FakeReceiver::start(Duration::ZERO, script).await;
    let dead = scene.dir.join("dead.jsonl");
    let http = format!(
        "    url: '{}'\n    dead_letter: {{file: {}}}\n",
        fake.url,
        dead.display()
    );
    let kubecast = InProcess::start(&scene, &config(&scene, &topic, &http));
    started(&scene, &kafka).await;
    let first = fake
        .wait_until("the first request, again", LIMIT, |p| p.len() >= 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let waited = first[1].at.duration_since(first[0].at);
    assert!(
        waited >= Duration::from_millis(1900),
        "the next request came {waited:?} after a 429 with Retry-After: 2"
    );
    assert_eq!(
        ids(&first[0]),
        ids(&first[1]),
        "the same event, sent again after the wait"
    );
    scene.pods.create("bad").await;
    let m = marker(&scene).await;
    let accepted = || fake.accepted().iter().flat_map(ids).collect::<Vec<_>>();
    let deadline = Instant::now() + LIMIT;
    while !accepted().iter().any(|(u, _)| *u == m) {
        assert!(Instant::now() < deadline, "the marker never arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(&dead).unwrap_or_default();
    let line: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or("{}")).unwrap_or_default();
    let reason = line["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("400") && reason.contains("unknown event type"),
        "the dead letter names the status and the answer: {text}"
    );
    assert!(
        text.contains("bad"),
        "the dead letter is the bad pod's event: {text}"
    );
    assert!(
        !accepted().iter().any(|(_, id)| text.contains(id.as_str())),
        "a dead-lettered event was not also accepted"
    );
    kubecast.stop(LIMIT).await;
}

#[tokio::test]
async fn a_slow_receiver_gets_eight_requests_at_a_time_and_each_objects_events_in_order() {
    let scene = Scene::new("http-slow").await;
    let topic = unique_name("http-slow");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], String::new()));
    let fake = FakeReceiver::start(Duration::from_secs(1), script).await;
    let kubecast = InProcess::start(
        &scene,
        &config(
            &scene,
            &topic,
            &format!("    url: '{}'\n    in_flight: 8\n", fake.url),
        ),
    );
    started(&scene, &kafka).await;
    let names: Vec<String> = (0..16).map(|i| format!("slow-{i}")).collect();
    for name in &names {
        scene.pods.create(name).await;
    }
    for name in &names {
        scene.pods.label(name, "step", "2").await;
    }
    let m = marker(&scene).await;
    let n = everything_arrives(
        &kafka,
        || fake.accepted().iter().flat_map(ids).collect(),
        &m,
        "a slow receiver",
    )
    .await;
    let most = fake.posts().iter().map(|s| s.concurrent).max().unwrap_or(0);
    assert_eq!(
        most, 8,
        "at most, and at some point exactly, eight requests at once"
    );
    println!("{n} events through a receiver taking 1 s per answer, 8 at a time");
    kubecast.stop(LIMIT).await;
}

/// How long the receiver is down in the outage scenario.
const OUTAGE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_receiver_down_for_a_minute_during_churn_loses_nothing() {
    let scene = Scene::new("http-down").await;
    let topic = unique_name("http-down");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let mut receiver = GoReceiver::start(&scene.stack).await;
    let mut kubecast = Kubecast::start(
        &scene.stack,
        &scene.dir,
        &config(&scene, &topic, &format!("    url: '{}'\n", receiver.url)),
    );
    started(&scene, &kafka).await;
    let churn = Churn::start(&scene.client, &scene.ns, 8, Duration::from_millis(50));
    // Churn reaching the receiver while it is up.
    receiver
        .wait_until("churn reaching the receiver", LIMIT, |e| e.len() >= 20)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let failed = "HTTP request failed; will send again";
    let failed_before = kubecast.count_in_log(failed);
    let down_since = tokio::time::Instant::now();
    receiver.stop().await;
    // kubecast meets the outage (a request fails and is held to send again) ...
    kubecast
        .wait_for_log(failed, failed_before + 1, LIMIT)
        .await;
    // ... and the outage lasts the minute the scenario names.
    tokio::time::sleep_until(down_since + OUTAGE).await;
    let mut receiver = receiver.restart(&scene.stack).await;
    // Churn reaching it again once it is back.
    let before = receiver.events().len();
    receiver
        .wait_until("churn reaching the receiver again", LIMIT, |e| {
            e.len() >= before + 20
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ops = churn.stop().await;
    let m = marker(&scene).await;
    let outcome = arrives(
        &kafka,
        || {
            receiver
                .events()
                .iter()
                .map(|e| (e.attr("k8suid").to_string(), e.attr("id").to_string()))
                .collect()
        },
        &m,
        "after a minute's outage",
    )
    .await;
    if outcome.is_err() {
        println!("the receiver's goroutines:\n{}", receiver.dump().await);
    }
    let n = kubecast.check(outcome);
    println!("{ops} changes, {n} events, receiver down 60 s: 0 lost");
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn kill_9_during_delivery_then_a_restart_delivers_everything_unacknowledged_with_its_id() {
    let scene = Scene::new("http-kill").await;
    let topic = unique_name("http-kill");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    let script: Arc<Script> = Arc::new(|_, _| (200, vec![], String::new()));
    // Slow answers, so that requests are in flight at the kill.
    let fake = FakeReceiver::start(Duration::from_millis(300), script).await;
    let state = scene.dir.join("state");
    let text = scene.config(
        &format!("state:\n  dir: {}\n", state.display()),
        &[
            scene.kafka_sink("kafka", &topic, &[]),
            format!(
                "  web:\n    type: http\n    url: '{}'\n    in_flight: 2\n",
                fake.url
            ),
        ],
    );
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    started(&scene, &kafka).await;
    scene.pods.create_each("k", 12).await;
    fake.wait_until("a few accepted", LIMIT, |p| p.len() >= 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The kill comes while requests wait for their answers: sent, never acknowledged.
    support::consume::wait_for(LIMIT, "a request in flight", || {
        (fake.in_flight() > 0).then_some(())
    })
    .await
    .expect("a request in flight before the kill");
    let in_flight = fake.in_flight();
    kubecast.kill().await;
    let before = fake.posts().len();
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &text);
    let m = marker(&scene).await;
    let n = everything_arrives(
        &kafka,
        || fake.accepted().iter().flat_map(ids).collect(),
        &m,
        "after kill -9",
    )
    .await;
    println!("{n} events; {before} requests answered before the kill, {in_flight} in flight at it");
    // What was in flight at the kill was taken by the receiver but never acknowledged: the
    // restart sent it again, with the same ids. (The receiver answers, and `posts` records,
    // only on connections still open, so the witness is what it took.)
    let mut times: BTreeMap<String, usize> = BTreeMap::new();
    for (_, id) in fake.received().iter().flat_map(ids) {
        *times.entry(id).or_default() += 1;
    }
    assert!(
        times.values().any(|n| *n > 1),
        "no event was sent again after the kill, though {in_flight} request(s) were in flight at it"
    );
    let (code, log) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn mutual_tls_with_the_stacks_ca_and_a_bearer_token_replaced_during_the_run() {
    let scene = Scene::new("http-mtls").await;
    let receiver = GoReceiver::start_tls(&scene.stack, true).await;
    let token = scene.dir.join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    let http = format!(
        "  web:\n    type: http\n    url: '{}'\n    bearer_token_file: {}\n    tls: {{ca_file: {}, cert_file: {}, key_file: {}}}\n",
        receiver.url,
        token.display(),
        pki(&scene.stack, "ca.crt").display(),
        pki(&scene.stack, "client.crt").display(),
        pki(&scene.stack, "client.key").display(),
    );
    let kubecast = InProcess::start(&scene, &scene.config("", &[http]));
    let pod = scene.pods.create("p").await;
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let got = receiver
        .wait_until("the pod's add over mutual TLS", LIMIT, |e| {
            e.iter().any(|x| x.attr("k8suid") == uid)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first = got.iter().find(|x| x.attr("k8suid") == uid).unwrap();
    assert_eq!(first.auth, "Bearer first-token");
    assert_eq!(
        first.proto, "HTTP/2.0",
        "HTTP/2 where the receiver offers it over TLS"
    );
    // Replaced as a projected token is: a new file moved into place.
    let fresh = scene.dir.join("token.new");
    std::fs::write(&fresh, "second-token\n").unwrap();
    std::fs::rename(&fresh, &token).unwrap();
    scene.pods.label("p", "step", "2").await;
    let got = receiver
        .wait_until("the pod's label change", LIMIT, |e| {
            e.iter().filter(|x| x.attr("k8suid") == uid).count() >= 2
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let next = got
        .iter()
        .filter(|x| x.attr("k8suid") == uid)
        .nth(1)
        .unwrap();
    assert_eq!(
        next.auth, "Bearer second-token",
        "the next request carries the new token"
    );
    kubecast.stop(LIMIT).await;
}

#[tokio::test]
async fn redirects_307_and_308_are_followed_others_hold_the_queue_and_retry_after_zero_still_backs_off()
 {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let scene = Scene::new("http-redirect").await;
    let topic = unique_name("http-redirect");
    let kafka = KafkaTopic::create(&scene.stack, &topic).await;
    // `/hook` moved for good to `/moved`; there, two 503s with `Retry-After: 0`, then a 301
    // (which a POST must not follow), then 200s.
    let moved = Arc::new(AtomicUsize::new(0));
    let script: Arc<Script> = Arc::new(move |_, s| {
        if !s.path.starts_with("/moved") {
            return (
                308,
                vec![("location", "/moved?token=t0k3n-moved".to_string())],
                String::new(),
            );
        }
        match moved.fetch_add(1, Ordering::SeqCst) {
            0 | 1 => (503, vec![("retry-after", "0".to_string())], String::new()),
            2 => (
                301,
                vec![("location", "/elsewhere?token=t0k3n-301".to_string())],
                String::new(),
            ),
            _ => (200, vec![], String::new()),
        }
    });
    let fake = FakeReceiver::start(Duration::ZERO, script).await;
    let dead = scene.dir.join("dead.jsonl");
    let url = fake.url.replace("http://", "http://user:pa55w0rd@");
    let http = format!(
        "    url: '{url}hook?token=t0k3n-url'\n    dead_letter: {{file: {}}}\n",
        dead.display()
    );
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config(&scene, &topic, &http));
    started(&scene, &kafka).await;
    scene.pods.create_each("r", 5).await;
    let m = marker(&scene).await;
    let n = everything_arrives(
        &kafka,
        || {
            fake.accepted()
                .iter()
                .filter(|s| s.path.starts_with("/moved"))
                .flat_map(ids)
                .collect()
        },
        &m,
        "through the redirect",
    )
    .await;
    let log = kubecast.log();
    let (code, _) = kubecast.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
    println!("{n} events through a 308");
    assert!(
        std::fs::read_to_string(&dead)
            .unwrap_or_default()
            .is_empty(),
        "no redirect dead-letters anything"
    );
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(
        lines("HTTP receiver redirects (307/308)"),
        1,
        "a new place is logged once:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("status=301") && l.contains("/elsewhere?…")),
        "a 301 is an ERROR naming the status and Location:\n{log}"
    );
    for secret in ["t0k3n-url", "t0k3n-moved", "t0k3n-301", "pa55w0rd"] {
        assert!(!log.contains(secret), "the log holds `{secret}`:\n{log}");
    }
    // The URL's userinfo is basic auth, on the redirect's target too (the same origin).
    let posts = fake.posts();
    assert!(
        posts
            .iter()
            .all(|p| p.header("authorization") == "Basic dXNlcjpwYTU1dzByZA=="),
        "basic auth from the URL's userinfo on every request"
    );
    // `Retry-After: 0` waits the backoff all the same: no request right after a 503.
    let mut moved_posts: Vec<&Seen> = posts
        .iter()
        .filter(|p| p.path.starts_with("/moved"))
        .collect();
    moved_posts.sort_by_key(|p| p.at);
    for pair in moved_posts.windows(2).take(3) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap >= Duration::from_millis(40),
            "a request {gap:?} after a {} answer",
            pair[0].status
        );
    }
}
