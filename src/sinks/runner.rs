//! Running the sinks: each validated sink gets its bounded queue and its [`Acks`], and runs
//! as a task of one [`JoinSet`] that the pipeline's event loop watches, so a sink that ends
//! is seen at once, also when no event is flowing.
//!
//! Entry point: [`start`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::contract::{Acks, KeeperFeed, Report, SinkError, Takes, ValidSink};
use super::queue::{QueueTx, queue};
use crate::ops::Ops;

/// How a sink task ended.
#[derive(Debug)]
pub struct SinkExit {
    pub sink: Arc<str>,
    pub outcome: Result<(), Ended>,
}

/// Why a sink task ended before it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum Ended {
    #[error(transparent)]
    Failed(#[from] SinkError),
    /// A bug in the sink: it panicked.
    #[error("sink `{0}` panicked")]
    Panicked(Arc<str>),
}

/// The running sinks: the pipeline's side of each queue, and the tasks.
pub struct Sinks {
    /// Each sink's name and the sender side of its queue, in config order.
    pub queues: Vec<(Arc<str>, QueueTx)>,
    /// What each sink takes ([`super::Sink::takes`]), in config order.
    pub takes: Vec<Takes>,
    pub tasks: JoinSet<SinkExit>,
}

/// Spawns every sink; their reports arrive on `reports`; `feed` is for a keeper.
pub fn start(
    sinks: Vec<(String, ValidSink)>,
    reports: mpsc::UnboundedSender<Report>,
    ops: Arc<Ops>,
    feed: KeeperFeed,
) -> Sinks {
    let mut out = Sinks {
        queues: Vec::with_capacity(sinks.len()),
        takes: Vec::with_capacity(sinks.len()),
        tasks: JoinSet::new(),
    };
    for (name, valid) in sinks {
        let name: Arc<str> = name.into();
        ops.metrics
            .queue_bounds(&name, valid.queue.events, valid.queue.bytes);
        let (tx, rx) = queue(valid.queue);
        let rx = rx.with_compat(valid.compat);
        let acks = Acks::new(
            name.clone(),
            reports.clone(),
            valid.dead_letter,
            ops.clone(),
            feed.clone(),
        );
        out.takes.push(valid.sink.takes());
        let run = valid.sink.run(rx, acks);
        let sink = name.clone();
        out.tasks.spawn(async move {
            // A panic is turned into an exit naming the sink instead of an anonymous join
            // error.
            let outcome = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(Ended::Failed(e)),
                Err(_) => Err(Ended::Panicked(sink.clone())),
            };
            SinkExit { sink, outcome }
        });
        out.queues.push((name, tx));
    }
    out
}
