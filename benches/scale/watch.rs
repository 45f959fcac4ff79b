//! What the scale bench measures with: an independent watch of each resource (kube's dynamic
//! API, not kubecast's code) stamping when every change reached it, a Kafka reader stamping
//! when every event reached it, and a sampler of processes' resident memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};

use rdkafka::Message;

use super::support::{Stack, proc};

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Every change of one resource the independent watch saw: its id (as kubecast's contract
/// gives it) and when it arrived.
#[derive(Default)]
pub struct Seen {
    pub changes: Vec<(String, u64)>,
    /// The bench's live objects (those labelled `kubecast-scale`): uid to whether it is a
    /// Running pod.
    pub live: HashMap<String, bool>,
    /// Set when the watch had to list again (a change may then be unseen).
    pub gaps: usize,
}

pub type Truth = Arc<Mutex<Seen>>;

fn record(seen: &Truth, kind: &str, o: &DynamicObject) {
    let uid = o.metadata.uid.clone().unwrap_or_default();
    let rv = o.metadata.resource_version.clone().unwrap_or_default();
    let id = match kind {
        "deleted" => format!("{uid}:deleted"),
        k => format!("{uid}:{rv}:{k}"),
    };
    let running = o.data["status"]["phase"] == "Running" && o.metadata.deletion_timestamp.is_none();
    if let Ok(mut s) = seen.lock() {
        s.changes.push((id, now_ms()));
        let ours = o
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("kubecast-scale"));
        if !ours {
            return;
        }
        if kind == "deleted" {
            s.live.remove(&uid);
        } else {
            s.live.insert(uid, running);
        }
    }
}

/// Lists and watches every object of `ar` cluster-wide from now on, in the background.
pub async fn watch(client: &kube::Client, ar: &ApiResource) -> Truth {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let seen: Truth = Arc::default();
    let list = api
        .list(&ListParams::default())
        .await
        .expect("the bench's watch: listing");
    for o in &list.items {
        record(&seen, "added", o);
    }
    let mut rv = list.metadata.resource_version.unwrap_or_default();
    let out = seen.clone();
    tokio::spawn(async move {
        let wp = WatchParams::default().timeout(290);
        loop {
            let Ok(stream) = api.watch(&wp, &rv).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut stream = Box::pin(stream);
            while let Some(Ok(e)) = stream.next().await {
                match e {
                    WatchEvent::Added(o) => {
                        rv = o.metadata.resource_version.clone().unwrap_or_default();
                        record(&out, "added", &o);
                    }
                    WatchEvent::Modified(o) => {
                        rv = o.metadata.resource_version.clone().unwrap_or_default();
                        record(&out, "modified", &o);
                    }
                    WatchEvent::Deleted(o) => {
                        rv = o.metadata.resource_version.clone().unwrap_or_default();
                        record(&out, "deleted", &o);
                    }
                    WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                    WatchEvent::Error(_) => {
                        // Expired: the record is no longer the truth; say so and go on.
                        if let Ok(mut s) = out.lock() {
                            s.gaps += 1;
                        }
                        if let Ok(l) = api.list(&ListParams::default()).await {
                            rv = l.metadata.resource_version.unwrap_or_default();
                        }
                        break;
                    }
                }
            }
        }
    });
    seen
}

/// When each event id first reached a consumer of the topics (from their beginning).
pub type Arrivals = Arc<Mutex<HashMap<String, u64>>>;

/// Reads every partition of each of `topics` (made here with 4 partitions each).
pub async fn read(stack: &Stack, topics: &[String]) -> Arrivals {
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    let consumer = super::bridges::reader(stack, &topics).await;
    let arrivals: Arrivals = Arc::default();
    let out = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let Ok(m) = consumer.recv().await else {
                continue;
            };
            let id = m.headers().and_then(|hs| {
                use rdkafka::message::Headers;
                hs.iter()
                    .find(|h| h.key == "ce_id")
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            });
            if let (Some(id), Ok(mut a)) = (id, out.lock()) {
                a.entry(id).or_insert_with(now_ms);
            }
        }
    });
    arrivals
}

/// The highest resident memory (KiB) each watched process reached since the last
/// [`Peaks::take`], sampled every 200 ms.
#[derive(Clone, Default)]
pub struct Peaks {
    pids: Arc<Mutex<Vec<u32>>>,
    peaks: Arc<Mutex<HashMap<u32, u64>>>,
}

impl Peaks {
    pub fn start() -> Peaks {
        let all = Peaks::default();
        let (pids, peaks) = (all.pids.clone(), all.peaks.clone());
        std::thread::spawn(move || {
            loop {
                let now: Vec<u32> = pids.lock().map(|p| p.clone()).unwrap_or_default();
                for pid in now {
                    if let (Some(kib), Ok(mut p)) = (proc::status_kib(pid, "VmRSS"), peaks.lock()) {
                        let e = p.entry(pid).or_insert(0);
                        *e = (*e).max(kib);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        all
    }

    /// Samples `pid` from now on.
    pub fn watch(&self, pid: u32) {
        if let Ok(mut p) = self.pids.lock() {
            p.push(pid);
        }
    }

    /// The peak of `pid` since the last take, in MiB; starts the next window.
    pub fn take(&self, pid: u32) -> f64 {
        let kib = self
            .peaks
            .lock()
            .ok()
            .and_then(|mut p| p.remove(&pid))
            .unwrap_or(0);
        kib as f64 / 1024.0
    }
}
