//! `kubecast replay`'s command line. Entry points: [`ReplayArgs`] (what clap parses) and
//! [`ReplayArgs::validate`] (pure: no I/O, the clock passed in), which turns it into a
//! [`Plan`] or a usage error naming the flag.

use std::path::PathBuf;
use std::time::Duration;

pub use super::plan::*;
use crate::model::ChangeKind;
use crate::sinks::Secret;
use crate::sinks::kafka::checkpoint::is_connection_property;
use crate::sinks::kafka::{KafkaConfig, SaslConfig};
use crate::sinks::{Common, TlsConfig};

/// Reads Kafka topics that kubecast (or any CloudEvents producer) wrote — one cluster's or a
/// fleet's — and prints, follows, verifies, reconstructs, compares or re-publishes their
/// events.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long)]
    pub brokers: String,
    /// The topic to read (every partition). Repeatable. A value starting with `^` is a
    /// regular expression every topic's whole name is matched against, as Kafka's pattern
    /// subscription does (`'^k8s\..*\.pods$'`); internal topics (`__…`) are left out. The
    /// topics are read as one stream, in the order of the records' timestamps.
    #[arg(long, required = true)]
    pub topic: Vec<String>,
    /// Only events of this cluster, as their `source` names it (`k8s://{cluster}/…`): a name
    /// or a glob (`prod-*`). Repeatable. Other producers' events name no cluster: with this
    /// flag they are left out.
    #[arg(long)]
    pub cluster: Vec<String>,
    /// Keep reading after the end, printing each change as it is appended, until Ctrl-C
    /// (which prints the summary line). Starts at the end unless `--since` or
    /// `--from-offset` say where.
    #[arg(long)]
    pub follow: bool,
    /// Compare two clusters: the objects of the selected kinds as each had them at `--at`,
    /// matched by kind, namespace and name, field by field. Exit 4 when they differ.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub diff_clusters: Vec<String>,
    /// The time `--diff-clusters` compares at (RFC 3339 or a duration ago). Default: now.
    #[arg(long, value_name = "TIME", requires = "diff_clusters")]
    pub at: Option<String>,
    /// Start at the first record written at or after this time: RFC 3339
    /// (`2026-12-04T14:05:00Z`) or a duration ago (`2h`, `30m`). Uses Kafka's
    /// offsets-for-times.
    #[arg(long)]
    pub since: Option<String>,
    /// Stop before the first record written at or after this time (RFC 3339 or a duration
    /// ago).
    #[arg(long)]
    pub until: Option<String>,
    /// Start at this offset (inclusive): `N` for every partition or `P:N` for partition P.
    /// Repeatable.
    #[arg(long, value_name = "[PARTITION:]OFFSET", allow_hyphen_values = true)]
    pub from_offset: Vec<String>,
    /// Stop before this offset (exclusive): `N` for every partition or `P:N`. Repeatable.
    #[arg(long, value_name = "[PARTITION:]OFFSET", allow_hyphen_values = true)]
    pub to_offset: Vec<String>,
    /// Read only this partition. Repeatable. Default: all.
    #[arg(long)]
    pub partition: Vec<i32>,
    /// Only objects of this resource, as `kubectl get` names it (`pods`, `deploy`,
    /// `deployments.apps`, `nodes`, `widgets.example.com`). Repeatable. Default: every kind.
    #[arg(long)]
    pub resource: Vec<String>,
    /// Only objects in this namespace (a name or a glob such as `team-*`). Repeatable.
    #[arg(long)]
    pub namespace: Vec<String>,
    /// Only pods with this name (a name or a glob). Repeatable.
    #[arg(long)]
    pub name: Vec<String>,
    /// Only the pod with this uid. Repeatable.
    #[arg(long)]
    pub uid: Vec<String>,
    /// Only events of this type: the CloudEvents type or its last word (`added`,
    /// `modified`, `deleted`, `firing`, `resolved`). Repeatable.
    #[arg(long = "type", value_name = "TYPE")]
    pub types: Vec<String>,
    /// Only pods whose labels match this selector (`app=web,tier in (a,b),!canary`), as the
    /// event's data shows them.
    #[arg(long)]
    pub label: Option<String>,
    /// Leave out events whose `source` and `id` were read before (the default).
    #[arg(long, overrides_with = "no_dedup")]
    pub dedup: bool,
    /// Keep every copy of an event delivered more than once.
    #[arg(long, overrides_with = "dedup")]
    pub no_dedup: bool,
    /// How many recent events deduplication remembers (at least half of them are always
    /// remembered; about 24 bytes each).
    #[arg(long, default_value_t = 1_000_000)]
    pub dedup_window: usize,
    /// Check every pod's chain of previous-resourceVersion links and report gaps,
    /// duplicates and order violations; exit 3 when the record is incomplete.
    #[arg(long)]
    pub verify: bool,
    /// Print the pods as they were at this time (RFC 3339 or a duration ago),
    /// reconstructed from the events.
    #[arg(long, value_name = "TIME")]
    pub state_at: Option<String>,
    /// How to print. `--state-at` and `--diff-clusters`: `json` (default) or `table`. The
    /// events: `events` (whole CloudEvents, a replay's default), `line` (one compact line per
    /// change, `--follow`'s default on a terminal) or `json` (one object per change,
    /// `--follow`'s default elsewhere).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Write an audit timeline of the range to this HTML file: one self-contained page (it
    /// fetches nothing) with a lane per object, each change a mark, alert episodes as bars,
    /// the gaps `--verify` would find, each version's diff and the objects at any moment.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the events to this file (JSON lines) instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// A kubecast config file: the names its `encoding.redact` adds are redacted in every
    /// output (as the kubecast that wrote the topic did), and with `--sink` one of its sinks
    /// re-publishes the events, ids kept.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// An annotation whose value is redacted in every `metadata` of every output, as
    /// `encoding.redact.annotations` does. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub redact_annotation: Vec<String>,
    /// A label whose value is redacted in every `metadata` of every output, as
    /// `encoding.redact.labels` does. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub redact_label: Vec<String>,
    /// The sink of `--config` to re-publish to.
    #[arg(long, requires = "config")]
    pub sink: Option<String>,
    /// PEM file of the CA certificates to trust (TLS to the brokers).
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (mutual TLS).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// Turn TLS on with the system's roots when no TLS file is given.
    #[arg(long)]
    pub tls: bool,
    /// SASL mechanism: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    #[arg(long, requires = "sasl_username")]
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long, requires = "sasl_mechanism")]
    pub sasl_username: Option<String>,
    /// SASL password (better through the environment variable).
    #[arg(long, env = "KUBECAST_REPLAY_SASL_PASSWORD", hide_env_values = true)]
    pub sasl_password: Option<String>,
    /// Give up when no record arrives for this many seconds while some are still due, or
    /// when the brokers do not answer for this long (shorter outages, a broker restarted,
    /// are waited out).
    #[arg(long, default_value_t = 60)]
    pub stall_seconds: u64,
}

impl ReplayArgs {
    /// Checks every flag; `now_ms` is the current time (for `--since 2h`).
    pub fn validate(&self, now_ms: i64) -> Result<Plan, UsageError> {
        let connection = self.connection()?;
        let topics = self
            .topic
            .iter()
            .map(|t| topic_choice(t))
            .collect::<Result<Vec<_>, _>>()?;
        let time = |flag: &str, v: &Option<String>| {
            v.as_deref()
                .map(|t| parse_time(t, now_ms).map_err(|m| usage(flag, m)))
                .transpose()
        };
        let range = Range {
            since_ms: time("--since", &self.since)?,
            until_ms: time("--until", &self.until)?,
            from: offsets("--from-offset", &self.from_offset)?,
            to: offsets("--to-offset", &self.to_offset)?,
            partitions: (!self.partition.is_empty()).then(|| self.partition.clone()),
        };
        if let (Some(s), Some(u)) = (range.since_ms, range.until_ms)
            && u <= s
        {
            return Err(usage("--until", "must be later than --since"));
        }
        if let Some(p) = self.partition.iter().find(|p| **p < 0) {
            return Err(usage("--partition", format!("`{p}` is not a partition")));
        }
        let state_at = match &self.state_at {
            Some(t) => Some((
                parse_time(t, now_ms).map_err(|m| usage("--state-at", m))?,
                t.clone(),
            )),
            None => None,
        };
        let filter = Filter {
            resources: self.resource.clone(),
            clusters: self.cluster.clone(),
            namespaces: self.namespace.clone(),
            names: self.name.clone(),
            uids: self.uid.clone(),
            types: self
                .types
                .iter()
                .map(|t| event_type(t))
                .collect::<Result<_, _>>()?,
            labels: self
                .label
                .as_deref()
                .map(|s| {
                    crate::route::selector::parse(s)
                        .map_err(|e| usage("--label", format!("`{s}` {e}")))
                })
                .transpose()?,
        };
        if self.dedup_window < 2 {
            return Err(usage("--dedup-window", "must be at least 2"));
        }
        if self.stall_seconds == 0 {
            return Err(usage("--stall-seconds", "must be at least 1"));
        }
        let destination = match (&self.output, &self.config, &self.sink) {
            (Some(_), _, Some(_)) => {
                return Err(usage("--output", "goes to a file or to a sink, not both"));
            }
            (Some(f), _, None) => Destination::File(f.clone()),
            (None, Some(c), Some(s)) => Destination::Sink {
                config: c.clone(),
                name: s.clone(),
            },
            // A report replaces the events on standard output.
            _ if self.verify
                || self.state_at.is_some()
                || self.html.is_some()
                || !self.diff_clusters.is_empty() =>
            {
                Destination::Nowhere
            }
            _ => Destination::Stdout,
        };
        let diff = self.diff_clusters(now_ms)?;
        if self.follow {
            self.check_follow(&range)?;
        }
        let report = state_at.is_some() || diff.is_some();
        let (format, events) = formats(self.format, report, self.follow)?;
        Ok(Plan {
            topics,
            connection,
            range,
            filter,
            dedup: (!self.no_dedup).then_some(self.dedup_window),
            verify: self.verify,
            state_at,
            format,
            destination,
            html: self.html.clone(),
            stall: Duration::from_secs(self.stall_seconds),
            follow: self.follow,
            events,
            diff,
            redact: crate::redact::RedactConfig {
                annotations: self.redact_annotation.clone(),
                labels: self.redact_label.clone(),
                ..crate::redact::RedactConfig::default()
            },
            config: self.config.clone(),
        })
    }

    /// `--diff-clusters A B` and `--at`; a comparison is a report of its own.
    fn diff_clusters(&self, now_ms: i64) -> Result<Option<DiffClusters>, UsageError> {
        let [a, b] = self.diff_clusters.as_slice() else {
            return Ok(None);
        };
        if a == b {
            return Err(usage(
                "--diff-clusters",
                format!("compares two clusters, `{a}` is named twice"),
            ));
        }
        if self.verify || self.state_at.is_some() || self.html.is_some() {
            return Err(usage(
                "--diff-clusters",
                "is a report of its own: run --verify, --state-at or --html separately",
            ));
        }
        let at = self.at.clone().unwrap_or_else(|| "now".to_string());
        let at_ms = match &self.at {
            Some(t) => parse_time(t, now_ms).map_err(|m| usage("--at", m))?,
            None => now_ms,
        };
        Ok(Some(DiffClusters {
            a: a.clone(),
            b: b.clone(),
            at_ms,
            at,
        }))
    }

    /// What `--follow` cannot go with: an end, a report, a re-publication.
    fn check_follow(&self, range: &Range) -> Result<(), UsageError> {
        if range.until_ms.is_some() || range.to != Offsets::default() {
            let flag = if range.until_ms.is_some() {
                "--until"
            } else {
                "--to-offset"
            };
            return Err(usage(flag, "sets an end, and --follow has none"));
        }
        let report = [
            (self.verify, "--verify"),
            (self.state_at.is_some(), "--state-at"),
            (self.html.is_some(), "--html"),
            (!self.diff_clusters.is_empty(), "--diff-clusters"),
            (self.sink.is_some(), "--sink"),
        ];
        if let Some((_, flag)) = report.iter().find(|(on, _)| *on) {
            return Err(usage(
                flag,
                "needs the end of a range, and --follow has none: give --until instead of --follow",
            ));
        }
        Ok(())
    }

    /// The connection properties, checked as the Kafka sink checks its own.
    fn connection(&self) -> Result<Vec<(String, Secret)>, UsageError> {
        let tls = (self.tls
            || self.tls_ca_file.is_some()
            || self.tls_cert_file.is_some()
            || self.tls_key_file.is_some())
        .then(|| TlsConfig {
            ca_file: self.tls_ca_file.clone(),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_key_file.clone(),
        });
        let sasl = match (&self.sasl_mechanism, &self.sasl_username) {
            (Some(mechanism), Some(username)) => Some(SaslConfig {
                mechanism: mechanism.clone(),
                username: username.clone(),
                password: Secret(self.sasl_password.clone().unwrap_or_default()),
            }),
            _ => None,
        };
        let kafka = KafkaConfig {
            brokers: self.brokers.clone(),
            tls,
            sasl,
            ..KafkaConfig::reader()
        };
        kafka
            .settings("replay", &Common::default(), "replay")
            .map(|s| {
                s.properties
                    .into_iter()
                    .filter(|(k, _)| is_connection_property(k))
                    .collect()
            })
            .map_err(|issues| {
                let i = &issues[0];
                // `replay.tls.cert_file` -> `--tls-cert-file`.
                let flag = i
                    .field
                    .trim_start_matches("replay.")
                    .replace(['.', '_'], "-");
                usage(&format!("--{flag}"), i.message.clone())
            })
    }
}

/// A `--topic`: a name, or a pattern when it starts with `^`.
fn topic_choice(t: &str) -> Result<TopicChoice, UsageError> {
    if t.trim().is_empty() {
        return Err(usage("--topic", "must name a topic"));
    }
    if !t.starts_with('^') {
        return Ok(TopicChoice::Name(t.to_string()));
    }
    regex::Regex::new(t)
        .map(TopicChoice::Pattern)
        .map_err(|e| usage("--topic", format!("`{t}` is not a regular expression: {e}")))
}

/// The report's format and the events' format: each `--format` goes with one of them.
fn formats(
    given: Option<Format>,
    report: bool,
    follow: bool,
) -> Result<(StateFormat, Option<EventFormat>), UsageError> {
    let bad = |what: &str| Err(usage("--format", what.to_string()));
    match (given, report) {
        (None | Some(Format::Json), true) => Ok((StateFormat::Json, None)),
        (Some(Format::Table), true) => Ok((StateFormat::Table, None)),
        (Some(_), true) => bad("a report (--state-at, --diff-clusters) prints as json or table"),
        (Some(Format::Table), false) => bad(
            "table is for --state-at and --diff-clusters; the events print as events, line or json",
        ),
        (None, false) if follow => Ok((StateFormat::Json, None)),
        (None | Some(Format::Events), false) => Ok((StateFormat::Json, Some(EventFormat::Events))),
        (Some(Format::Line), false) => Ok((StateFormat::Json, Some(EventFormat::Line))),
        (Some(Format::Json), false) => Ok((StateFormat::Json, Some(EventFormat::Json))),
    }
}

/// The CloudEvents type of a `--type`, or the word of a change of any kind (`added`,
/// `modified`, `deleted`).
fn event_type(t: &str) -> Result<String, UsageError> {
    if ["added", "modified", "deleted"].contains(&t) {
        return Ok(t.to_string());
    }
    // The last word of the alerts' types (`firing`, `resolved`).
    let word = ChangeKind::ALL
        .into_iter()
        .filter(|k| k.is_alert())
        .map(ChangeKind::event_type)
        .find(|full| full.rsplit('.').next() == Some(t));
    if let Some(full) = word {
        return Ok(full.to_string());
    }
    if t.contains('.') {
        return Ok(t.to_string());
    }
    Err(usage(
        "--type",
        format!(
            "`{t}` is neither a CloudEvents type nor one of added, modified, deleted, firing, resolved"
        ),
    ))
}

/// Parses RFC 3339 or a duration ago into milliseconds since the epoch.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64, String> {
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t.as_millisecond());
    }
    if let Some(ago) = crate::alert::duration::parse_duration(text) {
        return Ok(now_ms - ago);
    }
    Err(format!(
        "`{text}` is neither an RFC 3339 time (2026-12-04T14:05:00Z) nor a duration ago (2h, 30m)"
    ))
}

/// Parses repeated `[P:]N`.
fn offsets(flag: &str, values: &[String]) -> Result<Offsets, UsageError> {
    let mut out = Offsets::default();
    for v in values {
        let bad = || {
            usage(
                flag,
                format!("`{v}` is not OFFSET or PARTITION:OFFSET (numbers, not negative)"),
            )
        };
        match v.split_once(':') {
            Some((p, n)) => {
                let p: i32 = p.trim().parse().map_err(|_| bad())?;
                let n: i64 = n.trim().parse().map_err(|_| bad())?;
                if p < 0 || n < 0 {
                    return Err(bad());
                }
                out.per.insert(p, n);
            }
            None => {
                let n: i64 = v.trim().parse().map_err(|_| bad())?;
                if n < 0 {
                    return Err(bad());
                }
                out.all = Some(n);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
