//! High availability: one leader among kubecast's replicas, elected on a
//! `coordination.k8s.io/v1` Lease. Entry point: [`Elector`].

mod config;
mod lease;

pub use config::{Election, LeaderElectionConfig, MAX_SHARDS, ShardingConfig};
pub use lease::{Elector, LeaseError, LeaseSettings};
