//! The segment log: records appended to files named by their first sequence number, each
//! framed as `[length u32][crc32 u32][record]`, little-endian.
//!
//! Recovery reads every segment; a frame cut short or failing its checksum at the end of the
//! last segment is a write the crash interrupted, and is cut off. Anywhere else it is
//! corruption, and an error naming the file and offset: kubecast does not guess.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};

use super::record::Record;
use super::{StoreError, io};

const FRAME: usize = 8;

#[derive(Debug)]
struct Segment {
    first_seq: u64,
    path: PathBuf,
    /// Its size once closed (the active segment's is `Log::active_len`).
    len: u64,
}

/// The open log. Entry points: [`Log::open`], [`Log::append`], [`Log::sync`],
/// [`Log::compact`].
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    segments: Vec<Segment>,
    active: File,
    active_len: u64,
    segment_bytes: u64,
    next_seq: u64,
    buf: BytesMut,
    /// A fake fault, for tests only (a failed write part-way is not to be had on demand from
    /// a unit test's disk): the next append writes this many bytes of its frames and fails.
    #[cfg(test)]
    pub(crate) fail_next_write_after: Option<usize>,
}

fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.seg"))
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovers it, and returns it with every record
    /// it holds, oldest first.
    pub fn open(dir: &Path, segment_bytes: u64) -> Result<(Log, Vec<Record>), StoreError> {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let mut firsts: Vec<u64> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io("listing", dir))? {
            let entry = entry.map_err(io("listing", dir))?;
            let name = entry.file_name();
            if let Some(seq) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse().ok())
            {
                firsts.push(seq);
            }
        }
        firsts.sort_unstable();
        let mut records = Vec::new();
        let mut segments = Vec::new();
        let mut next_seq = firsts.first().copied().unwrap_or(1);
        let mut last_len = 0;
        for (i, first) in firsts.iter().enumerate() {
            let path = segment_path(dir, *first);
            let last = i + 1 == firsts.len();
            let (good_len, found) = read_segment(&path, last)?;
            if let Some(r) = found.last() {
                next_seq = r.seq() + 1;
            }
            next_seq = next_seq.max(*first);
            records.extend(found);
            if last {
                last_len = good_len;
            }
            segments.push(Segment {
                first_seq: *first,
                path,
                len: good_len,
            });
        }
        if segments.is_empty() {
            segments.push(Segment {
                first_seq: next_seq,
                path: segment_path(dir, next_seq),
                len: 0,
            });
        }
        let active_path = &segments[segments.len() - 1].path;
        let active = OpenOptions::new()
            .create(true)
            .append(true)
            .open(active_path)
            .map_err(io("opening", active_path))?;
        // Cut a torn tail off, so that new records follow the last whole one.
        active
            .set_len(last_len)
            .map_err(io("truncating", active_path))?;
        let log = Log {
            dir: dir.to_path_buf(),
            segments,
            active,
            active_len: last_len,
            segment_bytes,
            next_seq,
            buf: BytesMut::new(),
            #[cfg(test)]
            fail_next_write_after: None,
        };
        Ok((log, records))
    }

    /// The sequence number the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Numbers from `seq` on (if that is further): numbers taken by records that were
    /// never written are not given again.
    pub fn advance_to(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq);
    }

    /// Takes the next sequence number.
    pub fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Appends `records` (written, not yet synced). A full segment is synced and a new one
    /// started first.
    pub fn append(&mut self, records: &[Record]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.active_len >= self.segment_bytes {
            self.roll(records[0].seq())?;
        }
        self.buf.clear();
        for r in records {
            // Encoded in place after a header that is filled in once the length is known:
            // the event's data is copied once, into the write buffer.
            let start = self.buf.len();
            self.buf.put_bytes(0, FRAME);
            r.encode(&mut self.buf);
            let body = &self.buf[start + FRAME..];
            let (len, crc) = (
                (body.len() as u32).to_le_bytes(),
                crc32fast::hash(body).to_le_bytes(),
            );
            self.buf[start..start + 4].copy_from_slice(&len);
            self.buf[start + 4..start + FRAME].copy_from_slice(&crc);
            self.next_seq = self.next_seq.max(r.seq() + 1);
        }
        if let Err(e) = self.write_buf() {
            let path = &self.segments[self.segments.len() - 1].path;
            // A write that failed part-way leaves a torn frame: cut it off, so the segment
            // ends at its last whole frame again. (The store refuses every write after an
            // error anyway; this keeps a reopen from cutting at a frame that later records
            // were written after.)
            if let Err(cut) = self.active.set_len(self.active_len) {
                tracing::error!(path = %path.display(), error = %cut, "cutting a torn write off the state log failed; a restart cuts it");
            }
            return Err(io("writing", path)(e));
        }
        self.active_len += self.buf.len() as u64;
        Ok(())
    }

    /// Writes the encoded frames to the active segment.
    fn write_buf(&mut self) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(n) = self.fail_next_write_after.take() {
            self.active.write_all(&self.buf[..n.min(self.buf.len())])?;
            return Err(std::io::Error::other("a write fault injected by a test"));
        }
        self.active.write_all(&self.buf)
    }

    /// Bytes of the log on disk.
    pub fn disk_bytes(&self) -> u64 {
        let closed: u64 = self.segments[..self.segments.len() - 1]
            .iter()
            .map(|s| s.len)
            .sum();
        closed + self.active_len
    }

    /// Makes everything appended so far durable (fdatasync).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        let path = &self.segments[self.segments.len() - 1].path;
        self.active.sync_data().map_err(io("syncing", path))
    }

    fn roll(&mut self, first_seq: u64) -> Result<(), StoreError> {
        self.sync()?;
        let path = segment_path(&self.dir, first_seq);
        self.active = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("creating", &path))?;
        if let Some(last) = self.segments.last_mut() {
            last.len = self.active_len;
        }
        self.active_len = 0;
        self.segments.push(Segment {
            first_seq,
            path,
            len: 0,
        });
        sync_dir(&self.dir)
    }

    /// Deletes the segments that hold only records below `below`; never the active one.
    /// Returns how many were deleted.
    pub fn compact(&mut self, below: u64) -> Result<usize, StoreError> {
        let mut n = 0;
        while self.segments.len() > 1 && self.segments[1].first_seq <= below {
            let s = self.segments.remove(0);
            std::fs::remove_file(&s.path).map_err(io("deleting", &s.path))?;
            n += 1;
        }
        Ok(n)
    }
}

/// Reads one segment: the length of its good prefix and its records. A bad frame at the end
/// of the last segment is a torn write; anywhere else an error.
fn read_segment(path: &Path, last: bool) -> Result<(u64, Vec<Record>), StoreError> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(io("reading", path))?;
    let data = Bytes::from(data);
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < data.len() {
        let bad = |why: &str| StoreError::Corrupt {
            path: path.to_path_buf(),
            offset: at as u64,
            reason: why.to_string(),
        };
        if data.len() - at < FRAME {
            if last {
                break;
            }
            return Err(bad("a frame header is cut short"));
        }
        let len = u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]) as usize;
        let crc = u32::from_le_bytes([data[at + 4], data[at + 5], data[at + 6], data[at + 7]]);
        let end = at + FRAME + len;
        if end > data.len() || crc32fast::hash(&data[at + FRAME..end]) != crc {
            if last {
                break;
            }
            return Err(bad("a record is cut short or fails its checksum"));
        }
        match Record::decode(data.slice(at + FRAME..end)) {
            Some(r) => records.push(r),
            None => {
                return Err(bad(
                    "a record with a good checksum does not decode (written by another version?)",
                ));
            }
        }
        at = end;
    }
    Ok((at as u64, records))
}

/// Syncs a directory, so that a created, renamed or deleted file stays so after a crash.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;
    use crate::store::record::tests::event;

    fn rec(seq: u64) -> Record {
        Record::Event {
            event: std::sync::Arc::new(event(seq, "u", &seq.to_string(), ChangeKind::Modified)),
            from_watch: true,
        }
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kubecast-log-{name}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn records_come_back_after_reopening_across_segments() {
        let dir = tmp("reopen");
        let (mut log, got) = Log::open(&dir, 300).unwrap();
        assert!(got.is_empty());
        for s in 1..=20 {
            let seq = log.take_seq();
            assert_eq!(seq, s);
            log.append(&[rec(seq)]).unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let (log, got) = Log::open(&dir, 300).unwrap();
        assert_eq!(
            got.iter().map(Record::seq).collect::<Vec<_>>(),
            (1..=20).collect::<Vec<_>>()
        );
        assert!(log.segments.len() > 1, "small segments roll");
        assert_eq!(log.next_seq(), 21);
    }

    #[test]
    fn a_torn_tail_is_cut_off_and_appending_goes_on_after_the_last_whole_record() {
        let dir = tmp("torn");
        let (mut log, _) = Log::open(&dir, 1 << 20).unwrap();
        for s in 1..=3 {
            log.append(&[rec(s)]).unwrap();
        }
        log.sync().unwrap();
        let path = log.segments[0].path.clone();
        drop(log);
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        let (mut log, got) = Log::open(&dir, 1 << 20).unwrap();
        assert_eq!(got.len(), 2, "the torn third record is gone");
        assert_eq!(log.next_seq(), 3);
        log.append(&[rec(3)]).unwrap();
        drop(log);
        let (_, got) = Log::open(&dir, 1 << 20).unwrap();
        assert_eq!(
            got.iter().map(Record::seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn a_write_that_fails_part_way_is_cut_off_so_a_later_record_survives_a_reopen() {
        let dir = tmp("failed-write");
        let (mut log, _) = Log::open(&dir, 1 << 20).unwrap();
        log.append(&[rec(1)]).unwrap();
        // A fake fault: part of the second frame reaches the file, then the write fails.
        log.fail_next_write_after = Some(12);
        let e = log.append(&[rec(2)]).unwrap_err().to_string();
        assert!(e.contains("writing") && e.contains(".seg"), "{e}");
        log.append(&[rec(3)]).unwrap();
        log.sync().unwrap();
        drop(log);
        let (_, got) = Log::open(&dir, 1 << 20).unwrap();
        assert_eq!(
            got.iter().map(Record::seq).collect::<Vec<_>>(),
            vec![1, 3],
            "the torn frame is gone and the record after it is read"
        );
    }

    #[test]
    fn corruption_before_the_tail_is_an_error_naming_the_file() {
        let dir = tmp("corrupt");
        let (mut log, _) = Log::open(&dir, 200).unwrap();
        for s in 1..=10 {
            log.append(&[rec(s)]).unwrap();
        }
        let first = log.segments[0].path.clone();
        drop(log);
        let mut bytes = std::fs::read(&first).unwrap();
        bytes[12] ^= 0xff;
        std::fs::write(&first, bytes).unwrap();
        let e = Log::open(&dir, 200).unwrap_err().to_string();
        assert!(e.contains(&first.display().to_string()), "{e}");
    }

    #[test]
    fn compaction_keeps_every_record_at_or_above_the_bound() {
        let dir = tmp("compact");
        let (mut log, _) = Log::open(&dir, 200).unwrap();
        for s in 1..=30 {
            log.append(&[rec(s)]).unwrap();
        }
        let deleted = log.compact(15).unwrap();
        assert!(deleted > 0);
        drop(log);
        let (_, got) = Log::open(&dir, 200).unwrap();
        assert!(got.first().unwrap().seq() <= 15);
        assert_eq!(got.last().unwrap().seq(), 30);
    }
}
