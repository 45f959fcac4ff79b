//! Driving the simulated cluster of the scale bench: Deployments of realistic pods (the
//! fixture's spec, benches/fixtures/pod.yaml, scheduled by kube-scheduler onto kwok's nodes)
//! spread over namespaces, created, rolled, scaled to zero and deleted, and waits on what the
//! controllers make of it.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Pods per Deployment, as clusterloader2's density test makes them (its "small" and
/// "medium" groups lie around it).
pub const PER_DEPLOYMENT: usize = 50;
/// The label every object of the bench carries.
pub const LABEL: &str = "kubecast-scale";

pub struct Cluster {
    client: kube::Client,
    /// The Deployments: (namespace, name, replicas).
    pub deployments: Vec<(String, String, usize)>,
}

impl Cluster {
    /// `pods` pods in Deployments of [`PER_DEPLOYMENT`] over `namespaces` namespaces named
    /// `{prefix}-N` (made here).
    pub async fn new(
        client: &kube::Client,
        prefix: &str,
        namespaces: usize,
        pods: usize,
    ) -> Cluster {
        let namespaces: Vec<String> = (0..namespaces).map(|i| format!("{prefix}-{i}")).collect();
        for ns in &namespaces {
            super::support::pods::namespace(client, ns).await;
        }
        let mut deployments = Vec::new();
        let mut left = pods;
        let mut i = 0;
        while left > 0 {
            let n = left.min(PER_DEPLOYMENT);
            let ns = namespaces[i % namespaces.len()].clone();
            deployments.push((ns, format!("app-{i:04}"), n));
            left -= n;
            i += 1;
        }
        Cluster {
            client: client.clone(),
            deployments,
        }
    }

    fn api(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Calls `each` for every Deployment, 16 at a time.
    async fn every<F, Fut>(&self, what: &str, each: F)
    where
        F: Fn(Api<Deployment>, String, usize) -> Fut,
        Fut: std::future::Future<Output = Result<(), kube::Error>>,
    {
        let calls = self.deployments.iter().map(|(ns, name, n)| {
            let call = each(self.api(ns), name.clone(), *n);
            async move { call.await.map_err(|e| format!("{what} {ns}/{name}: {e}")) }
        });
        let failed: Vec<String> = stream::iter(calls)
            .buffer_unordered(16)
            .filter_map(|r| async move { r.err() })
            .collect()
            .await;
        assert!(failed.is_empty(), "{failed:?}");
    }

    /// Creates every Deployment with its replicas.
    pub async fn create(&self) {
        let template = pod_template();
        self.every("creating", |api, name, n| {
            let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "labels": {LABEL: "true"}},
                "spec": {"replicas": n, "selector": {"matchLabels": {"app": name}},
                    "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                    "template": {"metadata": {"labels": {"app": name, LABEL: "true"}}, "spec": template}}});
            async move {
                let d: Deployment = serde_json::from_value(object).expect("a Deployment");
                api.create(&PostParams::default(), &d).await.map(drop)
            }
        })
        .await;
    }

    /// Rolls every Deployment once (a new template, as `kubectl rollout restart` makes).
    pub async fn roll(&self) {
        self.every("rolling", |api, name, _| async move {
            let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-06T12:00:00Z"}}}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
        })
        .await;
    }

    /// Scales every Deployment to zero.
    pub async fn scale_to_zero(&self) {
        self.every("scaling", |api, name, _| async move {
            let patch = json!({"spec": {"replicas": 0}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop)
        })
        .await;
    }

    /// Deletes every Deployment (their ReplicaSets go with them).
    pub async fn delete(&self) {
        self.every("deleting", |api, name, _| async move {
            api.delete(&name, &DeleteParams::background())
                .await
                .map(drop)
        })
        .await;
    }

    /// Waits until every Deployment has rolled out (updated and available replicas as wanted,
    /// its newest generation observed) and `pods()` (Running, all) are both `want`; checks
    /// every 2 s.
    pub async fn settled(&self, want: usize, limit: Duration, pods: impl Fn() -> (usize, usize)) {
        let started = Instant::now();
        loop {
            let behind = self.behind().await;
            let (running, total) = pods();
            if behind == 0 && running == want && total == want {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "the cluster did not settle within {limit:?}: {behind} Deployments behind, {running} of {total} pods Running, {want} wanted"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// How many Deployments have not rolled out yet.
    async fn behind(&self) -> usize {
        let all: Api<Deployment> = Api::all(self.client.clone());
        let Ok(list) = all
            .list(&ListParams::default().labels(&format!("{LABEL}=true")))
            .await
        else {
            return usize::MAX;
        };
        list.items
            .iter()
            .filter(|d| {
                let want = d.spec.replicas.unwrap_or(1);
                let s = d.status.clone().unwrap_or_default();
                s.observed_generation != d.metadata.generation
                    || s.updated_replicas.unwrap_or(0) != want
                    || s.available_replicas.unwrap_or(0) != want
                    || s.replicas.unwrap_or(0) != want
            })
            .count()
    }
}

/// The fixture's pod spec (two containers, probes, env, resources), without its unrunnable
/// scheduler name: here kube-scheduler places the pods.
fn pod_template() -> Value {
    let pod: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(super::support::repo().join("benches/fixtures/pod.yaml"))
            .expect("pod.yaml"),
    )
    .expect("pod.yaml is YAML");
    let mut spec = pod["spec"].clone();
    if let Some(s) = spec.as_object_mut() {
        s.remove("schedulerName");
        // No ServiceAccount of that name exists; none is needed without a kubelet.
        s.remove("serviceAccountName");
    }
    spec
}
