//! Property test of the durable buffer against a simple model: whatever sequence of appends,
//! acknowledgements, upkeep (cursor saves, snapshots, compaction), crashes with a torn write
//! and restarts, each sink gets back every event it has not acknowledged, in order, and
//! nothing it acknowledged and saved.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::record::tests::event;
use super::*;
use crate::model::ChangeKind;

#[derive(Debug, Clone)]
enum Op {
    Append(u8),
    Ack(u8, u8),
    Maintain(bool),
    Crash(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..6).prop_map(Op::Append),
        3 => (0u8..2, 0u8..8).prop_map(|(s, n)| Op::Ack(s, n)),
        2 => any::<bool>().prop_map(Op::Maintain),
        1 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(Op::Crash),
    ]
}

const SINKS: [&str; 2] = ["a", "b"];

fn settings(dir: &std::path::Path) -> StoreSettings {
    StoreSettings {
        dir: dir.to_path_buf(),
        fsync: FsyncPolicy::Always,
        fsync_interval: Duration::from_millis(0),
        segment_bytes: 400,
        snapshot_interval: Duration::from_secs(3600),
    }
}

fn open(dir: &std::path::Path) -> (Store, Restored) {
    let sinks: Vec<String> = SINKS.iter().map(|s| s.to_string()).collect();
    Store::open(settings(dir), &sinks).expect("the store opens")
}

proptest! {
    #[test]
    fn sinks_get_back_exactly_their_unacknowledged_events_in_order(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = std::env::temp_dir().join(format!("kubecast-store-prop-{}-{}", std::process::id(), fastrand::u64(..)));
        let (mut store, _) = open(&dir);
        // The model: every event appended, and per sink the cursor as last saved.
        let mut events: Vec<u64> = Vec::new();
        let mut acked: BTreeMap<&str, u64> = SINKS.iter().map(|s| (*s, 0)).collect();
        let mut saved = acked.clone();
        for op in ops {
            match op {
                Op::Append(n) => {
                    let batch: Vec<Record> = (0..n)
                        .map(|_| {
                            let seq = store.take_seq();
                            events.push(seq);
                            Record::Event { event: std::sync::Arc::new(event(seq, "u", &seq.to_string(), ChangeKind::Modified)), from_watch: true }
                        })
                        .collect();
                    store.append(&batch).unwrap();
                }
                Op::Ack(s, n) => {
                    let sink = SINKS[s as usize];
                    let unacked: Vec<u64> = events.iter().copied().filter(|e| *e > acked[sink]).collect();
                    if let Some(upto) = unacked.get(n as usize) {
                        store.acked(sink, *upto);
                        acked.insert(sink, *upto);
                    }
                }
                Op::Maintain(snapshot) => {
                    let next = store.next_seq();
                    store.maintain(snapshot.then(|| Snapshot { next_seq: next, ..Snapshot::default() })).unwrap();
                    saved = acked.clone();
                }
                Op::Crash(garbage) => {
                    drop(store);
                    // A torn write: part of a frame after the last whole record.
                    let log_dir = dir.join("log");
                    let mut segs: Vec<_> = std::fs::read_dir(&log_dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).collect();
                    segs.sort();
                    if let Some(last) = segs.last() {
                        use std::io::Write;
                        let mut f = std::fs::OpenOptions::new().append(true).open(last).unwrap();
                        f.write_all(&garbage[..garbage.len().min(7)]).unwrap();
                    }
                    let (s, restored) = open(&dir);
                    store = s;
                    acked = saved.clone();
                    for sink in SINKS {
                        let got: Vec<u64> = restored.pending[sink].iter().map(|e| e.seq).collect();
                        let want: Vec<u64> = events.iter().copied().filter(|e| *e > saved[sink]).collect();
                        prop_assert_eq!(got, want, "sink {}", sink);
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
