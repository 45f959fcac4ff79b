//! Leader election on a Lease, as client-go's `leaderelection` does it: the leader renews the
//! Lease's `renewTime` every `renew_every`; a candidate takes the Lease over only when its
//! record (holder and renew time) has not changed for `lease_duration` by the candidate's own
//! clock, so clocks that disagree do not matter. Every write carries the resourceVersion it
//! read, so of two candidates racing for an expired Lease exactly one wins. A leader that
//! cannot renew within its renew deadline (two thirds of `lease_duration`, as client-go's
//! `RenewDeadline` of 10 s in a 15 s Lease) counts itself a follower again: it stops before
//! any candidate may take the Lease, with a third of the Lease to spare for a slow clock or a
//! slow stop. Entry point: [`Elector::run`]; one round is [`Elector::round`].

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;

/// Where and how to elect.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    /// The Lease's name: one per group of replicas.
    pub name: String,
    /// This replica's identity (its pod name), written as `holderIdentity`.
    pub identity: String,
    /// How long a Lease not renewed stays its holder's.
    pub lease_duration: Duration,
    /// How often the leader renews and a candidate tries.
    pub renew_every: Duration,
}

impl LeaseSettings {
    /// The longest one round of requests may take: a third of the Lease (three tries before
    /// it runs out), at least `renew_every`.
    pub fn round_limit(&self) -> Duration {
        (self.lease_duration / 3).max(self.renew_every)
    }

    /// How long after its last renewal a leader that could not renew steps down: two thirds
    /// of the Lease, so it has stopped a third of a Lease before any candidate may take it
    /// (a candidate waits the whole Lease from when it saw the renewal).
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }
}

/// A Lease request that failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading or writing Lease {namespace}/{name}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The Lease record as last observed, and when (by this replica's clock).
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    at: Instant,
}

/// Elects this replica or another; tracks what it saw of the Lease.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observed>,
    /// When this replica last renewed successfully while leading.
    renewed: Option<Instant>,
    /// Who holds the Lease as of the last round: this replica, another whose record is
    /// still changing, or nobody (free, or not renewed for `lease_duration`).
    holder: Option<String>,
}

impl Elector {
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Elector {
        Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
            renewed: None,
            holder: None,
        }
    }

    /// Who held the Lease at the last round (see the field).
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    /// This replica's record: holder now, renewed now.
    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        let taking_over = previous
            .and_then(|p| p.holder_identity.as_deref())
            .is_none_or(|h| h != self.settings.identity);
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.lease_duration.as_secs().max(1) as i32),
            acquire_time: if taking_over {
                Some(now.clone())
            } else {
                previous.and_then(|p| p.acquire_time.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if taking_over && previous.is_some() {
                transitions + 1
            } else {
                transitions
            }),
            ..Default::default()
        }
    }

    /// One attempt to acquire or renew the Lease; whether this replica leads after it.
    pub async fn round(&mut self) -> Result<bool, LeaseError> {
        self.round_if(true).await
    }

    /// One round: renews the Lease if it is this replica's; takes it when it is free or
    /// expired only if `may_take`, else just looks. Whether this replica holds it after.
    pub async fn round_if(&mut self, may_take: bool) -> Result<bool, LeaseError> {
        let now = Instant::now();
        let current = self.api.get_opt(&self.settings.name).await;
        let current = match current {
            Ok(c) => c,
            Err(e) => return self.failed(e),
        };
        let Some(mut lease) = current else {
            self.holder = None;
            if !may_take {
                return Ok(false);
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => self.leading(now),
                // Another candidate created it first.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => self.failed(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.settings.identity.as_str());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.holder != spec.holder_identity || o.renew != spec.renew_time);
        if changed {
            self.observed = Some(Observed {
                holder: spec.holder_identity.clone(),
                renew: spec.renew_time.clone(),
                at: now,
            });
        }
        let unchanged_for = self
            .observed
            .as_ref()
            .map_or(Duration::ZERO, |o| now.duration_since(o.at));
        let free = spec.holder_identity.as_deref().is_none_or(str::is_empty);
        if !mine && !free && unchanged_for < self.settings.lease_duration {
            self.renewed = None;
            self.holder = spec.holder_identity.clone();
            return Ok(false);
        }
        if !mine && !may_take {
            self.renewed = None;
            self.holder = None;
            return Ok(false);
        }
        lease.spec = Some(self.spec(Some(&spec)));
        // The write names the resourceVersion read: a concurrent writer makes it fail (409).
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => self.leading(now),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.renewed = None;
                self.holder = None;
                Ok(false)
            }
            Err(e) => self.failed(e),
        }
    }

    fn leading(&mut self, at: Instant) -> Result<bool, LeaseError> {
        self.renewed = Some(at);
        self.observed = None;
        self.holder = Some(self.settings.identity.clone());
        Ok(true)
    }

    /// Lets the Lease go (this replica stopped publishing what it guards): this replica stops
    /// counting itself its holder at once, and the returned request writes the Lease free, so
    /// another replica takes it at its next round instead of waiting for it to expire. The
    /// request borrows nothing, so a caller can run it without waiting for it; it writes
    /// nothing unless the Lease is this replica's.
    pub fn release(
        &mut self,
    ) -> impl std::future::Future<Output = Result<(), LeaseError>> + Send + 'static {
        self.renewed = None;
        self.holder = None;
        let (api, settings) = (self.api.clone(), self.settings.clone());
        async move {
            let error = |source| LeaseError::Api {
                namespace: settings.namespace.clone(),
                name: settings.name.clone(),
                source,
            };
            let mut lease = match api.get_opt(&settings.name).await {
                Ok(Some(l)) => l,
                Ok(None) => return Ok(()),
                Err(e) => return Err(error(e)),
            };
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(());
            };
            if spec.holder_identity.as_deref() != Some(settings.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            match api
                .replace(&settings.name, &PostParams::default(), &lease)
                .await
            {
                // Someone else wrote it meanwhile: it is not this replica's to let go.
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(error(e)),
            }
        }
    }

    /// A request failed: a leader stays one until its renew deadline.
    fn failed(&mut self, e: kube::Error) -> Result<bool, LeaseError> {
        self.lapse_if_expired();
        tracing::warn!(lease = %self.settings.name, error = %e, "Lease request failed");
        Err(self.error(e))
    }

    /// Whether this replica counts itself the leader: it renewed within its renew deadline.
    pub fn is_leader(&self) -> bool {
        self.renewed
            .is_some_and(|r| r.elapsed() < self.settings.renew_deadline())
    }

    /// When this replica's leadership ends unless it renews: its last renewal (when the
    /// request was sent) plus the renew deadline.
    pub fn leads_until(&self) -> Option<tokio::time::Instant> {
        self.renewed
            .map(|r| tokio::time::Instant::from_std(r + self.settings.renew_deadline()))
    }

    fn round_limit(&self) -> Duration {
        self.settings.round_limit()
    }

    /// Runs rounds every `renew_every` until the returned receiver is dropped; the receiver
    /// holds whether this replica leads. A round that gets no answer within a third of the
    /// Lease is given up (its connection with it: the next round opens a new one), and
    /// leadership ends at the renew deadline even while a round is waiting, so a leader cut
    /// off from the apiserver stops publishing before any standby may take over.
    pub fn run(mut self) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.settings.renew_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let (until, limit) = (self.leads_until(), self.round_limit());
                let lease = self.settings.name.clone();
                let mut expired = false;
                let answered = {
                    let round = tokio::time::timeout(limit, self.round());
                    tokio::pin!(round);
                    loop {
                        tokio::select! {
                            r = &mut round => break r.is_ok(),
                            () = crate::backoff::sleep_until(until), if !expired && until.is_some() => {
                                expired = true;
                                tracing::warn!(%lease, "the renew deadline passed while renewing the Lease got no answer: stepping down before it may be taken");
                                if tx.send(false).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                };
                if !answered {
                    // Errors are logged in `round`; a round without an answer is not.
                    tracing::warn!(%lease, limit_ms = limit.as_millis() as u64,
                        "a Lease request got no answer in time; trying again on a new connection");
                    self.lapse_if_expired();
                }
                let leading = self.is_leader();
                if *tx.borrow() != leading || expired {
                    tracing::info!(lease = %self.settings.name, identity = %self.settings.identity, leading, "leadership changed");
                }
                if tx.send(leading).is_err() {
                    return;
                }
            }
        });
        rx
    }

    /// A request failed or got no answer: a leader stays one until its renew deadline.
    pub fn lapse_if_expired(&mut self) {
        if self
            .renewed
            .is_some_and(|r| r.elapsed() >= self.settings.renew_deadline())
        {
            self.renewed = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose every request waits forever: an apiserver behind a black hole.
    fn unanswered() -> kube::Client {
        let silent = tower::service_fn(|_req: http::Request<kube::client::Body>| {
            std::future::pending::<
                Result<http::Response<kube::client::Body>, std::convert::Infallible>,
            >()
        });
        kube::Client::new(silent, "default")
    }

    #[tokio::test]
    async fn a_leader_whose_lease_requests_never_return_steps_down_at_its_renew_deadline() {
        let lease_duration = Duration::from_millis(600);
        let mut elector = Elector::new(
            unanswered(),
            LeaseSettings {
                namespace: "default".into(),
                name: "kubecast".into(),
                identity: "a".into(),
                lease_duration,
                renew_every: Duration::from_millis(100),
            },
        );
        // As if it had renewed just now.
        let renewed = Instant::now();
        elector.renewed = Some(renewed);
        let mut leading = elector.run();
        let limit = Duration::from_secs(5);
        // Leading while the Lease lasts (each unanswered round given up), then not.
        for lead in [true, false] {
            tokio::time::timeout(limit, leading.wait_for(|l| *l == lead))
                .await
                .unwrap_or_else(|_| panic!("the elector never said leading={lead}"))
                .expect("the elector is running");
        }
        let after = renewed.elapsed();
        let deadline = lease_duration * 2 / 3;
        assert!(
            after >= deadline && after < deadline + Duration::from_millis(150),
            "stepped down {after:?} after the last renewal; the renew deadline is {deadline:?} of a {lease_duration:?} Lease"
        );
    }
}
