//! The Alertmanager sink's task: it takes alert events from the queue (the only events it
//! takes: [`Takes::Alerts`], so the pipeline never hands it others, and its outage holds
//! back nothing else), puts each in the table, wakes every instance's sender, and
//! acknowledges events in order once one instance has confirmed the table version their
//! alerts made. Entry point: [`run`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::alert::AmAlert;
use super::config::AmSettings;
use super::sender::Sender;
use super::table::Table;
use crate::event::Event;
use crate::sinks::http::Client;
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, Sink, SinkError, Takes};

/// Alert events taken but not yet acknowledged, at most: beyond it (every instance away),
/// the sink stops taking events, its queue fills, and the queue's `when_full` decides. Only
/// alerts count: other sinks never wait for it on other events.
const WINDOW: usize = 10_000;

/// An event taken, waiting for its acknowledgement.
enum Waiting {
    /// Acknowledged once an instance confirmed this table version (0: at once).
    Version(u64, u64),
    /// Not an alert kubecast can send: dead-lettered in its turn.
    Refused(Arc<Event>, String),
}

impl Sink for AmSettings {
    fn run(self: Box<Self>, rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        Box::pin(run(*self, rx, acks))
    }

    fn restore_alerts(&mut self, standing: &dyn Fn() -> Vec<Arc<Event>>) {
        self.restored = standing();
    }

    fn takes(&self) -> Takes {
        Takes::Alerts
    }
}

/// Runs the sink until its queue closes and every event taken was acknowledged.
pub async fn run(s: AmSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let table = Arc::new(Mutex::new(Table::default()));
    {
        let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
        for e in &s.restored {
            if let Some(Ok(a)) = AmAlert::of(e, &s.cluster, s.generator_url.as_ref()) {
                t.put(a);
            }
        }
        if !s.restored.is_empty() {
            tracing::info!(sink = %acks.sink(), alerts = s.restored.len(), "sending the standing alerts to every Alertmanager again");
        }
    }
    let (changed, changes) = watch::channel(0u64);
    let (confirmed_tx, mut confirmed) = mpsc::unbounded_channel();
    let mut senders = tokio::task::JoinSet::new();
    for (index, instance) in s.instances.iter().enumerate() {
        let client = Client::new(&instance.into()).map_err(|e| acks.failed(e))?;
        let sender = Sender {
            index,
            shown: instance.shown_url.clone(),
            client,
            table: table.clone(),
            resend: s.resend,
            max_alerts: s.max_alerts,
            metrics: acks.alertmanager_metrics(&instance.shown_url),
            confirmed: confirmed_tx.clone(),
        };
        senders.spawn(sender.run(changes.clone()));
    }
    drop(confirmed_tx);
    let mut up = vec![false; s.instances.len()];
    let mut best = 0u64;
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    let mut open = true;
    loop {
        // In order: each acknowledged once what it needs is confirmed.
        while let Some(w) = waiting.front() {
            match w {
                Waiting::Version(seq, v) if *v <= best => {
                    acks.delivered(*seq);
                    waiting.pop_front();
                }
                Waiting::Refused(..) => {
                    if let Some(Waiting::Refused(event, why)) = waiting.pop_front() {
                        acks.dead_letter(&event, why).await?;
                    }
                }
                Waiting::Version(..) => break,
            }
        }
        if !open && waiting.is_empty() {
            return Ok(());
        }
        tokio::select! {
            e = rx.recv(), if open && waiting.len() < WINDOW => match e {
                None => open = false,
                Some(event) => match AmAlert::of(&event, &s.cluster, s.generator_url.as_ref()) {
                    // The pipeline never hands it one; `kubecast replay` re-publishing a
                    // topic through this sink does, and it passes in its turn.
                    None => waiting.push_back(Waiting::Version(event.seq, 0)),
                    Some(Ok(alert)) => {
                        let v = table.lock().unwrap_or_else(|p| p.into_inner()).put(alert);
                        changed.send_replace(v);
                        waiting.push_back(Waiting::Version(event.seq, v));
                    }
                    Some(Err(e)) => waiting.push_back(Waiting::Refused(event.clone(), format!("not an alert Alertmanager can take: {e}"))),
                },
            },
            Some((i, v, answered)) = confirmed.recv() => {
                best = best.max(v);
                if up.get(i).copied() != Some(answered) {
                    if let Some(u) = up.get_mut(i) {
                        *u = answered;
                    }
                    acks.connected(up.iter().any(|u| *u));
                }
            }
        }
    }
}
