//! The `state:` settings: where and how the durable store keeps what must survive a crash.
//! Entry point: [`StateConfig`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::FsyncPolicy;

/// Which changes are written to the state directory's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogPolicy {
    /// Only those a sink falls behind on: a change every sink acknowledges within
    /// `behind_ms` is never written; one that is not (or that does not fit `behind_mib`) is
    /// logged then, and a snapshot first logs whatever is still held. The resume point on
    /// disk never passes a change that is neither acknowledged nor logged: after a crash the
    /// watch resumes before it and the apiserver sends it again. A change held at a crash
    /// that the apiserver no longer has (its watch history compacted, 410) reaches only the
    /// sinks that had acknowledged it; a sink that was behind sees the object's present state
    /// after the re-list, not that change.
    #[default]
    WhenBehind,
    /// Every change, before any sink sees it (synced as `fsync` says): after a crash every
    /// sink gets every change handed to any sink, whatever the apiserver still has.
    Always,
}

/// Where and how kubecast keeps what must survive a crash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Directory of the durable buffer, the known state and the resume point; created if
    /// missing. Default: none, meaning nothing survives a restart: events not yet
    /// acknowledged are lost and existing pods are emitted again (as `k8sinitial`).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// When what is logged is synced to disk: `always` (before it counts as stored: with
    /// `log: always`, before events go to any sink, so nothing emitted is lost even if the
    /// machine crashes), `interval` (every `fsync_interval_ms`;
    /// a machine crash may re-emit the last interval's changes, with the same ids) or
    /// `never` (left to the OS: survives a kubecast crash, not a machine crash).
    /// Default: `always`.
    #[serde(default)]
    pub fsync: FsyncPolicy,
    /// Which changes are written: `when_behind` (only those the sinks do not all
    /// acknowledge within `behind_ms`) or `always` (every change, before any sink sees it).
    /// Default: `when_behind`.
    #[serde(default)]
    pub log: LogPolicy,
    /// With `log: when_behind`: how long a change may wait, in memory only, for every sink's
    /// acknowledgement before it is logged, in milliseconds. Default: 50.
    #[serde(default = "default_behind_ms")]
    pub behind_ms: u64,
    /// With `log: when_behind`: MiB held in memory only at most (event data, and with routes
    /// or alert rules the objects' routing states); beyond it the oldest changes are logged
    /// at once. Default: 16.
    #[serde(default = "default_behind_mib")]
    pub behind_mib: u64,
    /// Interval of `fsync: interval`, in milliseconds. Default: 100.
    #[serde(default = "default_fsync_interval")]
    pub fsync_interval_ms: u64,
    /// Seconds between snapshots of the known state (also taken after each list and at
    /// shutdown); the log after a snapshot is replayed on restart. Default: 30.
    #[serde(default = "default_snapshot_interval")]
    pub snapshot_interval_seconds: u64,
    /// Size at which a log segment is closed and a new one started, in MiB. Default: 64.
    #[serde(default = "default_segment_mib")]
    pub segment_mib: u64,
}

fn default_behind_ms() -> u64 {
    50
}
fn default_behind_mib() -> u64 {
    16
}
fn default_fsync_interval() -> u64 {
    100
}
fn default_snapshot_interval() -> u64 {
    30
}
fn default_segment_mib() -> u64 {
    64
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: None,
            fsync: FsyncPolicy::default(),
            log: LogPolicy::default(),
            behind_ms: default_behind_ms(),
            behind_mib: default_behind_mib(),
            fsync_interval_ms: default_fsync_interval(),
            snapshot_interval_seconds: default_snapshot_interval(),
            segment_mib: default_segment_mib(),
        }
    }
}
