//! Pod alert rules: the built-in conditions and the evidence each gives when it holds
//! ([`builtin::holds`]), user rules' expressions ([`expr::Expr`]) checked against the Pod's
//! fields ([`fields::check`]), their config ([`config::AlertsConfig`]) and validated form
//! ([`rule::Rule`]), and episodes (fire once after `for`, resolve once, deterministic ids,
//! deadlines that survive a restart: [`episode::Episodes`]). The pipeline evaluates them in
//! [`crate::route::engine`].

pub mod builtin;
pub mod config;
pub mod episode;
pub mod expr;
pub mod fields;
pub mod rule;
