//! Driving Pods through the real apiserver as users and a kubelet would: create, patch
//! labels, patch status (Running, restarts) and delete. Each call returns the object the
//! apiserver answered with, as the JSON it sent (a typed round trip would drop fields such
//! as `lastProbeTime: null`): the truth the events are compared against.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use super::NO_SCHEDULER;

/// A Pod as the apiserver's JSON.
pub type Pod = Value;

const MERGE: &str = "application/merge-patch+json";

/// A namespace of the test's own, so that tests running side by side never see each
/// other's pods.
pub async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace object");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

pub struct Pods {
    client: kube::Client,
    pub namespace: String,
}

impl Pods {
    pub fn new(client: &kube::Client, namespace: &str) -> Pods {
        Pods {
            client: client.clone(),
            namespace: namespace.to_string(),
        }
    }

    /// Sends one request with a JSON body and returns the JSON answer.
    async fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &Value,
        what: &str,
    ) -> Value {
        let uri = format!("/api/v1/namespaces/{}/pods{path}", self.namespace);
        let req = http::Request::builder()
            .method(method)
            .uri(&uri)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(serde_json::to_vec(body).expect("a JSON value serializes"))
            .expect("a valid request");
        let text = self
            .client
            .request_text(req)
            .await
            .unwrap_or_else(|e| panic!("{what} ({method} {uri}): {e}"));
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: the apiserver's answer is not JSON: {e}"))
    }

    /// Creates a pod with one container that has a plain env var (a value to redact), an
    /// env var from a secret, and a `last-applied-configuration` annotation holding a copy of
    /// the pod as `kubectl apply` writes it (its env value too).
    pub async fn create(&self, name: &str) -> Pod {
        let pod = json!({
            "metadata": {
                "name": name,
                "labels": {"app": "web"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": last_applied(name, "hunter2"),
                    "team": "platform"
                }
            },
            "spec": {"schedulerName": NO_SCHEDULER, "containers": [{
                "name": "app",
                "image": "registry.invalid/app:1",
                "env": [
                    {"name": "DB_PASSWORD", "value": "hunter2"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}
                ]
            }]}
        });
        self.post(name, &pod).await
    }

    /// Creates a pod like [`Pods::create`] whose container requests (and is limited to)
    /// `resources` (`{"nvidia.com/gpu": "1"}`), with `labels` added.
    pub async fn create_with(&self, name: &str, resources: Value, labels: Value) -> Pod {
        let mut pod = json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"schedulerName": NO_SCHEDULER, "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
        });
        if resources.as_object().is_some_and(|r| !r.is_empty()) {
            pod["spec"]["containers"][0]["resources"] =
                json!({"requests": resources.clone(), "limits": resources});
        }
        if let Some(extra) = labels.as_object() {
            for (k, v) in extra {
                pod["metadata"]["labels"][k] = v.clone();
            }
        }
        self.post(name, &pod).await
    }

    async fn post(&self, name: &str, pod: &Value) -> Pod {
        self.call(
            "POST",
            "",
            "application/json",
            pod,
            &format!("creating pod {name}"),
        )
        .await
    }

    /// Merges `status` into the pod's status (a kubelet's report, through the status
    /// subresource; lists such as `containerStatuses` are replaced whole).
    pub async fn status(&self, name: &str, status: Value) -> Pod {
        self.call(
            "PATCH",
            &format!("/{name}/status"),
            MERGE,
            &json!({ "status": status }),
            &format!("patching the status of pod {name}"),
        )
        .await
    }

    /// Creates `n` pods named `{prefix}-0`... and returns their uids.
    pub async fn create_each(&self, prefix: &str, n: usize) -> std::collections::BTreeSet<String> {
        let mut uids = std::collections::BTreeSet::new();
        for i in 0..n {
            let p = self.create(&format!("{prefix}-{i}")).await;
            uids.insert(
                p["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        uids
    }

    /// Sets a label (a user's change).
    pub async fn label(&self, name: &str, key: &str, value: &str) -> Pod {
        let patch = json!({"metadata": {"labels": {key: value}}});
        self.call(
            "PATCH",
            &format!("/{name}"),
            MERGE,
            &patch,
            &format!("labelling pod {name}"),
        )
        .await
    }

    /// Sets an annotation.
    pub async fn annotate(&self, name: &str, key: &str, value: &str) -> Pod {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.call(
            "PATCH",
            &format!("/{name}"),
            MERGE,
            &patch,
            &format!("annotating pod {name}"),
        )
        .await
    }

    /// Reports the pod Running with its container up, restarted `restarts` times (a
    /// kubelet's change, through the status subresource).
    pub async fn running(&self, name: &str, restarts: i32) -> Pod {
        let mut last_state = json!({});
        if restarts > 0 {
            last_state = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}});
        }
        let patch = json!({"status": {
            "phase": "Running",
            "hostIP": "192.0.2.10",
            "podIP": "198.51.100.7",
            "podIPs": [{"ip": "198.51.100.7"}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{
                "name": "app",
                "image": "registry.invalid/app:1",
                "imageID": "registry.invalid/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "ready": true,
                "started": true,
                "restartCount": restarts,
                "state": {"running": {"startedAt": "2026-01-01T00:02:00Z"}},
                "lastState": last_state
            }]
        }});
        self.call(
            "PATCH",
            &format!("/{name}/status"),
            MERGE,
            &patch,
            &format!("patching the status of pod {name}"),
        )
        .await
    }

    /// Deletes the pod at once (no kubelet runs to finish a graceful delete). The apiserver
    /// first sets `deletionTimestamp` (a MODIFIED event), then removes the pod; returns the
    /// removed object when the apiserver answers with it.
    pub async fn delete(&self, name: &str) -> Option<Pod> {
        let opts = json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0});
        let answer = self
            .call(
                "DELETE",
                &format!("/{name}"),
                "application/json",
                &opts,
                &format!("deleting pod {name}"),
            )
            .await;
        (answer["kind"] == "Pod").then_some(answer)
    }
}

/// The last-applied annotation of a pod named `name` whose env var holds `value`, as
/// `kubectl apply` writes it (compact JSON).
fn last_applied(name: &str, value: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "env": [{"name": "DB_PASSWORD", "value": value}]}]}})
    .to_string()
}

/// What kubecast's `full` data should be for `pod`: the object without managedFields, with
/// the env var values redacted, in the last-applied copy too.
pub fn expected_full_data(pod: &Pod) -> Value {
    let mut v = pod.clone();
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let meta = v["metadata"].as_object_mut().expect("metadata");
    meta.remove("managedFields");
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut)
        && a.contains_key("kubectl.kubernetes.io/last-applied-configuration")
    {
        a.insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            json!(last_applied(&name, "<redacted>")),
        );
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(cs) = v
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            for c in cs {
                if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
                    for var in env {
                        if let Some(val) = var.get_mut("value") {
                            *val = json!("<redacted>");
                        }
                    }
                }
            }
        }
    }
    v
}

/// Deletes the named pods, 32 requests at a time: a single delete-collection of many
/// thousands outlasts the apiserver's request timeout. Without a kubelet, deleting an
/// unscheduled pod is immediate. A pod that cannot be deleted is reported, not fatal.
pub async fn delete_each(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    names: impl IntoIterator<Item = String>,
) {
    use futures::StreamExt;
    futures::stream::iter(names)
        .map(|name| async move {
            if let Err(e) = pods.delete(&name, &Default::default()).await {
                eprintln!("deleting pod {name}: {e}");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}
