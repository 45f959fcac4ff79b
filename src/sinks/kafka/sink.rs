//! Producing events and turning delivery reports into acks. Entry point: [`run`], the
//! [`Sink`] of a validated [`KafkaSettings`].
//!
//! Records are keyed by the pod uid, so one pod's events share a partition; the idempotent
//! producer with an unlimited delivery timeout keeps their order through broker outages. An
//! event is reported delivered only when its delivery report arrives, and reports are
//! settled in send order ([`InFlight`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::ClientConfig;

use super::KafkaSettings;
use super::context::{Context, Fatal, KafkaSinkError};
use super::inflight::InFlight;
use super::producer::{Delivered, Delivery, Producer};
use super::record::enqueue;
use super::take_over::TxnKeeper;
use crate::event::Event;
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, Keeper, Sink, SinkError};

impl Sink for KafkaSettings {
    fn run(self: Box<Self>, rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        if self.exactly_once.is_some() {
            Box::pin(super::exactly_once::run(*self, rx, acks))
        } else {
            Box::pin(run(*self, rx, acks))
        }
    }

    fn keeper(&self) -> Option<Arc<dyn Keeper>> {
        let sink = self.exactly_once.as_ref()?.sink.as_str().into();
        Some(Arc::new(TxnKeeper::new(self.clone(), sink)))
    }
}

/// An event on its way to Kafka, or (with the reason) its dead letter on its way to the
/// dead-letter topic.
struct Pending {
    event: Arc<Event>,
    dead: Option<String>,
}

type Outstanding = InFlight<Pending, Delivery>;

/// Runs the sink until its queue closes, then waits for the outstanding reports.
pub async fn run(settings: KafkaSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let fatal = Arc::new(Fatal::default());
    let context = Context::with_fatal(acks.sink().clone(), fatal.clone());
    let mut config = ClientConfig::new();
    for (k, v) in &settings.properties {
        config.set(k, &v.0);
    }
    let producer = Producer::create(&config, context)
        .map_err(|e| acks.failed(KafkaSinkError::Create(e)))?;
    let probe = tokio::spawn(probe(producer.clone(), acks.clone(), fatal.clone()));
    let mut inflight: Outstanding = InFlight::new();
    let mut open = true;
    while open || !inflight.is_empty() {
        if let Some(e) = fatal.take() {
            probe.abort();
            return Err(acks.failed(e));
        }
        let room = inflight.len() < settings.in_flight;
        tokio::select! {
            biased;
            _ = fatal.wake.notified() => continue,
            (Pending { event, dead }, done) = inflight.next() => {
                settle(&producer, &settings, &acks, event, dead, done, &mut inflight).await?;
            }
            next = rx.recv(), if open && room => match next {
                Some(event) => submit(&producer, &settings, &acks, event, &mut inflight).await?,
                None => open = false,
            },
        }
    }
    probe.abort();
    // Everything was reported, so librdkafka's queue is empty; its flush still blocks its
    // caller, so it runs off the runtime's workers.
    let _ = tokio::task::spawn_blocking(move || producer.flush(Duration::from_secs(5))).await;
    Ok(())
}

/// Whether the brokers answer, for readiness: librdkafka connects and reconnects by itself
/// and says nothing when it succeeds, so a metadata request is made every few seconds (on
/// the blocking pool: it blocks its caller).
async fn probe(producer: Producer, acks: Acks, fatal: Arc<Fatal>) {
    let mut up = None;
    loop {
        let p = producer.clone();
        let answered = tokio::task::spawn_blocking(move || {
            p.client().fetch_metadata(None, Duration::from_secs(3)).is_ok()
        })
        .await
        .unwrap_or(false);
        if answered {
            fatal.connected.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if up != Some(answered) {
            acks.connected(answered);
            up = Some(answered);
        }
        tokio::time::sleep(Duration::from_secs(if answered { 5 } else { 1 })).await;
    }
}

/// Sends `event` (or its dead letter, when `dead` holds the reason), dead-lettering it if
/// Kafka refuses it outright.
async fn submit(
    producer: &Producer,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    match enqueue(producer, settings, acks.sink(), &event, None).await {
        Ok(delivery) => {
            inflight.push(Pending { event, dead: None }, delivery);
            Ok(())
        }
        Err(why) => dead_letter(producer, settings, acks, event, why.to_string(), inflight).await,
    }
}

/// Sends `event`'s dead letter to the dead-letter topic, or writes it to the file / log.
async fn dead_letter(
    producer: &Producer,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    reason: String,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    if settings.dead_letter_topic.is_none() {
        return acks.dead_letter(&event, reason).await;
    }
    match enqueue(producer, settings, acks.sink(), &event, Some(&reason)).await {
        Ok(delivery) => {
            inflight.push(
                Pending {
                    event,
                    dead: Some(reason),
                },
                delivery,
            );
            Ok(())
        }
        Err(e) => {
            acks.dead_letter(
                &event,
                format!("{reason}; the dead-letter topic refused it too: {e}"),
            )
            .await
        }
    }
}

/// Turns one delivery report into an ack or a dead letter.
async fn settle(
    producer: &Producer,
    settings: &KafkaSettings,
    acks: &Acks,
    event: Arc<Event>,
    dead: Option<String>,
    done: Delivered,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    match (done, dead) {
        (Ok(Ok(_)), None) => {
            acks.delivered(event.seq);
            Ok(())
        }
        (Ok(Ok(_)), Some(reason)) => {
            tracing::error!(sink = %acks.sink(), id = %event.id, reason, "event dead-lettered to Kafka");
            acks.reported_dead(event.seq, reason);
            Ok(())
        }
        (Ok(Err(e)), None) => {
            let reason = format!("Kafka did not accept the record: {e}");
            dead_letter(producer, settings, acks, event, reason, inflight).await
        }
        (Ok(Err(e)), Some(reason)) => {
            acks.dead_letter(
                &event,
                format!("{reason}; the dead-letter topic refused it too: {e}"),
            )
            .await
        }
        (Err(_canceled), _) => Err(acks.failed(KafkaSinkError::ProducerGone)),
    }
}
