//! Any object through the real apiserver by its API path, as JSON in and out: Deployments,
//! Nodes, custom resources and their definitions. Entry point: [`Objects`].

use std::time::Duration;

use serde_json::Value;

const MERGE: &str = "application/merge-patch+json";

/// Requests on the stack's apiserver as its admin.
pub struct Objects {
    client: kube::Client,
}

impl Objects {
    pub fn new(client: &kube::Client) -> Objects {
        Objects {
            client: client.clone(),
        }
    }

    /// One request with a JSON body (or none); the JSON answer, or the apiserver's error.
    pub async fn try_call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> Result<Value, kube::Error> {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(
                body.map(|b| serde_json::to_vec(b).expect("JSON serializes"))
                    .unwrap_or_default(),
            )
            .expect("a valid request");
        let text = self.client.request_text(req).await?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<&Value>,
    ) -> Value {
        self.try_call(method, path, content_type, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// POSTs `object` to the collection `path`.
    pub async fn create(&self, path: &str, object: &Value) -> Value {
        self.call("POST", path, "application/json", Some(object))
            .await
    }

    /// Merge-patches the object at `path` (a `/status` path patches its status).
    pub async fn patch(&self, path: &str, patch: &Value) -> Value {
        self.call("PATCH", path, MERGE, Some(patch)).await
    }

    /// Deletes the object at `path`, its dependents in the background.
    pub async fn delete(&self, path: &str) -> Value {
        self.call("DELETE", path, "application/json", None).await
    }

    /// GETs `path`; `None` on 404.
    pub async fn get(&self, path: &str) -> Option<Value> {
        match self.try_call("GET", path, "application/json", None).await {
            Ok(v) => Some(v),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// Waits until GET `path` answers something `done` accepts.
    pub async fn wait_until(
        &self,
        path: &str,
        limit: Duration,
        what: &str,
        done: impl Fn(Option<&Value>) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let now = self.get(path).await;
            if done(now.as_ref()) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; GET {path} answers {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates a namespaced CustomResourceDefinition of `group`, version `v1`, with `names`
    /// (`{"plural": .., "singular": .., "kind": ..}`) and `schema` (its `openAPIV3Schema`),
    /// waits until it is established and returns its API path.
    pub async fn create_crd(
        &self,
        group: &str,
        names: Value,
        schema: Value,
        limit: Duration,
    ) -> String {
        let versions = serde_json::json!([{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": schema}}]);
        self.create_crd_versions(group, names, versions, limit)
            .await
    }

    /// A namespaced CRD with `versions` as given (each with its own `served`, `storage` and
    /// schema), waited for until established; returns its path.
    pub async fn create_crd_versions(
        &self,
        group: &str,
        names: Value,
        versions: Value,
        limit: Duration,
    ) -> String {
        let name = format!("{}.{group}", names["plural"].as_str().unwrap_or("things"));
        self.create(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {"group": group, "scope": "Namespaced", "names": names, "versions": versions}}),
        )
        .await;
        let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}");
        self.wait_until(&path, limit, "the CRD to be established", |crd| {
            crd.and_then(|c| c["status"]["conditions"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
        .await;
        // Established may be said by another apiserver over the same etcd (a test's own)
        // before this one serves the new group: each served version is waited for here.
        let plural = names["plural"].as_str().unwrap_or("things");
        for v in versions
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["served"] == true)
        {
            let list = format!(
                "/apis/{group}/{}/{plural}",
                v["name"].as_str().unwrap_or_default()
            );
            self.wait_until(&list, limit, "the CRD's version to be served", |o| {
                o.is_some()
            })
            .await;
        }
        path
    }
}

/// An object's `metadata.resourceVersion`.
pub fn rv(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// An object's `metadata.uid`.
pub fn uid(o: &Value) -> String {
    o["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Churns `slots` ConfigMaps named `cm-N` in `ns` until `stop`: each step creates a missing
/// one, or patches (8 in 10) or deletes an existing one, pausing `pause` between steps.
pub fn churn_configmaps(
    client: &kube::Client,
    ns: &str,
    slots: usize,
    pause: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (client, cms) = (
        client.clone(),
        format!("/api/v1/namespaces/{ns}/configmaps"),
    );
    tokio::spawn(async move {
        let objects = Objects::new(&client);
        let mut alive = vec![false; slots];
        let mut step = 0u32;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let slot = fastrand::usize(..slots);
            let at = format!("{cms}/cm-{slot}");
            step += 1;
            if !alive[slot] {
                let cm = serde_json::json!({"metadata": {"name": format!("cm-{slot}")}, "data": {"step": "0"}});
                objects.create(&cms, &cm).await;
                alive[slot] = true;
            } else if fastrand::u8(..10) < 8 {
                let patch = serde_json::json!({"data": {"step": step.to_string()}});
                objects.patch(&at, &patch).await;
            } else {
                objects.delete(&at).await;
                alive[slot] = false;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    })
}
