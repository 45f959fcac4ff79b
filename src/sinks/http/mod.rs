//! The HTTP sink: CloudEvents over HTTP (binary, structured or batch) to Knative Brokers and
//! Services, webhooks and functions; Knative's `K_SINK` and `K_CE_OVERRIDES` conventions.
//!
//! Entry points: [`HttpConfig`] (`type: http`), validated into [`HttpSettings`], whose
//! [`crate::sinks::Sink`] is `sink::run`. An event is acknowledged only on a 2xx answer; the
//! events of one object never overtake each other (`window`).

mod client;
mod config;
mod encode;
pub(crate) mod link;
mod sink;
mod window;

pub use client::{Answer, Client, ClientSettings, SendError};
pub use config::Auth;
pub(crate) use link::{Link, maybe};
pub(crate) use window::{Positions, Window};
pub(crate) use encode::gzip;
pub use config::{Compression, HttpConfig, HttpSettings};
pub(crate) use config::check_tls;
#[doc(hidden)]
pub use client::{follow, retry_after};
