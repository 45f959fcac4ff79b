//! How a replica decides which shards to take and which to hand over, from what it saw of
//! the shard Leases and the members' record: pure, so that it is tested on its own.
//!
//! With `n` shards and `r` replicas alive, a replica holds at most ⌈n/r⌉. A free shard is
//! taken by the replica that holds the fewest (ties race for its Lease, and one wins), up to
//! ⌈n/r⌉; a replica that holds two more than another alive hands one over, when no shard is
//! free (the one it handed over before has been taken). So replicas end
//! within one shard of each other. A shard free for a whole Lease duration is taken by
//! anyone, so that it never waits for a replica that the members' record still counts alive
//! but that is gone.
//! Entry point: [`plan`].

use std::collections::{BTreeMap, BTreeSet};

/// What one replica sees.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// This replica's identity.
    pub me: &'a str,
    /// Per shard, its holder as observed (`None`: free, or expired).
    pub holders: &'a [Option<String>],
    /// The replicas alive, this one included.
    pub alive: &'a BTreeSet<String>,
    /// Per shard, whether it has been free for a whole Lease duration.
    pub long_free: &'a [bool],
}

/// What to do this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Free shards to try to take, in order.
    pub take: Vec<u32>,
    /// A shard to hand over to a replica that holds too few.
    pub hand_over: Option<u32>,
}

/// The most shards a replica holds when `n` are shared by `alive` replicas: ⌈n/alive⌉.
pub fn fair_share(n: usize, alive: usize) -> usize {
    n.div_ceil(alive.max(1))
}

/// What `view.me` should do.
pub fn plan(view: &View<'_>) -> Plan {
    let n = view.holders.len();
    let share = fair_share(n, view.alive.len());
    let mut counts: BTreeMap<&str, usize> = view.alive.iter().map(|a| (a.as_str(), 0)).collect();
    for h in view.holders.iter().flatten() {
        *counts.entry(h.as_str()).or_insert(0) += 1;
    }
    let mine: Vec<u32> = (0..n as u32)
        .filter(|i| view.holders[*i as usize].as_deref() == Some(view.me))
        .collect();
    // Replicas starting together look at the free shards from different places.
    let start = (crate::model::fnv1a64(view.me.as_bytes()) % n.max(1) as u64) as usize;
    let free: Vec<u32> = (0..n)
        .map(|k| ((start + k) % n) as u32)
        .filter(|i| view.holders[*i as usize].is_none())
        .collect();
    let fewest_of_others = view
        .alive
        .iter()
        .filter(|a| a.as_str() != view.me)
        .map(|a| counts.get(a.as_str()).copied().unwrap_or(0))
        .min();
    let fewest = fewest_of_others.is_none_or(|f| mine.len() <= f);
    let room = if fewest {
        share.saturating_sub(mine.len())
    } else {
        0
    };
    let take: Vec<u32> = free
        .iter()
        .enumerate()
        .filter(|(k, i)| *k < room || view.long_free.get(**i as usize).copied().unwrap_or(false))
        .map(|(_, i)| *i)
        .collect();
    // One hand-over at a time: while a shard is free, the replica short of shards takes it
    // first (or counting it short again would hand over one more).
    let hand_over = fewest_of_others
        .filter(|f| mine.len() > f + 1 && free.is_empty())
        .and_then(|_| mine.last().copied());
    Plan { take, hand_over }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn alive(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn holders(of: &[Option<&str>]) -> Vec<Option<String>> {
        of.iter().map(|h| h.map(str::to_string)).collect()
    }

    /// The plan of replica `me` for this view.
    fn plan_as(
        me: &str,
        holders: &[Option<String>],
        alive: &BTreeSet<String>,
        long_free: &[bool],
    ) -> Plan {
        plan(&View {
            me,
            holders,
            alive,
            long_free,
        })
    }

    #[test]
    fn a_lone_replica_takes_every_free_shard() {
        let h = holders(&[None; 8]);
        let p = plan_as("a", &h, &alive(&["a"]), &[false; 8]);
        assert_eq!(p.take.len(), 8);
        assert_eq!(p.hand_over, None);
    }

    #[test]
    fn a_replica_with_more_than_its_share_hands_one_over_to_a_newcomer() {
        let h = holders(&[Some("a"); 8]);
        let p = plan_as("a", &h, &alive(&["a", "b"]), &[false; 8]);
        assert_eq!(p.hand_over, Some(7));
        assert!(p.take.is_empty());
    }

    #[test]
    fn a_replica_hands_over_no_second_shard_while_the_first_is_still_free() {
        let h = holders(&[Some("a"), Some("a"), Some("a"), None]);
        let p = plan_as("a", &h, &alive(&["a", "b"]), &[false; 4]);
        assert_eq!(p.hand_over, None, "b takes shard 3 first");
    }

    #[test]
    fn a_replica_takes_free_shards_only_up_to_its_share_while_others_have_room() {
        let h = holders(&[None, None, None, None, Some("b"), Some("b"), None, None]);
        let p = plan_as("a", &h, &alive(&["a", "b", "c"]), &[false; 8]);
        assert_eq!(p.take.len(), 3, "⌈8/3⌉ = 3, and a holds the fewest");
    }

    #[test]
    fn a_free_shard_goes_to_the_replica_with_the_fewest_unless_it_stays_free_a_whole_lease() {
        let h = holders(&[
            Some("a"),
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("b"),
            None,
            None,
        ]);
        let all = alive(&["a", "b", "c"]);
        let fresh = [false; 8];
        let a = plan_as("a", &h, &all, &fresh);
        assert!(a.take.is_empty(), "c holds fewer: it takes them");
        let c = plan_as("c", &h, &all, &fresh);
        assert_eq!(c.take.len(), 2);
        // c is still counted alive but never takes them: after a Lease, anyone does.
        let stale = [false, false, false, false, false, false, true, true];
        let a = plan_as("a", &h, &all, &stale);
        assert_eq!(a.take.len(), 2);
        let h = holders(&[
            Some("a"),
            Some("a"),
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("b"),
            Some("b"),
        ]);
        let b = plan_as("b", &h, &alive(&["a", "b"]), &fresh);
        assert_eq!(b, Plan::default(), "balanced: 4 and 4");
    }

    proptest! {
        /// Replicas that follow their plans round after round (one hand-over at a time,
        /// takes in turn) end with every shard held and within one of each other.
        #[test]
        fn replicas_following_their_plans_settle_balanced(n in 1usize..24, r in 1usize..6, seed in 0u64..1000) {
            let names: Vec<String> = (0..r).map(|i| format!("kubecast-{i}")).collect();
            let all: BTreeSet<String> = names.iter().cloned().collect();
            // Start from a random assignment, some shards free.
            let mut h: Vec<Option<String>> = (0..n)
                .map(|i| {
                    let k = (seed.wrapping_mul(31).wrapping_add(i as u64 * 7)) % (r as u64 + 1);
                    names.get(k as usize).cloned()
                })
                .collect();
            for _ in 0..(4 * n + 8) {
                for me in &names {
                    let p = plan_as(me, &h, &all, &vec![false; n]);
                    if let Some(s) = p.hand_over {
                        h[s as usize] = None;
                    }
                    for s in p.take {
                        if h[s as usize].is_none() {
                            h[s as usize] = Some(me.clone());
                        }
                    }
                }
            }
            prop_assert!(h.iter().all(Option::is_some), "a shard without a holder: {h:?}");
            let counts: Vec<usize> = names
                .iter()
                .map(|m| h.iter().filter(|x| x.as_deref() == Some(m.as_str())).count())
                .collect();
            let (lo, hi) = (counts.iter().min().copied().unwrap_or(0), counts.iter().max().copied().unwrap_or(0));
            prop_assert!(hi - lo <= 1, "unbalanced: {counts:?}");
        }
    }
}
