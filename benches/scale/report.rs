//! The scale bench's tables, and its one check: every change the independent watches saw is
//! in kubecast's topics, and `kubecast replay --verify` passes on each.

use std::time::{Duration, Instant};

use super::lists::List;
use super::support::Stack;
use super::watch::{Arrivals, Truth};
use super::{Phase, RESOURCES};

fn per_1000(cpu_s: f64, changes: usize) -> f64 {
    cpu_s * 1e6 / changes.max(1) as f64
}

pub fn print(nodes: usize, pods: usize, phases: &[Phase], lists: &[List]) {
    println!("\n#### {nodes} nodes, {pods} pods: per phase\n");
    println!(
        "| phase | s | changes/s made | delivered/s | delay p50 / p99 / max ms | kubecast CPU ms per 1,000 | baseline CPU ms per 1,000 | kubecast RSS peak / end MiB | baseline RSS peak / end MiB | apiserver CPU s |"
    );
    println!("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |");
    for p in phases {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {:.0} | {:.0} | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} |",
            p.name,
            p.secs,
            p.made as f64 / p.secs,
            p.delivered as f64 / p.secs,
            p.delay_ms[0],
            p.delay_ms[1],
            p.delay_ms[2],
            per_1000(p.cpu[0], p.made),
            per_1000(p.cpu[1], p.made),
            p.rss[0].0,
            p.rss[0].1,
            p.rss[1].0,
            p.rss[1].1,
            p.cpu[2],
        );
    }
    println!("\n#### {nodes} nodes, {pods} pods: each bridge's initial list at the peak, alone\n");
    println!(
        "| bridge | s | CPU s | RSS peak MiB | apiserver CPU s | apiserver RSS peak MiB | LISTs | WATCHes open | streamed |"
    );
    println!("| --- | --: | --: | --: | --: | --: | --: | --: | --- |");
    for l in lists {
        println!(
            "| {} | {:.1} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {} |",
            l.bridge, l.secs, l.cpu, l.rss, l.api_cpu, l.api_rss, l.lists, l.watches, l.streamed
        );
    }
}

/// Every change seen is in Kafka (waits up to 10 minutes), and each topic verifies.
pub async fn check(stack: &Stack, topics: &[String], truths: &[Truth], arrivals: &Arrivals) {
    let started = Instant::now();
    println!("\n| resource | changes seen | in Kafka | lost | `replay --verify` |");
    println!("| --- | --: | --: | --: | --- |");
    for ((topic, truth), (resource, _)) in topics.iter().zip(truths).zip(RESOURCES) {
        let (ids, gaps) = truth
            .lock()
            .map(|s| {
                (
                    s.changes
                        .iter()
                        .map(|(id, _)| id.clone())
                        .collect::<Vec<_>>(),
                    s.gaps,
                )
            })
            .unwrap_or_default();
        let lost = loop {
            let lost = arrivals
                .lock()
                .map(|a| ids.iter().filter(|id| !a.contains_key(*id)).count())
                .unwrap_or(usize::MAX);
            if lost == 0 || started.elapsed() > Duration::from_secs(600) {
                break lost;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let (code, out, err) = super::support::kubecast::run_to_end(
            &[
                "replay",
                "--brokers",
                &stack.kafka_bootstrap,
                "--topic",
                topic,
                "--verify",
            ],
            &[],
        );
        let verdict = if code == Some(0) {
            "passes".to_string()
        } else {
            format!(
                "exit {code:?}: {}{}",
                out.lines().last().unwrap_or(""),
                err.lines().last().unwrap_or("")
            )
        };
        let gaps = if gaps > 0 {
            format!(" (the watch relisted {gaps} times)")
        } else {
            String::new()
        };
        println!(
            "| {resource} | {}{gaps} | {} | {lost} | {verdict} |",
            ids.len(),
            ids.len() - lost
        );
        assert_eq!(
            lost, 0,
            "{resource}: {lost} changes the independent watch saw never reached {topic}"
        );
    }
}
