//! `kubecast replay`: reads Kafka topics back for an audit — one cluster's, or a fleet's
//! topics chosen by a pattern and read as one stream ordered by time — and prints the
//! selected events (whole CloudEvents, compact lines or JSON changes), follows them live
//! (`--follow`), re-publishes them through a sink, checks every object's chain of
//! previous-resourceVersion links (`--verify`), reconstructs the objects at a time
//! (`--state-at`), draws a timeline (`--html`) or compares two clusters
//! (`--diff-clusters`). Objects are keyed by (cluster, uid) throughout. Entry points:
//! [`run`] (the subcommand, exit code included) and [`replay`] (the same, returning what
//! it found).
//!
//! Reading is the consumer side, so any valid CloudEvent is taken, through the CloudEvents
//! SDK (`decode`); the bridge's producer keeps its own binding. The reader streams: memory
//! is bounded by the deduplication window, one chain summary per object (`--verify`) and
//! one entry per live pod (`--state-at`), never by the topic's length.
//!
//! Exit codes: 0 done (a follow interrupted by Ctrl-C included), 1 Kafka or a sink failed
//! (or a topic does not exist), 2 a bad command line or config, 3 `--verify` found the
//! record incomplete or out of order, 4 `--diff-clusters` found the clusters differ.

mod args;
mod changes;
mod decode;
mod dedup;
mod drift;
mod facts;
mod filter;
mod html;
mod lines;
mod merge;
mod outage;
mod output;
mod plan;
mod publish;
mod read;
mod session;
mod state;
#[cfg(test)]
mod testing;
mod verify;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use args::{Destination, Plan, ReplayArgs, StateFormat, UsageError};
pub use decode::{NotCloudEvent, Record, events_of};
#[doc(hidden)]
pub use html::{apply_patch, merge_patch};

/// What replay reads of a decoded event (its facts and its data as JSON): the replay-record
/// fuzz target runs it on every event it decodes.
#[doc(hidden)]
pub fn decode_facts(event: &cloudevents::Event) -> (String, Option<serde_json::Value>) {
    let facts = facts::Facts::of(event, facts::Place::default());
    (facts.object(), decode::data_json(event))
}
/// What `--follow` prints of decoded events: each written twice (the second a change against
/// the first) as compact coloured lines and as JSON lines, to nowhere. The replay-record fuzz
/// target runs it on every event it decodes.
#[doc(hidden)]
pub fn write_change_lines(events: &[cloudevents::Event]) -> std::io::Result<()> {
    for json in [false, true] {
        let mut lines = lines::ChangeLines::new(Box::new(std::io::sink()), json, true, false);
        for e in events.iter().chain(events) {
            let facts = facts::Facts::of(e, facts::Place::default());
            lines.write(&facts, e)?;
        }
        lines.flush()?;
    }
    Ok(())
}

pub use publish::Published;
pub use session::replay;
pub use verify::Verdict;

/// Why a replay could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The `--config` of a re-publication is unusable.
    #[error("{0}")]
    Config(String),
    /// The brokers refused the credentials.
    #[error("the brokers refused the credentials: {0}")]
    Rejected(String),
    #[error("topic `{0}` does not exist (or this client may not describe it)")]
    NoTopic(String),
    #[error("no topic matches `{0}` (or this client may not describe them)")]
    NoMatch(String),
    #[error("topic `{topic}` has no partition {partition} (it has {count})")]
    NoPartition {
        topic: String,
        partition: i32,
        count: usize,
    },
    #[error("{what} of topic `{topic}`")]
    Kafka {
        what: &'static str,
        topic: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error(
        "no record of `{topic}` arrived for {stall:?} while partition(s) {partitions:?} still had records due (are the brokers reachable?)"
    )]
    Stalled {
        topic: String,
        stall: Duration,
        partitions: Vec<i32>,
    },
    #[error(
        "the brokers of `{topic}` did not answer for {since:?}, longer than the stall bound of {stall:?}"
    )]
    Unreachable {
        topic: String,
        stall: Duration,
        since: Duration,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error("writing {what}")]
    Write {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Sink(String),
}

impl ReplayError {
    /// 2 for what the user can fix on the command line or in the config, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Usage(_) | ReplayError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// What a replay read and did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The topics read.
    pub topics: Vec<String>,
    /// Records read from the topics.
    pub records: u64,
    /// CloudEvents in them (a batch record holds several).
    pub events: u64,
    /// Records that are not CloudEvents, skipped.
    pub not_cloudevents: u64,
    /// Events left out as repeats of one read before (with dedup on).
    pub duplicates_left_out: u64,
    /// Events that passed the filters (and dedup): written, queued to the sink, or taken
    /// by a report.
    pub selected: u64,
    pub verdict: Option<Verdict>,
    /// `--diff-clusters`: whether the clusters differ.
    pub differs: Option<bool>,
    pub published: Option<Published>,
    pub elapsed: Duration,
}

/// Non-CloudEvents records named one by one on standard error, at most.
const NAMED_SKIPS: u64 = 5;

/// Set by SIGINT or SIGTERM while following: the follow ends and the summary is printed.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn interrupted(_: libc::c_int) {
    // Only an atomic store: nothing else is safe in a signal handler.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Makes Ctrl-C (and SIGTERM) end a follow with its summary instead of killing it.
fn catch_interrupts() {
    let handler: extern "C" fn(libc::c_int) = interrupted;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, handler as libc::sighandler_t);
        }
    }
}

/// Runs `kubecast replay`: validates, replays, prints the report and the summary, and gives
/// the exit code.
pub fn run(args: &ReplayArgs) -> ExitCode {
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let result = args
        .validate(now_ms)
        .map_err(ReplayError::from)
        .and_then(|plan| {
            if plan.follow {
                catch_interrupts();
            }
            let mut out = std::io::stdout().lock();
            let s = replay(&plan, &mut out, &INTERRUPTED);
            let _ = out.flush();
            s.map(|s| (plan, s))
        });
    match result {
        Ok((plan, s)) => {
            eprintln!("{}", summary_line(&plan, &s));
            match (s.verdict, s.differs) {
                (Some(v), _) if !v.passed() => ExitCode::from(3),
                (_, Some(true)) => ExitCode::from(4),
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("kubecast replay: {}", crate::error_chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

fn summary_line(plan: &Plan, s: &Summary) -> String {
    let secs = s.elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        s.events as f64 / secs
    } else {
        0.0
    };
    let topics = match s.topics.as_slice() {
        [one] => format!("`{one}`"),
        [] => plan.topics_text(),
        many => format!(
            "{} topics ({})",
            many.len(),
            many.iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut line = format!(
        "kubecast replay: {topics}: {} record(s), {} event(s) in {secs:.1} s ({rate:.0} events/s); {} not CloudEvents (skipped); {} duplicate(s) left out; {} selected",
        s.records, s.events, s.not_cloudevents, s.duplicates_left_out, s.selected
    );
    if let Some(p) = &s.published {
        line.push_str(&format!(
            "; re-published: {} delivered, {} dead-lettered, {} not kubecast's (skipped)",
            p.delivered, p.dead_lettered, p.skipped
        ));
    }
    if plan.follow {
        line.push_str("; followed until interrupted");
    }
    line
}
