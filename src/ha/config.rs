//! `leader_election:` and `sharding:` in the config, and the validated form of the first,
//! [`Election`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::vocab::Issue;

/// Several replicas, one of which publishes: the others stand by and take over when its
/// Lease expires. Needs an `exactly_once` Kafka sink (its checkpoint is where a new leader
/// continues from, and its fencing stops a leader that lost the Lease).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderElectionConfig {
    /// Elect a leader among the replicas. Default: false (this process always publishes).
    #[serde(default)]
    pub enabled: bool,
    /// The `coordination.k8s.io/v1` Lease the replicas share. Default: `kubecast`.
    #[serde(default = "default_lease")]
    pub lease: String,
    /// The Lease's namespace. Default: `POD_NAMESPACE`, else the service account's
    /// namespace, else `default`.
    #[serde(default)]
    pub namespace: Option<String>,
    /// This replica's name in the Lease (`holderIdentity`); unique per replica. Default:
    /// `POD_NAME`, else the host name and the process id.
    #[serde(default)]
    pub identity: Option<String>,
    /// How long a Lease the leader stopped renewing stays its own, in milliseconds: the
    /// longest a failover waits. Default: 15000.
    #[serde(default = "default_lease_duration_ms")]
    pub lease_duration_ms: u64,
    /// How often the leader renews the Lease and a standby tries to take it, in
    /// milliseconds. Default: 2000.
    #[serde(default = "default_retry_period_ms")]
    pub retry_period_ms: u64,
}

impl Default for LeaderElectionConfig {
    fn default() -> LeaderElectionConfig {
        LeaderElectionConfig {
            enabled: false,
            lease: default_lease(),
            namespace: None,
            identity: None,
            lease_duration_ms: default_lease_duration_ms(),
            retry_period_ms: default_retry_period_ms(),
        }
    }
}

/// `sharding:`: the cluster's objects split by the hash of their uid into `shards` equal
/// ranges, each published by one replica at a time (README, "High availability").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardingConfig {
    /// How many shards. Each is a Lease (`{leader_election.lease}-shard-{i}`) that one replica
    /// holds; replicas balance the shards between them. More than 1 needs
    /// `leader_election.enabled`. Default: 1 (one replica publishes everything).
    #[serde(default = "default_shards")]
    pub shards: u32,
}

impl Default for ShardingConfig {
    fn default() -> ShardingConfig {
        ShardingConfig {
            shards: default_shards(),
        }
    }
}

fn default_shards() -> u32 {
    1
}

/// The most shards: each is a watch per resource and a Kafka producer on the replica that
/// holds it.
pub const MAX_SHARDS: u32 = 256;

impl ShardingConfig {
    /// The number of shards, or the issues found; `elected` says whether leader election is
    /// on (shards are Leases).
    pub fn validate(&self, elected: bool, issues: &mut Vec<Issue>) -> u32 {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            issues.push(Issue::new(
                "sharding.shards",
                format!("must be between 1 and {MAX_SHARDS}"),
            ));
        } else if self.shards > 1 && !elected {
            issues.push(Issue::new(
                "sharding.shards",
                "more than 1 needs leader_election.enabled: each shard is a Lease the replicas take and hand over",
            ));
        }
        self.shards.clamp(1, MAX_SHARDS)
    }
}

fn default_lease() -> String {
    "kubecast".to_string()
}
fn default_lease_duration_ms() -> u64 {
    15_000
}
fn default_retry_period_ms() -> u64 {
    2_000
}

/// A validated `leader_election`: the names not given are found at start
/// ([`crate::ha::LeaseSettings`]).
#[derive(Debug, Clone)]
pub struct Election {
    pub lease: String,
    pub namespace: Option<String>,
    pub identity: Option<String>,
    pub lease_duration: Duration,
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// `None` when disabled; the issues found otherwise.
    pub fn validate(&self, issues: &mut Vec<Issue>) -> Option<Election> {
        if !self.enabled {
            return None;
        }
        let at = "leader_election";
        if self.lease.is_empty() {
            issues.push(Issue::new(format!("{at}.lease"), "must not be empty"));
        }
        for (field, value) in [("namespace", &self.namespace), ("identity", &self.identity)] {
            if value.as_deref().is_some_and(str::is_empty) {
                issues.push(Issue::new(
                    format!("{at}.{field}"),
                    "is empty; leave it out for the default",
                ));
            }
        }
        Issue::at_least(
            issues,
            format!("{at}.retry_period_ms"),
            self.retry_period_ms,
            10,
        );
        if self.lease_duration_ms < self.retry_period_ms.saturating_mul(2) {
            issues.push(Issue::new(
                format!("{at}.lease_duration_ms"),
                format!(
                    "must be at least twice retry_period_ms ({} ms): the leader renews within it",
                    self.retry_period_ms
                ),
            ));
        }
        Some(Election {
            lease: self.lease.clone(),
            namespace: self.namespace.clone(),
            identity: self.identity.clone(),
            lease_duration: Duration::from_millis(self.lease_duration_ms),
            retry_period: Duration::from_millis(self.retry_period_ms),
        })
    }
}

impl Election {
    /// The Lease settings, with the defaults found in the environment: `POD_NAMESPACE` or
    /// the service account's namespace file; `POD_NAME` or the host name and process id.
    pub fn resolve(&self) -> crate::ha::LeaseSettings {
        let namespace = self.namespace.clone().unwrap_or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
                .or_else(|| {
                    std::fs::read_to_string(
                        "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
                    )
                    .ok()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                })
                .unwrap_or_else(|| "default".to_string())
        });
        let identity = self.identity.clone().unwrap_or_else(|| {
            std::env::var("POD_NAME")
                .ok()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| {
                    let host = std::fs::read_to_string("/etc/hostname")
                        .map(|h| h.trim().to_string())
                        .unwrap_or_default();
                    format!("{host}_{}", std::process::id())
                })
        });
        crate::ha::LeaseSettings {
            namespace,
            name: self.lease.clone(),
            identity,
            lease_duration: self.lease_duration,
            renew_every: self.retry_period,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(shards: u32, elected: bool) -> Vec<Issue> {
        let mut issues = Vec::new();
        ShardingConfig { shards }.validate(elected, &mut issues);
        issues
    }

    #[test]
    fn more_than_one_shard_needs_leader_election_and_the_count_is_bounded() {
        assert!(issues(1, false).is_empty(), "one shard is today's kubecast");
        assert!(issues(8, true).is_empty());
        let without = issues(8, false);
        assert_eq!(without.len(), 1);
        assert_eq!(without[0].field, "sharding.shards");
        assert!(
            without[0].message.contains("leader_election.enabled"),
            "{:?}",
            without[0]
        );
        for bad in [0, MAX_SHARDS + 1] {
            let found = issues(bad, true);
            assert_eq!(found.len(), 1, "{bad}");
            assert!(
                found[0].message.contains("between 1 and 256"),
                "{:?}",
                found[0]
            );
        }
    }
}
