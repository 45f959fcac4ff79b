//! High availability: one leader among kubecast's replicas, elected on a
//! `coordination.k8s.io/v1` Lease, or with `sharding` the shards shared among them, each a
//! Lease of its own. Entry points: [`Elector`] (one Lease), [`Members`] (which replicas are
//! alive) and [`balance::plan`] (which shards a replica takes and hands over).

pub mod balance;
mod config;
mod lease;
mod members;

pub use config::{Election, LeaderElectionConfig, MAX_SHARDS, ShardingConfig};
pub use lease::{Elector, LeaseError, LeaseSettings};
pub use members::Members;
