//! Write throughput of the durable buffer (src/store) with each fsync policy: batches of
//! events with 2 KiB of data (a typical Pod in `full` mode) appended as the pipeline does,
//! one append per batch. `interval` syncs every 100 ms through the store's upkeep, as the
//! running bridge does. Figures go to BENCHMARKS.md.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kubecast::event::{Event, SCHEMA_FULL, event_id};
use kubecast::model::{ChangeKind, ObjectRef};
use kubecast::store::{FsyncPolicy, Record, Snapshot, Store, StoreSettings};

const DATA: usize = 2048;

fn event(seq: u64) -> Event {
    let uid = format!("3f2a9c1e-0000-4000-8000-{seq:012}");
    let rv = (1_000_000 + seq).to_string();
    Event {
        seq,
        id: event_id(&uid, &rv, ChangeKind::Modified),
        kind: ChangeKind::Modified,
        source: "k8s://bench/api/v1/namespaces/default/pods".into(),
        time: "2026-12-03T00:00:00.000000000Z".parse().expect("a time"),
        ty: ChangeKind::Modified.event_type().into(),
        dataschema: SCHEMA_FULL.into(),
        api_version: "v1".into(),
        k8s_kind: "Pod".into(),
        scope: "*".into(),
        object: ObjectRef {
            uid,
            resource: "pods".into(),
            namespace: "default".into(),
            name: format!("web-{seq}"),
        },
        rv: rv.clone(),
        prev_rv: rv,
        inferred: false,
        initial: false,
        truncated: false,
        compat: None,
        from_watch: false,
        route: None,
        data: Bytes::from(vec![b'x'; DATA]),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("buffer_append");
    group
        .measurement_time(Duration::from_secs(8))
        .sample_size(20);
    for batch in [1usize, 64] {
        for policy in [
            FsyncPolicy::Always,
            FsyncPolicy::Interval,
            FsyncPolicy::Never,
        ] {
            let dir = std::env::temp_dir().join(format!(
                "kubecast-bench-{}-{policy:?}-{batch}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let settings = StoreSettings {
                dir: dir.clone(),
                fsync: policy,
                fsync_interval: Duration::from_millis(100),
                segment_bytes: 64 << 20,
                snapshot_interval: Duration::from_secs(3600),
            };
            let (mut store, _) =
                Store::open(settings, &["sink".to_string()]).expect("opening the store");
            let bytes_per_batch = batch as u64 * (DATA as u64 + 250);
            group.throughput(Throughput::Bytes(bytes_per_batch));
            let mut last_upkeep = std::time::Instant::now();
            group.bench_function(
                BenchmarkId::new(
                    format!("{policy:?}").to_lowercase(),
                    format!("batch{batch}"),
                ),
                |b| {
                    b.iter(|| {
                        let records: Vec<Record> = (0..batch)
                            .map(|_| Record::Event {
                                event: Arc::new(event(store.take_seq())),
                                from_watch: true,
                            })
                            .collect();
                        store.append(&records).expect("append");
                        // Upkeep as the bridge runs it: every 200 ms (the interval sync, cursors).
                        if last_upkeep.elapsed() >= Duration::from_millis(200) {
                            let next = store.next_seq();
                            store.acked("sink", next - 1);
                            let due = store.snapshot_due(false);
                            store
                                .maintain(due.then(|| Snapshot {
                                    next_seq: next,
                                    ..Snapshot::default()
                                }))
                                .expect("upkeep");
                            last_upkeep = std::time::Instant::now();
                        }
                    })
                },
            );
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
