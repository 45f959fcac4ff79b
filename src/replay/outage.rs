//! A replay's brokers not answering for a while: which errors the client recovers from by
//! itself (all brokers down, a broken connection, a timeout, a leader moving), and the outage
//! they start: said once on standard error, the brokers asked every second whether they
//! answer again, and given up ([`crate::replay::ReplayError::Unreachable`]) only once it lasts
//! longer than the stall bound. Entry points: [`transient`], [`Outage`].

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// How often a replay whose brokers are unreachable asks them whether they answer again.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Whether `e` is one the client recovers from by itself once the brokers answer again.
pub(super) fn transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    let code = match e {
        KafkaError::MessageConsumption(c) | KafkaError::Global(c) => *c,
        _ => return false,
    };
    matches!(
        code,
        C::AllBrokersDown
            | C::BrokerTransportFailure
            | C::OperationTimedOut
            | C::RequestTimedOut
            | C::NetworkException
            | C::Resolve
            | C::BrokerNotAvailable
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::ReplicaNotAvailable
            | C::NotCoordinator
            | C::CoordinatorNotAvailable
            | C::CoordinatorLoadInProgress
    )
}

/// The brokers not answering: since when, the last error, and when they were last asked.
#[derive(Default)]
pub(super) struct Outage {
    /// Since when (a transient error, not yet followed by a record, a partition's end or an
    /// answer), and the last such error; `None` while the brokers answer.
    since: Option<(Instant, KafkaError)>,
    probed: Option<Instant>,
}

impl Outage {
    /// A transient error: an outage starts (said once) or goes on.
    pub(super) fn begin(
        &mut self,
        e: KafkaError,
        stall: Duration,
        notice: &mut impl FnMut(String),
    ) {
        match &mut self.since {
            Some((_, last)) => *last = e,
            None => {
                notice(format!(
                    "the brokers do not answer ({e}); waiting up to {}s for them",
                    stall.as_secs()
                ));
                self.probed = Some(Instant::now());
                self.since = Some((Instant::now(), e));
            }
        }
    }

    /// The brokers answer again (a record, a partition's end, metadata): said once.
    pub(super) fn end(&mut self, notice: &mut impl FnMut(String)) {
        if let Some((since, _)) = self.since.take() {
            notice(format!(
                "the brokers answer again after {}s; reading on",
                since.elapsed().as_secs()
            ));
        }
    }

    /// During an outage, once a second: how long to wait for the brokers' answer.
    pub(super) fn probe_due(&mut self) -> Option<Duration> {
        self.since.as_ref()?;
        if self.probed.is_some_and(|at| at.elapsed() < PROBE_EVERY) {
            return None;
        }
        self.probed = Some(Instant::now());
        Some(PROBE_EVERY)
    }

    /// The outage's length and last error, once it lasts `stall` or longer (it ends here).
    pub(super) fn over(&mut self, stall: Duration) -> Option<(Duration, KafkaError)> {
        let (since, e) = self.since.take_if(|(since, _)| since.elapsed() >= stall)?;
        Some((since.elapsed(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_errors_are_waited_out_and_others_are_not() {
        for code in [
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::BrokerTransportFailure,
        ] {
            assert!(transient(&KafkaError::MessageConsumption(code)), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::TopicAuthorizationFailed,
        ] {
            assert!(
                !transient(&KafkaError::MessageConsumption(code)),
                "{code:?}"
            );
        }
    }

    #[test]
    fn an_outage_is_said_once_and_given_up_only_past_the_bound() {
        let mut said = Vec::new();
        let mut notice = |s: String| said.push(s);
        let mut o = Outage::default();
        assert!(o.probe_due().is_none(), "no outage, nothing to ask");
        let down = || KafkaError::MessageConsumption(RDKafkaErrorCode::AllBrokersDown);
        o.begin(down(), Duration::from_secs(60), &mut notice);
        o.begin(down(), Duration::from_secs(60), &mut notice);
        assert!(
            o.over(Duration::from_secs(60)).is_none(),
            "within the bound"
        );
        assert!(o.over(Duration::ZERO).is_some(), "past the bound");
        o.begin(down(), Duration::from_secs(60), &mut notice);
        o.end(&mut notice);
        o.end(&mut notice);
        assert_eq!(
            said.len(),
            3,
            "two outages begun and one ended, each said once: {said:?}"
        );
    }
}
