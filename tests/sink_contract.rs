//! The sink contract, proved in-process (`pipeline::run` with a config, a shutdown future
//! and the real stack) with a fake sink registered only in this test: the one place a fake
//! is right, since the point is the contract itself. A sink that fails stops the pipeline at
//! once with an error naming it and its cause, also when no event is flowing; after a
//! restart, every event it had not acknowledged is delivered, with the same ids, and nothing
//! it acknowledged is sent again.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kubecast::config::load_str;
use kubecast::pipeline::{self, PipelineError};
use kubecast::sinks::queue::QueueRx;
use kubecast::sinks::{Acks, DeadLetter, QueueConfig, Sink, SinkError, ValidSink};
use support::consume::wait_for;
use support::scene::{Scene, file_sink};

const LIMIT: Duration = Duration::from_secs(60);

/// What the fake sink saw: the ids it received, and those it acknowledged.
#[derive(Debug, Default)]
struct Seen {
    received: Vec<String>,
    acked: Vec<String>,
}

/// A fake sink that acknowledges `fail_after` events, then fails on the next one it
/// receives (without acknowledging it). `fail_after: Some(0)` with `at_start` fails before
/// taking any event.
#[derive(Debug)]
struct Fake {
    fail_after: Option<usize>,
    at_start: bool,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Debug, thiserror::Error)]
#[error("the fake destination broke")]
struct Broken;

impl Sink for Fake {
    fn run(
        self: Box<Self>,
        mut queue: QueueRx,
        acks: Acks,
    ) -> BoxFuture<'static, Result<(), SinkError>> {
        Box::pin(async move {
            if self.at_start {
                return Err(acks.failed(Broken));
            }
            let mut n = 0;
            while let Some(event) = queue.recv().await {
                self.seen.lock().unwrap().received.push(event.id.clone());
                if self.fail_after.is_some_and(|limit| n >= limit) {
                    return Err(acks.failed(Broken));
                }
                n += 1;
                self.seen.lock().unwrap().acked.push(event.id.clone());
                acks.delivered(event.seq);
            }
            Ok(())
        })
    }
}

/// The scene's config with a state directory and a file sink `log`, plus the fake as sink
/// `fake`.
fn config(scene: &Scene, fake: Fake) -> kubecast::config::Validated {
    let text = scene.config(
        &format!("state:\n  dir: {}\n", scene.dir.join("state").display()),
        &[file_sink("log", &scene.dir.join("log.jsonl"))],
    );
    let mut v = load_str("test.yaml", &text, Vec::new())
        .expect("the test's config loads")
        .validate()
        .expect("the test's config is valid");
    v.sinks.push((
        "fake".to_string(),
        ValidSink {
            queue: QueueConfig::default(),
            compat: Default::default(),
            dead_letter: DeadLetter::new(None),
            sink: Box::new(fake),
        },
    ));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_failing_with_no_event_flowing_stops_the_pipeline_at_once_naming_it() {
    let scene = Scene::new("contract-quiet").await;
    let fake = Fake {
        fail_after: None,
        at_start: true,
        seen: Arc::default(),
    };
    let started = Instant::now();
    let run = pipeline::run(
        config(&scene, fake),
        scene.client.clone(),
        std::future::pending(),
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the pipeline stopped within 10 s of the sink's failure");
    match outcome {
        Err(PipelineError::Sink(e)) => {
            assert_eq!(&*e.sink, "fake");
            let text = kubecast::error_chain(&e);
            assert!(
                text.contains("sink `fake` failed") && text.contains("the fake destination broke"),
                "{text}"
            );
        }
        other => panic!("expected the fake sink's error, got {other:?}"),
    }
    println!("pipeline stopped {:?} after start", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sink_failed_a_restart_delivers_exactly_what_it_had_not_acknowledged_with_the_same_ids()
 {
    let scene = Scene::new("contract-restart").await;
    let mut uids = BTreeSet::new();
    for i in 0..6 {
        let pod = scene.pods.create(&format!("p{i}")).await;
        uids.insert(
            pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }

    // First run: the fake acknowledges 3 events, then fails on the 4th.
    let first = Arc::new(Mutex::new(Seen::default()));
    let fake = Fake {
        fail_after: Some(3),
        at_start: false,
        seen: first.clone(),
    };
    let run = pipeline::run(
        config(&scene, fake),
        scene.client.clone(),
        std::future::pending(),
    );
    let outcome = tokio::time::timeout(LIMIT, run)
        .await
        .expect("the first run stopped");
    assert!(
        matches!(&outcome, Err(PipelineError::Sink(e)) if &*e.sink == "fake"),
        "the fake sink's failure ends the run: {outcome:?}"
    );
    let (received1, acked1) = {
        let s = first.lock().unwrap();
        (s.received.clone(), s.acked.clone())
    };
    assert_eq!(acked1.len(), 3, "{received1:?}");
    assert_eq!(received1.len(), 4, "failed on the 4th: {received1:?}");

    // Second run, same state directory: the fake now works.
    let second = Arc::new(Mutex::new(Seen::default()));
    let fake = Fake {
        fail_after: None,
        at_start: false,
        seen: second.clone(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(pipeline::run(
        config(&scene, fake),
        scene.client.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    let got_all = wait_for(LIMIT, "the rest of the pods", || {
        let s = second.lock().unwrap();
        (acked1.len() + s.acked.len() >= uids.len()).then(|| s.acked.clone())
    })
    .await;
    let acked2 = got_all.unwrap_or_else(|| {
        panic!(
            "the restart did not deliver the rest; first run acked {acked1:?}, second got {:?}",
            second.lock().unwrap().acked
        )
    });
    let _ = stop.send(());
    let outcome = tokio::time::timeout(LIMIT, run)
        .await
        .expect("the second run stopped");
    outcome.expect("the run task").expect("a clean second run");

    // Exactly the unacknowledged ones, the received-but-unacknowledged one with its id.
    let first_acked: BTreeSet<&String> = acked1.iter().collect();
    assert!(
        acked2.iter().all(|id| !first_acked.contains(id)),
        "nothing acknowledged is sent again: first {acked1:?}, second {acked2:?}"
    );
    assert!(
        acked2.contains(&received1[3]),
        "the event it failed on comes again with the same id {}: {acked2:?}",
        received1[3]
    );
    let all: BTreeSet<String> = acked1.iter().chain(&acked2).cloned().collect();
    let expected: BTreeSet<String> = uids.iter().map(|u| format!("{u}:")).collect();
    assert_eq!(all.len(), uids.len(), "one added event per pod: {all:?}");
    for (id, prefix) in all.iter().zip(&expected) {
        assert!(
            id.starts_with(prefix.as_str()) && id.ends_with(":added"),
            "{id} for {prefix}"
        );
    }
}
