//! Routes and alert rules: which changes go to which sinks, and what fires. A route's filter
//! is made of the Kubernetes label selector ([`selector::parse`]), field paths
//! ([`crate::model::FieldPath`]) and the aspects a change predicate names, with their fingerprints
//! ([`aspects::fingerprint`]); a route's config and what it takes is [`config::RouteConfig`].
//! Entry point: [`engine::Router`], which the pipeline runs on every classified change and
//! whose alert evidence and messages are redacted like the events.

pub mod aspects;
pub mod config;
pub mod engine;
pub mod selector;
pub mod view;
