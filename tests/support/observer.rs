//! An independent observer of the truth: its own watch on the apiserver (kube's typed API,
//! not kubecast's code), recording every change of the pods (or objects of another kind) in
//! one namespace, or of the labelled objects of a cluster-scoped kind, and the event id
//! kubecast's contract gives each.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Resource};

/// One change the apiserver reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: &'static str,
    pub uid: String,
    pub name: String,
    pub rv: String,
}

impl Change {
    /// The id kubecast must give this change.
    pub fn id(&self) -> String {
        match self.kind {
            "deleted" => format!("{}:deleted", self.uid),
            k => format!("{}:{}:{k}", self.uid, self.rv),
        }
    }
}

/// The observer's record, filled by a background task.
pub struct Observer {
    changes: Arc<Mutex<Vec<Change>>>,
    /// Set when the observer's own watch failed in a way that may have cost it a change:
    /// then its record is not the truth, and a test must say so rather than blame kubecast.
    broken: Arc<Mutex<Option<String>>>,
    pub start_rv: String,
}

impl Observer {
    /// Lists the namespace (the starting point, whose pods are reported as `added`) and
    /// watches it from there, resuming by itself when a watch request ends.
    pub async fn start(client: &kube::Client, ns: &str) -> Observer {
        Observer::start_for::<Pod>(client, ns).await
    }

    /// The same for objects of kind `K` (ConfigMaps, Deployments, ...).
    pub async fn start_for<K>(client: &kube::Client, ns: &str) -> Observer
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        Observer::watching(Api::<K>::namespaced(client.clone(), ns), None).await
    }

    /// The same for the objects of a cluster-scoped kind (Nodes) that carry `labels`.
    pub async fn start_cluster<K>(client: &kube::Client, labels: &str) -> Observer
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        Observer::watching(Api::<K>::all(client.clone()), Some(labels.to_string())).await
    }

    /// Lists `api`'s objects (with `labels`, when given) and watches them from there.
    async fn watching<K>(api: Api<K>, labels: Option<String>) -> Observer
    where
        K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        let mut lp = ListParams::default();
        let mut wp = WatchParams::default().timeout(60);
        if let Some(l) = &labels {
            lp = lp.labels(l);
            wp = wp.labels(l);
        }
        let list = api.list(&lp).await.expect("observer: listing");
        let start_rv = list.metadata.resource_version.clone().unwrap_or_default();
        let changes = Arc::new(Mutex::new(Vec::new()));
        for p in &list.items {
            push(&changes, "added", p.meta());
        }
        let out = changes.clone();
        let broken = Arc::new(Mutex::new(None));
        let broke = broken.clone();
        let mut rv = start_rv.clone();
        tokio::spawn(async move {
            let fail = |why: String| {
                if let Ok(mut b) = broke.lock() {
                    b.get_or_insert(why);
                }
            };
            loop {
                let stream = match api.watch(&wp, &rv).await {
                    Ok(s) => s,
                    Err(kube::Error::Api(e)) if e.code == 410 => {
                        // A restarted apiserver's watch cache starts after `rv` when anything
                        // (a Lease) was written meanwhile. The record is still whole if the
                        // pods listed now are exactly the live ones it holds.
                        match relist_if_unchanged(&api, &lp, &out).await {
                            Some(now) => {
                                rv = now;
                                continue;
                            }
                            None => {
                                fail(format!(
                                    "the observer's watch expired at {rv} and the pods changed meanwhile: {}",
                                    e.message
                                ));
                                return;
                            }
                        }
                    }
                    Err(_) => {
                        // The apiserver is restarting (a test may do that): try again.
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let mut stream = Box::pin(stream);
                // The apiserver ends the watch after its 60 s timeout; nothing for longer is a
                // connection that died without closing (the old client's, across an apiserver
                // restart under load): watch again from the last resourceVersion.
                let quiet = std::time::Duration::from_secs(75);
                while let Ok(Some(item)) = tokio::time::timeout(quiet, stream.next()).await {
                    let e = match item {
                        Ok(e) => e,
                        Err(kube::Error::SerdeError(e)) => {
                            fail(format!("the observer could not read an event: {e}"));
                            return;
                        }
                        // A broken connection: watch again from the last resourceVersion.
                        Err(_) => break,
                    };
                    let (kind, pod) = match e {
                        WatchEvent::Added(p) => ("added", p),
                        WatchEvent::Modified(p) => ("modified", p),
                        WatchEvent::Deleted(p) => ("deleted", p),
                        WatchEvent::Bookmark(b) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        WatchEvent::Error(e) if e.code == 410 => {
                            // As above, from within the stream.
                            match relist_if_unchanged(&api, &lp, &out).await {
                                Some(now) => {
                                    rv = now;
                                    break;
                                }
                                None => {
                                    fail(format!(
                                        "the observer's watch expired at {rv} and the pods changed meanwhile: {}",
                                        e.message
                                    ));
                                    return;
                                }
                            }
                        }
                        // Any other error the apiserver ends a watch with (a restart under way):
                        // watch again from the last resourceVersion, as on a broken connection.
                        // A panic here would end the observer's task unseen.
                        WatchEvent::Error(_) => break,
                    };
                    rv = pod.meta().resource_version.clone().unwrap_or_default();
                    push(&out, kind, pod.meta());
                }
            }
        });
        Observer {
            changes,
            broken,
            start_rv,
        }
    }

    /// Creates a marker pod and waits until the observer has seen it: the apiserver reports
    /// a namespace's changes in order, so by then the observer has every earlier change.
    pub async fn catch_up(&self, pods: &super::pods::Pods, limit: std::time::Duration) {
        let name = super::unique_name("marker");
        let p = pods.create(&name).await;
        let uid = p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let seen = super::consume::wait_for(limit, "the observer", || {
            self.changes
                .lock()
                .ok()?
                .iter()
                .any(|c| c.uid == uid)
                .then_some(())
        })
        .await;
        let broken = self.broken.lock().ok().and_then(|b| b.clone());
        assert!(
            seen.is_some(),
            "the observer did not see pod {name} within {limit:?} ({})",
            broken.map_or("its watch was still running".to_string(), |why| format!(
                "it had stopped: {why}"
            ))
        );
    }

    /// Every change seen; fails the test if the observer itself may have missed one.
    pub fn changes(&self) -> Vec<Change> {
        if let Some(why) = self.broken.lock().ok().and_then(|b| b.clone()) {
            panic!(
                "the independent observer is not reliable in this run, so nothing can be concluded: {why}"
            );
        }
        self.changes.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// Lists the pods; when each one is live in `changes` at the listed resourceVersion and no
/// other is, returns the list's resourceVersion to watch from.
async fn relist_if_unchanged<K>(
    api: &Api<K>,
    lp: &ListParams,
    changes: &Mutex<Vec<Change>>,
) -> Option<String>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let list = api.list(lp).await.ok()?;
    let mut live = std::collections::BTreeMap::new();
    for c in changes.lock().ok()?.iter() {
        if c.kind == "deleted" {
            live.remove(&c.uid);
        } else {
            live.insert(c.uid.clone(), c.rv.clone());
        }
    }
    let listed: std::collections::BTreeMap<String, String> = list
        .items
        .iter()
        .map(|p| {
            (
                p.meta().uid.clone().unwrap_or_default(),
                p.meta().resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    (listed == live).then(|| list.metadata.resource_version.unwrap_or_default())
}

fn push(changes: &Mutex<Vec<Change>>, kind: &'static str, m: &ObjectMeta) {
    let c = Change {
        kind,
        uid: m.uid.clone().unwrap_or_default(),
        name: m.name.clone().unwrap_or_default(),
        rv: m.resource_version.clone().unwrap_or_default(),
    };
    if let Ok(mut v) = changes.lock() {
        v.push(c);
    }
}

/// Checks what consumers received against the truth: every record is a change the
/// apiserver reported (so a duplicate always carries the original's id), and returns the
/// number of duplicates. `ids` are the event ids as received, in any order.
pub fn check_received(
    truth: &std::collections::BTreeSet<String>,
    ids: &[&str],
    where_: &str,
) -> usize {
    for id in ids {
        assert!(
            truth.contains(*id),
            "{where_} holds {id}, a change the apiserver never reported"
        );
    }
    let distinct: std::collections::BTreeSet<&&str> = ids.iter().collect();
    let missing: Vec<&String> = truth
        .iter()
        .filter(|t| !distinct.contains(&t.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{where_} lacks {} changes, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    ids.len() - distinct.len()
}

/// Whether `ids` hold every id of `truth`.
pub fn has_all<'a>(
    truth: &std::collections::BTreeSet<String>,
    ids: impl Iterator<Item = &'a str>,
) -> bool {
    let have: std::collections::BTreeSet<&str> = ids.collect();
    truth.iter().all(|t| have.contains(t.as_str()))
}

/// A sink's `peak_events` from kubecast's shutdown log line `sink totals`.
pub fn peak_events(log: &str, sink: &str) -> Option<usize> {
    log.lines()
        .find(|l| l.contains("sink totals") && l.contains(&format!("sink={sink} ")))?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("peak_events="))?
        .parse()
        .ok()
}
