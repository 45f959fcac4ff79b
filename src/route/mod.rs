//! Routes (issue 12, under way): which changes go to which sinks. So far the pieces a route's
//! filter is made of: the Kubernetes label selector ([`selector::parse`]), field paths
//! ([`path::FieldPath`]) and the aspects a change predicate names, with their fingerprints
//! ([`aspects::fingerprint`]).

pub mod aspects;
pub mod path;
pub mod selector;
