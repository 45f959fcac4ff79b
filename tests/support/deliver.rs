//! Pushing ready-made events straight through one sink, the pipeline left out (the sink
//! benchmarks, and writing large topics for the replay benchmark). Entry point:
//! [`through_sink`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kubecast::classify::Classifier;
use kubecast::config::{DataMode, InitialList, RedactConfig, load_str};
use kubecast::event::{Encoder, Event};
use kubecast::ops::Ops;
use kubecast::sinks::Report;
use kubecast::watch::{WatchLine, parse_watch_line};
use tokio::sync::mpsc;

/// The `full` event of the fixture Pod (benches/fixtures/pod-watch-line.json, 5 KB of
/// data), as a first sight of it: the template the benchmarks vary.
pub fn fixture_event() -> Event {
    let line = include_str!("../../benches/fixtures/pod-watch-line.json");
    let pod = match parse_watch_line(Bytes::from(line.trim().to_string())) {
        Ok(WatchLine::Modified(pod)) => pod,
        other => panic!("the fixture is not a MODIFIED line: {other:?}"),
    };
    let change = Classifier::new(InitialList::Emit)
        .applied(&kubecast::classify::Scope::all_pods(), pod)
        .expect("a first sight is a change");
    let (event, error) =
        Encoder::new("bench", DataMode::Full, RedactConfig::default()).encode(&change);
    assert!(error.is_none(), "{error:?}");
    event
}

/// Starts the one sink of `config` (a whole kubecast config), pushes `events` (numbered
/// 1..=N) as fast as it takes them and returns once it reported the last one delivered and
/// ended cleanly; the time from the first push to the last report. Panics (naming `label`)
/// on a dead letter, a silent sink or a failed one.
pub async fn through_sink(label: &str, config: &str, events: &[Arc<Event>]) -> Duration {
    let config = load_str("bench.yaml", config, Vec::new())
        .expect("the bench's config loads")
        .validate()
        .expect("the bench's config is valid");
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    let mut sinks = kubecast::sinks::start(
        config.sinks,
        reports_tx,
        Arc::new(Ops::default()),
        kubecast::sinks::KeeperFeed::idle(),
    );
    let (_, queue) = sinks.queues.pop().expect("one sink");
    let last = events.len() as u64;
    let started = Instant::now();
    let feed = {
        let events = events.to_vec();
        tokio::spawn(async move {
            for e in events {
                if queue.push(e).await.is_err() {
                    break;
                }
            }
            // Dropping the queue closes it: the sink returns once all is reported.
        })
    };
    let limit = Duration::from_secs(300);
    loop {
        let report = tokio::time::timeout(limit, reports.recv())
            .await
            .unwrap_or_else(|_| panic!("{label}: no report for {limit:?}"))
            .unwrap_or_else(|| panic!("{label}: the sink stopped reporting"));
        match report {
            Report::Delivered { seq, .. } if seq == last => break,
            Report::Delivered { .. } => {}
            Report::DeadLettered { seq, reason, .. } => {
                panic!("{label}: event {seq} dead-lettered: {reason}")
            }
        }
    }
    let elapsed = started.elapsed();
    feed.await.expect("the feeding task");
    while let Some(exit) = sinks.tasks.join_next().await {
        let exit = exit.expect("a sink task");
        assert!(exit.outcome.is_ok(), "{label}: {:?}", exit.outcome);
    }
    elapsed
}
