//! One replica among several (`leader_election.enabled`): it stands by until it holds the
//! Lease, then runs the bridge for as long as it leads (a term), then stands by again.
//!
//! Entry point: [`elected`]. While it stands by, the exactly-once sink reads what the leader
//! commits (checkpoint and known state, every second), so that a take-over has only the
//! rest to read. A term starts like a restart: the exactly-once sink takes over (its
//! `init_transactions` fences the previous leader), reads what was committed since, and the
//! bridge continues from the committed checkpoint, not from anything this replica saw itself.
//! A term ends when the Lease is lost (the bridge stops at once) or when the sink reports
//! that a newer leader fenced it; then this replica waits until its elector agrees that it no longer
//! leads before it may lead again, so that a stale view of the Lease never fences the real
//! leader.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::{Grace, PipelineError, Stats, bridge};
use crate::config::Validated;
use crate::ha::{Election, Elector};
use crate::ops::Ops;

/// Runs terms until `shutdown` completes or a fatal error.
pub(super) async fn elected(
    config: Validated,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
    ops: Arc<Ops>,
    election: Election,
) -> Result<Stats, PipelineError> {
    let settings = election.resolve();
    let (lease, identity) = (settings.name.clone(), settings.identity.clone());
    let mut leading = Elector::new(client.clone(), settings).run();
    let source = config.source.clone();
    let mut next = Some(config);
    tokio::pin!(shutdown);
    loop {
        let config = match next.take() {
            Some(c) => c,
            // The same config validated before; it cannot fail now.
            None => source.clone().validate().map_err(PipelineError::Config)?,
        };
        // The exactly-once sink reads what the leader commits meanwhile.
        let warm = match config.sinks.iter().find_map(|(_, v)| v.sink.keeper()) {
            Some(k) => k.keep_warm(),
            None => Box::pin(std::future::pending()),
        };
        ops.health.standby(true);
        ops.metrics.leader(false);
        tracing::info!(%lease, %identity, "standing by for the Lease");
        tokio::select! {
            _ = &mut shutdown => return Ok(Stats::default()),
            r = leading.wait_for(|l| *l) => {
                r.map_err(|_| PipelineError::ElectorGone)?;
            }
            () = warm => {}
        }
        ops.health.standby(false);
        ops.metrics.leader(true);
        tracing::info!(%lease, %identity, "leading: taking over from the checkpoint");
        let stopping = AtomicBool::new(false);
        let grace = Grace::new(Duration::from_secs(config.shutdown.grace_seconds));
        let term_over = term_over(&mut shutdown, leading.clone(), &stopping, &grace);
        let outcome = bridge(
            config,
            client.clone(),
            term_over,
            ops.clone(),
            Some(grace.clone()),
        )
        .await;
        match outcome {
            Ok(stats) if stopping.load(Ordering::Relaxed) => return Ok(stats),
            Ok(_) => {
                tracing::warn!(%lease, %identity, "lost the Lease: stepped down");
            }
            Err(e) if e.is_fenced() => {
                tracing::warn!(%lease, %identity, error = %crate::error_chain(&e), "a newer leader fenced this replica: stepped down");
                // Lead again only after the elector has seen the other leader (or the
                // Lease ran out without anyone else taking it).
                let _ =
                    tokio::time::timeout(election.lease_duration, leading.wait_for(|l| !*l)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Completes when `shutdown` does (setting `stopping`; the sinks then get their grace
/// period) or this replica stops leading (then the bridge stops at once: the next leader
/// continues from the checkpoint, and whatever this one still sent would only compete with
/// it, on the MQTT session for one).
async fn term_over(
    shutdown: &mut (impl Future<Output = ()> + Unpin),
    mut leading: watch::Receiver<bool>,
    stopping: &AtomicBool,
    grace: &Grace,
) {
    tokio::select! {
        _ = shutdown => stopping.store(true, Ordering::Relaxed),
        _ = leading.wait_for(|l| !*l) => grace.set(Duration::ZERO),
    }
}
