//! Opening what a replay reads: the topics its `--topic` names and patterns choose, and
//! each partition's span of offsets from the range flags (times through Kafka's
//! offsets-for-times, offsets, the watermarks), with a consumer that commits nothing and
//! sees only committed records. Entry point: [`Topics::open`]; [`Topics::read`]
//! (`merge.rs`) reads the spans as one stream.
//!
//! A follow may start before its topics exist (kubecast creates a topic with its first
//! record): a name or pattern that finds nothing is then waited for, not an error, and
//! [`Topics::new_spans`] adds each topic as it appears.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use super::ReplayError;
use super::args::{Plan, Range, TopicChoice};

/// How long metadata, watermark and offsets-for-times requests may take.
const REQUEST: Duration = Duration::from_secs(15);

/// Records fetched ahead over all partitions, in KiB: each partition's queue gets its share,
/// between [`PREFETCH_MIN_KIB`] and [`PREFETCH_MAX_KIB`]. Every partition has a queue of its
/// own (the merge takes the earliest record of all), so librdkafka applies the limit per
/// partition; a fleet's many partitions would otherwise multiply the replay's memory.
const PREFETCH_KIB: usize = 8 * 1024;
const PREFETCH_MIN_KIB: usize = 1024;
const PREFETCH_MAX_KIB: usize = 8192;

/// One partition's records to read: offsets `start..end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub topic: Arc<str>,
    pub partition: i32,
    pub start: i64,
    pub end: i64,
}

/// The topics, opened for reading their spans.
pub struct Topics {
    pub(super) consumer: Arc<BaseConsumer<Quiet>>,
    /// The topics read, by name.
    pub names: Vec<String>,
    pub spans: Vec<Span>,
    /// Whether every span starts at offset 0: nothing before the range was ever written
    /// (or removed by retention).
    pub from_start: bool,
    /// `--follow`: spans have no end, and without `--since` or `--from-offset` they start
    /// at each partition's end.
    pub(super) follow: bool,
    pub(super) at_end: bool,
    /// Following: the patterns of `--topic` and the names not found yet, for the topics
    /// created while following.
    watch_for: Vec<TopicChoice>,
    /// Following: the names and patterns that found no topic when the follow started.
    pub(super) waiting: Vec<TopicChoice>,
    /// The range flags, for the topics found while following.
    range: Range,
}

/// Kafka's own complaints (a broker briefly unreachable) are retried by librdkafka; the
/// stall timeout is what gives up. A rejected authentication is kept, so that the replay
/// stops at once naming it instead of waiting for a timeout.
#[derive(Default)]
pub(super) struct Quiet {
    rejected: std::sync::Mutex<Option<String>>,
}

impl Quiet {
    pub(super) fn rejected(&self) -> Option<String> {
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

impl Topics {
    /// Connects, finds the topics the plan names or matches and works out every partition's
    /// span.
    pub fn open(plan: &Plan) -> Result<Topics, ReplayError> {
        let what = plan.topics_text();
        let kafka = |what_failed: &'static str| {
            let topic = what.clone();
            move |source| ReplayError::Kafka {
                what: what_failed,
                topic: topic.clone(),
                source,
            }
        };
        let consumer =
            Arc::new(new_consumer(plan, PREFETCH_MAX_KIB).map_err(kafka("creating the consumer"))?);
        let (names, waiting) =
            resolve(&consumer, &plan.topics, plan.follow).map_err(|e| match e {
                Resolve::Kafka(source) => kafka("reading the metadata")(source),
                Resolve::Rejected(r) => ReplayError::Rejected(r),
                Resolve::Missing(t) => ReplayError::NoTopic(t),
                Resolve::NoMatch(p) => ReplayError::NoMatch(p),
            })?;
        let at_end =
            plan.follow && plan.range.since_ms.is_none() && plan.range.from == Default::default();
        let mut spans = Vec::new();
        for (topic, all) in &names {
            let topic: Arc<str> = Arc::from(topic.as_str());
            let chosen = match &plan.range.partitions {
                None => all.clone(),
                Some(wanted) => {
                    if let Some(p) = wanted.iter().find(|p| !all.contains(p)) {
                        return Err(ReplayError::NoPartition {
                            topic: topic.to_string(),
                            partition: *p,
                            count: all.len(),
                        });
                    }
                    wanted.clone()
                }
            };
            let found = topic_spans(
                &consumer,
                &topic,
                &chosen,
                &plan.range,
                (plan.follow, at_end),
            )
            .map_err(|(what, source)| kafka(what)(source))?;
            spans.extend(found);
        }
        let from_start = spans.iter().all(|s| s.start == 0);
        // The reading consumer, its prefetch shared out over the partitions it reads.
        let share = (PREFETCH_KIB / spans.len().max(1)).clamp(PREFETCH_MIN_KIB, PREFETCH_MAX_KIB);
        let consumer = if share == PREFETCH_MAX_KIB {
            consumer
        } else {
            Arc::new(new_consumer(plan, share).map_err(kafka("creating the consumer"))?)
        };
        Ok(Topics {
            consumer,
            names: names.into_iter().map(|(n, _)| n).collect(),
            spans,
            from_start,
            follow: plan.follow,
            at_end,
            // Every pattern (a topic may yet appear that it matches), and the names not found.
            watch_for: plan
                .topics
                .iter()
                .filter(|c| plan.follow && matches!(c, TopicChoice::Pattern(_)))
                .chain(waiting.iter().filter(|c| matches!(c, TopicChoice::Name(_))))
                .cloned()
                .collect(),
            waiting,
            range: plan.range.clone(),
        })
    }

    /// Following: the partitions of topics a pattern matches, or named topics that did not
    /// exist yet, that are not among `known`, each with its span (from its beginning, or
    /// the range's start). None when nothing is looked for, or the brokers did not answer
    /// (looked for again later).
    pub(super) fn new_spans(&self, known: &[&Span]) -> Vec<Span> {
        if self.watch_for.is_empty() {
            return Vec::new();
        }
        let Ok(m) = self.consumer.fetch_metadata(None, Duration::from_secs(1)) else {
            return Vec::new();
        };
        let mut spans = Vec::new();
        for t in m.topics().iter().filter(|t| t.error().is_none()) {
            let name = t.name();
            let matched = self.watch_for.iter().any(|p| p.takes(name));
            if !matched || known.iter().any(|k| &*k.topic == name) {
                continue;
            }
            let topic: Arc<str> = Arc::from(name);
            let partitions: Vec<i32> = t
                .partitions()
                .iter()
                .map(|p| p.id())
                .filter(|p| {
                    self.range
                        .partitions
                        .as_ref()
                        .is_none_or(|only| only.contains(p))
                })
                .collect();
            // All of a topic created after the follow started is new: read from its
            // beginning, or from where the range flags say.
            match topic_spans(
                &self.consumer,
                &topic,
                &partitions,
                &self.range,
                (true, false),
            ) {
                Ok(found) => spans.extend(found),
                Err(_) => return Vec::new(),
            }
        }
        spans
    }

    /// Whether topics may join while reading: a follow with a pattern, or waiting for one.
    pub(super) fn may_grow(&self) -> bool {
        !self.watch_for.is_empty()
    }

    /// Records in the spans (none known ahead when following).
    pub fn total(&self) -> u64 {
        if self.follow {
            return 0;
        }
        self.spans
            .iter()
            .map(|s| (s.end - s.start).max(0) as u64)
            .sum()
    }

    /// Where reading a span starts: its start, or the partition's end (for `read_committed`,
    /// the last stable offset: a transaction still open there is read once committed).
    pub(super) fn start_of(&self, span: &Span) -> Offset {
        if self.at_end {
            Offset::End
        } else {
            Offset::Offset(span.start)
        }
    }
}

/// The replay's consumer.
fn new_consumer(plan: &Plan, prefetch_kib: usize) -> Result<BaseConsumer<Quiet>, KafkaError> {
    let mut config = ClientConfig::new();
    for (k, v) in &plan.connection {
        config.set(k, &v.0);
    }
    config
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
        .set("queued.max.messages.kbytes", prefetch_kib.to_string())
        // With a full prefetch queue librdkafka waits this long before fetching again
        // (1 s by default): the replay drains the queue in far less.
        .set("fetch.queue.backoff.ms", "5")
        // A follower's fetch returns as soon as a record is appended; the broker holds an
        // empty one this long (librdkafka's default, 500 ms, is also fine for a replay).
        .set("fetch.wait.max.ms", "100")
        .create_with_context(Quiet::default())
}

/// Why the topics could not be found.
enum Resolve {
    Kafka(KafkaError),
    Rejected(String),
    Missing(String),
    NoMatch(String),
}

/// A topic's name and its partitions.
type Described = (String, Vec<i32>);

/// The topics `choices` name or match, each with its partitions, in name order, and the
/// choices that found none. A name that does not exist, or a pattern that matches nothing,
/// is an error, unless `follow` (then it is waited for).
fn resolve(
    consumer: &BaseConsumer<Quiet>,
    choices: &[TopicChoice],
    follow: bool,
) -> Result<(Vec<Described>, Vec<TopicChoice>), Resolve> {
    let any_pattern = choices.iter().any(|c| matches!(c, TopicChoice::Pattern(_)));
    let mut found: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
    let mut waiting = Vec::new();
    let described = |only: Option<&str>| -> Result<Vec<Described>, Resolve> {
        let m = metadata(consumer, only).map_err(|e| match e {
            Ok(k) => Resolve::Kafka(k),
            Err(r) => Resolve::Rejected(r),
        })?;
        Ok(m.topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .map(|t| {
                let ps = t.partitions().iter().map(|p| p.id()).collect();
                (t.name().to_string(), ps)
            })
            .collect())
    };
    let everything = if any_pattern {
        Some(described(None)?)
    } else {
        None
    };
    for choice in choices {
        let candidates = match (&everything, choice) {
            (Some(all), _) => all.clone(),
            (None, TopicChoice::Name(n)) => described(Some(n))?,
            (None, TopicChoice::Pattern(_)) => Vec::new(),
        };
        let matched: Vec<_> = candidates
            .into_iter()
            .filter(|(name, _)| choice.takes(name))
            .collect();
        if matched.is_empty() && follow {
            waiting.push(choice.clone());
        } else if matched.is_empty() {
            return Err(match choice {
                TopicChoice::Name(n) => Resolve::Missing(n.clone()),
                TopicChoice::Pattern(p) => Resolve::NoMatch(p.as_str().to_string()),
            });
        }
        found.extend(matched);
    }
    Ok((found.into_iter().collect(), waiting))
}

/// The topic's metadata, asked for in short attempts so that a rejected authentication ends
/// the wait at once (`Err(Err(reason))`); `Err(Ok(e))` is the last error after [`REQUEST`].
fn metadata(
    consumer: &BaseConsumer<Quiet>,
    topic: Option<&str>,
) -> Result<rdkafka::metadata::Metadata, Result<KafkaError, String>> {
    let started = Instant::now();
    loop {
        match consumer.fetch_metadata(topic, Duration::from_secs(1)) {
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

/// The spans of `topic`'s `partitions` that `range` chooses. Following, spans have no end,
/// and with `at_end` they start at each partition's end. The error names the request that
/// failed.
fn topic_spans(
    consumer: &BaseConsumer<Quiet>,
    topic: &Arc<str>,
    partitions: &[i32],
    range: &Range,
    modes: (bool, bool),
) -> Result<Vec<Span>, (&'static str, KafkaError)> {
    // A topic just created (as a follow meets them) has partitions without a leader for a
    // moment; its brokers answer so until one is elected.
    let mut tries = 0;
    loop {
        match spans_once(consumer, topic, partitions, range, modes) {
            Err((_, e)) if tries < 20 && leaderless(&e) => {
                tries += 1;
                tracing::debug!(%topic, error = %e, "replay: a partition has no leader yet; asking again");
                std::thread::sleep(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// The answers of a partition whose leader is being elected.
fn leaderless(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::UnknownTopicOrPartition
        )
    )
}

fn spans_once(
    consumer: &BaseConsumer<Quiet>,
    topic: &Arc<str>,
    partitions: &[i32],
    range: &Range,
    (follow, at_end): (bool, bool),
) -> Result<Vec<Span>, (&'static str, KafkaError)> {
    let since = times(consumer, topic, partitions, range.since_ms)
        .map_err(|e| ("looking up --since", e))?;
    let until = times(consumer, topic, partitions, range.until_ms)
        .map_err(|e| ("looking up --until", e))?;
    let mut spans = Vec::with_capacity(partitions.len());
    for (i, p) in partitions.iter().enumerate() {
        let (low, high) = consumer
            .fetch_watermarks(topic, *p, REQUEST)
            .map_err(|e| ("reading the watermarks", e))?;
        let mut s = span(*p, low, high, range, since[i], until[i]);
        if follow {
            s.end = i64::MAX;
        }
        if at_end {
            s.start = high;
        }
        s.topic = topic.clone();
        spans.push(s);
    }
    Ok(spans)
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
        topic: Arc::from(""),
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
                topic: Arc::from(""),
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
                topic: Arc::from(""),
                partition: 0,
                start: 20,
                end: 60
            }
        );
        assert_eq!(
            span(1, 5, 100, &range, Some(20), Some(i64::MAX)),
            Span {
                topic: Arc::from(""),
                partition: 1,
                start: 50,
                end: 100
            }
        );
        // A range past the end, or ending before it starts, is empty.
        assert_eq!(
            span(0, 5, 100, &range, Some(i64::MAX), None),
            Span {
                topic: Arc::from(""),
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
                topic: Arc::from(""),
                partition: 2,
                start: 10,
                end: 10
            }
        );
    }
}
