//! The checkpoint and the known state as read so far, resumable: a standby reads the
//! compacted topics every second while the leader commits, so that on taking over (after
//! the fence) only what was committed since is left to read. Entry point: [`StateReader`].
//!
//! A reader left unused for long is not resumed: compaction drops tombstones after the
//! topic's `delete.retention.ms` (a day by default), so a reader that far behind could miss
//! a delete. [`StateReader::fresh`] says whether it may be.
//!
//! It reads the checkpoints of every shard count of the sink (`{base}`, and
//! `{base}/shard-{i}-of-{n}`), not only its own: when the count changed, the count whose
//! checkpoints were committed last (the checkpoint topic has one partition, so offsets order
//! them) is where this one continues from ([`Kept::earlier`]).
//!
//! A take-over reads with [`StateReader::read_settled`]: the reader is `read_committed`, so
//! a checkpoint in a transaction still open (a commit on its way to the coordinator) is
//! invisible until it is decided, and a shard count that only such a checkpoint shows would
//! go unfenced. It first waits until every transaction open in the checkpoint topic when it
//! began is committed or aborted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};

use super::checkpoint::{self, Checkpoint, CheckpointError};
use super::txn_config::shard_of_key;
use crate::model::Shard;
use crate::sinks::Kept;

/// Reading the committed state for a take-over failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A transaction open in the checkpoint topic when the reader began was neither committed
    /// nor aborted in time: a checkpoint in it (of another shard count) could still become
    /// visible after the take-over read past it.
    #[error(
        "a transaction open in the checkpoint topic `{topic}` partition {partition} (its records before offset {end}; stable up to {stable}) was not committed or aborted within {limit:?}: the broker aborts one after the producer's transaction.timeout.ms (transactions.timeout_ms, at most the broker's transaction.max.timeout.ms), so a shard of another count with a longer timeout may still commit"
    )]
    Undecided {
        topic: String,
        partition: i32,
        end: i64,
        stable: i64,
        limit: Duration,
    },
}

/// How often [`StateReader::read_settled`] asks whether the open transactions were decided.
const SETTLE_EVERY: Duration = Duration::from_millis(250);

/// Where a reader stands in one sink's checkpoint and state topics, and what it has read.
#[derive(Debug)]
pub struct StateReader {
    checkpoint_topic: String,
    state_topic: String,
    /// The key of every shard count's checkpoints, before the shard.
    base: String,
    /// This sink's shard (shard 0 of 1 without sharding).
    shard: Shard,
    /// Per partition, the next offset to read.
    checkpoint_next: HashMap<i32, i64>,
    state_next: HashMap<i32, i64>,
    /// Every shard's last checkpoint (of every count) and the offset it was read at; a
    /// removed one is kept as `None`.
    latest: HashMap<Shard, (i64, Option<Checkpoint>)>,
    /// Each object's state record (opaque) by key.
    known: HashMap<String, Vec<u8>>,
    /// When it last read to the ends.
    read_at: Option<Instant>,
    /// Records read in its last read.
    pub last_read: usize,
}

impl StateReader {
    /// A reader at the beginning of an exactly-once sink's topics: the checkpoints under
    /// `base` (its own is `shard`'s; `None`: unsharded) and its known state.
    pub fn new(
        checkpoint_topic: &str,
        state_topic: &str,
        base: &str,
        shard: Option<Shard>,
    ) -> StateReader {
        StateReader {
            checkpoint_topic: checkpoint_topic.to_string(),
            state_topic: state_topic.to_string(),
            base: base.to_string(),
            shard: shard.unwrap_or(Shard { index: 0, count: 1 }),
            checkpoint_next: HashMap::new(),
            state_next: HashMap::new(),
            latest: HashMap::new(),
            known: HashMap::new(),
            read_at: None,
            last_read: 0,
        }
    }

    /// Whether it read to the ends within `age`: then it may be resumed.
    pub fn fresh(&self, age: Duration) -> bool {
        self.read_at.is_some_and(|t| t.elapsed() < age)
    }

    /// Reads both topics from where it stands to their ends (blocking, each up to `limit`).
    /// A damaged record is an error, and the reader is then not to be used again.
    pub fn read(&mut self, config: &ClientConfig, limit: Duration) -> Result<(), CheckpointError> {
        let mut read = 0;
        let mut corrupt = None;
        let (topic, base) = (&self.checkpoint_topic, &self.base);
        let latest = &mut self.latest;
        checkpoint::read_from(config, topic, &mut self.checkpoint_next, limit, |m| {
            read += 1;
            let Some((key, shard)) = m
                .key()
                .and_then(|k| std::str::from_utf8(k).ok())
                .and_then(|k| Some((k, shard_of_key(base, k)?)))
            else {
                return;
            };
            let mut one = None;
            match checkpoint::apply_checkpoint(m, topic, key, &mut one) {
                Ok(()) => {
                    latest.insert(shard, (m.offset(), one));
                }
                Err(e) => {
                    corrupt.get_or_insert(e);
                }
            }
        })?;
        let (topic, known) = (&self.state_topic, &mut self.known);
        checkpoint::read_from(config, topic, &mut self.state_next, limit, |m| {
            read += 1;
            if corrupt.is_none()
                && let Err(e) = checkpoint::apply_state(m, topic, known)
            {
                corrupt = Some(e);
            }
        })?;
        if let Some(e) = corrupt {
            return Err(e);
        }
        self.read_at = Some(Instant::now());
        self.last_read = read;
        Ok(())
    }

    /// Reads both topics to their ends (each read up to `limit`) once every transaction that
    /// was open in the checkpoint topic when it began has been decided, waiting for that up
    /// to `settle`. What was written to the checkpoint topic by then is the high watermark
    /// (read `read_uncommitted`); a `read_committed` reader reaches only the last stable
    /// offset, the first record of the oldest open transaction. Once the stable offset is
    /// past that high watermark, nothing written before the take-over can become visible
    /// later. Only what was open at the start is waited for: the live shards' transactions
    /// that begin after it write after the high watermark, so they cannot keep it waiting,
    /// and one open at the start ends within the producer's transaction timeout (committed,
    /// or aborted by the broker). A commit on its way whose records were not yet written is
    /// no concern: a producer sends its commit only once every record of it was written.
    pub fn read_settled(
        &mut self,
        config: &ClientConfig,
        limit: Duration,
        settle: Duration,
    ) -> Result<(), ReadError> {
        let started = Instant::now();
        let topic = self.checkpoint_topic.clone();
        let written = ends(config, &topic, false, limit)?;
        loop {
            let stable = ends(config, &topic, true, limit)?;
            match undecided(&written, &stable) {
                // The read below reaches at least this stable offset: a `read_committed`
                // reader's partition end is the stable offset when it gets there, which only
                // grows.
                None => break,
                Some((partition, end, stable)) if started.elapsed() >= settle => {
                    return Err(ReadError::Undecided {
                        topic,
                        partition,
                        end,
                        stable,
                        limit: settle,
                    });
                }
                Some(_) => std::thread::sleep(SETTLE_EVERY),
            }
        }
        self.read(config, limit)?;
        Ok(())
    }

    /// The other shard counts whose transactions could still change what this reader reads:
    /// each count (not this sink's) with a checkpoint committed after this sink's own last
    /// one, or with any checkpoint when this sink has none. Their transactional ids are
    /// fenced before the reader's last read: a commit of theirs still in flight (a task
    /// aborted with its commit on the blocking pool, a request slow on the network) would
    /// otherwise become visible after this shard read their checkpoints, and what it then
    /// publishes again would be in Kafka twice. Counts that committed only before this
    /// sink's own checkpoint were fenced by the take-over that preceded it.
    pub fn counts_to_fence(&self) -> Vec<u32> {
        let own = self.latest.get(&self.shard).map(|(offset, _)| *offset);
        let mut counts: Vec<u32> = self
            .latest
            .iter()
            .filter(|(s, (offset, c))| {
                s.count != self.shard.count && c.is_some() && own.is_none_or(|own| *offset > own)
            })
            .map(|(s, _)| s.count)
            .collect();
        counts.sort_unstable();
        counts.dedup();
        counts
    }

    /// The last checkpoint read and the known state with it; `None` when nothing was ever
    /// committed (or every checkpoint was removed). When another shard count's checkpoints
    /// were committed after this sink's own (or it has none), those are where it continues:
    /// `earlier` holds them and `positions` is empty.
    pub fn kept(&self) -> Option<Kept> {
        let own = self
            .latest
            .get(&self.shard)
            .and_then(|(offset, c)| Some((*offset, c.as_ref()?)));
        // The newest checkpoint of another count: where that count's shards stopped.
        let other = self
            .latest
            .iter()
            .filter(|(s, (_, c))| s.count != self.shard.count && c.is_some())
            .max_by_key(|(_, (offset, _))| *offset)
            .map(|(s, (offset, _))| (*offset, s.count));
        let states = || {
            self.known
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let any_of_this_count = self
            .latest
            .iter()
            .any(|(s, (_, c))| s.count == self.shard.count && c.is_some());
        match (own, other) {
            (Some((at, c)), other) if other.is_none_or(|(o, _)| at > o) => Some(Kept {
                seq: c.seq,
                positions: c.positions.clone(),
                states: states(),
                earlier: None,
            }),
            (own, Some((_, count))) => {
                // Every shard of that count, or the scopes are listed.
                let earlier: Option<Vec<_>> = (0..count)
                    .map(|index| {
                        let shard = Shard { index, count };
                        self.latest
                            .get(&shard)
                            .and_then(|(_, c)| c.as_ref())
                            .map(|c| c.positions.clone())
                    })
                    .collect();
                Some(Kept {
                    seq: own.map_or(0, |(_, c)| c.seq),
                    positions: Default::default(),
                    states: states(),
                    earlier,
                })
            }
            // Another shard of this count committed, this one not yet: its objects' states
            // are known, its watches list.
            (None, None) if any_of_this_count => Some(Kept {
                states: states(),
                ..Kept::default()
            }),
            _ => None,
        }
    }
}

/// Each partition's end of `topic`: with `committed`, its last stable offset (what a
/// `read_committed` reader reaches), else its high watermark (everything written). Empty
/// when the topic does not exist.
fn ends(
    config: &ClientConfig,
    topic: &str,
    committed: bool,
    limit: Duration,
) -> Result<HashMap<i32, i64>, CheckpointError> {
    let kafka = |source| CheckpointError::Kafka {
        topic: topic.to_string(),
        source,
    };
    // No group: listing offsets needs none (and no ACL on one). librdkafka lists them at the
    // client's isolation level.
    let consumer: BaseConsumer = checkpoint::connection_only(config)
        .set(
            "isolation.level",
            if committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        )
        .create()
        .map_err(kafka)?;
    let metadata = consumer.fetch_metadata(Some(topic), limit).map_err(kafka)?;
    let mut out = HashMap::new();
    let Some(t) = metadata.topics().first() else {
        return Ok(out);
    };
    if let Some(code) = t
        .error()
        .map(rdkafka::error::RDKafkaErrorCode::from)
        .filter(|c| super::refusal::refused(*c))
    {
        let r = super::refusal::Refusal::new(
            super::refusal::Operation::Read,
            super::refusal::Resource::Topic,
            topic,
            code,
        );
        return Err(r.into());
    }
    if t.error().is_some() {
        return Ok(out);
    }
    for p in t.partitions() {
        let (_, high) = consumer
            .fetch_watermarks(topic, p.id(), limit)
            .map_err(kafka)?;
        out.insert(p.id(), high);
    }
    Ok(out)
}

/// The first partition (with its high watermark at the start and its stable offset now)
/// where a transaction open at the start is not decided yet: its stable offset is short of
/// what had been written then. `None`: every one is decided.
fn undecided(written: &HashMap<i32, i64>, stable: &HashMap<i32, i64>) -> Option<(i32, i64, i64)> {
    let mut open: Vec<(i32, i64, i64)> = written
        .iter()
        .map(|(p, end)| (*p, *end, stable.get(p).copied().unwrap_or(-1)))
        .filter(|(_, end, stable)| stable < end)
        .collect();
    open.sort_unstable();
    open.into_iter().next()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn checkpoint(seq: u64, rv: &str) -> Option<Checkpoint> {
        Some(Checkpoint {
            seq,
            positions: BTreeMap::from([("*".to_string(), rv.to_string())]),
        })
    }

    fn reader(shard: Option<Shard>, latest: &[(u32, u32, i64, Option<Checkpoint>)]) -> StateReader {
        let mut r = StateReader::new("c", "s", "test/kafka", shard);
        for (index, count, offset, c) in latest {
            r.latest.insert(
                Shard {
                    index: *index,
                    count: *count,
                },
                (*offset, c.clone()),
            );
        }
        r.known.insert("u1".into(), b"{}".to_vec());
        r
    }

    #[test]
    fn a_shard_continues_from_its_own_checkpoint_while_its_count_committed_last() {
        let r = reader(
            Shard::new(1, 2),
            &[
                (0, 4, 1, checkpoint(9, "5")),
                (1, 2, 7, checkpoint(3, "20")),
                (0, 2, 8, checkpoint(4, "21")),
            ],
        );
        let kept = r.kept().expect("committed");
        assert_eq!((kept.seq, kept.positions["*"].as_str()), (3, "20"));
        assert!(kept.earlier.is_none());
        assert_eq!(kept.states.len(), 1);
    }

    #[test]
    fn after_a_change_of_count_a_shard_gets_the_newest_counts_positions_and_the_known_state() {
        // Four shards committed after this shard's own (of two) last checkpoint.
        let four: Vec<_> = (0..4)
            .map(|i| {
                (
                    i,
                    4,
                    10 + i64::from(i),
                    checkpoint(50, &format!("{}", 100 + i)),
                )
            })
            .collect();
        let mut latest = vec![(1, 2, 3, checkpoint(7, "20"))];
        latest.extend(four.iter().cloned());
        let kept = reader(Shard::new(1, 2), &latest).kept().expect("committed");
        assert!(kept.positions.is_empty(), "its own are older");
        assert_eq!(kept.seq, 7, "its own sequence goes on");
        let earlier = kept.earlier.expect("the four shards' positions");
        assert_eq!(earlier.len(), 4);
        assert_eq!(earlier[3]["*"], "103");
        assert_eq!(kept.states.len(), 1, "the known state is read");
        // Unsharded after being sharded: the same.
        let kept = reader(None, &four).kept().expect("committed");
        assert_eq!(kept.earlier.map(|e| e.len()), Some(4));
    }

    #[test]
    fn a_shard_of_the_new_count_that_has_not_committed_continues_from_the_old_count() {
        // Shard 4 of 6 committed first; shard 0 of 6 has not yet.
        let mut latest: Vec<_> = (0..4)
            .map(|i| (i, 4, i64::from(i), checkpoint(5, &format!("{}", 100 + i))))
            .collect();
        latest.push((4, 6, 20, checkpoint(1, "200")));
        let kept = reader(Shard::new(0, 6), &latest).kept().expect("committed");
        assert_eq!(kept.earlier.map(|e| e.len()), Some(4));
        assert!(kept.positions.is_empty());
        // Once it committed, its own.
        latest.push((0, 6, 21, checkpoint(2, "201")));
        let kept = reader(Shard::new(0, 6), &latest).kept().expect("committed");
        assert_eq!((kept.earlier, kept.positions["*"].as_str()), (None, "201"));
    }

    #[test]
    fn the_counts_to_fence_are_those_that_committed_after_the_shards_own_checkpoint() {
        let four: Vec<_> = (0..4)
            .map(|i| (i, 4, 10 + i64::from(i), checkpoint(50, "100")))
            .collect();
        // A new shard of six with no checkpoint of its own: every other count is fenced.
        let mut latest = four.clone();
        latest.push((0, 2, 3, checkpoint(7, "20")));
        assert_eq!(
            reader(Shard::new(4, 6), &latest).counts_to_fence(),
            vec![2, 4]
        );
        // Its own checkpoint after the four's: nothing (the four were fenced before it).
        latest.push((4, 6, 20, checkpoint(51, "120")));
        assert!(
            reader(Shard::new(4, 6), &latest)
                .counts_to_fence()
                .is_empty()
        );
        // Its own checkpoint before the four's (six, then four, then six again): the four.
        latest.pop();
        latest.push((4, 6, 5, checkpoint(9, "30")));
        assert_eq!(reader(Shard::new(4, 6), &latest).counts_to_fence(), vec![4]);
        // Its own count's other shards, and removed checkpoints, are never fenced.
        let latest = [(1, 6, 30, checkpoint(1, "1")), (0, 4, 31, None)];
        assert!(
            reader(Shard::new(4, 6), &latest)
                .counts_to_fence()
                .is_empty()
        );
        // Unsharded after sharded.
        assert_eq!(reader(None, &four).counts_to_fence(), vec![4]);
    }

    #[test]
    fn a_transaction_open_at_the_start_is_waited_for_and_those_begun_after_it_are_not() {
        let written = HashMap::from([(0, 120)]);
        // The stable offset stops at the first record of the oldest open transaction (a
        // commit of another count on its way): not decided.
        assert_eq!(
            undecided(&written, &HashMap::from([(0, 100)])),
            Some((0, 120, 100))
        );
        // Decided (committed or aborted), with the live shards' later transactions open
        // after the start: done.
        assert_eq!(undecided(&written, &HashMap::from([(0, 120)])), None);
        assert_eq!(undecided(&written, &HashMap::from([(0, 180)])), None);
        // A partition the stable offsets do not show is not known to be decided.
        assert_eq!(undecided(&written, &HashMap::new()), Some((0, 120, -1)));
        // An empty or missing topic: nothing to wait for.
        assert_eq!(undecided(&HashMap::new(), &HashMap::new()), None);
        assert_eq!(
            undecided(&HashMap::from([(0, 0)]), &HashMap::from([(0, 0)])),
            None
        );
    }

    #[test]
    fn a_count_with_a_shard_never_committed_gives_no_positions_but_the_known_state() {
        let latest = [(1, 2, 10, checkpoint(1, "100"))];
        let kept = reader(Shard::new(0, 2), &latest).kept().expect("committed");
        assert!(kept.positions.is_empty() && kept.earlier.is_none());
        assert_eq!(kept.states.len(), 1);
        // An earlier count with a shard that never committed: listed, the known state kept.
        let latest = [
            (0, 4, 10, checkpoint(1, "100")),
            (2, 4, 11, checkpoint(1, "101")),
        ];
        let kept = reader(Shard::new(0, 2), &latest).kept().expect("committed");
        assert!(kept.positions.is_empty() && kept.earlier.is_none());
        assert_eq!(kept.states.len(), 1);
        assert!(
            reader(Shard::new(0, 2), &[]).kept().is_none(),
            "nothing committed"
        );
        // Removed checkpoints count as none.
        assert!(reader(None, &[(0, 1, 4, None)]).kept().is_none());
    }
}
