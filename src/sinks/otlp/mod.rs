//! The OTLP sink: every event as an OpenTelemetry log record, to the Collector or any OTLP
//! receiver over HTTP (protobuf or JSON) or gRPC.
//!
//! Entry points: [`OtlpConfig`] (`type: otlp`), validated into [`OtlpSettings`], whose
//! [`crate::sinks::Sink`] is `sink::run`. `record` maps an event onto the log data model (in
//! kubecast's shape or the `k8sobjects` receiver's), `encode` writes it in protobuf or JSON,
//! `answer` reads the receiver's answer by OTLP's retry rules. A record is acknowledged only
//! when the receiver accepted its request.

mod answer;
mod config;
mod encode;
mod proto;
mod record;
mod sink;

pub use config::{BatchConfig, OtlpConfig, OtlpSettings, Protocol};
pub use record::Shape;
#[doc(hidden)]
pub use answer::classify_any;
