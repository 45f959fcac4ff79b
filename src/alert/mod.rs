//! Pod alert rules: the built-in conditions and the evidence each gives when it holds
//! ([`builtin::holds`]), user rules' expressions ([`expr::Expr`]) checked against the Pod's
//! fields ([`fields::check`]), their config ([`config::AlertsConfig`]) and validated form
//! ([`rule::Rule`]), and episodes (fire once after `for`, resolve once after
//! `keep_firing_for`, deterministic ids, deadlines that survive a restart:
//! [`episode::Episodes`]), and Prometheus-style durations ([`duration`]). The router
//! evaluates them on every change; this module knows nothing of routes.

pub mod builtin;
pub mod config;
pub mod duration;
pub mod episode;
pub mod expr;
pub mod fields;
pub mod rule;
