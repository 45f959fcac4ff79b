//! Producing events and turning delivery reports into acks. Entry point: [`run`], the
//! [`Sink`] of a validated [`KafkaSettings`].
//!
//! Records are keyed by the pod uid, so one pod's events share a partition; the idempotent
//! producer with an unlimited delivery timeout keeps their order through broker outages. An
//! event is reported delivered only when its delivery report arrives, and reports are
//! settled in send order ([`InFlight`]). Each topic is looked up before its first record
//! ([`TopicGuard`]); a refusal, a long wait or a topic deleted under the sink is held as
//! [`Hold`] says (a deleted one is created again with `create_topics`), and the records Kafka
//! gave back meanwhile are sent again in their order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::oneshot;

use super::KafkaSettings;
use super::context::{Context, Fatal, KafkaSinkError};
use super::hold::{Hold, STALL};
use super::inflight::InFlight;
use super::producer::{Delivered, Delivery, Producer};
use super::record::{Unsendable, enqueue, topic_of};
use super::refusal::{Operation, Refusal, Resource, missing, refused};
use super::take_over::TxnKeeper;
use super::topics::{Kind, TopicError, TopicGuard, gone};
use crate::backoff::Backoff;
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
    /// When it was handed to librdkafka.
    sent: Instant,
    /// Why it could not be handed over again, to dead-letter in its turn (its report is
    /// none).
    unsendable: Option<String>,
}

impl Pending {
    fn new(event: Arc<Event>, dead: Option<String>) -> Pending {
        Pending {
            event,
            dead,
            sent: Instant::now(),
            unsendable: None,
        }
    }
}

/// What the sink's loop works with besides the records in flight.
struct Run<'a> {
    producer: &'a Producer,
    settings: &'a KafkaSettings,
    acks: &'a Acks,
    guard: TopicGuard,
    hold: Hold,
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
    let producer =
        Producer::create(&config, context).map_err(|e| acks.failed(KafkaSinkError::Create(e)))?;
    let guard = TopicGuard::new(&settings.at, settings.create_topics.clone(), &config);
    let mut run = Run {
        producer: &producer,
        settings: &settings,
        acks: &acks,
        guard,
        hold: Hold::new(),
    };
    let probe = tokio::spawn(probe(producer.clone(), acks.clone(), fatal.clone()));
    let mut inflight: Outstanding = InFlight::new();
    let mut stall_check = tokio::time::interval(Duration::from_secs(1));
    stall_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Whether the topic of a record waiting too long was deleted, asked beside the loop.
    let mut lookup: Option<tokio::task::JoinHandle<Option<String>>> = None;
    let mut open = true;
    while open || !inflight.is_empty() {
        if let Some(e) = fatal.take() {
            probe.abort();
            return Err(acks.failed(e));
        }
        // Nothing new is taken while Kafka refuses what the sink has.
        let room = inflight.len() < settings.in_flight && run.hold.refused.is_none();
        // Whether the oldest record waits too long is looked at once a second while records
        // are out, not with a timer per record: the per-event path stays free of timers.
        let watch_stall = !run.hold.stalled && !inflight.is_empty();
        tokio::select! {
            biased;
            _ = fatal.wake.notified() => continue,
            (pending, done) = inflight.next() => {
                settle(&mut run, pending, done, &mut inflight).await?;
            }
            _ = stall_check.tick(), if watch_stall => {
                if let Some(p) = inflight.front().filter(|p| p.sent.elapsed() >= STALL) {
                    let topic = topic_of(&settings, &p.event, p.dead.is_some());
                    run.hold.stalled(&acks, &topic, fatal.recent());
                    lookup = Some(tokio::spawn(gone(producer.clone(), topic)));
                }
            }
            Some(answer) = async {
                match lookup.as_mut() {
                    Some(asked) => Some(asked.await),
                    None => None,
                }
            }, if lookup.is_some() => {
                lookup = None;
                if let Ok(Some(topic)) = answer {
                    deleted(&mut run, &topic).await?;
                }
            }
            next = rx.recv(), if open && room => match next {
                Some(event) => submit(&mut run, event, &mut inflight).await?,
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
            p.client()
                .fetch_metadata(None, Duration::from_secs(3))
                .is_ok()
        })
        .await
        .unwrap_or(false);
        if answered {
            fatal
                .connected
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if up != Some(answered) {
            acks.connected(answered);
            up = Some(answered);
        }
        tokio::time::sleep(Duration::from_secs(if answered { 5 } else { 1 })).await;
    }
}

/// Makes sure `topic` exists before a record goes to it: Kafka not answering is waited
/// for; a refusal stops the sink before its first delivery and is held after it; a missing
/// topic stops it too, unless the sink delivered already or saw the topic before (it was
/// deleted under it): then it is held until the topic exists again (`create_topics` creates
/// it instead, in the guard).
async fn ensure_topic(run: &mut Run<'_>, topic: &str) -> Result<(), SinkError> {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
    let mut waited = false;
    loop {
        let wait = match run
            .guard
            .ensure(topic, Kind::Events, Some(run.producer))
            .await
        {
            Ok(()) => {
                if waited {
                    run.hold.resumed();
                }
                return Ok(());
            }
            Err(TopicError::Unanswered { source, .. }) => {
                tracing::warn!(sink = %run.acks.sink(), topic, error = %source, "Kafka did not answer the topic's lookup; asking again");
                backoff.next_delay()
            }
            Err(TopicError::Refused(r)) if run.hold.delivered_once => {
                run.hold.refused(run.acks, r.to_string())
            }
            Err(e @ TopicError::Missing { .. })
                if run.hold.delivered_once || run.guard.seen(topic) =>
            {
                // A lookup is cheap: the topic is looked for more often than a refusal is
                // tried again, so the records go on soon after it is back.
                run.hold.missing(run.acks, e.to_string());
                backoff.next_delay()
            }
            Err(e @ TopicError::Create { .. }) if run.hold.delivered_once => {
                run.hold.refused(run.acks, e.to_string())
            }
            Err(e) => {
                tracing::error!(sink = %run.acks.sink(), error = %e, "cannot write to the topic");
                return Err(run.acks.failed(KafkaSinkError::Topic(e)));
            }
        };
        waited = true;
        tokio::time::sleep(wait).await;
    }
}

/// `topic`, of a record that has waited [`STALL`], was deleted: held on (or created again)
/// now rather than when librdkafka gives its records back (after its metadata propagation
/// time, 30 s); librdkafka sends them itself once the topic is back.
async fn deleted(run: &mut Run<'_>, topic: &str) -> Result<(), SinkError> {
    run.guard.forget(topic);
    ensure_topic(run, topic).await?;
    run.hold.resumed();
    Ok(())
}

/// Sends `event` (or its dead letter, when `dead` holds the reason), dead-lettering it if
/// Kafka refuses it outright.
async fn submit(
    run: &mut Run<'_>,
    event: Arc<Event>,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    let topic = topic_of(run.settings, &event, false);
    ensure_topic(run, &topic).await?;
    match send(run, &event, &topic, None).await? {
        Ok(delivery) => {
            inflight.push(Pending::new(event, None), delivery);
            Ok(())
        }
        Err(why) => dead_letter(run, event, why.to_string(), inflight).await,
    }
}

/// Sends `event`'s dead letter to the dead-letter topic, or writes it to the file / log.
async fn dead_letter(
    run: &mut Run<'_>,
    event: Arc<Event>,
    reason: String,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    if run.settings.dead_letter_topic.is_none() {
        return run.acks.dead_letter(&event, reason).await;
    }
    let topic = topic_of(run.settings, &event, true);
    ensure_topic(run, &topic).await?;
    match send(run, &event, &topic, Some(&reason)).await? {
        Ok(delivery) => {
            inflight.push(Pending::new(event, Some(reason)), delivery);
            Ok(())
        }
        Err(e) => {
            run.acks
                .dead_letter(
                    &event,
                    format!("{reason}; the dead-letter topic refused it too: {e}"),
                )
                .await
        }
    }
}

/// Hands the record to librdkafka. One librdkafka refuses at once because Kafka refuses
/// its topic (a permission taken away, the topic gone: it then knows no partitions) is held
/// and handed over again, never dead-lettered; other refusals are the caller's to settle.
async fn send(
    run: &mut Run<'_>,
    event: &Event,
    topic: &str,
    dead: Option<&str>,
) -> Result<Result<Delivery, Unsendable>, SinkError> {
    loop {
        match enqueue(
            run.producer,
            run.settings,
            run.acks.sink(),
            (event, topic),
            dead,
        )
        .await
        {
            Err(Unsendable::Refused(e)) if is_held(&e) => hold_on(run, &e, topic, None).await?,
            other => return Ok(other),
        }
    }
}

/// Whether Kafka refusing a record with `e` is a refusal of its topic, to hold.
fn is_held(e: &KafkaError) -> bool {
    e.rdkafka_error_code()
        .is_some_and(|c| refused(c) || missing(c))
}

/// Kafka refused `topic` with `e`, for a record sent at `sent` (`None`: librdkafka refused
/// it at once). A missing topic is looked up: [`ensure_topic`] holds until it exists again,
/// or creates it again. A refusal stops the sink before its first delivery, naming the ACL;
/// after it, readiness names it and this waits out the backoff. Either way the topic is then
/// looked up again. A record sent before the sink last resumed failed for what was over by
/// then: its topic is only looked up again.
async fn hold_on(
    run: &mut Run<'_>,
    e: &KafkaError,
    topic: &str,
    sent: Option<Instant>,
) -> Result<(), SinkError> {
    let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Unknown);
    let wait = if sent.is_some_and(|s| run.hold.resumed_since(s)) {
        Duration::ZERO
    } else if missing(code) {
        run.guard.forget(topic);
        ensure_topic(run, topic).await?;
        // Kafka has it (again) while librdkafka, which refused it, does not know yet.
        run.hold.pause()
    } else {
        let refusal = held(e, topic);
        if !run.hold.delivered_once {
            tracing::error!(sink = %run.acks.sink(), error = %refusal, "Kafka refuses the sink's first records");
            return Err(run.acks.failed(KafkaSinkError::Refused(refusal)));
        }
        run.hold.refused(run.acks, refusal.to_string())
    };
    tokio::time::sleep(wait).await;
    run.guard.forget(topic);
    ensure_topic(run, topic).await?;
    run.hold.resumed();
    Ok(())
}

/// Sends `first` again, and with it every record after it whose report is in already and
/// is a refusal of its topic too (Kafka gives back a deleted topic's records all at once):
/// they go again in their order, in front of the rest. Records between them whose reports
/// say otherwise keep them, to be settled in their turn.
async fn send_again(
    run: &mut Run<'_>,
    first: Pending,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    let mut again: Vec<(Pending, Option<Delivered>)> = vec![(first, None)];
    while let Some((pending, done)) = inflight.next().now_or_never() {
        match done {
            Ok(Err(e)) if is_held(&e) => again.push((pending, None)),
            other => again.push((pending, Some(other))),
        }
    }
    let mut front = Vec::with_capacity(again.len());
    for (mut pending, done) in again {
        let report = match done {
            Some(done) => reported(done),
            None => {
                let topic = topic_of(run.settings, &pending.event, pending.dead.is_some());
                pending.sent = Instant::now();
                match send(run, &pending.event, &topic, pending.dead.as_deref()).await? {
                    Ok(delivery) => delivery,
                    Err(why) => {
                        pending.unsendable = Some(why.to_string());
                        reported(Ok(Ok(())))
                    }
                }
            }
        };
        front.push((pending, report));
    }
    for (pending, report) in front.into_iter().rev() {
        inflight.push_front(pending, report);
    }
    Ok(())
}

/// A report that is in already, to be settled again in its turn.
fn reported(done: Delivered) -> Delivery {
    let (tx, rx) = oneshot::channel();
    // A report whose sender went (the producer gone) stays so: `tx` is dropped unsent.
    if let Ok(result) = done {
        let _ = tx.send(result);
    }
    rx
}

/// Turns one delivery report into an ack, a dead letter, or (Kafka refusing the topic) the
/// same record sent again in front of the others.
async fn settle(
    run: &mut Run<'_>,
    pending: Pending,
    done: Delivered,
    inflight: &mut Outstanding,
) -> Result<(), SinkError> {
    let Pending {
        event,
        dead,
        sent,
        unsendable,
    } = pending;
    if let Some(why) = unsendable {
        return match dead {
            None => dead_letter(run, event, why, inflight).await,
            Some(reason) => {
                run.acks
                    .dead_letter(
                        &event,
                        format!("{reason}; the dead-letter topic refused it too: {why}"),
                    )
                    .await
            }
        };
    }
    match (done, dead) {
        (Ok(Ok(_)), None) => {
            run.hold.delivered(run.acks);
            run.acks.delivered(event.seq);
            Ok(())
        }
        (Ok(Ok(_)), Some(reason)) => {
            run.hold.delivered(run.acks);
            tracing::error!(sink = %run.acks.sink(), id = %event.id, reason, "event dead-lettered to Kafka");
            run.acks.reported_dead(event.seq, reason);
            Ok(())
        }
        (Ok(Err(e)), dead) if is_held(&e) => {
            let topic = topic_of(run.settings, &event, dead.is_some());
            hold_on(run, &e, &topic, Some(sent)).await?;
            let pending = Pending {
                event,
                dead,
                sent,
                unsendable: None,
            };
            send_again(run, pending, inflight).await
        }
        (Ok(Err(e)), None) => {
            let reason = format!("Kafka did not accept the record: {e}");
            dead_letter(run, event, reason, inflight).await
        }
        (Ok(Err(e)), Some(reason)) => {
            run.acks
                .dead_letter(
                    &event,
                    format!("{reason}; the dead-letter topic refused it too: {e}"),
                )
                .await
        }
        (Err(_canceled), _) => Err(run.acks.failed(KafkaSinkError::ProducerGone)),
    }
}

/// A refused topic's delivery error, as the permission it names.
fn held(e: &KafkaError, topic: &str) -> Refusal {
    let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Unknown);
    Refusal::new(Operation::Write, Resource::Topic, topic, code)
}
