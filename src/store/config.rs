//! The `state:` settings: where and how the durable store keeps what must survive a crash.
//! Entry point: [`StateConfig`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::FsyncPolicy;

/// Where and how kubecast keeps what must survive a crash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Directory of the durable buffer, the known state and the resume point; created if
    /// missing. Default: none, meaning nothing survives a restart: events not yet
    /// acknowledged are lost and existing pods are emitted again (as `k8sinitial`).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// When the buffer is synced to disk: `always` (before events go to any sink: nothing
    /// emitted is lost even if the machine crashes), `interval` (every `fsync_interval_ms`;
    /// a machine crash may re-emit the last interval's changes, with the same ids) or
    /// `never` (left to the OS: survives a kubecast crash, not a machine crash).
    /// Default: `always`.
    #[serde(default)]
    pub fsync: FsyncPolicy,
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
            fsync_interval_ms: default_fsync_interval(),
            snapshot_interval_seconds: default_snapshot_interval(),
            segment_mib: default_segment_mib(),
        }
    }
}
