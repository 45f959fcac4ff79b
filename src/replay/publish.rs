//! Re-publishing replayed events through one sink of a kubecast config (another Kafka
//! topic, an MQTT broker, a file), ids and attributes kept. Entry point: [`Publisher`].
//!
//! The sink runs as it does in the bridge: from its own bounded queue (always `block` here:
//! a replay has nothing to drop), reporting an event delivered only on the destination's
//! acknowledgement. [`Publisher::finish`] returns once every event was acknowledged or
//! dead-lettered. Only kubecast's own event types and data schemas can be re-published;
//! other events are counted and skipped.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use cloudevents::{AttributesReader, Event as CloudEvent};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use super::ReplayError;
use super::decode::{data_bytes, time_text};
use super::facts::{Facts, resource_of_source};
use crate::event::Event;
use crate::model::{ChangeKind, ObjectRef};
use crate::sinks::kafka::KafkaConfig;
use crate::sinks::queue::QueueTx;
use crate::sinks::{KeeperFeed, Report, SinkKind, Sinks, WhenFull};

/// The sink, running.
pub struct Publisher {
    runtime: Runtime,
    name: String,
    queue: Option<QueueTx>,
    sinks: Sinks,
    reports: mpsc::UnboundedReceiver<Report>,
    next_seq: u64,
    /// Events that are not kubecast's and were not re-published.
    pub skipped: u64,
}

/// The outcome of a re-publication.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    pub delivered: u64,
    pub dead_lettered: u64,
    pub skipped: u64,
}

impl Publisher {
    /// Loads `config`, validates its sink `name` and starts it.
    pub fn start(config: &Path, name: &str) -> Result<Publisher, ReplayError> {
        let usage =
            |message: String| ReplayError::Config(format!("{}: {message}", config.display()));
        let loaded = crate::config::load(config).map_err(|e| usage(crate::error_chain(&e)))?;
        let Some(sink) = loaded.sinks.get(name) else {
            let names: Vec<&str> = loaded.sinks.keys().map(String::as_str).collect();
            return Err(usage(format!(
                "has no sink `{name}` (its sinks: {})",
                names.join(", ")
            )));
        };
        if let SinkKind::Kafka(KafkaConfig {
            exactly_once: true, ..
        }) = &sink.kind
        {
            return Err(usage(format!(
                "sinks.{name}: an exactly_once sink keeps its checkpoint with the bridge's \
                 events; a replay cannot write through it (use the same sink without exactly_once)"
            )));
        }
        let mut common = sink.common.clone();
        common.queue.when_full = WhenFull::Block;
        let valid = sink
            .kind
            .validate(name, &common, &loaded.cluster)
            .map_err(|issues| {
                usage(
                    issues
                        .iter()
                        .map(|i| format!("{}: {}", i.field, i.message))
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?;
        // kube and rumqttc share rustls with ring as its provider; an error means one is
        // installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| ReplayError::Sink(format!("cannot start the async runtime: {e}")))?;
        let (tx, reports) = mpsc::unbounded_channel();
        let mut sinks = {
            let _inside = runtime.enter();
            crate::sinks::start(
                vec![(name.to_string(), valid)],
                tx,
                Arc::new(crate::ops::Ops::default()),
                KeeperFeed::idle(),
            )
        };
        let queue = sinks.queues.pop().map(|(_, q)| q);
        Ok(Publisher {
            runtime,
            name: name.to_string(),
            queue,
            sinks,
            reports,
            next_seq: 1,
            skipped: 0,
        })
    }

    /// Queues `event`, waiting while the sink's queue is full.
    pub fn publish(&mut self, event: &CloudEvent, facts: &Facts) -> Result<(), ReplayError> {
        let Some(mut e) = to_kubecast(event, facts) else {
            self.skipped += 1;
            return Ok(());
        };
        e.seq = self.next_seq;
        let Some(queue) = &self.queue else {
            return Err(self.ended());
        };
        match self.runtime.block_on(queue.push(Arc::new(e))) {
            Ok(_) => {
                self.next_seq += 1;
                Ok(())
            }
            Err(_) => Err(self.ended()),
        }
    }

    /// Why the sink stopped taking events.
    fn ended(&mut self) -> ReplayError {
        self.queue = None;
        let exit = self.runtime.block_on(self.sinks.tasks.join_next());
        let why = match exit {
            Some(Ok(exit)) => match exit.outcome {
                Err(e) => crate::error_chain(&e),
                Ok(()) => "it stopped".to_string(),
            },
            Some(Err(e)) => e.to_string(),
            None => "it stopped".to_string(),
        };
        ReplayError::Sink(format!("sink `{}`: {why}", self.name))
    }

    /// Closes the queue and waits until the sink has settled every event.
    pub fn finish(mut self) -> Result<Published, ReplayError> {
        self.queue = None;
        let mut failure = None;
        while let Some(exit) = self.runtime.block_on(self.sinks.tasks.join_next()) {
            match exit {
                Ok(exit) => {
                    if let Err(e) = exit.outcome {
                        failure = Some(crate::error_chain(&e));
                    }
                }
                Err(e) => failure = Some(e.to_string()),
            }
        }
        let mut out = Published {
            skipped: self.skipped,
            ..Published::default()
        };
        while let Ok(r) = self.reports.try_recv() {
            match r {
                Report::Delivered { .. } => out.delivered += 1,
                Report::DeadLettered { .. } => out.dead_lettered += 1,
            }
        }
        match failure {
            Some(why) => Err(ReplayError::Sink(format!("sink `{}`: {why}", self.name))),
            None => Ok(out),
        }
    }
}

/// kubecast's form of a replayed event, for the sinks; `None` when its type or data schema
/// is not one kubecast writes.
pub fn to_kubecast(event: &CloudEvent, facts: &Facts) -> Option<Event> {
    let kind = ChangeKind::of_type(event.ty())?;
    let schema = event.dataschema().map(|u| u.as_str())?;
    let dataschema = schema
        .strip_prefix("urn:kubecast:schema:")
        .map(|_| schema)?;
    let text = |name: &str, default: &str| -> Arc<str> {
        match event.extension(name) {
            Some(cloudevents::event::ExtensionValue::String(s)) => s.as_str().into(),
            _ => default.into(),
        }
    };
    let flag = |name: &str| {
        matches!(
            event.extension(name),
            Some(cloudevents::event::ExtensionValue::Boolean(true))
        )
    };
    Some(Event {
        seq: 0,
        id: event.id().to_string(),
        kind,
        ty: event.ty().into(),
        scope: "".into(),
        api_version: text("k8sapiversion", "v1"),
        k8s_kind: text("k8skind", "Pod"),
        source: event.source().to_string(),
        time: time_text(event)?.parse().ok()?,
        dataschema: dataschema.into(),
        object: ObjectRef {
            uid: facts.uid.clone()?,
            resource: resource_of_source(event.source().as_str()).into(),
            namespace: facts.namespace.as_deref().unwrap_or_default().into(),
            name: facts.name.clone().unwrap_or_default(),
        },
        rv: facts.rv.clone().unwrap_or_default(),
        prev_rv: facts.prev_rv.clone().unwrap_or_default(),
        inferred: flag("k8sinferred"),
        initial: flag("k8sinitial"),
        truncated: flag("k8struncated"),
        from_watch: false,
        route: None,
        compat: None,
        data: data_bytes(event)
            .map(|d| Bytes::copy_from_slice(&d))
            .unwrap_or_default(),
    })
}
