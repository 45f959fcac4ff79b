//! Routes (issue 12, under way): which changes go to which sinks. So far the pieces a route's
//! filter is made of: the Kubernetes label selector ([`selector::parse`]), field paths
//! ([`path::FieldPath`]) and the aspects a change predicate names, with their fingerprints
//! ([`aspects::fingerprint`]); a route's config and what it takes ([`config::RouteConfig`]).
//! Not yet wired into the pipeline or the config file.

pub mod aspects;
pub mod config;
pub mod engine;
pub mod path;
pub mod selector;
pub mod view;
