//! `kubernetes.keepalive`: how soon a dead connection to kube-apiserver is noticed, and its
//! validated form [`Keepalive`].
//!
//! kubecast talks HTTP/1.1 to the apiserver (kube's client), one connection per watch and a
//! small pool for lists, discovery and the Lease, so a dead connection is found by TCP
//! keepalive: probes start after `idle_seconds` without traffic, and the kernel drops the
//! connection after `probes` unanswered ones `interval_seconds` apart. The same span bounds
//! data written and not acknowledged (`TCP_USER_TIMEOUT`), so a request written into a
//! dead connection fails as soon. A watch is checked end to end as well: the apiserver sends
//! a bookmark about once a minute to a watch that asks for them (kubecast's do), so one that
//! brought neither an event nor a bookmark for `watch_silence_seconds` is taken for dead
//! even where something between kubecast and the apiserver (a proxy) keeps TCP alive. The
//! watch's own server-side timeout is kept below that bound ([`Keepalive::watch_timeout`]),
//! so that a healthy watch that is quiet and gets no bookmarks (an older apiserver, a proxy
//! that drops them) is ended by the apiserver and resumed from its position, not taken for
//! dead.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::net::TcpKeepalive;
use crate::vocab::Issue;

/// `kubernetes.keepalive` in the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepaliveConfig {
    /// Seconds without any traffic on a connection to the apiserver before TCP keepalive
    /// probes start. Default: 15.
    #[serde(default = "default_idle")]
    pub idle_seconds: u32,
    /// Seconds between two keepalive probes. Default: 10.
    #[serde(default = "default_interval")]
    pub interval_seconds: u32,
    /// Unanswered probes after which the connection is dropped, and with it every request
    /// and watch on it (they start again on a new connection, watches from where they
    /// were). Default: 3: a dead connection is found within idle + interval × probes =
    /// 45 s.
    #[serde(default = "default_probes")]
    pub probes: u32,
    /// A watch that brought neither an event nor a bookmark for this many seconds is taken
    /// for dead and opened again from where it was. The apiserver sends a bookmark about
    /// once a minute, so this is about twice that; at least 65. Default: 120.
    #[serde(default = "default_watch_silence")]
    pub watch_silence_seconds: u32,
}

impl Default for KeepaliveConfig {
    fn default() -> KeepaliveConfig {
        KeepaliveConfig {
            idle_seconds: default_idle(),
            interval_seconds: default_interval(),
            probes: default_probes(),
            watch_silence_seconds: default_watch_silence(),
        }
    }
}

fn default_idle() -> u32 {
    TcpKeepalive::DEFAULT.idle.as_secs() as u32
}
fn default_interval() -> u32 {
    TcpKeepalive::DEFAULT.interval.as_secs() as u32
}
fn default_probes() -> u32 {
    TcpKeepalive::DEFAULT.probes
}
fn default_watch_silence() -> u32 {
    120
}

/// The apiserver's bookmark interval on an idle watch, about: a silence bound below it
/// would reopen healthy watches.
const BOOKMARK_INTERVAL_S: u32 = 60;

/// A validated `kubernetes.keepalive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Every connection's TCP keepalive.
    pub tcp: TcpKeepalive,
    pub watch_silence: Duration,
}

impl Keepalive {
    /// The `timeoutSeconds` a watch asks of the apiserver, for `watch.timeout_seconds` as
    /// configured: at most three quarters of the silence bound, so the apiserver ends a quiet
    /// watch a quarter of the bound before kubecast would take it for dead.
    pub fn watch_timeout(&self, configured: u32) -> u32 {
        let bound = (self.watch_silence.as_secs() * 3 / 4).max(1);
        configured.min(u32::try_from(bound).unwrap_or(u32::MAX))
    }
}

impl Default for Keepalive {
    fn default() -> Keepalive {
        let mut issues = Vec::new();
        KeepaliveConfig::default().validate(&mut issues)
    }
}

impl KeepaliveConfig {
    /// The validated settings; what is wrong goes into `issues` (the defaults stand in).
    pub fn validate(&self, issues: &mut Vec<Issue>) -> Keepalive {
        let at = "kubernetes.keepalive";
        for (field, value) in [
            ("idle_seconds", self.idle_seconds),
            ("interval_seconds", self.interval_seconds),
            ("probes", self.probes),
        ] {
            Issue::at_least(issues, format!("{at}.{field}"), u64::from(value), 1);
        }
        if self.probes > 127 {
            issues.push(Issue::new(
                format!("{at}.probes"),
                "must be at most 127 (the kernel's limit)",
            ));
        }
        if self.watch_silence_seconds < BOOKMARK_INTERVAL_S + 5 {
            issues.push(Issue::new(
                format!("{at}.watch_silence_seconds"),
                format!(
                    "must be at least {}: the apiserver sends a bookmark about every {BOOKMARK_INTERVAL_S} s, so a shorter silence would reopen healthy watches",
                    BOOKMARK_INTERVAL_S + 5
                ),
            ));
        }
        let secs = |s: u32| Duration::from_secs(u64::from(s.max(1)));
        Keepalive {
            tcp: TcpKeepalive {
                idle: secs(self.idle_seconds),
                interval: secs(self.interval_seconds),
                probes: self.probes.clamp(1, 127),
            },
            watch_silence: secs(self.watch_silence_seconds),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_watch_is_ended_by_the_apiserver_before_it_would_be_taken_for_dead() {
        for silence in [65, 120, 600] {
            let mut issues = Vec::new();
            let k = KeepaliveConfig {
                watch_silence_seconds: silence,
                ..KeepaliveConfig::default()
            }
            .validate(&mut issues);
            assert!(issues.is_empty(), "{issues:?}");
            for configured in [10, 60, 300, 3600] {
                let sent = k.watch_timeout(configured);
                assert!(
                    u64::from(sent) < k.watch_silence.as_secs(),
                    "timeoutSeconds {sent} (configured {configured}) is not below the silence bound {silence}"
                );
                assert!(sent <= configured && sent >= configured.min(48));
            }
        }
        assert_eq!(Keepalive::default().watch_timeout(300), 90);
    }

    #[test]
    fn the_defaults_find_a_dead_connection_within_45_seconds() {
        let k = Keepalive::default();
        assert_eq!(k.tcp, TcpKeepalive::DEFAULT);
        assert_eq!(k.tcp.dead_after(), Duration::from_secs(45));
        assert_eq!(k.watch_silence, Duration::from_secs(120));
    }

    #[test]
    fn zero_probes_and_a_silence_below_the_bookmark_interval_are_refused_by_name() {
        let c = KeepaliveConfig {
            probes: 0,
            watch_silence_seconds: 30,
            ..KeepaliveConfig::default()
        };
        let mut issues = Vec::new();
        c.validate(&mut issues);
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "kubernetes.keepalive.probes",
                "kubernetes.keepalive.watch_silence_seconds"
            ]
        );
    }
}
