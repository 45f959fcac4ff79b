//! Reading the selected records of a topic: each partition's span of offsets from the
//! range flags (times through Kafka's offsets-for-times, offsets, the watermarks), read in
//! offset order per partition with a consumer that commits nothing and sees only committed
//! records. Entry points: [`Topic::open`], [`Topic::read`].

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};

use super::ReplayError;
use super::args::{Plan, Range};

/// How long metadata, watermark and offsets-for-times requests may take.
const REQUEST: Duration = Duration::from_secs(15);

/// Records fetched ahead per partition, in KiB.
const PREFETCH_KIB: &str = "8192";

/// One partition's records to read: offsets `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub partition: i32,
    pub start: i64,
    pub end: i64,
}

/// The topic, opened for reading its spans.
pub struct Topic {
    consumer: BaseConsumer<Quiet>,
    name: String,
    pub spans: Vec<Span>,
    /// Whether every span starts at offset 0: nothing before the range was ever written
    /// (or removed by retention).
    pub from_start: bool,
}

/// Kafka's own complaints (a broker briefly unreachable) are retried by librdkafka; the
/// stall timeout is what gives up. A rejected authentication is kept, so that the replay
/// stops at once naming it instead of waiting for a timeout.
#[derive(Default)]
struct Quiet {
    rejected: std::sync::Mutex<Option<String>>,
}

impl Quiet {
    fn rejected(&self) -> Option<String> {
        self.rejected.lock().ok().and_then(|r| r.clone())
    }
}

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::PartitionEOF) => {}
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => {
                if let Ok(mut r) = self.rejected.lock() {
                    r.get_or_insert_with(|| reason.to_string());
                }
            }
            _ => tracing::debug!(error = %error, reason, "replay: Kafka client error, retrying"),
        }
    }
}

impl ConsumerContext for Quiet {}

impl Topic {
    /// Connects, checks that the topic exists and works out every partition's span.
    pub fn open(plan: &Plan) -> Result<Topic, ReplayError> {
        let kafka = |what: &'static str| {
            let topic = plan.topic.clone();
            move |source| ReplayError::Kafka {
                what,
                topic: topic.clone(),
                source,
            }
        };
        let mut config = ClientConfig::new();
        for (k, v) in &plan.connection {
            config.set(k, &v.0);
        }
        let consumer: BaseConsumer<Quiet> = config
            // Offsets are never committed: the group id only satisfies the client.
            .set(
                "group.id",
                format!("kubecast-replay-{}", std::process::id()),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            // Records of aborted or open transactions (an `exactly_once` sink) are never read.
            .set("isolation.level", "read_committed")
            .set("allow.auto.create.topics", "false")
            // Prefetch per partition: librdkafka's default (64 MiB each) is most of the
            // replay's memory and buys no speed here (BENCHMARKS.md, "Replay").
            .set("queued.max.messages.kbytes", PREFETCH_KIB)
            // With a full prefetch queue librdkafka waits this long before fetching again
            // (1 s by default): the replay drains the queue in far less.
            .set("fetch.queue.backoff.ms", "5")
            .create_with_context(Quiet::default())
            .map_err(kafka("creating the consumer"))?;
        let metadata = metadata(&consumer, &plan.topic).map_err(|e| match e {
            Ok(source) => kafka("reading the metadata")(source),
            Err(rejected) => ReplayError::Rejected(rejected),
        })?;
        let t = metadata
            .topics()
            .first()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .ok_or_else(|| ReplayError::NoTopic(plan.topic.clone()))?;
        let all: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        let chosen = match &plan.range.partitions {
            None => all.clone(),
            Some(wanted) => {
                if let Some(p) = wanted.iter().find(|p| !all.contains(p)) {
                    return Err(ReplayError::NoPartition {
                        topic: plan.topic.clone(),
                        partition: *p,
                        count: all.len(),
                    });
                }
                wanted.clone()
            }
        };
        let since = times(&consumer, &plan.topic, &chosen, plan.range.since_ms)
            .map_err(kafka("looking up --since"))?;
        let until = times(&consumer, &plan.topic, &chosen, plan.range.until_ms)
            .map_err(kafka("looking up --until"))?;
        let mut spans = Vec::with_capacity(chosen.len());
        for (i, p) in chosen.iter().enumerate() {
            let (low, high) = consumer
                .fetch_watermarks(&plan.topic, *p, REQUEST)
                .map_err(kafka("reading the watermarks"))?;
            spans.push(span(*p, low, high, &plan.range, since[i], until[i]));
        }
        let from_start = spans.iter().all(|s| s.start == 0);
        Ok(Topic {
            consumer,
            name: plan.topic.clone(),
            spans,
            from_start,
        })
    }

    /// Records in the spans.
    pub fn total(&self) -> u64 {
        self.spans
            .iter()
            .map(|s| (s.end - s.start).max(0) as u64)
            .sum()
    }

    /// Calls `each` with every committed record of the spans, in offset order per partition,
    /// until every span is read or `each` breaks. Gives up when nothing arrives for `stall`
    /// while records are still due.
    pub fn read(
        &self,
        stall: Duration,
        mut each: impl FnMut(&BorrowedMessage<'_>) -> ControlFlow<()>,
    ) -> Result<(), ReplayError> {
        let kafka = |source| ReplayError::Kafka {
            what: "reading",
            topic: self.name.clone(),
            source,
        };
        let mut assignment = TopicPartitionList::new();
        let mut pending: HashSet<i32> = HashSet::new();
        for s in self.spans.iter().filter(|s| s.start < s.end) {
            assignment
                .add_partition_offset(&self.name, s.partition, Offset::Offset(s.start))
                .map_err(kafka)?;
            pending.insert(s.partition);
        }
        if pending.is_empty() {
            return Ok(());
        }
        self.consumer.assign(&assignment).map_err(kafka)?;
        let end_of = |p: i32| {
            self.spans
                .iter()
                .find(|s| s.partition == p)
                .map_or(0, |s| s.end)
        };
        let mut last = Instant::now();
        while !pending.is_empty() {
            let message = match self.consumer.poll(Duration::from_millis(200)) {
                None => {
                    if last.elapsed() >= stall {
                        return Err(ReplayError::Stalled {
                            topic: self.name.clone(),
                            stall,
                            partitions: sorted(&pending),
                        });
                    }
                    continue;
                }
                // A partition's end: with read_committed, the last stable offset. Records past
                // it belong to transactions still open and are not part of the record yet.
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    pending.remove(&p);
                    last = Instant::now();
                    continue;
                }
                Some(Err(e)) => return Err(kafka(e)),
                Some(Ok(m)) => m,
            };
            last = Instant::now();
            let p = message.partition();
            if !pending.contains(&p) {
                continue;
            }
            if message.offset() >= end_of(p) {
                pending.remove(&p);
                self.pause(p)?;
                continue;
            }
            if message.offset() + 1 >= end_of(p) {
                pending.remove(&p);
            }
            if each(&message).is_break() {
                return Ok(());
            }
            if !pending.contains(&p) {
                self.pause(p)?;
            }
        }
        Ok(())
    }

    /// Stops fetching a partition that is done.
    fn pause(&self, partition: i32) -> Result<(), ReplayError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.name, partition);
        self.consumer
            .pause(&tpl)
            .map_err(|source| ReplayError::Kafka {
                what: "pausing a partition",
                topic: self.name.clone(),
                source,
            })
    }
}

/// The topic's metadata, asked for in short attempts so that a rejected authentication ends
/// the wait at once (`Err(Err(reason))`); `Err(Ok(e))` is the last error after [`REQUEST`].
fn metadata(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
) -> Result<rdkafka::metadata::Metadata, Result<KafkaError, String>> {
    let started = Instant::now();
    loop {
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(1)) {
            Ok(m) => return Ok(m),
            Err(e) => {
                // Errors reach the context only while the consumer is polled (nothing is
                // assigned yet, so no record can come).
                let _ = consumer.poll(Duration::ZERO);
                if let Some(reason) = consumer.context().rejected() {
                    return Err(Err(reason));
                }
                if started.elapsed() >= REQUEST {
                    return Err(Ok(e));
                }
            }
        }
    }
}

fn sorted(set: &HashSet<i32>) -> Vec<i32> {
    let mut v: Vec<i32> = set.iter().copied().collect();
    v.sort_unstable();
    v
}

/// The offset of the first record at or after `at_ms` in each partition (`None`: none is,
/// or no time was given).
fn times(
    consumer: &BaseConsumer<Quiet>,
    topic: &str,
    partitions: &[i32],
    at_ms: Option<i64>,
) -> Result<Vec<Option<i64>>, KafkaError> {
    let Some(at) = at_ms else {
        return Ok(vec![None; partitions.len()]);
    };
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition_offset(topic, *p, Offset::Offset(at))?;
    }
    let found = consumer.offsets_for_times(tpl, REQUEST)?;
    Ok(partitions
        .iter()
        .map(
            |p| match found.find_partition(topic, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                // No record at or after the time: the partition's end.
                _ => Some(i64::MAX),
            },
        )
        .collect())
}

/// A partition's span: the latest of its start bounds and the earliest of its end bounds,
/// within its watermarks.
fn span(
    partition: i32,
    low: i64,
    high: i64,
    range: &Range,
    since: Option<i64>,
    until: Option<i64>,
) -> Span {
    let start = [Some(low), since, range.from.of(partition)]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(low)
        .min(high);
    let end = [Some(high), until, range.to.of(partition)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(high)
        .max(start);
    Span {
        partition,
        start,
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::args::Offsets;

    #[test]
    fn a_span_takes_the_narrowest_bounds_within_the_watermarks() {
        let mut range = Range::default();
        assert_eq!(
            span(0, 5, 100, &range, None, None),
            Span {
                partition: 0,
                start: 5,
                end: 100
            }
        );
        range.from = Offsets {
            all: Some(10),
            per: [(1, 50)].into(),
        };
        range.to = Offsets {
            all: None,
            per: [(0, 60)].into(),
        };
        assert_eq!(
            span(0, 5, 100, &range, Some(20), None),
            Span {
                partition: 0,
                start: 20,
                end: 60
            }
        );
        assert_eq!(
            span(1, 5, 100, &range, Some(20), Some(i64::MAX)),
            Span {
                partition: 1,
                start: 50,
                end: 100
            }
        );
        // A range past the end, or ending before it starts, is empty.
        assert_eq!(
            span(0, 5, 100, &range, Some(i64::MAX), None),
            Span {
                partition: 0,
                start: 100,
                end: 100
            }
        );
        range.to = Offsets {
            all: Some(3),
            per: Default::default(),
        };
        assert_eq!(
            span(2, 5, 100, &range, None, None),
            Span {
                partition: 2,
                start: 10,
                end: 10
            }
        );
    }
}
