//! When a replica may run its shards: each shard's deadline (its Lease's renew deadline, or
//! the replica's heartbeat's, whichever comes first) and the shard count in force. Entry
//! points: [`Shards::deadline`] and [`Shards::may_run`], used by the replica's loop in the
//! parent module.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::Shards;

impl Shards {
    /// When this replica must stop publishing a shard it holds unless it renews: its Lease's
    /// renew deadline or its heartbeat's, whichever comes first.
    pub(super) fn held_until(&self, i: u32) -> Option<Instant> {
        let lease = self.leases[i as usize].leads_until()?;
        Some(self.beat_until.map_or(lease, |beat| lease.min(beat)))
    }

    /// Whether shard `i` is this replica's to publish now.
    pub(super) fn holds(&self, i: u32) -> bool {
        self.held_until(i)
            .is_some_and(|until| Instant::now() < until)
    }

    /// The first deadline of a shard whose bridge still runs: when [`Shards::step_down_due`]
    /// is due.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.running
            .iter()
            .filter(|(_, r)| !r.lost)
            .map(|(i, _)| self.held_until(*i).unwrap_or_else(Instant::now))
            .min()
    }

    /// How long the next request may wait: never past the first deadline of a shard this
    /// replica holds, at most a round's limit.
    pub(super) fn within(&self) -> Duration {
        let now = Instant::now();
        (0..self.count())
            .filter_map(|i| self.held_until(i))
            .min()
            .map_or(self.settings.round_limit(), |until| {
                until
                    .saturating_duration_since(now)
                    .min(self.settings.round_limit())
            })
    }

    /// Stops, at once, the bridge of every shard past its deadline.
    pub(super) fn step_down_due(&mut self) {
        for i in 0..self.count() {
            if !self.holds(i) {
                self.stop_lost(i);
            }
        }
    }

    /// Shard `i` is no longer this replica's: its bridge stops at once (no grace: the next
    /// holder continues from the committed checkpoint).
    pub(super) fn stop_lost(&mut self, i: u32) {
        let Some(r) = self.running.get_mut(&i).filter(|r| !r.lost) else {
            return;
        };
        tracing::warn!(
            shard = i,
            "the shard's Lease or this replica's heartbeat was not renewed within its renew deadline: its bridge stops at once"
        );
        r.lost = true;
        r.grace.set(Duration::ZERO);
        r.handing_over = false;
        if let Some(stop) = r.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether this replica may run shards now, by the members' record: its count is in
    /// force, and no replica of another count has run a shard for a Lease. Logs changes;
    /// leaves the replicas of other counts out of `self.alive`.
    pub(super) fn may_run(&mut self) -> bool {
        let g = self.members.generation();
        let now = Instant::now();
        if g.others_hold() {
            self.blocked_until = Some(now + self.settings.lease_duration);
        }
        let in_force = g.in_force == self.count();
        let others: BTreeSet<String> = g.others.keys().cloned().collect();
        if (in_force, others.clone()) != self.generation {
            let announced: Vec<String> = g
                .others
                .iter()
                .map(|(id, a)| match a {
                    Some(a) => format!("{id} ({} shards, running {:?})", a.shards, a.held),
                    None => format!("{id} (announces no shard count)"),
                })
                .collect();
            if others.is_empty() {
                tracing::info!(
                    shards = self.count(),
                    "every replica alive has this shard count"
                );
            } else if in_force {
                tracing::warn!(shards = self.count(), others = %announced.join(", "),
                    "replicas of another shard count are alive; this count is in force: taking shards once none of them has run one for a Lease");
            } else {
                tracing::warn!(shards = self.count(), in_force = g.in_force, others = %announced.join(", "),
                    "another shard count is in force: running no shard until its replicas are gone, so that no object is published by both");
            }
            self.generation = (in_force, others);
        }
        self.alive.retain(|id| !g.others.contains_key(id));
        in_force && self.blocked_until.is_none_or(|until| now >= until)
    }

    /// Hands over every shard this replica runs (another count is in force).
    pub(super) fn hand_over_all(&mut self) {
        for (i, r) in self.running.iter_mut() {
            if let Some(stop) = r.stop.take() {
                tracing::info!(
                    shard = i,
                    "another shard count is in force: stopping the shard at a committed point"
                );
                r.handing_over = true;
                let _ = stop.send(());
            }
        }
    }
}
