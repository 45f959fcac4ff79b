use clap::Parser;

use super::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ReplayArgs,
}

const NOW: i64 = 1_796_400_000_000;

fn plan(extra: &[&str]) -> Result<Plan, UsageError> {
    let mut argv = vec!["replay", "--brokers", "127.0.0.1:19092", "--topic", "t"];
    argv.extend_from_slice(extra);
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"));
    cli.args.validate(NOW)
}

fn error(extra: &[&str]) -> UsageError {
    match plan(extra) {
        Ok(p) => panic!("{extra:?} accepted: {p:?}"),
        Err(e) => e,
    }
}

#[test]
fn defaults_print_every_event_deduplicated_to_stdout() {
    let p = plan(&[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.destination, Destination::Stdout);
    assert_eq!(p.dedup, Some(1_000_000));
    assert!(!p.verify && p.state_at.is_none());
    assert!(
        p.connection
            .iter()
            .any(|(k, v)| k == "bootstrap.servers" && v.0 == "127.0.0.1:19092")
    );
    assert!(
        p.connection
            .iter()
            .all(|(k, _)| !k.starts_with("enable.idempotence"))
    );
}

#[test]
fn times_are_rfc3339_or_a_duration_ago() {
    let p = plan(&["--since", "2h", "--until", "2026-12-04T14:05:00Z"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.range.since_ms, Some(NOW - 7_200_000));
    assert_eq!(p.range.until_ms, Some(1_796_393_100_000));
    let e = error(&["--since", "yesterday"]);
    assert_eq!(e.flag, "--since");
    assert!(
        e.message
            .contains("`yesterday` is neither an RFC 3339 time"),
        "{e}"
    );
    assert_eq!(error(&["--state-at", "14:05"]).flag, "--state-at");
    assert_eq!(error(&["--since", "1h", "--until", "2h"]).flag, "--until");
}

#[test]
fn offsets_are_per_partition_or_for_all() {
    let p = plan(&[
        "--from-offset",
        "10",
        "--from-offset",
        "2:5",
        "--to-offset",
        "1:99",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (p.range.from.of(0), p.range.from.of(2)),
        (Some(10), Some(5))
    );
    assert_eq!((p.range.to.of(0), p.range.to.of(1)), (None, Some(99)));
    for bad in ["-1", "x", "1:", "a:1", "1:-2"] {
        assert_eq!(
            error(&["--from-offset", bad]).flag,
            "--from-offset",
            "{bad}"
        );
    }
}

#[test]
fn filters_are_checked() {
    let p = plan(&[
        "--type",
        "deleted",
        "--type",
        "io.kubecast.alert.firing",
        "--label",
        "app in (a,b),!canary",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // A change's word takes that change of every kind.
    assert_eq!(p.filter.types, ["deleted", "io.kubecast.alert.firing"]);
    let r =
        plan(&["--resource", "deploy", "--resource", "nodes"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.filter.resources, ["deploy", "nodes"]);
    assert!(p.filter.labels.is_some());
    assert_eq!(error(&["--type", "created"]).flag, "--type");
    let e = error(&["--label", "app in (a"]);
    assert_eq!(e.flag, "--label");
}

#[test]
fn a_report_replaces_the_events_on_stdout_unless_they_go_elsewhere() {
    let dest = |extra: &[&str]| {
        plan(extra)
            .map(|p| p.destination)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(dest(&["--verify"]), Destination::Nowhere);
    assert_eq!(dest(&["--state-at", "5m"]), Destination::Nowhere);
    assert_eq!(
        dest(&["--verify", "-o", "x.jsonl"]),
        Destination::File("x.jsonl".into())
    );
    assert_eq!(
        dest(&["--config", "c.yaml", "--sink", "edge"]),
        Destination::Sink {
            config: "c.yaml".into(),
            name: "edge".into()
        }
    );
    assert_eq!(
        error(&["-o", "x", "--config", "c.yaml", "--sink", "s"]).flag,
        "--output"
    );
}

#[test]
fn dedup_is_on_unless_turned_off_last() {
    assert_eq!(plan(&["--no-dedup"]).map(|p| p.dedup).ok(), Some(None));
    assert_eq!(
        plan(&["--no-dedup", "--dedup"]).map(|p| p.dedup).ok(),
        Some(Some(1_000_000))
    );
    assert_eq!(error(&["--dedup-window", "1"]).flag, "--dedup-window");
}

#[test]
fn connection_flags_are_checked_as_the_kafka_sink_checks_them() {
    let p = plan(&[
        "--tls-ca-file",
        "ca.pem",
        "--sasl-mechanism",
        "scram-sha-512",
        "--sasl-username",
        "u",
        "--sasl-password",
        "pw",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let get = |k: &str| {
        p.connection
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.0.clone())
    };
    assert_eq!(get("security.protocol").as_deref(), Some("sasl_ssl"));
    assert_eq!(get("sasl.mechanism").as_deref(), Some("SCRAM-SHA-512"));
    assert_eq!(get("ssl.ca.location").as_deref(), Some("ca.pem"));
    assert_eq!(get("sasl.password").as_deref(), Some("pw"));
    let e = error(&["--sasl-mechanism", "GSSAPI", "--sasl-username", "u"]);
    assert_eq!(e.flag, "--sasl-mechanism", "{e}");
    let e = error(&["--tls-cert-file", "c.pem"]);
    assert_eq!(e.flag, "--tls-key-file", "{e}");
}

#[test]
fn topics_repeat_and_a_caret_makes_a_pattern_matched_against_whole_names() {
    let p =
        plan(&["--topic", "u", "--topic", r"^k8s\..*\.pods$"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.topics.len(), 3);
    assert!(p.topics[0].takes("t") && !p.topics[0].takes("tt"));
    assert!(p.topics[2].takes("k8s.eu-1.pods"));
    assert!(!p.topics[2].takes("k8s.eu-1.pods.dlq"));
    let anything = plan(&["--topic", "^.*"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !anything.topics[1].takes("__consumer_offsets"),
        "internal topics never match"
    );
    let e = error(&["--topic", "^k8s.(pods"]);
    assert_eq!(e.flag, "--topic");
    assert!(e.message.contains("is not a regular expression"), "{e}");
}

#[test]
fn follow_has_no_end_and_no_report_and_picks_its_format_by_the_terminal() {
    let p = plan(&["--follow", "--cluster", "eu-*"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.follow && p.events.is_none(), "chosen at run time: {p:?}");
    assert_eq!(p.filter.clusters, ["eu-*"]);
    assert_eq!(error(&["--follow", "--until", "1h"]).flag, "--until");
    assert_eq!(error(&["--follow", "--to-offset", "5"]).flag, "--to-offset");
    assert_eq!(error(&["--follow", "--verify"]).flag, "--verify");
    assert_eq!(error(&["--follow", "--html", "x.html"]).flag, "--html");
    let p = plan(&["--follow", "--format", "events"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.events, Some(EventFormat::Events));
    let p = plan(&["--format", "line"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.events, Some(EventFormat::Line));
    assert_eq!(
        plan(&[]).map(|p| p.events).ok(),
        Some(Some(EventFormat::Events))
    );
    assert_eq!(error(&["--format", "table"]).flag, "--format");
    assert_eq!(
        error(&["--state-at", "1h", "--format", "line"]).flag,
        "--format"
    );
}

#[test]
fn diff_clusters_takes_two_different_clusters_and_a_time_defaulting_to_now() {
    let p = plan(&["--diff-clusters", "eu-1", "us-1", "--format", "table"])
        .unwrap_or_else(|e| panic!("{e}"));
    let d = p.diff.unwrap_or_else(|| panic!("no diff"));
    assert_eq!((d.a.as_str(), d.b.as_str(), d.at_ms), ("eu-1", "us-1", NOW));
    assert_eq!(p.format, StateFormat::Table);
    assert_eq!(p.destination, Destination::Nowhere);
    let p = plan(&["--diff-clusters", "a", "b", "--at", "2h"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.diff.map(|d| d.at_ms), Some(NOW - 7_200_000));
    assert_eq!(
        error(&["--diff-clusters", "a", "a"]).flag,
        "--diff-clusters"
    );
    assert_eq!(
        error(&["--diff-clusters", "a", "b", "--verify"]).flag,
        "--diff-clusters"
    );
    assert_eq!(
        error(&["--diff-clusters", "a", "b", "--at", "noon"]).flag,
        "--at"
    );
}

#[test]
fn the_writers_redaction_comes_from_its_config_or_flags_also_while_following() {
    let p = plan(&[
        "--follow",
        "--config",
        "c.yaml",
        "--redact-annotation",
        "example.com/token",
        "--redact-label",
        "owner",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.config, Some("c.yaml".into()));
    assert_eq!(
        p.destination,
        Destination::Stdout,
        "no --sink: nothing re-published"
    );
    assert_eq!(p.redact.annotations, ["example.com/token"]);
    assert_eq!(p.redact.labels, ["owner"]);
    assert!(p.redact.env_values);
    // Re-publishing needs an end.
    assert_eq!(
        error(&["--follow", "--config", "c.yaml", "--sink", "s"]).flag,
        "--sink"
    );
}
