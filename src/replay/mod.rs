//! `kubecast replay`: reads a Kafka topic back for an audit — prints the selected events as
//! JSON lines, re-publishes them through a sink, checks every pod's chain of
//! previous-resourceVersion links (`--verify`), or reconstructs the pods at a time
//! (`--state-at`). Entry points: [`run`] (the subcommand, exit code included) and
//! [`replay`] (the same, returning what it found).
//!
//! Reading is the consumer side, so any valid CloudEvent is taken, through the CloudEvents
//! SDK (`decode`); the bridge's producer keeps its own binding. The reader streams: memory
//! is bounded by the deduplication window, one chain summary per object (`--verify`) and
//! one entry per live pod (`--state-at`), never by the topic's length.
//!
//! Exit codes: 0 done, 1 Kafka or a sink failed (or the topic does not exist), 2 a bad
//! command line or config, 3 `--verify` found the record incomplete or out of order.

mod args;
mod decode;
mod dedup;
mod facts;
mod filter;
mod html;
mod output;
mod publish;
mod read;
mod state;
mod verify;

use std::io::Write;
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cloudevents::AttributesReader;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdkafka::Message;

pub use args::{Destination, Plan, ReplayArgs, StateFormat, UsageError};
pub use decode::{NotCloudEvent, Record, events_of};
#[doc(hidden)]
pub use html::{apply_patch, merge_patch};

/// What replay reads of a decoded event (its facts and its data as JSON): the replay-record
/// fuzz target runs it on every event it decodes.
#[doc(hidden)]
pub fn decode_facts(event: &cloudevents::Event) -> (String, Option<serde_json::Value>) {
    let facts = facts::Facts::of(
        event,
        facts::Place {
            partition: 0,
            offset: 0,
        },
    );
    (facts.object(), decode::data_json(event))
}
pub use publish::Published;
pub use verify::Verdict;

use facts::{Facts, Place};

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
    /// Records read from the topic.
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
    pub published: Option<Published>,
    pub elapsed: Duration,
}

/// Non-CloudEvents records named one by one on standard error, at most.
const NAMED_SKIPS: u64 = 5;

/// Runs `kubecast replay`: validates, replays, prints the report and the summary, and gives
/// the exit code.
pub fn run(args: &ReplayArgs) -> ExitCode {
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let result = args
        .validate(now_ms)
        .map_err(ReplayError::from)
        .and_then(|plan| {
            let mut out = std::io::stdout().lock();
            let s = replay(&plan, &mut out);
            let _ = out.flush();
            s.map(|s| (plan, s))
        });
    match result {
        Ok((plan, s)) => {
            eprintln!("{}", summary_line(&plan, &s));
            match s.verdict {
                Some(v) if !v.passed() => ExitCode::from(3),
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
    let mut line = format!(
        "kubecast replay: `{}`: {} record(s), {} event(s) in {secs:.1} s ({rate:.0} events/s); {} not CloudEvents (skipped); {} duplicate(s) left out; {} selected",
        plan.topic, s.records, s.events, s.not_cloudevents, s.duplicates_left_out, s.selected
    );
    if let Some(p) = &s.published {
        line.push_str(&format!(
            "; re-published: {} delivered, {} dead-lettered, {} not kubecast's (skipped)",
            p.delivered, p.dead_lettered, p.skipped
        ));
    }
    line
}

/// Where selected events go while reading.
enum Sink {
    Lines(output::JsonLines),
    Publisher(Box<publish::Publisher>),
    Nowhere,
}

/// Replays as `plan` says; the report (`--verify`, `--state-at`) and, by default, the events
/// go to `out`.
pub fn replay(plan: &Plan, out: &mut dyn Write) -> Result<Summary, ReplayError> {
    let started = Instant::now();
    let write_error = |what: &str| {
        let what = what.to_string();
        move |source| ReplayError::Write { what, source }
    };
    // The destination first: a bad config or file is reported before any reading.
    let mut sink = match &plan.destination {
        Destination::Stdout => Sink::Lines(output::JsonLines::stdout()),
        Destination::File(f) => {
            Sink::Lines(output::JsonLines::file(f).map_err(write_error(&f.display().to_string()))?)
        }
        Destination::Sink { config, name } => {
            Sink::Publisher(Box::new(publish::Publisher::start(config, name)?))
        }
        Destination::Nowhere => Sink::Nowhere,
    };
    let topic = read::Topic::open(plan)?;
    let bar = progress(topic.total());
    // The report's header and gap marks need the verifier too.
    let mut verifier =
        (plan.verify || plan.html.is_some()).then(|| verify::Verifier::new(topic.from_start));
    let mut timeline = plan.html.as_ref().map(|_| html::Timeline::new());
    let mut state = plan
        .state_at
        .as_ref()
        .map(|(ms, _)| state::StateAt::new(*ms));
    let mut seen = plan.dedup.map(dedup::Seen::new);
    let mut s = Summary::default();
    let mut failure: Option<ReplayError> = None;
    topic.read(plan.stall, |m| {
        s.records += 1;
        bar.inc(1);
        let place = Place {
            partition: m.partition(),
            offset: m.offset(),
        };
        let events = match events_of(Record::of(m)) {
            Ok(events) => events,
            Err(why) => {
                s.not_cloudevents += 1;
                if s.not_cloudevents <= NAMED_SKIPS {
                    bar.suspend(|| {
                        eprintln!("kubecast replay: skipped the record at {place}: {why}")
                    });
                }
                return ControlFlow::Continue(());
            }
        };
        for event in events {
            s.events += 1;
            let facts = Facts::of(&event, place);
            let repeat = seen
                .as_mut()
                .is_some_and(|seen| seen.repeat(event.source().as_str(), event.id()));
            if !plan.filter.takes_object(&facts) {
                continue;
            }
            if let Some(v) = verifier.as_mut() {
                v.observe(&facts, event.id(), repeat);
            }
            if repeat {
                s.duplicates_left_out += 1;
                continue;
            }
            if let Some(st) = state.as_mut() {
                st.observe(&facts, &event);
            }
            if !plan.filter.takes_event(&event) {
                continue;
            }
            if let Some(t) = timeline.as_mut() {
                t.observe(&facts, &event);
            }
            let written = match &mut sink {
                Sink::Nowhere => Ok(()),
                Sink::Lines(lines) => match lines.write(event) {
                    // A reader that went away (`| head`) ends the replay, not as a failure.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        return ControlFlow::Break(());
                    }
                    r => r.map_err(write_error("the events")),
                },
                Sink::Publisher(p) => p.publish(&event, &facts),
            };
            match written {
                Ok(()) => s.selected += 1,
                Err(e) => {
                    failure = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    })?;
    bar.finish_and_clear();
    if let Some(e) = failure {
        return Err(e);
    }
    match sink {
        Sink::Lines(mut lines) => {
            reader_gone_is_fine(lines.flush()).map_err(write_error("the events"))?;
        }
        Sink::Publisher(p) => s.published = Some(p.finish()?),
        Sink::Nowhere => {}
    }
    let mut checked = None;
    if let Some(v) = verifier {
        if let Some(t) = timeline.as_mut() {
            t.gaps(v.gaps());
        }
        let (verdict, report) = v.finish();
        if plan.verify {
            reader_gone_is_fine(out.write_all(report.as_bytes()))
                .map_err(write_error("the report"))?;
            s.verdict = Some(verdict);
        }
        let line = report.lines().last().unwrap_or_default().to_string();
        checked = Some((verdict.passed(), line));
    }
    if let (Some(t), Some(path)) = (timeline, &plan.html) {
        let header = html::Header {
            topic: plan.topic.clone(),
            range: plan.range.describe(),
            verdict: checked,
        };
        html::write_file(t, path, &header).map_err(write_error(&path.display().to_string()))?;
    }
    if let (Some(st), Some((ms, text))) = (state, &plan.state_at) {
        let pods = st.pods(|p| plan.filter.takes_labels_of(&p.data));
        reader_gone_is_fine(state::print(out, text, *ms, &pods, plan.format))
            .map_err(write_error("the state"))?;
    }
    s.elapsed = started.elapsed();
    Ok(s)
}

/// A reader that went away (`| head`) took what it wanted: not a failure.
fn reader_gone_is_fine(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// A progress bar on a terminal; hidden (and nearly free) otherwise.
fn progress(total: u64) -> ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} records  {rate}  ETA {eta}")
    {
        // Whole records per second: indicatif's own `per_sec` prints four decimals.
        bar.set_style(style.with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        ));
    }
    bar
}
