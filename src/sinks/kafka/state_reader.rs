//! The checkpoint and the known state as read so far, resumable: a standby reads the
//! compacted topics every second while the leader commits, so that on taking over (after
//! the fence) only what was committed since is left to read. Entry point: [`StateReader`].
//!
//! A reader left unused for long is not resumed: compaction drops tombstones after the
//! topic's `delete.retention.ms` (a day by default), so a reader that far behind could miss
//! a delete. [`StateReader::fresh`] says whether it may be.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;

use super::checkpoint::{self, Checkpoint, CheckpointError};
use crate::sinks::Kept;

/// Where a reader stands in one sink's checkpoint and state topics, and what it has read.
#[derive(Debug)]
pub struct StateReader {
    checkpoint_topic: String,
    state_topic: String,
    key: String,
    /// Per partition, the next offset to read.
    checkpoint_next: HashMap<i32, i64>,
    state_next: HashMap<i32, i64>,
    latest: Option<Checkpoint>,
    /// Each object's state record (opaque) by key.
    known: HashMap<String, Vec<u8>>,
    /// When it last read to the ends.
    read_at: Option<Instant>,
    /// Records read in its last read.
    pub last_read: usize,
}

impl StateReader {
    /// A reader at the beginning of an exactly-once sink's topics: its checkpoint (the
    /// record keyed `key`) and its known state.
    pub fn new(checkpoint_topic: &str, state_topic: &str, key: &str) -> StateReader {
        StateReader {
            checkpoint_topic: checkpoint_topic.to_string(),
            state_topic: state_topic.to_string(),
            key: key.to_string(),
            checkpoint_next: HashMap::new(),
            state_next: HashMap::new(),
            latest: None,
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
        let (topic, key) = (&self.checkpoint_topic, &self.key);
        let latest = &mut self.latest;
        checkpoint::read_from(config, topic, &mut self.checkpoint_next, limit, |m| {
            read += 1;
            if corrupt.is_none()
                && let Err(e) = checkpoint::apply_checkpoint(m, topic, key, latest)
            {
                corrupt = Some(e);
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

    /// The last checkpoint read and the known state with it; `None` when there is no
    /// checkpoint (nothing was ever committed, or it was removed).
    pub fn kept(&self) -> Option<Kept> {
        let c = self.latest.as_ref()?;
        Some(Kept {
            seq: c.seq,
            positions: c.positions.clone(),
            states: self
                .known
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}
