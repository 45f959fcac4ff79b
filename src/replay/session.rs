//! One replay from start to end: reads what the plan selects as one stream, passes each
//! event through dedup and the filters to the reports that want it (`--verify`,
//! `--state-at`, `--html`, `--diff-clusters`) and to where the events go (lines, a file, a
//! sink), then writes the reports. Entry point: [`replay`].

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use cloudevents::AttributesReader;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdkafka::Message;

use super::args::{Destination, EventFormat, Plan};
use super::facts::{Facts, Place};
use super::{
    NAMED_SKIPS, Record, ReplayError, Summary, dedup, drift, events_of, html, lines, output,
    publish, read, state, verify,
};

/// Where selected events go while reading.
enum Sink {
    Events(output::JsonLines),
    Changes(lines::ChangeLines),
    Publisher(Box<publish::Publisher>),
    Nowhere,
}

impl Sink {
    /// The sink `plan` asks for (a bad config or file is reported before any reading).
    fn open(plan: &Plan) -> Result<Sink, ReplayError> {
        let out: Box<dyn Write> = match &plan.destination {
            Destination::Stdout => Box::new(std::io::stdout()),
            Destination::File(f) => {
                Box::new(std::fs::File::create(f).map_err(write_error(&f.display().to_string()))?)
            }
            Destination::Sink { config, name } => {
                return Ok(Sink::Publisher(Box::new(publish::Publisher::start(
                    config, name,
                )?)));
            }
            Destination::Nowhere => return Ok(Sink::Nowhere),
        };
        let terminal = plan.destination == Destination::Stdout && std::io::stdout().is_terminal();
        let format = plan.events.unwrap_or(if terminal {
            EventFormat::Line
        } else {
            EventFormat::Json
        });
        // Colour on a terminal only, and never when NO_COLOR is set (no-color.org).
        let color = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        Ok(match format {
            EventFormat::Events => Sink::Events(output::JsonLines::new(out, plan.follow)),
            EventFormat::Line => {
                Sink::Changes(lines::ChangeLines::new(out, false, color, plan.follow))
            }
            EventFormat::Json => {
                Sink::Changes(lines::ChangeLines::new(out, true, false, plan.follow))
            }
        })
    }
}

fn write_error(what: &str) -> impl Fn(std::io::Error) -> ReplayError + use<> {
    let what = what.to_string();
    move |source| ReplayError::Write {
        what: what.clone(),
        source,
    }
}

/// Replays as `plan` says until the end (or, following, until `stop` is set); the reports go
/// to `out`.
pub fn replay(plan: &Plan, out: &mut dyn Write, stop: &AtomicBool) -> Result<Summary, ReplayError> {
    let started = Instant::now();
    let redact = plan.redaction()?;
    let mut sink = Sink::open(plan)?;
    let topics = read::Topics::open(plan)?;
    let named = topics.names.len() > 1 || topics.may_grow();
    let bar = if plan.follow {
        ProgressBar::hidden()
    } else {
        progress(topics.total())
    };
    // The report's header and gap marks need the verifier too.
    let mut verifier =
        (plan.verify || plan.html.is_some()).then(|| verify::Verifier::new(topics.from_start));
    let mut timeline = plan.html.as_ref().map(|_| html::Timeline::new());
    let state_ms = plan
        .state_at
        .as_ref()
        .map(|(ms, _)| *ms)
        .or(plan.diff.as_ref().map(|d| d.at_ms));
    let mut state = state_ms.map(state::StateAt::new);
    let mut clusters: BTreeSet<String> = BTreeSet::new();
    let mut seen = plan.dedup.map(dedup::Seen::new);
    let mut s = Summary {
        topics: topics.names.clone(),
        ..Summary::default()
    };
    let mut failure: Option<ReplayError> = None;
    // The topic of the last record: a topic a follow found later joins the summary.
    let mut last_topic: Option<Arc<str>> = None;
    let notice = |what: String| eprintln!("kubecast replay: {what}");
    topics.read(plan.stall, stop, notice, |topic, m| {
        s.records += 1;
        if !last_topic.as_ref().is_some_and(|t| Arc::ptr_eq(t, topic)) {
            if !s.topics.iter().any(|t| **t == **topic) {
                s.topics.push(topic.to_string());
                s.topics.sort();
            }
            last_topic = Some(Arc::clone(topic));
        }
        bar.inc(1);
        let place = Place {
            topic: named.then(|| Arc::clone(topic)),
            partition: m.partition(),
            offset: m.offset(),
        };
        let events = match events_of(Record::of(m), &redact) {
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
            let facts = Facts::of(&event, place.clone());
            let repeat = seen
                .as_mut()
                .is_some_and(|seen| seen.repeat(event.source().as_str(), event.id()));
            if !plan.filter.takes_object(&facts) {
                continue;
            }
            if let Some(c) = &facts.cluster
                && plan.diff.is_some()
                && !clusters.contains(c)
            {
                clusters.insert(c.clone());
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
                Sink::Events(lines) => lines
                    .write(event)
                    .map_err(gone_or(write_error("the events"))),
                Sink::Changes(lines) => lines
                    .write(&facts, &event)
                    .map_err(gone_or(write_error("the changes"))),
                Sink::Publisher(p) => p.publish(&event, &facts).map_err(Some),
            };
            match written {
                Ok(()) => s.selected += 1,
                // A reader that went away (`| head`) ends the replay, not as a failure.
                Err(None) => return ControlFlow::Break(()),
                Err(Some(e)) => {
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
        Sink::Events(mut lines) => {
            reader_gone_is_fine(lines.flush()).map_err(write_error("the events"))?;
        }
        Sink::Changes(mut lines) => {
            reader_gone_is_fine(lines.flush()).map_err(write_error("the changes"))?;
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
            topic: plan.topics_text().replace('`', ""),
            range: plan.range.describe(),
            verdict: checked,
        };
        html::write_file(t, path, &header).map_err(write_error(&path.display().to_string()))?;
    }
    if let Some(st) = state {
        let pods = st.pods(|p| plan.filter.takes_labels_of(&p.data));
        if let Some((ms, text)) = &plan.state_at {
            reader_gone_is_fine(state::print(out, text, *ms, &pods, plan.format))
                .map_err(write_error("the state"))?;
        } else if let Some(d) = &plan.diff {
            let at = jiff::Timestamp::from_millisecond(d.at_ms)
                .map_or_else(|_| d.at.clone(), |t| t.to_string());
            let drift = drift::compare(pods, d, &clusters, at).map_err(|e| {
                ReplayError::Usage(super::plan::usage("--diff-clusters", e.to_string()))
            })?;
            reader_gone_is_fine(drift::print(out, &drift, plan.format))
                .map_err(write_error("the comparison"))?;
            s.differs = Some(drift.differs());
        }
    }
    s.elapsed = started.elapsed();
    Ok(s)
}

/// A broken pipe as `None` (the reader went away), any other error through `f`.
fn gone_or(
    f: impl Fn(std::io::Error) -> ReplayError,
) -> impl Fn(std::io::Error) -> Option<ReplayError> {
    move |e| (e.kind() != std::io::ErrorKind::BrokenPipe).then(|| f(e))
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
