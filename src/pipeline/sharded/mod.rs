//! One replica among several that share the cluster's objects in shards (`sharding.shards`
//! with `leader_election.enabled`). Each shard is a Lease (`{lease}-shard-{i}`); for every
//! shard it holds, the replica runs a bridge of its own that watches only the shard's objects
//! and publishes with the shard's sinks (its own transactional id and checkpoint), exactly
//! as a leader's term runs the whole bridge.
//!
//! Entry point: [`sharded`]. Every `retry_period` the replica raises its heartbeat in the
//! members' record, renews the shards it holds, and takes or hands over shards as
//! [`crate::ha::balance::plan`] says. A shard is handed over only at a committed point: its
//! bridge stops as at a shutdown (the sinks deliver what they hold, the exactly-once sink
//! commits) and then its Lease is written free, without the loop waiting for the write. A
//! shard whose Lease was not renewed within its renew deadline (two thirds of the Lease), or
//! whose replica's heartbeat was not written within it, stops at once, on a timer of its own:
//! a third of a Lease before any other replica may take it (they wait a whole Lease from the
//! last change they saw); the next holder fences it and continues from the shard's committed
//! checkpoint. A shard whose sink a newer holder fenced is let go and not taken again for a
//! Lease duration.
//!
//! Replicas with different shard counts cut the objects into different ranges (during a
//! rolling update of `sharding.shards`, say), so two of them publishing at once would publish
//! the same objects twice. Each replica announces its count, when it joined and the shards it
//! runs in the members' record; one count is in force, that of the replica alive that joined
//! first. The replicas of that count share the shards among themselves as usual (a replica of
//! another count is not counted in the balance); a replica of another count runs no shard
//! (it hands over any it runs, at a committed point) and waits. A replica of the count in
//! force takes a shard only when no replica of another count has announced running one for a
//! whole Lease (so that none with a stale view of who is alive still runs one). Once the
//! last replica of the old count is gone, the new count is in force and each of its shards
//! continues where the old shards whose ranges overlap it had committed (the sink's
//! checkpoint, [`crate::sinks::Kept`]).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;

mod terms;

use super::{Grace, PipelineError, Stats, bridge};
use crate::config::Validated;
use crate::ha::balance::{self, View};
use crate::ha::{Election, Elector, LeaseSettings, Members};
use crate::model::Shard;
use crate::ops::Ops;

/// A shard's bridge, running.
struct Running {
    /// Stops the bridge (as a shutdown does).
    stop: Option<oneshot::Sender<()>>,
    grace: Grace,
    /// Its bridge is stopping to hand the shard over; the Lease goes free once it has.
    handing_over: bool,
    /// Its Lease was lost: the bridge is stopping at once.
    lost: bool,
}

/// What a shard's bridge task returns: its shard and how it ended.
type Ended = (u32, Result<Stats, PipelineError>);

/// Runs the shards this replica holds until `shutdown` completes or a fatal error.
pub(super) async fn sharded(
    config: Validated,
    client: kube::Client,
    shutdown: impl Future<Output = ()>,
    ops: Arc<Ops>,
    election: Election,
) -> Result<Stats, PipelineError> {
    let settings = election.resolve();
    let count = config.shards;
    let mut s = Shards {
        members: Members::new(client.clone(), settings.clone(), count),
        leases: (0..count)
            .map(|i| {
                Elector::new(
                    client.clone(),
                    LeaseSettings {
                        name: format!("{}-shard-{i}", settings.name),
                        ..settings.clone()
                    },
                )
            })
            .collect(),
        alive: BTreeSet::new(),
        free_since: vec![None; count as usize],
        cooldown: vec![None; count as usize],
        running: BTreeMap::new(),
        tasks: JoinSet::new(),
        releasing: JoinSet::new(),
        beat_until: None,
        generation: (true, BTreeSet::new()),
        blocked_until: None,
        config,
        client,
        ops: ops.clone(),
        settings,
        stats: Stats::default(),
        looked: false,
    };
    ops.health.sharded();
    ops.metrics.shards_owned(0);
    ops.metrics.leader(false);
    tracing::info!(shards = count, lease = %s.settings.name, identity = %s.settings.identity, "sharing shards with the other replicas");
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(s.settings.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let deadline = s.deadline();
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            () = crate::backoff::sleep_until(deadline), if deadline.is_some() => s.step_down_due(),
            Some(ended) = s.tasks.join_next() => {
                // A bridge task that panicked is a bug; it ends the replica, as an
                // unsharded bridge's panic would.
                let (shard, outcome) = ended.map_err(|_| PipelineError::ShardPanicked)?;
                s.ended(shard, outcome)?;
            }
            Some(_) = s.releasing.join_next() => {}
            _ = tick.tick() => s.round().await?,
        }
    }
    s.stop_all().await
}

struct Shards {
    members: Members,
    /// Per shard, its Lease.
    leases: Vec<Elector>,
    alive: BTreeSet<String>,
    /// Per shard, since when it has been seen free.
    free_since: Vec<Option<Instant>>,
    /// Per shard, until when it is not taken again (a newer holder fenced it here).
    cooldown: Vec<Option<Instant>>,
    running: BTreeMap<u32, Running>,
    tasks: JoinSet<Ended>,
    /// Leases being written free, which the loop does not wait for.
    releasing: JoinSet<()>,
    /// Until when this replica's last written heartbeat keeps it alive in the others' eyes,
    /// less the same margin as a Lease's: its shards stop then unless it beats again.
    beat_until: Option<Instant>,
    /// Whether this replica's count was in force, and the replicas of other counts, as last
    /// logged.
    generation: (bool, BTreeSet<String>),
    /// Until when no shard is taken: a replica of another count ran one less than a Lease
    /// ago.
    blocked_until: Option<Instant>,
    config: Validated,
    client: kube::Client,
    ops: Arc<Ops>,
    settings: LeaseSettings,
    stats: Stats,
    /// Whether a round has looked at the Leases and the members yet.
    looked: bool,
}

impl Shards {
    fn count(&self) -> u32 {
        self.leases.len() as u32
    }

    /// One round: heartbeat, plan, the Leases' rounds, then start and stop bridges to match.
    async fn round(&mut self) -> Result<(), PipelineError> {
        self.members
            .set_held(self.running.keys().copied().collect());
        let beat_at = Instant::now();
        match tokio::time::timeout(self.within(), self.members.beat()).await {
            Ok(Ok(true)) => {
                self.beat_until = Some(beat_at + self.settings.renew_deadline());
            }
            Ok(Ok(false)) => {
                tracing::debug!(
                    "other replicas wrote the members' record each time; beating again next round"
                );
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::error_chain(&e), "raising this replica's heartbeat failed; balancing with the replicas last seen");
            }
            Err(_) => {}
        }
        self.alive = self.members.alive();
        let may_run = self.may_run();
        if !may_run && !self.generation.0 {
            self.hand_over_all();
        }
        let now = Instant::now();
        let holders: Vec<Option<String>> = self
            .leases
            .iter()
            .map(|l| l.holder().map(str::to_string))
            .collect();
        let long_free: Vec<bool> = self
            .free_since
            .iter()
            .map(|f| f.is_some_and(|at| now.duration_since(at) >= self.settings.lease_duration))
            .collect();
        let plan = balance::plan(&View {
            me: &self.settings.identity,
            holders: &holders,
            alive: &self.alive,
            long_free: &long_free,
        });
        let cooling: Vec<bool> = self
            .cooldown
            .iter()
            .map(|c| c.is_some_and(|until| now < until))
            .collect();
        let limit = self.within();
        // The first round only looks: replicas starting together see each other's
        // heartbeats before any of them takes shards (fewer hand-overs to balance).
        let looked = std::mem::replace(&mut self.looked, true);
        let rounds = futures::future::join_all(self.leases.iter_mut().enumerate().map(|(i, l)| {
            let may_take = looked && may_run && plan.take.contains(&(i as u32)) && !cooling[i];
            async move {
                if let Err(e) = l.round_if(may_take).await {
                    tracing::debug!(error = %crate::error_chain(&e), "a shard Lease round failed");
                }
            }
        }));
        if tokio::time::timeout(limit, rounds).await.is_err() {
            tracing::warn!(
                limit_ms = limit.as_millis() as u64,
                "shard Lease requests got no answer in time"
            );
            self.leases.iter_mut().for_each(Elector::lapse_if_expired);
        }
        let now = Instant::now();
        for (i, l) in self.leases.iter().enumerate() {
            let free = l.holder().is_none();
            match (free, self.free_since[i]) {
                (true, None) => self.free_since[i] = Some(now),
                (false, Some(_)) => self.free_since[i] = None,
                _ => {}
            }
        }
        for i in 0..self.count() {
            let held = self.holds(i);
            match (held, self.running.contains_key(&i)) {
                (true, false) if !cooling[i as usize] && may_run => self.start(i)?,
                (false, true) => self.stop_lost(i),
                _ => {}
            }
        }
        let handing = self.running.values().any(|r| r.handing_over);
        if let Some(i) = plan.hand_over
            && !handing
            && may_run
            && let Some(r) = self.running.get_mut(&i)
            && let Some(stop) = r.stop.take()
        {
            tracing::info!(
                shard = i,
                "handing the shard over to a replica that holds fewer: stopping at a committed point"
            );
            r.handing_over = true;
            let _ = stop.send(());
        }
        self.show();
        Ok(())
    }

    /// Starts shard `i`'s bridge: its config validated for the shard, its own readiness.
    fn start(&mut self, i: u32) -> Result<(), PipelineError> {
        let shard = Shard {
            index: i,
            count: self.count(),
        };
        // The same config validated at start; it cannot fail now.
        let config = self
            .config
            .source
            .clone()
            .validate_shard(Some(shard))
            .map_err(PipelineError::Config)?;
        let ops = Arc::new(
            self.ops
                .part(i, config.sinks.iter().map(|(n, _)| n.clone())),
        );
        let grace = Grace::new(Duration::from_secs(config.shutdown.grace_seconds));
        let (stop, stopped) = oneshot::channel::<()>();
        tracing::info!(
            shard = i,
            "holding the shard: taking over from its checkpoint"
        );
        let client = self.client.clone();
        let term = grace.clone();
        self.tasks.spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            (i, bridge(config, client, shutdown, ops, Some(term)).await)
        });
        self.running.insert(
            i,
            Running {
                stop: Some(stop),
                grace,
                handing_over: false,
                lost: false,
            },
        );
        Ok(())
    }

    /// Shard `i`'s bridge ended.
    fn ended(
        &mut self,
        i: u32,
        outcome: Result<Stats, PipelineError>,
    ) -> Result<(), PipelineError> {
        let running = self.running.remove(&i);
        self.ops.release(i);
        tracing::info!(shard = i, "the shard's bridge stopped");
        match outcome {
            Ok(stats) => {
                self.stats.absorb(stats);
                if running.is_some_and(|r| r.handing_over) {
                    // Stopped at a committed point: the shard is free for its next holder.
                    self.release(i);
                    tracing::info!(shard = i, "handed the shard over");
                }
            }
            Err(e) if e.is_fenced() => {
                tracing::warn!(shard = i, error = %crate::error_chain(&e), "a newer holder fenced this replica's sink for the shard: letting it go");
                self.release(i);
                self.cooldown[i as usize] = Some(Instant::now() + self.settings.lease_duration);
            }
            Err(e) => return Err(e),
        }
        self.show();
        Ok(())
    }

    /// Writes shard `i`'s Lease free (if it is this replica's), within a round's limit, without
    /// the loop waiting for it: this replica no longer counts itself its holder at once, and a
    /// Lease not written free expires instead.
    fn release(&mut self, i: u32) {
        let limit = self.settings.round_limit();
        let write = self.leases[i as usize].release();
        self.releasing.spawn(async move {
            if !matches!(tokio::time::timeout(limit, write).await, Ok(Ok(()))) {
                tracing::warn!(
                    shard = i,
                    "letting the shard's Lease go failed; it expires instead"
                );
            }
        });
    }

    /// The shards held, in the metrics.
    fn show(&self) {
        let held = self.running.len();
        self.ops.metrics.shards_owned(held);
        let leading = held > 0;
        if self.ops.metrics.is_leader() != leading {
            self.ops.metrics.leader(leading);
        }
    }

    /// Shutdown: every bridge stops as at a shutdown (the sinks get their grace), then the
    /// Leases go free and this replica leaves the members' record, so that the others take
    /// its shards at once.
    async fn stop_all(mut self) -> Result<Stats, PipelineError> {
        // Each bridge ends as a hand-over does: its Lease is written free once it stopped.
        for r in self.running.values_mut() {
            r.handing_over = true;
            if let Some(stop) = r.stop.take() {
                let _ = stop.send(());
            }
        }
        let mut failed = None;
        while let Some(ended) = self.tasks.join_next().await {
            let outcome = match ended {
                Ok((i, outcome)) => self.ended(i, outcome),
                Err(_) => Err(PipelineError::ShardPanicked),
            };
            if let Err(e) = outcome {
                failed = Some(e);
            }
        }
        // The Leases are free before this replica leaves, so the others take them at once.
        while self.releasing.join_next().await.is_some() {}
        let leave = tokio::time::timeout(self.settings.round_limit(), self.members.leave()).await;
        if !matches!(leave, Ok(Ok(()))) {
            tracing::warn!(
                "leaving the members' record failed; the others see this replica gone when its heartbeat stops"
            );
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(self.stats),
        }
    }
}
