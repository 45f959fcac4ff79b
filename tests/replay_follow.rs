//! `kubecast replay --follow` over a pattern while the topics it reads are busy: new topics
//! that match appear while records stream into eight partitions of another (so the follow
//! holds records of some partitions while others' next are due when it finds them), and every
//! record is printed exactly once. A follow started before any of its topics exist waits
//! for them (a new Kafka, before kubecast wrote anything) and reads each from its beginning,
//! or from `--since`; without `--follow` a pattern that matches nothing is an error. A
//! follow still reading a backlog that never runs out (it never reaches the end of its
//! partitions) finds a topic that appears meanwhile within a bound.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::consume::create_topic;
use support::follow::{EventWriter, Follow};
use support::kubecast::replay_command;
use support::{Stack, unique_name};

const LIMIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_that_appear_while_the_others_are_busy_lose_no_record_of_any() {
    let stack = Stack::load();
    let base = unique_name("follow-busy");
    let busy = format!("{base}-busy");
    create_topic(&stack, &busy, 8).await;
    let follow = Follow::start(&stack, &format!("^{base}-"), &[]).await;

    // Records into the busy topic's four partitions, without pause, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stack, busy, stop) = (stack.clone(), busy.clone(), stop.clone());
        std::thread::spawn(move || {
            let w = EventWriter::new(&stack);
            let mut sent = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let id = format!("busy-{}", sent.len());
                w.send(&busy, &id);
                sent.push(id);
                if sent.len() % 10 == 0 {
                    w.flush();
                }
            }
            w.flush();
            sent
        })
    };
    // Three topics appear one after another; the follow looks for new ones every 5 s.
    let mut want = Vec::new();
    let w = EventWriter::new(&stack);
    for t in 0..3 {
        let topic = format!("{base}-new-{t}");
        create_topic(&stack, &topic, 1).await;
        for i in 0..20 {
            let id = format!("new-{t}-{i}");
            w.send(&topic, &id);
            want.push(id);
        }
        w.flush();
        follow
            .wait_said(&format!("topic `{topic}` appeared"), LIMIT)
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    want.extend(writer.join().expect("the writer thread"));

    if let Err(e) = follow.wait_for_ids(&want, LIMIT).await {
        panic!("{e}");
    }
    let printed = follow.ids();
    let mut seen = std::collections::HashSet::new();
    let twice: Vec<&String> = printed.iter().filter(|id| !seen.insert(*id)).collect();
    assert!(twice.is_empty(), "printed more than once: {twice:?}");
    assert_eq!(
        printed.len(),
        want.len(),
        "every record written, and nothing else, is printed"
    );
    let (code, said) = follow.interrupt().await;
    assert_eq!(code, Some(0), "{said}");
    println!(
        "{} records followed over 4 topics (11 partitions), 3 of which appeared while it read",
        want.len()
    );
}

/// Records the follow has still to read, which the test tops up every 100 ms: a debug build
/// here reads about 13,000 a second, so the follow never reaches the end of its partitions
/// while the test waits (it would say `following`, which the test checks it never did).
const AHEAD: usize = 100_000;

/// How soon a topic that appears is read: the follow looks every 5 s, busy or not.
const FOUND_WITHIN: Duration = Duration::from_secs(20);

/// Writes `n` records `{prefix}-{from}`.. to `topic`, flushed: their ids.
fn write_ids(w: &EventWriter, topic: &str, prefix: &str, from: usize, n: usize) -> Vec<String> {
    let ids: Vec<String> = (from..from + n).map(|i| format!("{prefix}-{i}")).collect();
    for (k, id) in ids.iter().enumerate() {
        w.send(topic, id);
        // The producer's queue holds 100,000 records: flushed well before it is full.
        if k % 10_000 == 9_999 {
            w.flush();
        }
    }
    w.flush();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_appears_while_a_follow_reads_a_backlog_is_read_within_a_bound() {
    let stack = Stack::load();
    let base = unique_name("follow-backlog");
    let busy = format!("{base}-busy");
    create_topic(&stack, &busy, 4).await;
    let w = EventWriter::new(&stack);
    let mut backlog = write_ids(&w, &busy, "backlog", 0, AHEAD);
    let since = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1)).to_string();
    // From an hour ago: the follow starts with the whole backlog to read.
    let follow = Follow::spawn(&stack, &format!("^{base}-"), &["--since", &since]);
    let reading = support::consume::wait_for(LIMIT, "the first records", || {
        (!follow.ids().is_empty()).then_some(())
    })
    .await;
    assert!(
        reading.is_some(),
        "replay --follow printed nothing of the backlog; it said:\n{}",
        follow.said()
    );

    let new = format!("{base}-new");
    create_topic(&stack, &new, 1).await;
    let want_new = write_ids(&w, &new, "new", 0, 20);
    let appeared = std::time::Instant::now();
    // Until the new topic's records are printed (or the bound passed), the backlog is kept
    // ahead of the follow by [`AHEAD`] records.
    let found = loop {
        let printed = follow.ids();
        let have: std::collections::HashSet<&String> = printed.iter().collect();
        if want_new.iter().all(|id| have.contains(id)) {
            break Some(appeared.elapsed());
        }
        if appeared.elapsed() > FOUND_WITHIN {
            break None;
        }
        if backlog.len() - printed.len().min(backlog.len()) < AHEAD {
            let more = write_ids(&w, &busy, "backlog", backlog.len(), AHEAD / 4);
            backlog.extend(more);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let said = follow.said();
    let found = found.unwrap_or_else(|| {
        panic!(
            "the topic that appeared was not read within {FOUND_WITHIN:?} while the follow read \
             its backlog ({} of {} records printed); it said:\n{said}",
            follow.ids().len(),
            backlog.len()
        )
    });
    assert!(
        !said.contains("following "),
        "the follow caught up with its backlog, so it was not busy as this test needs; it said:\n{said}"
    );
    assert!(
        said.contains(&format!("topic `{new}` appeared")),
        "it says which topic appeared; it said:\n{said}"
    );

    // Every record of both, once each, and nothing else.
    let mut want = backlog;
    want.extend(want_new);
    if let Err(e) = follow.wait_for_ids(&want, LIMIT).await {
        panic!("{e}");
    }
    let printed = follow.ids();
    let mut seen = std::collections::HashSet::new();
    let twice: Vec<&String> = printed.iter().filter(|id| !seen.insert(*id)).collect();
    assert!(
        twice.is_empty(),
        "printed more than once: {:?}",
        &twice[..twice.len().min(5)]
    );
    assert_eq!(
        printed.len(),
        want.len(),
        "every record written, and nothing else"
    );
    let (code, said) = follow.interrupt().await;
    assert_eq!(code, Some(0), "{said}");
    println!(
        "a topic that appeared while the follow read a backlog was read {} ms later ({} records followed)",
        found.as_millis(),
        want.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_started_before_its_topics_exist_waits_and_reads_each_from_its_beginning() {
    let stack = Stack::load();
    let base = unique_name("follow-wait");
    let pattern = format!("^{base}-p-");
    let named = format!("{base}-named");
    let mut follow = Follow::spawn(&stack, &pattern, &["--topic", &named]);
    follow
        .wait_said(
            &format!("no topic matches `{pattern}` yet: waiting for one"),
            LIMIT,
        )
        .await;
    follow
        .wait_said(
            &format!("topic `{named}` does not exist yet: waiting for it"),
            LIMIT,
        )
        .await;
    assert!(
        follow.running(),
        "a follow with no topic yet keeps running; it said:\n{}",
        follow.said()
    );

    // The topics appear (as kubecast creates each with its first record), with records in
    // them before the follow finds them, and more after.
    let matched = format!("{base}-p-pods");
    let w = EventWriter::new(&stack);
    let mut want = Vec::new();
    for (topic, partitions) in [(&matched, 3), (&named, 1)] {
        create_topic(&stack, topic, partitions).await;
        for i in 0..10 {
            let id = format!("{topic}-early-{i}");
            w.send(topic, &id);
            want.push(id);
        }
    }
    w.flush();
    follow
        .wait_said(
            &format!("topic `{matched}` appeared (3 partition(s)): reading it from its beginning"),
            LIMIT,
        )
        .await;
    follow
        .wait_said(&format!("topic `{named}` appeared (1 partition(s))"), LIMIT)
        .await;
    for topic in [&matched, &named] {
        for i in 0..10 {
            let id = format!("{topic}-late-{i}");
            w.send(topic, &id);
            want.push(id);
        }
    }
    w.flush();
    if let Err(e) = follow.wait_for_ids(&want, LIMIT).await {
        panic!("{e}");
    }
    let printed = follow.ids();
    assert_eq!(
        printed.len(),
        want.len(),
        "every record of the topics that appeared, once each, and nothing else: {printed:?}"
    );
    let (code, said) = follow.interrupt().await;
    assert_eq!(
        code,
        Some(0),
        "Ctrl-C ends a follow with 0; it said:\n{said}"
    );
    assert!(
        said.contains("40 event(s)") && said.contains("followed until interrupted"),
        "the summary counts what was followed; it said:\n{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_appears_during_a_follow_since_a_time_is_read_from_that_time() {
    let stack = Stack::load();
    let base = unique_name("follow-wait-since");
    let topic = format!("{base}-events");
    let now = jiff::Timestamp::now();
    let since = now - jiff::SignedDuration::from_hours(1);
    let follow = Follow::spawn(
        &stack,
        &format!("^{base}-"),
        &["--since", &since.to_string()],
    );
    follow.wait_said("yet: waiting for one", LIMIT).await;
    // Stopped, the follow cannot look for topics: it finds this one with every record in it.
    follow.signal("-STOP");
    create_topic(&stack, &topic, 1).await;
    let w = EventWriter::new(&stack);
    let two_hours_ago = (now - jiff::SignedDuration::from_hours(2)).as_millisecond();
    for i in 0..5 {
        w.send_at(&topic, &format!("before-{i}"), Some(two_hours_ago + i));
    }
    let want: Vec<String> = (0..5).map(|i| format!("after-{i}")).collect();
    for id in &want {
        w.send(&topic, id);
    }
    w.flush();
    follow.signal("-CONT");
    follow
        .wait_said(
            &format!("topic `{topic}` appeared (1 partition(s)): reading it from offsets 0: 5"),
            LIMIT,
        )
        .await;
    if let Err(e) = follow.wait_for_ids(&want, LIMIT).await {
        panic!("{e}");
    }
    assert_eq!(
        follow.ids(),
        want,
        "only the records from --since on are printed"
    );
    let (code, said) = follow.interrupt().await;
    assert_eq!(code, Some(0), "{said}");
}

#[test]
fn without_follow_a_pattern_or_a_name_that_finds_no_topic_is_an_error() {
    let stack = Stack::load();
    let base = unique_name("follow-none");
    for (topic, says) in [
        (format!("^{base}-"), format!("no topic matches `^{base}-`")),
        (base.clone(), format!("topic `{base}` does not exist")),
    ] {
        let out = replay_command(&stack, &topic)
            .output()
            .expect("running kubecast replay");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "exit code 1; it said:\n{stderr}"
        );
        assert!(
            stderr.contains(&says),
            "it names what found nothing: {stderr}"
        );
    }
}
