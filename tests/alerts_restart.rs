//! Alerts across `kill -9`, with the binary: kubecast A (with a state directory) is killed
//! while a `not_ready` timer is pending and while a `failed` alert is firing, and started
//! again. The timer fires at its original deadline (within a second), the firing alert is
//! not fired again, both resolve once, and A's alert ids equal those of kubecast B, which
//! ran throughout.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use support::consume::wait_for;
use support::kubecast::Kubecast;
use support::scene::{Scene, file_events, file_sink};

const LIMIT: Duration = Duration::from_secs(60);
const FOR: i64 = 8;

fn alerts(path: &std::path::Path) -> Vec<Value> {
    file_events(path)
        .into_iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("io.kubecast.alert."))
        })
        .collect()
}

fn find<'a>(alerts: &'a [Value], pod: &str, rule: &str, status: &str) -> Vec<&'a Value> {
    alerts
        .iter()
        .filter(|e| {
            e["k8sname"] == pod && e["data"]["rule"] == rule && e["data"]["status"] == status
        })
        .collect()
}

fn time(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("{v} is not RFC 3339: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_a_pending_timer_fires_at_its_deadline_and_no_alert_repeats_or_is_lost() {
    let scene = Scene::new("alerts-kill").await;
    let settings = format!(
        "alerts:\n  not_ready: {{for: {FOR}s, keep_firing_for: 1s}}\n  unscheduled: {{enabled: false}}\n  restarts: {{enabled: false}}\n"
    );
    let (a_dir, b_dir) = (scene.dir.join("a"), scene.dir.join("b"));
    for d in [&a_dir, &b_dir] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let (a_out, b_out) = (a_dir.join("events.jsonl"), b_dir.join("events.jsonl"));
    let a_config = scene.config(
        &format!(
            "{settings}state:\n  dir: {}\n",
            a_dir.join("state").display()
        ),
        &[file_sink("out", &a_out)],
    );
    let b_config = scene.config(&settings, &[file_sink("out", &b_out)]);
    let mut a = Kubecast::start(&scene.stack, &a_dir, &a_config);
    let mut b = Kubecast::start(&scene.stack, &b_dir, &b_config);
    a.wait_for_log("list complete", 1, LIMIT).await;
    b.wait_for_log("list complete", 1, LIMIT).await;

    let pods = &scene.pods;
    pods.create_with("bad", json!({}), json!({})).await;
    pods.status("bad", json!({"phase": "Failed", "reason": "Evicted"}))
        .await;
    let slow = pods.create_with("slow", json!({}), json!({})).await;
    let created = std::time::Instant::now();
    let slow_uid = slow["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // A has logged the slow pod (its episode began) and the bad pod's alert fired.
    let seen = wait_for(LIMIT, "A to see both", || {
        let ev = file_events(&a_out);
        let slow_seen = ev.iter().any(|e| e["k8suid"] == slow_uid.as_str());
        (slow_seen && !find(&alerts(&a_out), "bad", "failed", "firing").is_empty()).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "A did not see both pods; its log:\n{}",
        a.log()
    );
    assert!(
        created.elapsed() < Duration::from_secs(FOR as u64 - 2),
        "the kill must come while the timer is pending"
    );
    let first_log = a.kill().await;
    assert!(first_log.contains("alert firing"), "{first_log}");
    let a = Kubecast::start(&scene.stack, &a_dir, &a_config);

    let fired = wait_for(LIMIT, "the not_ready timer", || {
        let al = alerts(&a_out);
        find(&al, "slow", "not_ready", "firing")
            .first()
            .map(|e| (*e).clone())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no not_ready alert after the restart; A's log:\n{}",
            a.log()
        )
    });
    let deadline = time(&fired["data"]["beganAt"]) + jiff::SignedDuration::from_secs(FOR);
    let late = time(&fired["time"]).duration_since(deadline);
    println!("the not_ready alert fired {late:?} after its original deadline");
    assert!(
        late >= jiff::SignedDuration::ZERO && late <= jiff::SignedDuration::from_secs(1),
        "fired {late:?} after the deadline {deadline}"
    );
    // The bad pod's alert fired before the kill: the new process does not fire it again.
    let bad_id = find(&alerts(&a_out), "bad", "failed", "firing")[0]["id"].clone();
    assert!(
        !a.log().contains(bad_id.as_str().unwrap_or("?")),
        "the firing alert was fired again after the restart:\n{}",
        a.log()
    );

    pods.delete("bad").await;
    pods.delete("slow").await;
    for (name, out) in [("A", &a_out), ("B", &b_out)] {
        let done = wait_for(LIMIT, "both to resolve", || {
            let al = alerts(out);
            (!find(&al, "bad", "failed", "resolved").is_empty()
                && !find(&al, "slow", "not_ready", "resolved").is_empty())
            .then_some(())
        })
        .await;
        assert!(done.is_some(), "{name}: not resolved: {:#?}", alerts(out));
    }
    let ids = |out: &std::path::Path| -> BTreeSet<String> {
        alerts(out)
            .iter()
            .filter_map(|e| e["id"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(
        ids(&a_out),
        ids(&b_out),
        "the same alerts, with the same ids, as B's"
    );
    assert_eq!(ids(&a_out).len(), 4, "{:?}", ids(&a_out));
    for (pod, rule) in [("bad", "failed"), ("slow", "not_ready")] {
        for status in ["firing", "resolved"] {
            let al = alerts(&a_out);
            let n: BTreeSet<&str> = find(&al, pod, rule, status)
                .iter()
                .filter_map(|e| e["id"].as_str())
                .collect();
            assert_eq!(n.len(), 1, "{pod} {rule} {status}");
        }
    }
    let (code, _) = a.stop(LIMIT).await;
    assert_eq!(code, Some(0));
    let (code, _) = b.stop(LIMIT).await;
    assert_eq!(code, Some(0));
}
