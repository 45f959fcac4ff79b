//! The durable buffer: what kubecast has emitted but its sinks have not all acknowledged,
//! with the known state and the watch positions, in a state directory that survives a crash
//! or `kill -9`.
//!
//! Entry point: [`Store::open`], which recovers the directory and returns what a restart
//! needs ([`Restored`]): the last snapshot, the log records after it (replayed by the
//! pipeline into the classifier and the positions), and per sink the events it has not
//! acknowledged. Then [`Store::append`] logs a batch whole (with `log: always` before its
//! events go to the sinks, else once a sink falls behind on it), [`Store::append_delivered`]
//! logs the resume point of a batch every sink acknowledged, [`Store::acked`] moves a sink's
//! cursor, and [`Store::maintain`] saves cursors, writes snapshots and deletes log segments
//! nobody needs any more.
//!
//! Why a log of our own: the job is an append-only sequence with one reader position per
//! sink, truncated from the front; a small segment log with checksummed frames does exactly
//! that, with an fsync policy we control and recovery we can test by cutting files.

mod config;
mod log;
mod record;
mod snapshot;

#[cfg(test)]
mod proptests;

#[cfg(test)]
pub(crate) use record::tests::event as record_tests_event;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use config::{LogPolicy, StateConfig};
pub use log::Log;
pub use record::Record;
pub use snapshot::{Cursors, Snapshot};

use crate::event::Event;

/// Why the state directory cannot be used. Always fatal: kubecast must not acknowledge
/// what it cannot store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state directory: {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state directory: {path} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// The blocking-pool task doing the disk work panicked or was cancelled.
    #[error("state directory: the task writing it failed: {0}")]
    Worker(String),
    /// A write or sync failed earlier: nothing more is written (a snapshot or a record after
    /// the failed one would claim that what failed is on disk).
    #[error(
        "state directory: nothing more is written after an earlier failure ({0}); a restart resumes from what was written before it"
    )]
    Broken(String),
}

/// Maps an I/O error of `op` on `path` into a [`StoreError`] (for `map_err`).
fn io<'a>(
    op: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// How soon after a sink's cursor moves it is saved: the cursors of a busy sink are written
/// a few times a second, not once per acknowledgement. A crash loses at most this much of a
/// cursor's progress, and the events after the saved cursor are sent again with their ids.
const CURSORS_WITHIN: Duration = Duration::from_millis(200);

/// When appended records are synced to disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// Before the batch's events go to any sink: nothing emitted is ever lost.
    #[default]
    Always,
    /// At most `fsync_interval_ms` after appending: a crash may lose the last interval's
    /// events from the log; they are then emitted again after the restart (same ids).
    Interval,
    /// Left to the operating system: survives a kubecast crash, not a machine crash.
    Never,
}

/// The store's settings.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub dir: PathBuf,
    pub fsync: FsyncPolicy,
    pub fsync_interval: Duration,
    pub segment_bytes: u64,
    pub snapshot_interval: Duration,
}

/// What a restart starts from.
#[derive(Debug, Default)]
pub struct Restored {
    pub snapshot: Snapshot,
    /// Records at or after `snapshot.next_seq`, to replay on top of it.
    pub replay: Vec<Record>,
    /// Per configured sink, its unacknowledged events in order.
    pub pending: BTreeMap<String, Vec<Arc<Event>>>,
}

/// The open state directory.
#[derive(Debug)]
pub struct Store {
    settings: StoreSettings,
    log: Log,
    cursors: Cursors,
    /// Since when a cursor moved that is not saved yet.
    cursors_dirty: Option<Instant>,
    /// The highest sequence number of a logged event: a cursor that moves below it is worth
    /// saving (it spares a restart sending those events again); one that moves only over
    /// events never written is not.
    logged_upto: u64,
    unsynced: bool,
    last_sync: Instant,
    last_snapshot: Instant,
    snapshot_seq: u64,
    /// Durations of the fsyncs since the last [`Store::take_fsync_times`], in seconds.
    fsync_times: Vec<f64>,
    /// The first write or sync that failed. From then on every write is refused: what
    /// failed may be partly on disk or not at all (and after a failed fsync, Linux may have
    /// dropped the unsynced pages while saying nothing next time), so a later record,
    /// cursor or snapshot could claim it is there. A restart resumes from what was written.
    broken: Option<String>,
}

impl Store {
    /// The free bytes (for an unprivileged user) and the size of the filesystem holding the
    /// state directory; `None` where it cannot be asked.
    pub fn disk_space(&self) -> Option<(u64, u64)> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.settings.dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: statvfs only writes the struct we hand it, which is plain data and fully
        // initialised (zeroed) beforehand; the path is a valid NUL-terminated string.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
            return None;
        }
        let unit = stat.f_frsize as u64;
        Some((stat.f_bavail as u64 * unit, stat.f_blocks as u64 * unit))
    }

    /// Opens and recovers `settings.dir` for the sinks named in `sinks`. A sink without a
    /// cursor yet starts at the log's end.
    pub fn open(
        settings: StoreSettings,
        sinks: &[String],
    ) -> Result<(Store, Restored), StoreError> {
        let log_dir = settings.dir.join("log");
        std::fs::create_dir_all(&settings.dir).map_err(io("creating", &settings.dir))?;
        let (mut log, records) = Log::open(&log_dir, settings.segment_bytes)?;
        let snapshot: Snapshot =
            snapshot::read(&settings.dir, snapshot::SNAPSHOT)?.unwrap_or_default();
        let mut cursors: Cursors =
            snapshot::read(&settings.dir, snapshot::CURSORS)?.unwrap_or_default();
        // Changes held in memory at a crash were numbered and never written, and a sink may
        // have acknowledged some of them: new numbers start past every number on disk (the
        // log's, the snapshot's, a cursor's), so none is taken twice.
        let saved_cursor = cursors.values().copied().max().unwrap_or(0);
        log.advance_to(snapshot.next_seq.max(saved_cursor + 1));
        let head = log.next_seq().saturating_sub(1);
        cursors.retain(|name, _| sinks.contains(name));
        for s in sinks {
            cursors.entry(s.clone()).or_insert(head);
        }
        // Saved at once: a new sink's starting point must not move to a later head if
        // kubecast crashes before the next upkeep.
        snapshot::write(&settings.dir, snapshot::CURSORS, &cursors)?;
        let mut pending: BTreeMap<String, Vec<Arc<Event>>> =
            sinks.iter().map(|s| (s.clone(), Vec::new())).collect();
        let mut replay = Vec::new();
        let mut logged_upto = 0;
        for r in records {
            if let Record::Event { event, .. } = &r {
                logged_upto = event.seq;
                for (sink, list) in pending.iter_mut() {
                    if event.seq > cursors[sink] {
                        list.push(event.clone());
                    }
                }
            }
            if r.seq() >= snapshot.next_seq {
                replay.push(r);
            }
        }
        let store = Store {
            snapshot_seq: snapshot.next_seq,
            logged_upto,
            settings,
            log,
            cursors,
            cursors_dirty: None,
            unsynced: false,
            last_sync: Instant::now(),
            last_snapshot: Instant::now(),
            fsync_times: Vec::new(),
            broken: None,
        };
        Ok((
            store,
            Restored {
                snapshot,
                replay,
                pending,
            },
        ))
    }

    /// The next sequence number, for the next record.
    pub fn take_seq(&mut self) -> u64 {
        self.log.take_seq()
    }

    /// The sequence number the next record will get (without taking it).
    pub fn next_seq(&self) -> u64 {
        self.log.next_seq()
    }

    /// Logs `records` whole, synced as the policy says: with `log: always` before their
    /// events go anywhere, else once a sink has fallen behind on them.
    pub fn append(&mut self, records: &[Record]) -> Result<(), StoreError> {
        self.guard(|store| store.append_unguarded(records))
    }

    fn append_unguarded(&mut self, records: &[Record]) -> Result<(), StoreError> {
        self.log.append(records)?;
        let mut events = records.iter().filter_map(|r| match r {
            Record::Event { event, .. } => Some(event.seq),
            _ => None,
        });
        if let Some(first) = events.next() {
            self.logged_upto = events.next_back().unwrap_or(first);
            // A sink that had already acknowledged some of them (the others fell behind):
            // its cursor is saved, or a restart would send them to it again.
            if self.cursors.values().any(|&c| c >= first) {
                self.cursors_dirty.get_or_insert_with(Instant::now);
            }
        }
        self.unsynced = true;
        if self.settings.fsync == FsyncPolicy::Always {
            self.sync()?;
        }
        Ok(())
    }

    /// Logs the resume point of changes every sink has acknowledged (their objects' states
    /// and positions, without the events): not synced, as a machine crash that loses them
    /// only makes a restart resume earlier and send those changes again, with their ids.
    pub fn append_delivered(&mut self, records: &[Record]) -> Result<(), StoreError> {
        self.guard(|store| store.log.append(records))
    }

    /// Runs a write unless an earlier one failed; a failure refuses every later write.
    fn guard(
        &mut self,
        write: impl FnOnce(&mut Store) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if let Some(first) = &self.broken {
            return Err(StoreError::Broken(first.clone()));
        }
        let result = write(self);
        if let Err(e) = &result {
            self.broken = Some(e.to_string());
        }
        result
    }

    /// Whether a write or sync failed (every later one is refused).
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Makes the next append write part of its frames and fail (a fake fault: see
    /// [`Log`]'s `fail_next_write_after`).
    #[cfg(test)]
    pub(crate) fn fail_next_write_after(&mut self, bytes: usize) {
        self.log.fail_next_write_after = Some(bytes);
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.unsynced {
            let started = Instant::now();
            self.log.sync()?;
            self.fsync_times.push(started.elapsed().as_secs_f64());
            self.unsynced = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// `sink` settled every event up to `seq` (delivered or dead-lettered).
    pub fn acked(&mut self, sink: &str, seq: u64) {
        if let Some(c) = self.cursors.get_mut(sink)
            && seq > *c
        {
            if *c < self.logged_upto {
                self.cursors_dirty.get_or_insert_with(Instant::now);
            }
            *c = seq;
        }
    }

    /// The fsync durations (seconds) since the last call, for the metrics.
    pub fn take_fsync_times(&mut self) -> Vec<f64> {
        std::mem::take(&mut self.fsync_times)
    }

    /// Bytes of the log on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.log.disk_bytes()
    }

    /// The lowest acknowledged sequence number over all sinks.
    pub fn min_cursor(&self) -> u64 {
        self.cursors.values().copied().min().unwrap_or(0)
    }

    /// Whether [`Store::maintain`] should be given a snapshot now (`force`: regardless of
    /// the interval): the interval has passed and something was logged since the last one
    /// (a snapshot of what did not change would only cost the disk and the CPU).
    pub fn snapshot_due(&self, force: bool) -> bool {
        force
            || (self.logged_since_snapshot()
                && self.last_snapshot.elapsed() >= self.settings.snapshot_interval)
    }

    fn logged_since_snapshot(&self) -> bool {
        self.log.next_seq() > self.snapshot_seq
    }

    /// When [`Store::maintain`] has something to do next (the interval fsync of what is not
    /// synced, a moved cursor to save, a snapshot of what was logged since the last one);
    /// `None` when nothing is waiting, so an idle kubecast is not woken for upkeep.
    pub fn next_due(&self) -> Option<Instant> {
        let fsync = (self.settings.fsync == FsyncPolicy::Interval && self.unsynced)
            .then(|| self.last_sync + self.settings.fsync_interval);
        let cursors = self.cursors_dirty.map(|since| since + CURSORS_WITHIN);
        let snapshot = self
            .logged_since_snapshot()
            .then(|| self.last_snapshot + self.settings.snapshot_interval);
        [fsync, cursors, snapshot].into_iter().flatten().min()
    }

    /// Periodic upkeep: the interval fsync, saving cursors, and writing `snapshot` (taken
    /// when [`Store::snapshot_due`] said so), after which segments nobody needs are deleted.
    pub fn maintain(&mut self, snapshot: Option<Snapshot>) -> Result<(), StoreError> {
        self.guard(|store| store.maintain_unguarded(snapshot))
    }

    fn maintain_unguarded(&mut self, snapshot: Option<Snapshot>) -> Result<(), StoreError> {
        if self.settings.fsync == FsyncPolicy::Interval
            && self.last_sync.elapsed() >= self.settings.fsync_interval
        {
            self.sync()?;
        }
        if self.cursors_dirty.is_some() {
            snapshot::write(&self.settings.dir, snapshot::CURSORS, &self.cursors)?;
            self.cursors_dirty = None;
        }
        if let Some(snap) = snapshot {
            // Everything the snapshot covers must be on disk before the snapshot says so.
            self.sync()?;
            snapshot::write(&self.settings.dir, snapshot::SNAPSHOT, &snap)?;
            self.snapshot_seq = snap.next_seq;
            self.last_snapshot = Instant::now();
        }
        // Keep what a sink still needs and what a replay after the snapshot needs.
        let below = (self.min_cursor() + 1).min(self.snapshot_seq);
        self.log.compact(below)?;
        Ok(())
    }
}
