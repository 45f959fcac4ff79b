//! Reading the spans of [`Topics`] as one stream. Every partition has its own queue
//! (librdkafka's partition queues, split before anything is assigned), holding what was
//! fetched ahead; the record given next is the earliest, by its timestamp, of the
//! partitions' next records. Per-partition offset order, and so each object's order, is
//! kept; topics and partitions interleave by time. Entry point: [`Topics::read`].
//!
//! A partition with nothing fetched yet holds the stream back until its next record or its
//! end arrives, so a replay's order does not depend on which broker answered first. When
//! following, a partition at its end does not hold anything back: a record appended there
//! later is given when it comes, even if another partition gave a later one meanwhile. A
//! follow also looks for new topics its patterns match (and named topics that did not exist
//! yet) every [`LOOK_FOR_TOPICS`], idle or busy reading a backlog, as Kafka's pattern
//! subscription does, and reads each from its beginning (or `--since`); the records the
//! partitions already took from their queues are carried over to the next pass, so a topic
//! that appears loses nothing. A follow that found no topic at all says once what it waits
//! for and looks until one appears.
//!
//! Errors the brokers recover from by themselves are waited out ([`super::outage`]).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::ReplayError;
use super::args::TopicChoice;
use super::outage::{Outage, transient};
use super::read::{Quiet, Span, Topics};

/// How long one wait for a record lasts before the stop flag and the stall are checked
/// again.
const WAIT: Duration = Duration::from_millis(100);

/// Where a partition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Its next record (or end) is still to come.
    Reading,
    /// Following: it reached its end; a record may still be appended.
    AtEnd,
    /// Its span is read.
    Done,
}

struct Part<'q> {
    span: &'q Span,
    queue: &'q Queue,
    /// The partition's next record, taken from its queue. Owned (a copy of the record,
    /// small beside decoding it), so that it outlives the pass that took it.
    head: Option<OwnedMessage>,
    state: State,
}

/// A partition's place between two passes of the merge: its state and the record it holds.
type Carried = (State, Option<OwnedMessage>);

/// Set by any partition queue's callback when it becomes non-empty.
#[derive(Default)]
struct Wake {
    ready: Mutex<bool>,
    signal: Condvar,
}

impl Wake {
    fn notify(&self) {
        if let Ok(mut r) = self.ready.lock() {
            *r = true;
        }
        self.signal.notify_all();
    }

    /// Waits until a queue received something, at most `limit`.
    fn wait(&self, limit: Duration) {
        let Ok(guard) = self.ready.lock() else {
            return;
        };
        let Ok((mut guard, _)) = self
            .signal
            .wait_timeout_while(guard, limit, |ready| !*ready)
        else {
            return;
        };
        *guard = false;
    }
}

/// Why one pass of the merge ended.
enum Outcome {
    /// Every span is read, `each` broke or the stop flag was set.
    Ended,
    /// Following, new topics match a pattern: read them too.
    Grew(Vec<Span>),
}

/// What a merge carries from one pass to the next.
struct Progress {
    /// When a record or a partition's end last arrived.
    last: Instant,
    /// Whether `notice` was told the follow caught up.
    announced: bool,
    /// When the topics were last looked for new ones matching a pattern.
    looked: Instant,
    /// The brokers not answering, while they do not.
    outage: Outage,
}

/// How often a follow looks for new topics matching its patterns.
const LOOK_FOR_TOPICS: Duration = Duration::from_secs(5);

type Queue = rdkafka::consumer::base_consumer::PartitionQueue<Quiet>;

impl Topics {
    /// Calls `each` with every committed record of the spans, earliest first across
    /// partitions and in offset order within one, until every span is read, `each` breaks
    /// or `stop` is set. Following, `notice` is told once of the names and patterns that
    /// found no topic yet, once when every partition first reached its end (from then on
    /// each record appended is given as it comes), and of each new topic a pattern or a
    /// waited-for name matches. Gives up when nothing arrives for `stall` while a
    /// partition's next record is due.
    pub fn read(
        &self,
        stall: Duration,
        stop: &AtomicBool,
        mut notice: impl FnMut(String),
        mut each: impl FnMut(&Arc<str>, &OwnedMessage) -> ControlFlow<()>,
    ) -> Result<(), ReplayError> {
        let wake = Arc::new(Wake::default());
        let mut queues: Vec<(Span, Queue)> = Vec::new();
        let spans = self
            .spans
            .iter()
            .filter(|s| self.follow || s.start < s.end)
            .cloned()
            .collect();
        self.add(&mut queues, spans, &wake, |span| self.start_of(span))?;
        if queues.is_empty() && !self.follow {
            return Ok(());
        }
        for choice in &self.waiting {
            notice(match choice {
                TopicChoice::Name(n) => format!(
                    "topic `{n}` does not exist yet: waiting for it (looking every {}s; Ctrl-C stops)",
                    LOOK_FOR_TOPICS.as_secs()
                ),
                TopicChoice::Pattern(p) => format!(
                    "no topic matches `{}` yet: waiting for one (looking every {}s; Ctrl-C stops)",
                    p.as_str(),
                    LOOK_FOR_TOPICS.as_secs()
                ),
            });
        }
        let mut carried: Vec<Carried> = queues.iter().map(|_| (State::Reading, None)).collect();
        let mut progress = Progress {
            last: Instant::now(),
            announced: false,
            looked: Instant::now(),
            outage: Outage::default(),
        };
        loop {
            let outcome = self.merge(
                &queues,
                &mut carried,
                &mut progress,
                (stall, stop, &wake),
                &mut notice,
                &mut each,
            )?;
            match outcome {
                Outcome::Ended => return Ok(()),
                Outcome::Grew(spans) => {
                    for said in appeared(&spans) {
                        notice(said);
                    }
                    carried.extend(spans.iter().map(|_| (State::Reading, None)));
                    // Offset 0 may be gone to retention: the beginning is the log's start.
                    self.add(&mut queues, spans, &wake, |s| match s.start {
                        0 => Offset::Beginning,
                        at => Offset::Offset(at),
                    })?;
                }
            }
        }
    }

    /// Gives each span a queue of its own and adds it to the assignment at `start`.
    fn add(
        &self,
        queues: &mut Vec<(Span, Queue)>,
        spans: Vec<Span>,
        wake: &Arc<Wake>,
        start: impl Fn(&Span) -> Offset,
    ) -> Result<(), ReplayError> {
        let mut assignment = TopicPartitionList::new();
        for span in spans {
            // Split before the assignment: librdkafka then never forwards the partition's
            // records to the consumer's own queue.
            let mut queue = self
                .consumer
                .split_partition_queue(&span.topic, span.partition)
                .ok_or_else(|| ReplayError::NoTopic(span.topic.to_string()))?;
            let w = wake.clone();
            queue.set_nonempty_callback(move || w.notify());
            assignment
                .add_partition_offset(&span.topic, span.partition, start(&span))
                .map_err(|e| self.kafka(e))?;
            queues.push((span, queue));
        }
        if assignment.count() > 0 {
            self.consumer
                .incremental_assign(&assignment)
                .map_err(|e| self.kafka(e))?;
        }
        Ok(())
    }

    fn kafka(&self, source: KafkaError) -> ReplayError {
        ReplayError::Kafka {
            what: "reading",
            topic: self.names.join(", "),
            source,
        }
    }

    /// One pass of the merge over `queues` (whose states and held records are `carried`),
    /// until it ends or, following, new topics appear; then `carried` holds where each
    /// partition stands, with the record it took from its queue and has not given yet.
    fn merge(
        &self,
        queues: &[(Span, Queue)],
        carried: &mut [Carried],
        progress: &mut Progress,
        (stall, stop, wake): (Duration, &AtomicBool, &Wake),
        notice: &mut impl FnMut(String),
        each: &mut impl FnMut(&Arc<str>, &OwnedMessage) -> ControlFlow<()>,
    ) -> Result<Outcome, ReplayError> {
        let kafka = |e| self.kafka(e);
        let mut parts: Vec<Part<'_>> = queues
            .iter()
            .zip(carried.iter_mut())
            .map(|((span, queue), (state, head))| Part {
                span,
                queue,
                head: head.take(),
                state: *state,
            })
            .collect();
        while !stop.load(Ordering::Relaxed) {
            // New topics are looked for on a timer, busy or idle: a follow reading a backlog
            // that never runs out would otherwise never find them. They join between two
            // passes, the records the partitions hold carried over.
            if self.may_grow() && progress.looked.elapsed() >= LOOK_FOR_TOPICS {
                progress.looked = Instant::now();
                let known: Vec<&Span> = parts.iter().map(|p| p.span).collect();
                let grown = self.new_spans(&known);
                if !grown.is_empty() {
                    for (c, part) in carried.iter_mut().zip(parts) {
                        *c = (part.state, part.head);
                    }
                    return Ok(Outcome::Grew(grown));
                }
            }
            let mut arrived = false;
            for part in parts.iter_mut() {
                if part.head.is_some() || part.state == State::Done {
                    continue;
                }
                match part.queue.poll(Duration::ZERO) {
                    None => {}
                    Some(Ok(m)) => {
                        arrived = true;
                        if m.offset() >= part.span.end {
                            part.state = State::Done;
                            pause(&self.consumer, part.span).map_err(kafka)?;
                        } else {
                            part.head = Some(m.detach());
                            part.state = State::Reading;
                        }
                    }
                    // A partition's end: with read_committed, the last stable offset.
                    // Records past it belong to transactions still open and are not part
                    // of the record yet.
                    Some(Err(KafkaError::PartitionEOF(_))) => {
                        arrived = true;
                        if self.follow {
                            part.state = State::AtEnd;
                        } else {
                            part.state = State::Done;
                            pause(&self.consumer, part.span).map_err(kafka)?;
                        }
                    }
                    Some(Err(e)) if transient(&e) => progress.outage.begin(e, stall, notice),
                    Some(Err(e)) => return Err(kafka(e)),
                }
            }
            if arrived {
                progress.last = Instant::now();
                progress.outage.end(notice);
            }
            if self.follow
                && !progress.announced
                && !parts.is_empty()
                && parts.iter().all(|p| p.state == State::AtEnd)
            {
                progress.announced = true;
                let mut topics: Vec<&str> = parts.iter().map(|p| &*p.span.topic).collect();
                topics.sort_unstable();
                topics.dedup();
                notice(format!(
                    "following {} topic(s), {} partition(s); Ctrl-C stops",
                    topics.len(),
                    parts.len()
                ));
            }
            let due = parts
                .iter()
                .any(|p| p.head.is_none() && p.state == State::Reading);
            if !due {
                let earliest = parts
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| p.head.as_ref().map(|m| (order(m), i)))
                    .min();
                if let Some((_, i)) = earliest {
                    let part = &mut parts[i];
                    let Some(m) = part.head.take() else { continue };
                    let done = m.offset() + 1 >= part.span.end;
                    let flow = each(&part.span.topic, &m);
                    if done {
                        part.state = State::Done;
                        pause(&self.consumer, part.span).map_err(kafka)?;
                    }
                    if flow.is_break() {
                        return Ok(Outcome::Ended);
                    }
                    continue;
                }
                // (A follow that has found no topic yet has no part: it waits for one.)
                if !parts.is_empty() && parts.iter().all(|p| p.state == State::Done) {
                    return Ok(Outcome::Ended);
                }
            } else if !arrived && progress.last.elapsed() >= stall {
                return Err(ReplayError::Stalled {
                    topic: self.names.join(", "),
                    stall,
                    partitions: parts
                        .iter()
                        .filter(|p| p.head.is_none() && p.state == State::Reading)
                        .map(|p| p.span.partition)
                        .collect(),
                });
            }
            if arrived {
                continue;
            }
            if let Some(wait) = progress.outage.probe_due() {
                if self.consumer.fetch_metadata(None, wait).is_ok() {
                    progress.outage.end(notice);
                } else if let Some((since, source)) = progress.outage.over(stall) {
                    return Err(ReplayError::Unreachable {
                        topic: self.names.join(", "),
                        stall,
                        since,
                        source,
                    });
                }
            }
            // Serves the consumer's own events (errors, a rejected authentication);
            // every record comes through a partition queue.
            match self.consumer.poll(Duration::ZERO) {
                Some(Err(e)) if transient(&e) => progress.outage.begin(e, stall, notice),
                Some(Err(e)) => return Err(kafka(e)),
                _ => {}
            }
            if let Some(reason) = self.consumer.context().rejected() {
                return Err(ReplayError::Rejected(reason));
            }
            wake.wait(WAIT);
        }
        Ok(Outcome::Ended)
    }
}

/// What a follow says of the topics that appeared: one line per topic, with where its
/// partitions are read from (`spans` holds each topic's partitions together).
fn appeared(spans: &[Span]) -> Vec<String> {
    spans
        .chunk_by(|a, b| a.topic == b.topic)
        .map(|one| {
            let from = if one.iter().all(|s| s.start == 0) {
                "its beginning".to_string()
            } else {
                let at: Vec<String> = one
                    .iter()
                    .map(|s| format!("{}: {}", s.partition, s.start))
                    .collect();
                format!("offsets {}", at.join(", "))
            };
            format!(
                "topic `{}` appeared ({} partition(s)): reading it from {from}",
                one[0].topic,
                one.len()
            )
        })
        .collect()
}

/// The merge's order: the record's timestamp (records without one first), in milliseconds.
fn order(m: &OwnedMessage) -> i64 {
    m.timestamp().to_millis().unwrap_or(i64::MIN)
}

/// Stops fetching a partition that is done.
fn pause(consumer: &BaseConsumer<Quiet>, span: &Span) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&span.topic, span.partition);
    consumer.pause(&tpl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(topic: &str, partition: i32, start: i64) -> Span {
        Span {
            topic: Arc::from(topic),
            partition,
            start,
            end: i64::MAX,
        }
    }

    #[test]
    fn topics_that_appear_are_said_once_each_with_where_they_are_read_from() {
        let said = appeared(&[
            span("kubecast.pods", 0, 0),
            span("kubecast.pods", 1, 0),
            span("kubecast.nodes", 0, 5),
            span("kubecast.nodes", 1, 0),
        ]);
        assert_eq!(
            said,
            [
                "topic `kubecast.pods` appeared (2 partition(s)): reading it from its beginning",
                "topic `kubecast.nodes` appeared (2 partition(s)): reading it from offsets 0: 5, 1: 0",
            ]
        );
    }
}
