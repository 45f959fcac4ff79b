//! When Kafka stops taking the sink's records for a reason that does not pass by itself (a
//! permission taken away, a topic deleted) or does not acknowledge them for long (fewer
//! in-sync replicas than `min.insync.replicas`, the leader unreachable): readiness says why
//! and the sink holds what it has. Before the sink's first delivery such a refusal is a
//! mistake in the setup and stops kubecast instead. Entry point: [`Hold`].

use std::time::Duration;

use crate::backoff::Backoff;
use crate::sinks::Acks;

/// How long the oldest record may wait for its acknowledgement before readiness says so.
pub const STALL: Duration = Duration::from_secs(10);

/// The sink's standing with Kafka.
pub struct Hold {
    /// Kafka acknowledged a record of this sink since it started.
    pub delivered_once: bool,
    /// Kafka refuses the sink's records, for this reason; nothing new is taken meanwhile.
    pub refused: Option<String>,
    /// The oldest record has waited longer than [`STALL`].
    pub stalled: bool,
    backoff: Backoff,
}

impl Hold {
    pub fn new() -> Hold {
        Hold {
            delivered_once: false,
            refused: None,
            stalled: false,
            backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
        }
    }

    /// Kafka acknowledged a record: whatever held the sink is over.
    pub fn delivered(&mut self, acks: &Acks) {
        self.delivered_once = true;
        if self.refused.take().is_some() || std::mem::take(&mut self.stalled) {
            tracing::info!(sink = %acks.sink(), "Kafka acknowledges kubecast's records again");
            acks.connected(true);
            self.backoff.reset();
        }
    }

    /// Kafka refused a record for `reason` after the sink had delivered: readiness names
    /// it, and the first time (or when the reason changes) an ERROR says what is held.
    /// Returns how long to wait before sending again.
    pub fn refused(&mut self, acks: &Acks, reason: String) -> Duration {
        if self.refused.as_deref() != Some(reason.as_str()) {
            tracing::error!(sink = %acks.sink(), reason, "Kafka refuses kubecast's records; holding them (they stay in the queue) and trying again until it takes them");
            acks.down_because(reason.clone());
            self.refused = Some(reason);
        }
        self.backoff.next_delay()
    }

    /// The oldest record, to `topic`, has waited [`STALL`] for its acknowledgement.
    pub fn stalled(&mut self, acks: &Acks, topic: &str, last_error: Option<String>) {
        self.stalled = true;
        let why = format!(
            "Kafka has acknowledged no record for {}s (the oldest waiting is for topic `{topic}`): its partition leader is unreachable, or fewer replicas are in sync than min.insync.replicas{}",
            STALL.as_secs(),
            last_error
                .map(|e| format!("; the last error: {e}"))
                .unwrap_or_default()
        );
        tracing::warn!(sink = %acks.sink(), reason = %why, "the sink is not ready");
        acks.down_because(why);
    }
}
