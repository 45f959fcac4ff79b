//! An independent observer of the truth: its own watch on the apiserver (kube's typed API,
//! not kubecast's code), recording every change of the pods in one namespace, and the event
//! id kubecast's contract gives each.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};

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
    pub start_rv: String,
}

impl Observer {
    /// Lists the namespace (the starting point, whose pods are reported as `added`) and
    /// watches it from there, resuming by itself when a watch request ends.
    pub async fn start(client: &kube::Client, ns: &str) -> Observer {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let list = api
            .list(&ListParams::default())
            .await
            .expect("observer: listing pods");
        let start_rv = list.metadata.resource_version.clone().unwrap_or_default();
        let changes = Arc::new(Mutex::new(Vec::new()));
        for p in &list.items {
            push(&changes, "added", p);
        }
        let out = changes.clone();
        let mut rv = start_rv.clone();
        tokio::spawn(async move {
            loop {
                let Ok(stream) = api.watch(&WatchParams::default().timeout(60), &rv).await else {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                };
                let mut stream = Box::pin(stream);
                while let Some(Ok(e)) = stream.next().await {
                    let (kind, pod) = match e {
                        WatchEvent::Added(p) => ("added", p),
                        WatchEvent::Modified(p) => ("modified", p),
                        WatchEvent::Deleted(p) => ("deleted", p),
                        WatchEvent::Bookmark(b) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        WatchEvent::Error(e) => {
                            panic!("observer: the apiserver ended its watch: {e:?}")
                        }
                    };
                    rv = pod.metadata.resource_version.clone().unwrap_or_default();
                    push(&out, kind, &pod);
                }
            }
        });
        Observer { changes, start_rv }
    }

    pub fn changes(&self) -> Vec<Change> {
        self.changes.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

fn push(changes: &Mutex<Vec<Change>>, kind: &'static str, p: &Pod) {
    let c = Change {
        kind,
        uid: p.metadata.uid.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        rv: p.metadata.resource_version.clone().unwrap_or_default(),
    };
    if let Ok(mut v) = changes.lock() {
        v.push(c);
    }
}
