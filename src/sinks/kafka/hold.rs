//! When Kafka stops taking the sink's records for a reason that does not pass by itself (a
//! permission taken away, a topic deleted) or does not acknowledge them for long (fewer
//! in-sync replicas than `min.insync.replicas`, the leader unreachable): readiness says why
//! and the sink holds what it has. Before the sink's first delivery a refusal, or a topic
//! that never existed, is a mistake in the setup and stops kubecast instead. Entry point:
//! [`Hold`].

use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::sinks::Acks;

/// How long the oldest record may wait for its acknowledgement before readiness says so.
pub const STALL: Duration = Duration::from_secs(10);

/// The sink's standing with Kafka.
pub struct Hold {
    /// Kafka acknowledged a record of this sink since it started.
    pub delivered_once: bool,
    /// Kafka refuses the sink's records, or their topic is missing, for this reason; nothing
    /// new is taken meanwhile.
    pub refused: Option<String>,
    /// The oldest record has waited longer than [`STALL`].
    pub stalled: bool,
    /// When the sink last found its topics writable again after holding: a record sent
    /// before then that comes back refused failed for what was over by then.
    resumed: Option<Instant>,
    backoff: Backoff,
    pause: Backoff,
}

impl Hold {
    pub fn new() -> Hold {
        Hold {
            delivered_once: false,
            refused: None,
            stalled: false,
            resumed: None,
            backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
            pause: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
        }
    }

    /// Kafka acknowledged a record: whatever held the sink is over.
    pub fn delivered(&mut self, acks: &Acks) {
        self.delivered_once = true;
        self.pause.reset();
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

    /// A topic of the sink does not exist (any more), for `reason` naming it: readiness
    /// names it, and once (until a record is delivered again) an ERROR says what is held.
    pub fn missing(&mut self, acks: &Acks, reason: String) {
        if self.refused.as_deref() != Some(reason.as_str()) {
            tracing::error!(sink = %acks.sink(), reason, "a topic of the sink does not exist; holding its records (they stay in the queue) and looking it up until it exists again");
            acks.down_because(reason.clone());
            self.refused = Some(reason);
        }
    }

    /// How long to wait before sending again when Kafka's answer and the producer's view of
    /// a topic disagree for a moment (a topic that exists again, which librdkafka has not
    /// seen yet): nothing is logged, and the wait grows, up to 2 s, until a record is
    /// delivered.
    pub fn pause(&mut self) -> Duration {
        self.pause.next_delay()
    }

    /// The sink found its topics writable again after holding.
    pub fn resumed(&mut self) {
        self.resumed = Some(Instant::now());
    }

    /// Whether a record sent at `sent` was sent before the sink last resumed.
    pub fn resumed_since(&self, sent: Instant) -> bool {
        self.resumed.is_some_and(|r| sent < r)
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
