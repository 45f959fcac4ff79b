//! Sinks: where events go. One folder or file per sink type; each sink runs as its own
//! task, reads events from its bounded queue and reports an event delivered only on the
//! destination's own acknowledgement.
//!
//! Entry points: [`SinkConfig`] (the config of one sink), [`start`] (spawns a validated
//! sink and returns the sender side of its queue).

mod config;
mod dead_letter;
pub mod file;
pub mod kafka;
pub mod mqtt;
pub mod queue;
mod runner;
pub mod stdout;
mod validate;

pub use config::{DeadLetterConfig, Placeholder, Secret, SinkConfig, Template, TlsConfig};
pub use dead_letter::DeadLetter;
pub use queue::{Pushed, QueueConfig, WhenFull};
pub use runner::{Report, SinkError, SinkHandle, start};
pub use validate::ValidSink;
