//! The producer's client context: librdkafka's global errors, logged when retriable, and the
//! first fatal one (rejected credentials, a refused TLS handshake before the brokers ever
//! answered, the idempotent producer's own fatal error) kept where the sink's loop sees it;
//! librdkafka's log, with the topic a transaction was refused kept for the refusal's error.
//! Entry point: [`Context`]; the delivery reports go to each record's future (`producer.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::Notify;

/// Why the Kafka sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum KafkaSinkError {
    #[error("creating the Kafka producer")]
    Create(#[source] KafkaError),
    /// Fatal: rejected credentials or authorization, or the idempotent producer's own fatal
    /// error (it can no longer guarantee order).
    #[error("Kafka rejected kubecast: {reason}")]
    Rejected {
        reason: String,
        #[source]
        source: KafkaError,
    },
    #[error("the Kafka producer stopped before reporting a delivery")]
    ProducerGone,
    #[error(transparent)]
    Topic(#[from] super::topics::TopicError),
    #[error(transparent)]
    Refused(#[from] super::refusal::Refusal),
}

/// Receives librdkafka's global errors: logs the retriable ones, keeps the first fatal one
/// where the sink's loop sees it; its delivery reports go to each record's future
/// (`producer.rs`).
pub struct Context {
    sink: Arc<str>,
    shared: Arc<Fatal>,
}

impl Context {
    /// A context for sink `sink` that keeps its first fatal error in `shared`.
    pub(super) fn with_fatal(sink: Arc<str>, shared: Arc<Fatal>) -> Context {
        Context { sink, shared }
    }
}

/// The first fatal error, and a wake-up for the sink's loop.
#[derive(Default)]
pub(super) struct Fatal {
    error: Mutex<Option<(KafkaError, String)>>,
    pub(super) wake: Notify,
    /// The brokers answered once: a refused TLS handshake is retried from then on (a
    /// certificate being rotated) instead of stopping the sink.
    pub(super) connected: AtomicBool,
    /// The last retriable error and when it came, for readiness to name.
    last: Mutex<Option<(std::time::Instant, String)>>,
    /// The last topic Kafka refused to add to a transaction (librdkafka names it only in
    /// its log; the transaction's error names only the refusal).
    refused_topic: Mutex<Option<String>>,
}

impl Fatal {
    /// The fatal error reported so far, if any.
    pub(super) fn take(&self) -> Option<KafkaSinkError> {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.take()
            .map(|(source, reason)| KafkaSinkError::Rejected { reason, source })
    }
}

impl Fatal {
    /// The topic Kafka last refused to add to a transaction, taken.
    pub(super) fn refused_topic(&self) -> Option<String> {
        self.refused_topic.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The last retriable error, if it came within the last 30 seconds.
    pub(super) fn recent(&self) -> Option<String> {
        let slot = self.last.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref()
            .filter(|(at, _)| at.elapsed() < std::time::Duration::from_secs(30))
            .map(|(_, why)| why.clone())
    }
}

impl ClientContext for Context {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        // `Failed to add partition "TOPIC" [P] to transaction: Broker: Topic authorization
        // failed`: the one place the refused topic of a transaction is named.
        if fac == "ADDPARTS"
            && message.contains("authorization failed")
            && let Some((_, rest)) = message.split_once('"')
            && let Some((topic, _)) = rest.split_once('"')
        {
            let mut slot = self.shared.refused_topic.lock().unwrap_or_else(|p| p.into_inner());
            *slot = Some(topic.to_string());
        }
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            L::Warning => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Notice | L::Info => tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        // `Fatal`: the idempotent producer can no longer guarantee order or exactly-once.
        let fatal = matches!(
            code,
            Some(
                RDKafkaErrorCode::Fatal
                    | RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
            )
        );
        let fenced = matches!(
            code,
            Some(RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::Fenced)
        ) || reason.contains("fenced");
        if fenced {
            // A newer replica of this exactly-once sink took over: expected at a failover;
            // the transactional calls report it to the sink.
            tracing::warn!(sink = %self.sink, reason, "fenced: another kubecast took over this sink's transactional.id");
        } else if let Some(why) = tls_refusal(reason) {
            if self.shared.connected.load(Ordering::Relaxed) {
                tracing::error!(sink = %self.sink, error = %error, reason, "Kafka's TLS handshake refused; retrying");
            } else {
                tracing::error!(sink = %self.sink, error = %error, reason, "Kafka's TLS handshake refused");
                let mut slot = self.shared.error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| (error.clone(), format!("{why}: {reason}")));
                self.shared.wake.notify_one();
            }
        } else if fatal {
            let reason = if code == Some(RDKafkaErrorCode::ClusterAuthorizationFailed) {
                // The idempotent producer's first request (InitProducerId) needs
                // IdempotentWrite on the cluster, which Write on any topic grants.
                format!("Kafka refused IdempotentWrite on Cluster (the idempotent producer's registration; Write on the sink's topics grants it; `kubecast kafka-acls` prints the ACLs this config needs): {reason}")
            } else {
                reason.to_string()
            };
            let reason = reason.as_str();
            tracing::error!(sink = %self.sink, error = %error, reason, "Kafka rejected kubecast");
            let mut slot = self.shared.error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| (error.clone(), reason.to_string()));
            self.shared.wake.notify_one();
        } else {
            // Brokers down, connection refused: librdkafka reconnects with backoff itself.
            tracing::warn!(sink = %self.sink, error = %error, reason, "Kafka unavailable, retrying");
            let mut slot = self.shared.last.lock().unwrap_or_else(|p| p.into_inner());
            *slot = Some((std::time::Instant::now(), format!("{error}: {reason}")));
        }
    }
}

/// What a librdkafka error text says failed in a TLS handshake (OpenSSL's words): the
/// verification of the broker's certificate, kubecast's client certificate, or the protocol
/// versions and cipher suites.
fn tls_refusal(reason: &str) -> Option<&'static str> {
    let has = |words: &[&str]| words.iter().any(|w| reason.contains(w));
    if has(&["certificate verify failed"]) {
        Some("certificate verification failed: the broker's certificate is not trusted; check tls.ca_file and the broker's name")
    } else if has(&[
        "alert bad certificate",
        "alert certificate required",
        "alert unknown ca",
        "alert certificate unknown",
        "alert certificate expired",
        "alert certificate revoked",
    ]) {
        Some("the broker refused kubecast's client certificate; check tls.cert_file and tls.key_file")
    } else if has(&["alert protocol version", "no protocols available", "wrong version number", "no shared cipher", "alert insufficient security"]) {
        Some("protocol or cipher mismatch: the broker and kubecast have no TLS version or cipher suite in common")
    } else if has(&["alert handshake failure"]) {
        Some("the broker refused the TLS handshake (handshake failure): no TLS version or cipher suite in common, or it refused kubecast's client certificate (or its absence); check the broker's TLS settings, tls.cert_file and tls.key_file")
    } else {
        None
    }
}
