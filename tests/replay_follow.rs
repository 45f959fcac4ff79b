//! `kubecast replay --follow` over a pattern while the topics it reads are busy: new topics
//! that match appear while records stream into eight partitions of another (so the follow
//! holds records of some partitions while others' next are due when it finds them), and every
//! record is printed exactly once.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::consume::create_topic;
use support::follow::{EventWriter, Follow};
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
            .wait_said(&format!("topic `{topic}` partition 0 matches"), LIMIT)
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
