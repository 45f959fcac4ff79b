//! [`Config::validate`]: pure checks that turn a [`Config`] into the [`Validated`] form the
//! pipeline runs on, reporting every problem at once, each with its field path.

use std::fmt;

use super::{
    Config, EncodingConfig, KubernetesConfig, LogConfig, ShutdownConfig, StateConfig, WatchConfig,
};
use crate::ha::Election;
use crate::sinks::ValidSink;
use crate::vocab::{Issue, is_dns_label, is_name};

/// Every problem found in a config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    pub issues: Vec<Issue>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config:")?;
        for i in &self.issues {
            write!(f, "\n  field `{}`: {}", i.field, i.message)?;
        }
        Ok(())
    }
}

/// A config that passed validation.
#[derive(Debug)]
pub struct Validated {
    pub cluster: String,
    pub kubernetes: KubernetesConfig,
    /// `kubernetes.keepalive`, validated.
    pub keepalive: crate::cluster::Keepalive,
    pub watch: WatchConfig,
    pub encoding: EncodingConfig,
    pub sinks: Vec<(String, ValidSink)>,
    pub state: StateConfig,
    pub log: LogConfig,
    /// Where the operations endpoint listens, if anywhere.
    pub metrics_address: Option<std::net::SocketAddr>,
    pub shutdown: ShutdownConfig,
    /// With `leader_election.enabled`, how to elect.
    pub leader_election: Option<Election>,
    /// `sharding.shards`: 1 unless leader election is on.
    pub shards: u32,
    /// The shard this config runs (validated for it by [`Config::validate_shard`]): its
    /// watches ask for the shard's objects only, and its sinks' transactional ids, checkpoints
    /// and sessions are the shard's. `None`: every object.
    pub shard: Option<crate::model::Shard>,
    /// With `routes` or `alerts`, the validated routes and rules.
    pub routing: Option<super::Routing>,
    /// The config this came from: a replica validates it again for each term it leads
    /// (the running sinks are used up by a term).
    pub source: Config,
}

impl Config {
    /// Each sink's config as its shard runs it: with the topics and compat of the routes
    /// that feed it, and `shard`.
    pub fn sink_configs(
        &self,
        shard: Option<crate::model::Shard>,
    ) -> Vec<(String, crate::sinks::SinkConfig)> {
        let mut route_topics = super::routing::route_topics(self);
        let mut route_compat = super::routing::route_compat(self);
        self.sinks
            .iter()
            .map(|(name, sink)| {
                let mut sink = sink.clone();
                sink.common.route_topics = route_topics.remove(name).unwrap_or_default();
                sink.common.route_compat = route_compat.remove(name).unwrap_or_default();
                sink.common.shard = shard;
                (name.clone(), sink)
            })
            .collect()
    }

    /// Checks every value without touching the network or the disk.
    pub fn validate(self) -> Result<Validated, ValidationError> {
        self.validate_shard(None)
    }

    /// As [`Config::validate`], for the replica that holds `shard`: its sinks are the shard's
    /// (a transactional id, checkpoint key and MQTT session of its own).
    pub fn validate_shard(
        self,
        shard: Option<crate::model::Shard>,
    ) -> Result<Validated, ValidationError> {
        let source = self.clone();
        let mut issues = Vec::new();
        if !is_dns_label(&self.cluster) {
            issues.push(Issue::new(
                "cluster",
                format!(
                    "`{}` must be a DNS-1123 label (lower-case letters, digits, '-', at most 63)",
                    self.cluster
                ),
            ));
        }
        let keepalive = self.kubernetes.keepalive.validate(&mut issues);
        super::resources::check(&self.watch.resources, &mut issues);
        for (i, ns) in self.watch.namespaces.iter().enumerate() {
            if !is_dns_label(ns) {
                issues.push(Issue::new(
                    format!("watch.namespaces[{i}]"),
                    format!("`{ns}` is not a namespace name"),
                ));
            }
        }
        for (field, sel) in [
            ("watch.label_selector", &self.watch.label_selector),
            ("watch.field_selector", &self.watch.field_selector),
        ] {
            if sel.as_deref().is_some_and(|s| s.trim().is_empty()) {
                issues.push(Issue::new(
                    field,
                    "is empty; leave it out to select everything",
                ));
            }
        }
        if self.watch.page_size == 0 {
            issues.push(Issue::new("watch.page_size", "must be at least 1"));
        }
        if !(10..=3600).contains(&self.watch.timeout_seconds) {
            issues.push(Issue::new(
                "watch.timeout_seconds",
                "must be between 10 and 3600",
            ));
        }
        if self.watch.resync_seconds == Some(0) {
            issues.push(Issue::new(
                "watch.resync_seconds",
                "must be at least 1; leave it out for no resync",
            ));
        }
        if self.watch.max_backoff_seconds == 0 {
            issues.push(Issue::new(
                "watch.max_backoff_seconds",
                "must be at least 1",
            ));
        }
        if self
            .state
            .dir
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            issues.push(Issue::new(
                "state.dir",
                "is empty; leave it out to keep no state",
            ));
        }
        Issue::at_least(
            &mut issues,
            "state.fsync_interval_ms",
            self.state.fsync_interval_ms,
            1,
        );
        Issue::at_least(
            &mut issues,
            "state.snapshot_interval_seconds",
            self.state.snapshot_interval_seconds,
            1,
        );
        Issue::at_least(&mut issues, "state.segment_mib", self.state.segment_mib, 1);
        Issue::at_least(&mut issues, "state.behind_ms", self.state.behind_ms, 1);
        Issue::at_least(&mut issues, "state.behind_mib", self.state.behind_mib, 1);
        if self.sinks.is_empty() {
            issues.push(Issue::new("sinks", "at least one sink is required"));
        }
        let routes_and_rules = super::routing::routes_and_rules(&self, &mut issues);
        let mut sinks = Vec::new();
        for (name, sink) in self.sink_configs(shard) {
            if !is_name(&name) {
                issues.push(Issue::new(
                    format!("sinks.{name}"),
                    "sink names are letters, digits, '-' and '_'",
                ));
            }
            match sink.validate(&name, &self.cluster) {
                Ok(v) => sinks.push((name.clone(), v)),
                Err(more) => issues.extend(more),
            }
        }
        check_keeper(&sinks, &self.state, &mut issues);
        check_k8sobjects(&self, &mut issues);
        let routing = routes_and_rules.map(|(routes, rules)| {
            super::routing::feeds(&self, routes, rules, &sinks, &mut issues)
        });
        let leader_election = self.leader_election.validate(&mut issues);
        let shards = self
            .sharding
            .validate(leader_election.is_some(), &mut issues);
        if shards > 1 {
            for (name, sink) in &self.sinks {
                if matches!(
                    sink.kind,
                    crate::sinks::SinkKind::File(_) | crate::sinks::SinkKind::Stdout(_)
                ) {
                    issues.push(Issue::new(
                        format!("sinks.{name}.type"),
                        "a file or stdout sink cannot be shared by shards: each shard a replica holds would write its lines into the same stream",
                    ));
                }
            }
        }
        if leader_election.is_some() && !sinks.iter().any(|(_, v)| v.sink.keeper().is_some()) {
            issues.push(Issue::new(
                "leader_election.enabled",
                "needs an exactly_once Kafka sink: a new leader continues from its checkpoint, and its fencing stops a leader that lost the Lease",
            ));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            issues.push(Issue::new(
                "log.level",
                format!(
                    "`{}` is not a log filter such as `info` or `kubecast=debug`",
                    self.log.level
                ),
            ));
        }
        let metrics_address = match self.metrics.address.as_deref().map(str::parse) {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                issues.push(Issue::new(
                    "metrics.address",
                    format!(
                        "`{}` is not HOST:PORT with an IP address (e.g. 127.0.0.1:9464)",
                        self.metrics.address.as_deref().unwrap_or_default()
                    ),
                ));
                None
            }
        };
        Issue::at_least(
            &mut issues,
            "shutdown.grace_seconds",
            self.shutdown.grace_seconds,
            1,
        );
        if !issues.is_empty() {
            return Err(ValidationError { issues });
        }
        Ok(Validated {
            cluster: self.cluster,
            kubernetes: self.kubernetes,
            keepalive,
            watch: self.watch,
            encoding: self.encoding,
            sinks,
            state: self.state,
            log: self.log,
            metrics_address,
            shutdown: self.shutdown,
            leader_election,
            shards,
            shard,
            routing,
            source,
        })
    }
}

/// An OTLP sink of `shape: k8sobjects` puts the whole object in each record, so every change
/// it gets must carry it: the data mode each route gives it (a route's own `data`, else
/// `encoding.data`) is `full`; without routes, `encoding.data` is. A route of alerts only
/// sends no object and is not checked.
fn check_k8sobjects(config: &Config, issues: &mut Vec<Issue>) {
    use super::DataMode;
    let shown = |m: DataMode| match m {
        DataMode::Full => "full",
        DataMode::Summary => "summary",
        DataMode::Reference => "reference",
    };
    let global = config.encoding.data;
    for (name, sink) in &config.sinks {
        let crate::sinks::SinkKind::Otlp(o) = &sink.kind else {
            continue;
        };
        if o.shape != crate::sinks::otlp::Shape::K8sobjects {
            continue;
        }
        if config.routes.is_empty() {
            if global != DataMode::Full {
                issues.push(Issue::new(
                    format!("sinks.{name}.shape"),
                    "`k8sobjects` carries the whole object: it needs `encoding.data: full`",
                ));
            }
            continue;
        }
        for (route, r) in &config.routes {
            let alerts_only = !r.types.is_empty() && r.types.iter().all(|t| t.starts_with("alert"));
            if !r.sinks.contains(name) || alerts_only {
                continue;
            }
            let message = match r.data {
                Some(DataMode::Full) => continue,
                None if global == DataMode::Full => continue,
                Some(m) => format!(
                    "`{}` goes to sinks.{name}, whose `shape: k8sobjects` carries the whole object: it needs `full`",
                    shown(m)
                ),
                None => format!(
                    "unset, so this route gives sinks.{name} `encoding.data` (`{}`), but its `shape: k8sobjects` carries the whole object: set `data: full` here",
                    shown(global)
                ),
            };
            issues.push(Issue::new(format!("routes.{route}.data"), message));
        }
    }
}

/// An exactly-once sink keeps the pipeline's state in its destination: there can be one,
/// there is then no `state.dir` (two sources of truth would disagree after a failover), and
/// the other sinks must not drop events (it waits for them; a dropped event it would wait
/// for forever).
fn check_keeper(sinks: &[(String, ValidSink)], state: &StateConfig, issues: &mut Vec<Issue>) {
    let keepers: Vec<&str> = sinks
        .iter()
        .filter(|(_, v)| v.sink.keeper().is_some())
        .map(|(n, _)| n.as_str())
        .collect();
    let Some(keeper) = keepers.first() else {
        return;
    };
    for other in &keepers[1..] {
        issues.push(Issue::new(
            format!("sinks.{other}.exactly_once"),
            format!("only one sink can be exactly_once (sinks.{keeper} is)"),
        ));
    }
    if state.dir.is_some() {
        issues.push(Issue::new(
            "state.dir",
            format!("must be left out with an exactly_once sink: sinks.{keeper} keeps the state in Kafka"),
        ));
    }
    for (name, v) in sinks {
        if name != keeper && v.queue.when_full != crate::sinks::WhenFull::Block {
            issues.push(Issue::new(
                format!("sinks.{name}.queue.when_full"),
                format!("must be `block` next to the exactly_once sink sinks.{keeper} (it commits only what every sink has settled)"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::load_str;

    #[test]
    fn every_problem_is_reported_with_its_field_path() {
        let text = "cluster: Local_1\nwatch:\n  namespaces: [ok, Bad]\n  page_size: 0\nsinks:\n  k:\n    type: kafka\n    brokers: ''\n";
        let err = load_str("t.yaml", text, Vec::new())
            .unwrap()
            .validate()
            .unwrap_err();
        let fields: Vec<&str> = err.issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "cluster",
                "watch.namespaces[1]",
                "watch.page_size",
                "sinks.k.brokers"
            ],
            "{err}"
        );
    }

    #[test]
    fn a_config_without_sinks_is_rejected() {
        let err = load_str("t.yaml", "cluster: c\nsinks: {}\n", Vec::new())
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(err.issues[0].field, "sinks");
    }

    fn issues_of(text: &str) -> Vec<String> {
        match load_str("t.yaml", text, Vec::new()).unwrap().validate() {
            Ok(_) => Vec::new(),
            Err(e) => e.issues.iter().map(|i| i.field.clone()).collect(),
        }
    }

    const EOS: &str = "    type: kafka\n    brokers: b:1\n    exactly_once: true\n";

    #[test]
    fn shards_take_no_file_or_stdout_sink_and_give_each_shard_its_transactional_id() {
        let elected = "leader_election:\n  enabled: true\nsharding:\n  shards: 4\n";
        let with_file = format!(
            "cluster: c\n{elected}sinks:\n  a:\n{EOS}  f:\n    type: file\n    path: /tmp/x.jsonl\n"
        );
        assert_eq!(issues_of(&with_file), vec!["sinks.f.type"]);
        let text = format!("cluster: c\n{elected}sinks:\n  a:\n{EOS}");
        let config = load_str("t.yaml", &text, Vec::new()).unwrap();
        let shard = crate::model::Shard::new(2, 4);
        let v = config.validate_shard(shard).unwrap();
        assert_eq!((v.shards, v.shard), (4, shard));
    }

    #[test]
    fn one_exactly_once_sink_and_no_state_dir_beside_it() {
        let two = format!("cluster: c\nsinks:\n  a:\n{EOS}  b:\n{EOS}");
        assert_eq!(issues_of(&two), vec!["sinks.b.exactly_once"]);
        let stateful = format!("cluster: c\nstate:\n  dir: /tmp/x\nsinks:\n  a:\n{EOS}");
        assert_eq!(issues_of(&stateful), vec!["state.dir"]);
        let alone = format!("cluster: c\nsinks:\n  a:\n{EOS}");
        assert!(issues_of(&alone).is_empty());
    }

    #[test]
    fn the_state_logs_bounds_are_at_least_one_and_its_policy_a_known_word() {
        let text = "cluster: c\nstate:\n  dir: /tmp/x\n  behind_ms: 0\n  behind_mib: 0\nsinks:\n  a:\n    type: stdout\n";
        assert_eq!(issues_of(text), vec!["state.behind_ms", "state.behind_mib"]);
        let always =
            "cluster: c\nstate:\n  dir: /tmp/x\n  log: always\nsinks:\n  a:\n    type: stdout\n";
        let config = load_str("t.yaml", always, Vec::new()).unwrap();
        assert_eq!(config.state.log, crate::store::LogPolicy::Always);
        let default = load_str(
            "t.yaml",
            "cluster: c\nsinks:\n  a:\n    type: stdout\n",
            Vec::new(),
        );
        let default = default.unwrap();
        assert_eq!(
            (
                default.state.log,
                default.state.behind_ms,
                default.state.behind_mib
            ),
            (crate::store::LogPolicy::WhenBehind, 50, 16)
        );
        let typo = "cluster: c\nstate:\n  log: sometimes\nsinks:\n  a:\n    type: stdout\n";
        let err = load_str("t.yaml", typo, Vec::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("state.log") || err.contains("sometimes"),
            "{err}"
        );
    }

    #[test]
    fn sinks_beside_an_exactly_once_sink_must_not_drop_events() {
        let text = format!(
            "cluster: c\nsinks:\n  a:\n{EOS}  m:\n    type: stdout\n    queue: {{when_full: drop}}\n"
        );
        assert_eq!(issues_of(&text), vec!["sinks.m.queue.when_full"]);
    }

    const K8SOBJECTS: &str = "  o: {type: otlp, endpoint: 'http://127.0.0.1:4318', shape: k8sobjects}\n  s: {type: stdout}\n";

    /// The issues of a config whose sinks are [`K8SOBJECTS`], as `field: message`.
    fn k8sobjects_issues(settings: &str) -> Vec<String> {
        let text = format!("cluster: c\n{settings}sinks:\n{K8SOBJECTS}");
        match load_str("t.yaml", &text, Vec::new()).unwrap().validate() {
            Ok(_) => Vec::new(),
            Err(e) => e
                .issues
                .iter()
                .map(|i| format!("{}: {}", i.field, i.message))
                .collect(),
        }
    }

    #[test]
    fn a_k8sobjects_sink_needs_full_data_from_every_route_that_feeds_it() {
        // Without routes, the global mode.
        let global = k8sobjects_issues("encoding: {data: summary}\n");
        assert_eq!(global.len(), 1, "{global:?}");
        assert!(
            global[0].starts_with("sinks.o.shape: ") && global[0].contains("encoding.data: full"),
            "{global:?}"
        );
        assert!(k8sobjects_issues("").is_empty());
        // A route's own summary into it: named by the route, the sink and the field.
        let own = k8sobjects_issues(
            "routes:\n  r: {sinks: [o, s], data: summary}\n  f: {sinks: [o], data: full}\n",
        );
        assert_eq!(own.len(), 1, "{own:?}");
        assert!(
            own[0].starts_with("routes.r.data: ")
                && own[0].contains("`summary`")
                && own[0].contains("sinks.o")
                && own[0].contains("shape: k8sobjects"),
            "{own:?}"
        );
        // A route that sets no mode gives the global one.
        let inherited = k8sobjects_issues(
            "encoding: {data: reference}\nroutes:\n  r: {sinks: [o]}\n  s: {sinks: [s]}\n",
        );
        assert_eq!(inherited.len(), 1, "{inherited:?}");
        assert!(
            inherited[0].starts_with("routes.r.data: ")
                && inherited[0].contains("encoding.data")
                && inherited[0].contains("`reference`")
                && inherited[0].contains("sinks.o"),
            "{inherited:?}"
        );
        // Global summary, but every route into the k8sobjects sink says full: valid.
        let valid = k8sobjects_issues(
            "encoding: {data: summary}\nroutes:\n  r: {sinks: [o], data: full}\n  s: {sinks: [s]}\n",
        );
        assert!(valid.is_empty(), "{valid:?}");
        // A route of alerts only sends no object, whatever its mode.
        let alerts = "encoding: {data: summary}\nalerts:\n  rules:\n    r: {expr: 'status.phase == \"Failed\"'}\n";
        let valid = k8sobjects_issues(&format!(
            "{alerts}routes:\n  r: {{sinks: [o], data: full}}\n  a: {{sinks: [o, s], types: [alerts]}}\n"
        ));
        assert!(valid.is_empty(), "{valid:?}");
    }

    #[test]
    fn leader_election_needs_an_exactly_once_sink_and_a_lease_that_outlasts_renewals() {
        let plain =
            "cluster: c\nleader_election: {enabled: true}\nsinks:\n  a:\n    type: stdout\n";
        assert_eq!(issues_of(plain), vec!["leader_election.enabled"]);
        let short = format!(
            "cluster: c\nleader_election: {{enabled: true, lease_duration_ms: 1000, retry_period_ms: 800}}\nsinks:\n  a:\n{EOS}"
        );
        assert_eq!(issues_of(&short), vec!["leader_election.lease_duration_ms"]);
        let good = format!("cluster: c\nleader_election: {{enabled: true}}\nsinks:\n  a:\n{EOS}");
        assert!(issues_of(&good).is_empty());
    }
}
