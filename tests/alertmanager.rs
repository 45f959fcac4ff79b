//! The Alertmanager sink against real Prometheus Alertmanagers (v0.31, built by the stack),
//! each test with its own instances and webhook receiver:
//! - a pod that crash-loops for minutes (kwok's crash-loop stage on a node of the test's own)
//!   is one episode: one `crash_loop_backoff` firing event, one firing notification; deleted,
//!   one resolved event and one resolved notification;
//! - an Alertmanager restarted mid-episode has the alert back within one resend interval and
//!   sends no second notification; `amtool alert query` shows the labels;
//! - of two instances, one stopped and started again ends with every alert, including one
//!   that fired while it was away;
//! - `kill -9` of kubecast during an episode, shorter than `endsAt`'s horizon: no resolve and
//!   no second notification; a resolve that happened while kubecast was down is sent when it
//!   is back;
//! - an alert an Alertmanager refuses (400; a label name its classic mode refuses): logged
//!   once, never sent again, and the other alerts of the request taken;
//! - an alert whose `keep_firing_for` ends while kubecast is down resolves at its time (within
//!   the times the test measured) when kubecast is back;
//! - the same, down also past the `endsAt` of its last send (the Alertmanager resolved it by
//!   itself): after the restart it is not sent as firing, only its resolve, and the
//!   notifications stay one firing and one resolved.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::alertmanager::{Alertmanager, Webhook, sink};
use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::nodes::Pool;
use support::objects::Objects;
use support::scene::{Scene, file_events, file_sink};
use support::unique_name;

const LIMIT: Duration = Duration::from_secs(60);
/// How many turns of kwok's 7-second crash loop the pod goes through (about two minutes).
const CRASH_TURNS: u64 = 15;

/// Every built-in rule off; `bad` fires while a pod is labelled `state=bad`; `extra` rule
/// lines (with their labels) after it.
fn bad_rule(extra: &str) -> String {
    let off = [
        "restarts",
        "failed",
        "not_ready",
        "oom_killed",
        "oom_killed_gpu",
        "crash_loop_backoff",
        "image_pull_backoff",
        "unscheduled",
    ]
    .map(|r| format!("  {r}: {{enabled: false}}\n"))
    .concat();
    format!(
        "alerts:\n{off}  rules:\n    bad:\n      expr: 'metadata.labels.state == \"bad\"'\n      severity: critical\n      labels: {{team: payments}}\n{extra}"
    )
}

/// Waits for `check` to give a value, or fails naming `what`.
async fn until<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    wait_for(LIMIT, what, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {LIMIT:?} waiting for {what}"))
}

/// The alert events of `rule` in a file sink's output, by status.
fn alert_events(path: &std::path::Path, rule: &str, status: &str) -> Vec<Value> {
    file_events(path)
        .into_iter()
        .filter(|e| e["type"] == format!("io.kubecast.alert.{status}") && e["data"]["rule"] == rule)
        .collect()
}

#[tokio::test]
async fn a_crash_looping_pod_is_one_episode_and_one_notification_until_it_is_deleted() {
    let scene = Scene::new("am-crash").await;
    let hook = Webhook::start(&scene.dir).await;
    let am = Alertmanager::start(&scene.stack, &scene.dir, "am", &hook, &[]).await;
    let path = scene.dir.join("events.jsonl");
    let config = scene.config(
        "alerts: {}\n",
        &[sink("am", &[&am], "5s"), file_sink("file", &path)],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    let pool = Pool::create(
        &scene.client,
        &unique_name("am-crash"),
        1,
        Duration::from_secs(10),
    )
    .await;
    let objects = Objects::new(&scene.client);
    let pods = format!("/api/v1/namespaces/{}/pods", scene.ns);
    objects
        .create(&pods, &json!({"metadata": {"name": "crash", "labels": {"kubecast.dev/fault": "crash-loop"}},
            "spec": {"nodeSelector": pool.node_selector(), "containers": [{"name": "app", "image": "busybox:1.36"}]}}))
        .await;
    am.wait_until("the crash_loop_backoff alert", LIMIT, |a| {
        a.iter()
            .any(|a| a["labels"]["alertname"] == "crash_loop_backoff")
    })
    .await;
    objects
        .wait_until(
            &format!("{pods}/crash"),
            Duration::from_secs(240),
            &format!("{CRASH_TURNS} turns of the crash loop"),
            |p| {
                p.and_then(|p| p["status"]["containerStatuses"][0]["restartCount"].as_u64())
                    .is_some_and(|n| n >= CRASH_TURNS)
            },
        )
        .await;
    let pod = objects
        .get(&format!("{pods}/crash"))
        .await
        .unwrap_or_default();
    let restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        restarts >= 8,
        "the pod crash-looped only {restarts} times: {pod}"
    );
    let firing = alert_events(&path, "crash_loop_backoff", "firing");
    assert_eq!(
        firing.len(),
        1,
        "one episode over {restarts} restarts: {firing:#?}"
    );
    assert!(
        alert_events(&path, "crash_loop_backoff", "resolved").is_empty(),
        "no resolve while it loops"
    );
    assert_eq!(
        hook.of("am", "crash_loop_backoff"),
        [("firing".to_string(), vec!["firing".to_string()])],
        "one firing notification over {restarts} restarts"
    );
    let held = am.named("crash_loop_backoff").await;
    assert_eq!(held.len(), 1, "{held:#?}");
    assert_eq!(held[0]["labels"]["pod"], "crash");
    assert_eq!(
        held[0]["annotations"]["alert_id"],
        firing[0]["data"]["alert"]
    );

    objects.delete(&format!("{pods}/crash")).await;
    let resolved = wait_for(LIMIT, "the resolved notification", || {
        let n = hook.of("am", "crash_loop_backoff");
        (n.len() == 2).then_some(n)
    })
    .await
    .unwrap_or_else(|| panic!("no resolved notification: {:#?}", hook.notifications()));
    assert_eq!(
        resolved[1],
        ("resolved".to_string(), vec!["resolved".to_string()])
    );
    assert_eq!(
        alert_events(&path, "crash_loop_backoff", "resolved").len(),
        1
    );
    assert!(
        am.named("crash_loop_backoff").await.is_empty(),
        "resolved at the Alertmanager"
    );
    pool.delete().await;
    drop(kubecast);
}

#[tokio::test]
async fn an_alertmanager_restarted_mid_episode_has_the_alert_back_within_one_resend_and_notifies_once()
 {
    let scene = Scene::new("am-restart").await;
    let hook = Webhook::start(&scene.dir).await;
    let mut am = Alertmanager::start(&scene.stack, &scene.dir, "am", &hook, &[]).await;
    let config = scene.config(&bad_rule(""), &[sink("am", &[&am], "2s")]);
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create("p").await;
    scene.pods.label("p", "state", "bad").await;
    am.wait_until("the alert", LIMIT, |a| a.len() == 1).await;
    until("the firing notification", || {
        (!hook.of("am", "bad").is_empty()).then_some(())
    })
    .await;

    // The labels as amtool shows them: the episode, nothing that changes within it.
    let amtool = scene.stack.dir.join("bin/amtool");
    let out = std::process::Command::new(&amtool)
        .args([
            &format!("--alertmanager.url={}", am.url()),
            "alert",
            "query",
            "alertname=bad",
            "-o",
            "json",
        ])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", amtool.display()));
    assert!(
        out.status.success(),
        "amtool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "amtool's JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(
        shown[0]["labels"],
        json!({"alertname": "bad", "severity": "critical", "cluster": "test", "namespace": scene.ns, "pod": "p", "team": "payments"})
    );
    assert!(
        shown[0]["annotations"]["alert_id"]
            .as_str()
            .is_some_and(|a| a.ends_with(":alert:bad")),
        "{shown:#?}"
    );

    am.stop().await;
    am.start_again().await;
    let back = tokio::time::Instant::now();
    am.wait_until(
        "the alert back after the restart",
        Duration::from_secs(5),
        |a| a.len() == 1,
    )
    .await;
    println!(
        "the alert was back {:?} after the Alertmanager",
        back.elapsed()
    );
    // Two more resends, longer than the group's wait and interval: still the one notification.
    am.resent("bad", 2, Duration::from_secs(10)).await;
    assert_eq!(hook.of("am", "bad").len(), 1, "{:#?}", hook.notifications());
    assert_eq!(am.alerts().await.len(), 1);
    drop(kubecast);
}

#[tokio::test]
async fn of_two_alertmanagers_one_stopped_and_started_again_ends_with_every_alert() {
    let scene = Scene::new("am-pair").await;
    let hook = Webhook::start(&scene.dir).await;
    let one = Alertmanager::start(&scene.stack, &scene.dir, "am-1", &hook, &[]).await;
    let mut two = Alertmanager::start(&scene.stack, &scene.dir, "am-2", &hook, &[]).await;
    let path = scene.dir.join("events.jsonl");
    let config = scene.config(
        &bad_rule(""),
        &[sink("am", &[&one, &two], "2s"), file_sink("file", &path)],
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create("a").await;
    scene.pods.label("a", "state", "bad").await;
    for am in [&one, &two] {
        am.wait_until("a's alert", LIMIT, |a| a.len() == 1).await;
    }
    two.stop().await;
    scene.pods.create("b").await;
    scene.pods.label("b", "state", "bad").await;
    one.wait_until("b's alert while the other is away", LIMIT, |a| a.len() == 2)
        .await;
    // Delivered though one instance is away: the other confirmed it.
    until("b's firing in the file sink", || {
        (alert_events(&path, "bad", "firing").len() == 2).then_some(())
    })
    .await;
    two.start_again().await;
    let pods = |alerts: &[Value]| {
        let mut p: Vec<String> = alerts
            .iter()
            .map(|a| a["labels"]["pod"].as_str().unwrap_or_default().to_string())
            .collect();
        p.sort();
        p
    };
    let held = two
        .wait_until(
            "both alerts, within one resend",
            Duration::from_secs(5),
            |a| a.len() == 2,
        )
        .await;
    assert_eq!(pods(&held), ["a", "b"]);
    assert_eq!(pods(&one.alerts().await), ["a", "b"]);
    drop(kubecast);
}

#[tokio::test]
async fn kill_9_of_kubecast_mid_episode_resolves_nothing_and_a_resolve_while_it_was_down_is_sent() {
    let scene = Scene::new("am-kill").await;
    let hook = Webhook::start(&scene.dir).await;
    let am = Alertmanager::start(&scene.stack, &scene.dir, "am", &hook, &[]).await;
    let config = format!(
        "{}state:\n  dir: {}\n",
        scene.config(&bad_rule(""), &[sink("am", &[&am], "2s")]),
        scene.dir.join("state").display()
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create("p").await;
    scene.pods.label("p", "state", "bad").await;
    let first = am.wait_until("the alert", LIMIT, |a| a.len() == 1).await;
    until("the firing notification", || {
        (!hook.of("am", "bad").is_empty()).then_some(())
    })
    .await;

    // Down past a missed resend, less than the 8 s (4 × 2 s) its endsAt lies ahead.
    let before = am.alerts().await;
    let ends: jiff::Timestamp = before[0]["endsAt"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("endsAt ({e}): {before:#?}"));
    let updated: jiff::Timestamp = before[0]["updatedAt"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("updatedAt ({e}): {before:#?}"));
    kubecast.kill().await;
    // Down until a resend (every 2 s) was missed: 3 s past the last one Alertmanager took.
    let missed = updated + jiff::SignedDuration::from_secs(3);
    until("a resend missed while kubecast is down", || {
        (jiff::Timestamp::now() > missed).then_some(())
    })
    .await;
    let kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    // Past the endsAt the last send before the kill gave it, and sent again since.
    let held = am
        .wait_until("the alert past its old endsAt, sent again", LIMIT, |a| {
            jiff::Timestamp::now() > ends
                && a.len() == 1
                && a[0]["updatedAt"] != before[0]["updatedAt"]
        })
        .await;
    assert_eq!(held.len(), 1, "still firing: {held:#?}");
    assert_eq!(held[0]["startsAt"], first[0]["startsAt"], "the same start");
    assert_eq!(held[0]["status"]["state"], "active");
    assert_eq!(
        hook.of("am", "bad"),
        [("firing".to_string(), vec!["firing".to_string()])],
        "no resolve, no second notification"
    );

    // Resolved while kubecast is down: said when it is back.
    kubecast.kill().await;
    scene.pods.label("p", "state", "good").await;
    let _kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let notes = wait_for(LIMIT, "the resolved notification", || {
        let n = hook.of("am", "bad");
        (n.len() == 2).then_some(n)
    })
    .await
    .unwrap_or_else(|| panic!("no resolved notification: {:#?}", hook.notifications()));
    assert_eq!(notes[1].0, "resolved");
    am.wait_until("no active alert", LIMIT, |a| a.is_empty())
        .await;
}

#[tokio::test]
async fn an_alert_the_alertmanager_refuses_is_logged_once_and_the_rest_of_its_request_is_taken() {
    let scene = Scene::new("am-refused").await;
    let hook = Webhook::start(&scene.dir).await;
    // Classic mode takes only Prometheus 2 label names: `team-name` is refused.
    let am = Alertmanager::start(&scene.stack, &scene.dir, "am", &hook, &["classic-mode"]).await;
    let odd = "    odd:\n      expr: 'metadata.labels.state == \"bad\"'\n      labels: {team-name: payments}\n";
    let config = scene.config(&bad_rule(odd), &[sink("am", &[&am], "2s")]);
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create("p").await;
    scene.pods.label("p", "state", "bad").await;
    let refused = "the Alertmanager refused an alert";
    kubecast.wait_for_log(refused, 1, LIMIT).await;
    let taken = am
        .wait_until("the valid alert", LIMIT, |a| a.len() == 1)
        .await;
    assert_eq!(taken[0]["labels"]["alertname"], "bad");
    // Three more resends (each moves the alert's updatedAt): the refused one is not sent again.
    am.resent("bad", 3, Duration::from_secs(10)).await;
    assert_eq!(
        kubecast.count_in_log(refused),
        1,
        "logged once:\n{}",
        kubecast.log()
    );
    let line = kubecast
        .log()
        .lines()
        .find(|l| l.contains(refused))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains("team-name") && line.contains("ERROR"),
        "{line}"
    );
    assert!(am.named("odd").await.is_empty());
}

/// Waits until the state directory `state` holds object state at resourceVersion `rv` with a
/// condition cleared (`cleared_at`): under `log: when_behind` a change every sink took is
/// written only as the resume point it moves, a moment after the sinks have it, so a kill
/// before that would resume from before the change (and see it again, at a later time).
async fn until_durable(state: &std::path::Path, rv: &str) {
    let text = || {
        let mut text = std::fs::read_to_string(state.join("snapshot.json")).unwrap_or_default();
        for e in std::fs::read_dir(state.join("log"))
            .into_iter()
            .flatten()
            .flatten()
        {
            text.push_str(&String::from_utf8_lossy(
                &std::fs::read(e.path()).unwrap_or_default(),
            ));
        }
        text
    };
    let needle = format!("\"rv\":\"{rv}\"");
    until("the cleared state in the state directory", || {
        let text = text();
        (text.contains(&needle) && text.contains("\"cleared_at\"")).then_some(())
    })
    .await;
}

/// A timestamp field of an event or an Alertmanager alert.
fn timestamp(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("{v}: {e}"))
}

#[tokio::test]
async fn an_alert_whose_keep_firing_for_ends_while_kubecast_is_down_resolves_at_its_time_when_it_is_back()
 {
    let scene = Scene::new("am-kept").await;
    let hook = Webhook::start(&scene.dir).await;
    let am = Alertmanager::start(&scene.stack, &scene.dir, "am", &hook, &[]).await;
    let path = scene.dir.join("events.jsonl");
    let state = scene.dir.join("state");
    let kept =
        "    kept:\n      expr: 'metadata.labels.state == \"bad\"'\n      keep_firing_for: 4s\n";
    let config = format!(
        "{}state:\n  dir: {}\n",
        scene.config(
            &bad_rule(kept),
            &[sink("am", &[&am], "2s"), file_sink("file", &path)]
        ),
        state.display()
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create("p").await;
    scene.pods.label("p", "state", "bad").await;
    am.wait_until("the kept alert", LIMIT, |a| {
        a.iter().any(|x| x["labels"]["alertname"] == "kept")
    })
    .await;
    // The condition clears while kubecast runs: kept firing. Once that is in the state
    // directory, kubecast is killed, and the 4 s run out while it is down.
    let before = jiff::Timestamp::now();
    let cleared = scene.pods.label("p", "state", "good").await;
    let rv = cleared["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    until("the change that cleared it", || {
        file_events(&path)
            .into_iter()
            .find(|e| e["k8srv"] == rv.as_str())
    })
    .await;
    let seen = jiff::Timestamp::now();
    until_durable(&state, &rv).await;
    println!(
        "the cleared state was in the state directory {} after the file sink had the change",
        jiff::Timestamp::now().duration_since(seen)
    );
    assert!(
        alert_events(&path, "kept", "resolved").is_empty(),
        "kept firing"
    );
    kubecast.kill().await;
    let over = seen + jiff::SignedDuration::from_secs(5);
    until("the 4 s to run out while kubecast is down", || {
        (jiff::Timestamp::now() > over).then_some(())
    })
    .await;
    let restarted = jiff::Timestamp::now();
    let _kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    let resolved = until("the kept alert's resolve", || {
        alert_events(&path, "kept", "resolved").pop()
    })
    .await;
    // Against the times the test took: cleared between the label request and the change
    // seen in the file sink (the timers count whole milliseconds, rounded up), resolved 4 s
    // after that, before the restart.
    let ms = jiff::SignedDuration::from_millis(1);
    let keep = jiff::SignedDuration::from_secs(4);
    let cleared_at = timestamp(&resolved["data"]["evidence"]["clearedAt"]);
    assert!(
        before <= cleared_at && cleared_at <= seen + ms,
        "cleared at {cleared_at}, between {before} and {seen}: {resolved}"
    );
    let time = timestamp(&resolved["time"]);
    assert!(
        before + keep <= time && time <= seen + keep + ms,
        "resolved at {time}, 4 s after the clearing ({before} .. {seen}): {resolved}"
    );
    assert!(
        time < restarted,
        "resolved at its time, while kubecast was down (restarted at {restarted}): {resolved}"
    );
    assert_eq!(
        alert_events(&path, "kept", "firing").len(),
        1,
        "one episode"
    );
    let notes = until("the resolved notification", || {
        let n = hook.of("am", "kept");
        (n.len() == 2).then_some(n)
    })
    .await;
    assert_eq!(notes[1].0, "resolved", "{notes:?}");
    am.wait_until("no active alert", LIMIT, |a| a.is_empty())
        .await;
}

#[tokio::test]
async fn an_alert_whose_keep_firing_for_and_ends_at_ran_out_while_kubecast_was_down_is_not_fired_again()
 {
    let scene = Scene::new("am-late").await;
    let hook = Webhook::start(&scene.dir).await;
    let am = Alertmanager::start(&scene.stack, &scene.dir, "am", &hook, &[]).await;
    let path = scene.dir.join("events.jsonl");
    let state = scene.dir.join("state");
    let kept =
        "    kept:\n      expr: 'metadata.labels.state == \"bad\"'\n      keep_firing_for: 2s\n";
    // Sent again every second: an active alert's endsAt lies 4 s ahead.
    let config = format!(
        "{}state:\n  dir: {}\n",
        scene.config(
            &bad_rule(kept),
            &[sink("am", &[&am], "1s"), file_sink("file", &path)]
        ),
        state.display()
    );
    let mut kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    kubecast.wait_for_log("list complete", 1, LIMIT).await;
    scene.pods.create("p").await;
    scene.pods.label("p", "state", "bad").await;
    until("the firing notification", || {
        (!hook.of("am", "kept").is_empty()).then_some(())
    })
    .await;
    // Cleared, kept firing; kubecast killed once that is durable.
    let cleared = scene.pods.label("p", "state", "good").await;
    let rv = cleared["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    until_durable(&state, &rv).await;
    kubecast.kill().await;
    // Down past the keep and past the endsAt of its last send: the Alertmanager resolves it
    // by itself and says so.
    am.wait_until("the alert past its endsAt", LIMIT, |a| {
        !a.iter().any(|x| x["labels"]["alertname"] == "kept")
    })
    .await;
    let notes = until("the resolved notification, while kubecast is down", || {
        let n = hook.of("am", "kept");
        (n.len() == 2).then_some(n)
    })
    .await;
    assert_eq!(notes[1].0, "resolved", "{notes:?}");
    let (firing, resolved) = (am.received("firing").await, am.received("resolved").await);

    let restarted = jiff::Timestamp::now();
    let _kubecast = Kubecast::start(&scene.stack, &scene.dir, &config);
    // The resolve sent, then sent again twice (a resend a second): well past the moment the
    // standing alerts go out at the start.
    am.wait_received("resolved", resolved + 3, LIMIT).await;
    assert_eq!(
        am.received("firing").await,
        firing,
        "the alert resolved while kubecast was down was sent as firing again"
    );
    let events = alert_events(&path, "kept", "resolved");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(
        timestamp(&events[0]["time"]) < restarted,
        "resolved at its time: {:#}",
        events[0]
    );
    am.wait_until("no active alert", LIMIT, |a| a.is_empty())
        .await;
    assert_eq!(
        hook.of("am", "kept"),
        [
            ("firing".to_string(), vec!["firing".to_string()]),
            ("resolved".to_string(), vec!["resolved".to_string()])
        ],
        "no firing notification after the restart, one resolved"
    );
}
