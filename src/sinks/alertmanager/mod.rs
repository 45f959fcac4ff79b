//! The Alertmanager sink: kubecast's alert episodes as Prometheus Alertmanager alerts, sent the
//! way Prometheus sends its own (API v2, `POST /api/v2/alerts`).
//!
//! What it holds: the config and its validation ([`AlertmanagerConfig`] into [`AmSettings`]),
//! the mapping of an alert event to an Alertmanager alert (`alert`), the table of alerts
//! standing at the destination (`table`), one sender per Alertmanager instance (`sender`) and
//! the task that feeds them and acknowledges events (`sink`, the entry point: [`run`]).
//!
//! Alertmanager holds state, not a log: each active alert is sent again every
//! `resend_interval` with `endsAt` four intervals ahead (so a missed send never resolves it),
//! a resolved one with `endsAt` its resolve time for 15 minutes (so an instance that lost its
//! state or was away learns it). Every instance listed in `urls` has its own sender and its
//! own backlog (the alerts it has not confirmed), so one down never holds another. It takes
//! only alert events ([`crate::sinks::Takes::Alerts`]): the pipeline hands it no other, so
//! every instance down holds back nothing but alerts. An event is acknowledged when one
//! instance confirmed the alert it changed; the table itself comes back after a restart or a
//! take-over from the durable episodes ([`crate::sinks::Sink::restore_alerts`]), so a new
//! sender re-sends every standing alert at once.

mod alert;
mod config;
mod sender;
mod sink;
mod table;

pub use config::{AlertmanagerConfig, AmSettings};
pub use sender::InstanceMetrics;
pub use sink::run;

/// How long a resolved alert is sent again, as Prometheus does.
pub const RESOLVED_RESEND: std::time::Duration = std::time::Duration::from_secs(15 * 60);
