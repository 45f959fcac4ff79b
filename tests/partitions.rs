//! Partitions: every packet of kubecast's established connections to one port dropped for
//! good (support::partition: iptables on loopback, by port pair; no reset, no FIN), while
//! new connections work and pods keep changing. Each connection kubecast holds (to
//! kube-apiserver with its defaults, to Kafka, to Mosquitto, to an HTTP receiver over
//! HTTP/1.1 and over HTTP/2) is let go of and replaced within a minute, without a restart,
//! and every change arrives (the independent observer's ids, each once where the sink is
//! exactly-once or nothing failed). A leader whose Lease requests get no answer (through an
//! API proxy of its own that holds them, while its watch goes on) steps down at its renew
//! deadline, publishes nothing once the standby has taken over, and the standby takes over.
//!
//! Each test prints how long after the cut its connections were closed and replaced.
//! `KUBECAST_PARTITION_LIMIT_S` lengthens the wait for the replacement (default 90 s), to
//! measure builds that take longer (BENCHMARKS.md, "Partitions"); the checks stay the same.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::churn::Churn;
use support::consume::{KafkaTopic, MqttSubscriber};
use support::http::{free_port, get, sample};
use support::kubecast::Kubecast;
use support::observer::Observer;
use support::partition::{BlackHole, Replacement};
use support::receiver::GoReceiver;
use support::scene::{Scene, exactly_once};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(120);
/// The bound the partition tests hold every connection to.
const NOTICED: Duration = Duration::from_secs(60);

/// How long a test waits for a cut connection to be replaced before failing.
fn replace_limit() -> Duration {
    let s = std::env::var("KUBECAST_PARTITION_LIMIT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90);
    Duration::from_secs(s)
}

/// Checks that the connection was let go of within [`NOTICED`].
fn noticed_in_time(r: Replacement, what: &str, log: &str) {
    assert!(
        r.closed <= NOTICED,
        "{what}: the black-holed connection was let go of {:.1} s after the cut, over {NOTICED:?}; log:\n{log}",
        r.closed.as_secs_f64()
    );
}

/// Waits for kubecast's first event in each of `topics` (so it has listed before the churn
/// starts).
async fn started(scene: &Scene, topics: &[&KafkaTopic], k: &Kubecast) {
    let pod = scene.pods.create("first").await;
    let uid = support::objects::uid(&pod);
    for kafka in topics {
        k.check(
            kafka
                .wait_until("kubecast's first event", LIMIT, |r| {
                    r.iter().any(|x| x.ce("k8suid") == uid)
                })
                .await,
        );
    }
}

/// The ids that appear more than once.
fn repeated<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = BTreeMap::new();
    for id in ids {
        *seen.entry(id).or_insert(0) += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, _)| id)
        .collect()
}

/// Waits until the churn has made 10 more changes (seen by the independent observer), so
/// that changes also go over the connections that replaced the cut ones.
async fn more_changes(observer: &Observer) {
    let before = observer.changes().len();
    let more = support::consume::wait_for(LIMIT, "10 more changes", || {
        (observer.changes().len() >= before + 10).then_some(())
    })
    .await;
    assert!(
        more.is_some(),
        "the churn made no 10 more changes in {LIMIT:?}"
    );
}

/// What a cut while pods churned came to.
struct Cut {
    /// Per cut port, in the order given.
    replaced: Vec<Replacement>,
    /// The ids of every change the independent observer saw, the churn's and a marker's.
    truth: BTreeSet<String>,
    /// API operations the churn made.
    ops: usize,
}

/// While pods churn, drops every packet of `pid`'s established connections to each port of
/// `cuts`, waits until each was replaced, lets the churn go on for a while on the new
/// connections and stops it. The rules go when this returns.
async fn cut_while_churning(
    scene: &Scene,
    observer: &Observer,
    pid: u32,
    cuts: &[(u16, &str)],
) -> Cut {
    let churn = Churn::start(&scene.client, &scene.ns, 20, Duration::from_millis(200));
    let mut holes = Vec::new();
    for (port, what) in cuts {
        holes.push(BlackHole::established(pid, *port, what).await);
    }
    let replaced =
        futures::future::join_all(holes.iter().map(|h| h.replaced(pid, replace_limit()))).await;
    more_changes(observer).await;
    let ops = churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth = observer.changes().iter().map(|c| c.id()).collect();
    Cut {
        replaced,
        truth,
        ops,
    }
}

/// Checks that each cut connection was let go of within [`NOTICED`] and kubecast never
/// restarted, prints the figures, and stops kubecast (exit 0).
async fn finish(mut k: Kubecast, cut: &Cut, what: &[&str], outcome: &str) {
    for (r, w) in cut.replaced.iter().zip(what) {
        noticed_in_time(*r, w, &k.log());
    }
    assert!(k.running(), "kubecast restarted or exited:\n{}", k.log());
    let times: Vec<String> = cut
        .replaced
        .iter()
        .zip(what)
        .map(|(r, w)| {
            format!(
                "{w} closed after {:.1} s, replaced after {:.1} s",
                r.closed.as_secs_f64(),
                r.replaced.as_secs_f64()
            )
        })
        .collect();
    eprintln!(
        "partitions: {}: {} API operations, {} changes, {outcome}; {}",
        what.join(" and "),
        cut.ops,
        cut.truth.len(),
        times.join("; ")
    );
    let (code, log) = k.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_apiserver_connection_is_replaced_within_a_minute_by_default_and_every_change_arrives_once()
 {
    let scene = Scene::new("part-kube").await;
    let stack = &scene.stack;
    let topic = unique_name("part-kube");
    let kafka = KafkaTopic::create(stack, &topic).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let metrics = free_port();
    let config = scene.config(
        &format!(
            "metrics:\n  address: 127.0.0.1:{metrics}\nstate:\n  dir: {}\n",
            scene.dir.join("state").display()
        ),
        &[scene.kafka_sink("kafka", &topic, &[])],
    );
    let k = Kubecast::start(stack, &scene.dir, &config);
    started(&scene, &[&kafka], &k).await;
    let pid = k.pid();

    let cut = cut_while_churning(
        &scene,
        &observer,
        pid,
        &[(stack.kube_port, "kube-apiserver")],
    )
    .await;
    let records = k.check(kafka.wait_for_ids(&cut.truth, LIMIT).await);

    let dups = repeated(records.iter().map(|x| x.ce("id")));
    assert!(
        dups.is_empty(),
        "the resumed watch repeated events: {dups:?}"
    );
    let log = k.log();
    let warned = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("watch failed") && l.contains("silent_s"));
    assert!(
        warned.is_some_and(|l| l.contains(&scene.ns)),
        "no WARN naming the watch and how long it was silent:\n{log}"
    );
    let (_, text) = k.check(get(metrics, "/metrics").await);
    let restarts: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("kubecast_watch_restarts_total{") && l.contains("resource=\"pods\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(restarts >= 1.0, "no watch restart counted:\n{text}");
    finish(k, &cut, &["kube-apiserver"], "all delivered once").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_silent_behind_a_proxy_that_keeps_tcp_alive_is_opened_again_after_watch_silence_seconds()
 {
    use support::relay::Relay;
    let scene = Scene::new("part-silent").await;
    let stack = &scene.stack;
    let kafka = KafkaTopic::create(stack, &unique_name("part-silent")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let relay = Relay::start(stack.kube_port).await;
    let kubeconfig = scene.dir.join("relay.kubeconfig");
    relay.kubeconfig(&stack.kubeconfig, stack.kube_port, &kubeconfig);
    let metrics = free_port();
    let silence = 65;
    let config = scene.config(
        &format!(
            "kubernetes:\n  kubeconfig: {}\n  keepalive: {{watch_silence_seconds: {silence}}}\nmetrics:\n  address: 127.0.0.1:{metrics}\n",
            kubeconfig.display()
        ),
        &[scene.kafka_sink("kafka", &kafka.topic, &[])],
    );
    let mut k = Kubecast::start(stack, &scene.dir, &config);
    started(&scene, &[&kafka], &k).await;

    // The proxy keeps every connection open and answers TCP, but passes nothing on.
    relay.freeze();
    let frozen = std::time::Instant::now();
    let churn = Churn::start(&scene.client, &scene.ns, 20, Duration::from_millis(200));
    k.wait_for_log("cause=silent", 1, Duration::from_secs(silence + 45))
        .await;
    let noticed = frozen.elapsed();
    more_changes(&observer).await;
    let ops = churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let records = k.check(kafka.wait_for_ids(&truth, LIMIT).await);

    let log = k.log();
    let silent_s: Option<u64> = log
        .lines()
        .find(|l| l.contains("cause=silent"))
        .and_then(|l| {
            l.split("silent_s=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
    assert!(
        silent_s.is_some_and(|s| s >= silence),
        "the watch was taken for silent after {silent_s:?} s of silence, not {silence}:\n{log}"
    );
    let dups = repeated(records.iter().map(|x| x.ce("id")));
    assert!(
        dups.is_empty(),
        "the reopened watch repeated events: {dups:?}"
    );
    let (_, text) = k.check(get(metrics, "/metrics").await);
    assert!(
        sample(
            &text,
            "kubecast_watch_restarts_total{resource=\"pods\",reason=\"silent\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "no silent restart counted:\n{text}"
    );
    assert!(k.running(), "kubecast restarted or exited:\n{}", k.log());
    eprintln!(
        "partitions: a silent watch (watch_silence_seconds {silence}): opened again {:.1} s after the proxy froze; {ops} API operations, {} changes, all delivered once",
        noticed.as_secs_f64(),
        truth.len()
    );
    let (code, log) = k.stop(LIMIT).await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_holed_kafka_connections_are_replaced_within_a_minute_and_every_change_arrives() {
    let scene = Scene::new("part-kafka").await;
    let stack = &scene.stack;
    let plain = KafkaTopic::create(stack, &unique_name("part-kafka")).await;
    let txn = KafkaTopic::create(stack, &unique_name("part-kafka-eos")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let eos = exactly_once("part-kafka");
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("plain", &plain.topic, &[]),
            scene.kafka_sink("eos", &txn.topic, &eos),
        ],
    );
    let k = Kubecast::start(stack, &scene.dir, &config);
    started(&scene, &[&plain, &txn], &k).await;
    let pid = k.pid();
    let port: u16 = stack
        .kafka_bootstrap
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("the stack's Kafka port");

    let cut = cut_while_churning(&scene, &observer, pid, &[(port, "Kafka")]).await;
    k.check(plain.wait_for_ids(&cut.truth, LIMIT).await);
    let committed = k.check(txn.wait_for_ids(&cut.truth, LIMIT).await);

    let dups = repeated(committed.iter().map(|x| x.ce("id")));
    assert!(
        dups.is_empty(),
        "the exactly-once topic holds events twice: {dups:?}"
    );
    finish(
        k,
        &cut,
        &["Kafka"],
        "all delivered (once into the exactly-once topic)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_mqtt_connection_is_replaced_within_a_minute_and_every_change_arrives() {
    let scene = Scene::new("part-mqtt").await;
    let stack = &scene.stack;
    let kafka = KafkaTopic::create(stack, &unique_name("part-mqtt")).await;
    let prefix = unique_name("part-mqtt");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("kafka", &kafka.topic, &[]),
            scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[]),
        ],
    );
    let k = Kubecast::start(stack, &scene.dir, &config);
    started(&scene, &[&kafka], &k).await;
    let pid = k.pid();

    let cut = cut_while_churning(&scene, &observer, pid, &[(stack.mqtt_port, "Mosquitto")]).await;
    k.check(mqtt.wait_for_ids(&cut.truth, LIMIT).await);
    finish(k, &cut, &["Mosquitto"], "all delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_holed_http_receiver_connections_over_http1_and_http2_are_replaced_within_a_minute() {
    let scene = Scene::new("part-http").await;
    let stack = &scene.stack;
    let kafka = KafkaTopic::create(stack, &unique_name("part-http")).await;
    let h1 = GoReceiver::start(stack).await;
    let h2 = GoReceiver::start_tls(stack, false).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    let ca = stack.pki.join("ca.crt");
    let config = scene.config(
        "",
        &[
            scene.kafka_sink("kafka", &kafka.topic, &[]),
            format!("  h1:\n    type: http\n    url: {}\n", h1.url),
            format!(
                "  h2:\n    type: http\n    url: {}\n    tls:\n      ca_file: {}\n",
                h2.url,
                ca.display()
            ),
        ],
    );
    let k = Kubecast::start(stack, &scene.dir, &config);
    started(&scene, &[&kafka], &k).await;
    let pid = k.pid();
    let port = |url: &str| -> u16 {
        url.trim_end_matches('/')
            .rsplit_once(':')
            .and_then(|(_, p)| p.split('/').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"))
    };

    let what = ["HTTP/1.1 receiver", "HTTP/2 receiver"];
    let cut = cut_while_churning(
        &scene,
        &observer,
        pid,
        &[(port(&h1.url), what[0]), (port(&h2.url), what[1])],
    )
    .await;
    for (name, receiver) in what.iter().zip([&h1, &h2]) {
        let got = receiver
            .wait_until(&format!("every change at the {name}"), LIMIT, |e| {
                let ids: BTreeSet<&str> = e.iter().map(|x| x.attr("id")).collect();
                cut.truth.iter().all(|id| ids.contains(id.as_str()))
            })
            .await;
        k.check(got);
    }
    finish(k, &cut, &what, "all delivered to both receivers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_requests_get_no_answer_steps_down_before_the_standby_takes_over_and_publishes_nothing_after()
 {
    use support::apiproxy::ApiProxy;
    use support::replicas::{LEASE_DURATION_MS, RETRY_PERIOD_MS};
    let scene = Scene::new("part-ha").await;
    let stack = &scene.stack;
    let kafka = KafkaTopic::create(stack, &unique_name("part-ha")).await;
    let prefix = unique_name("part-ha");
    let mqtt = MqttSubscriber::subscribe(stack, &format!("{prefix}/#")).await;
    let observer = Observer::start(&scene.client, &scene.ns).await;
    // The first replica reaches the apiserver through a proxy of its own, which will hold its
    // Lease requests while its watch goes on.
    let proxy = ApiProxy::start(stack).await;
    let kubeconfig = scene.dir.join("proxied.kubeconfig");
    proxy.kubeconfig(&kubeconfig);
    let lease = unique_name("part-ha-lease");
    let eos = exactly_once("part-ha");
    let eos: Vec<&str> = eos.iter().map(String::as_str).collect();
    let sinks = [
        scene.kafka_sink("kafka", &kafka.topic, &eos),
        scene.mqtt_sink("mqtt", &prefix, &format!("{prefix}/{{name}}"), &[]),
    ];
    let replica = |identity: &str, metrics: u16, kubernetes: &str| {
        scene.config(
            &format!(
                "{kubernetes}metrics:\n  address: 127.0.0.1:{metrics}\nleader_election:\n  enabled: true\n  identity: {identity}\n  lease: {lease}\n  namespace: {}\n  lease_duration_ms: {LEASE_DURATION_MS}\n  retry_period_ms: {RETRY_PERIOD_MS}\n",
                scene.ns
            ),
            &sinks,
        )
    };
    let (m_cut, m_standby) = (free_port(), free_port());
    let cut_dir = support::kubecast::scratch_dir("part-ha-cut");
    let mut cut = Kubecast::start(
        stack,
        &cut_dir,
        &replica(
            "cut-off",
            m_cut,
            &format!("kubernetes:\n  kubeconfig: {}\n", kubeconfig.display()),
        ),
    );
    cut.wait_for_log("took over the exactly-once sink", 1, LIMIT)
        .await;
    cut.wait_for_log("list complete", 1, LIMIT).await;
    let standby_dir = support::kubecast::scratch_dir("part-ha-standby");
    let mut standby = Kubecast::start(stack, &standby_dir, &replica("standby", m_standby, ""));
    standby
        .wait_for_log("standing by for the Lease", 1, LIMIT)
        .await;
    let churn = Churn::start(&scene.client, &scene.ns, 20, Duration::from_millis(100));
    k_wait_more(&kafka, &cut, 10).await;

    // From here on the leader's Lease requests get no answer; its watch and sinks work.
    let held_at = std::time::Instant::now();
    proxy.hold(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        scene.ns
    ));
    cut.wait_for_log("stepped down", 1, LIMIT).await;
    let stepped_down = held_at.elapsed();
    standby
        .wait_for_log("took over the exactly-once sink", 1, LIMIT)
        .await;
    let took_over = held_at.elapsed();
    let delivered = |page: &str, sink: &str| {
        sample(
            page,
            &format!("kubecast_sink_events_total{{sink=\"{sink}\",outcome=\"delivered\"}}"),
        )
        .unwrap_or(0.0)
    };
    let (_, page) = cut.check(get(m_cut, "/metrics").await);
    let at_take_over = (delivered(&page, "kafka"), delivered(&page, "mqtt"));
    // The new leader publishes the changes made meanwhile and after, while the old one's
    // watch still sees them.
    k_wait_more(&kafka, &standby, 20).await;
    let ops = churn.stop().await;
    observer.catch_up(&scene.pods, LIMIT).await;
    let truth: BTreeSet<String> = observer.changes().iter().map(|c| c.id()).collect();
    let committed = standby.check(kafka.wait_for_ids(&truth, LIMIT).await);
    standby.check(mqtt.wait_for_ids(&truth, LIMIT).await);

    assert!(proxy.held() > 0, "no Lease request was held");
    let (_, page) = cut.check(get(m_cut, "/metrics").await);
    assert_eq!(
        sample(&page, "kubecast_leader"),
        Some(0.0),
        "the cut-off replica still counts itself the leader:\n{page}"
    );
    assert_eq!(
        (delivered(&page, "kafka"), delivered(&page, "mqtt")),
        at_take_over,
        "the cut-off replica published after the standby took over:\n{}",
        cut.log()
    );
    let lease = Duration::from_millis(LEASE_DURATION_MS);
    assert!(
        stepped_down < lease && stepped_down < took_over,
        "the cut-off leader stepped down {stepped_down:?} after its Lease requests were held, the standby took over after {took_over:?}; the Lease is {lease:?}:\n{}",
        cut.log()
    );
    let dups = repeated(committed.iter().map(|x| x.ce("id")));
    assert!(
        dups.is_empty(),
        "read_committed holds events twice: {dups:?}"
    );
    let taken = standby.count_in_log("taken over by another client");
    assert_eq!(
        taken,
        0,
        "the cut-off replica kept taking the MQTT session:\n{}",
        standby.log()
    );
    assert!(cut.running() && standby.running(), "a replica exited");
    eprintln!(
        "partitions: leader election: with its Lease requests held, the leader stepped down {:.2} s after (Lease {:.1} s), the standby took over after {:.2} s; {ops} API operations, {} changes, each once in read_committed",
        stepped_down.as_secs_f64(),
        lease.as_secs_f64(),
        took_over.as_secs_f64(),
        truth.len()
    );
    for k in [cut, standby] {
        let (code, log) = k.stop(LIMIT).await;
        assert_eq!(code, Some(0), "{log}");
    }
}

/// Waits until `n` more records than now arrived in `kafka`.
async fn k_wait_more(kafka: &KafkaTopic, k: &Kubecast, n: usize) {
    k.check(kafka.wait_for_more("more events", n, LIMIT).await);
}
