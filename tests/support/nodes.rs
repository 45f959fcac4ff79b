//! Simulated nodes of a test's own: Nodes that the stack's kwok plays the kubelet of (the
//! label it manages nodes by, as `scripts/stack nodes` makes them), in a pool named after
//! the test. Pods reach them through a `nodeSelector` on the pool's label, so tests side by
//! side never share a node, and a node one test stops affects no other.

use std::time::Duration;

use serde_json::{Value, json};

use super::objects::Objects;

/// The label kwok manages nodes by (scripts/stack.d/nodes.sh).
const KWOK_LABEL: &str = "kwok.x-k8s.io/node";
/// The label naming a test's pool.
pub const POOL_LABEL: &str = "kubecast-test-pool";

pub struct Pool {
    objects: Objects,
    pub name: String,
    pub nodes: Vec<String>,
}

impl Pool {
    /// Makes `n` nodes `{name}-1`..`{name}-n` with room for 110 pods each, reporting their
    /// status again every `heartbeat` (as `kubecast.dev/heartbeat-period`; a kubelet's is 5
    /// minutes), and waits until each is Ready and schedulable.
    pub async fn create(client: &kube::Client, name: &str, n: usize, heartbeat: Duration) -> Pool {
        let objects = Objects::new(client);
        let mut nodes = Vec::new();
        for i in 1..=n {
            let node = format!("{name}-{i}");
            let room = json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
            objects
                .create(
                    "/api/v1/nodes",
                    &json!({"metadata": {"name": node,
                        "labels": {KWOK_LABEL: "fake", POOL_LABEL: name, "kubernetes.io/hostname": node},
                        "annotations": {"kubecast.dev/heartbeat-period": format!("{}ms", heartbeat.as_millis())}},
                        "status": {"allocatable": room, "capacity": room}}),
                )
                .await;
            nodes.push(node);
        }
        let pool = Pool {
            objects,
            name: name.to_string(),
            nodes,
        };
        for node in &pool.nodes {
            pool.wait_node(node, "Ready and untainted", Duration::from_secs(60), |n| {
                ready(n) == Some("True")
                    && n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty())
            })
            .await;
        }
        pool
    }

    /// The selector that puts a pod on this pool's nodes.
    pub fn node_selector(&self) -> Value {
        json!({POOL_LABEL: self.name})
    }

    /// The label selector of this pool's nodes.
    pub fn labels(&self) -> String {
        format!("{POOL_LABEL}={}", self.name)
    }

    /// Waits until `node` satisfies `done`, or fails naming `what` and the node as it was.
    pub async fn wait_node(
        &self,
        node: &str,
        what: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) {
        let path = format!("/api/v1/nodes/{node}");
        let what = format!("node {node} to be {what}");
        self.objects
            .wait_until(&path, limit, &what, |n| n.is_some_and(&done))
            .await
    }

    /// Stops (`false`) or restarts (`true`) `node`'s kubelet: kwok lets go of a node without
    /// its label, so its Lease and status are no longer renewed.
    pub async fn heartbeat(&self, node: &str, on: bool) {
        let value = if on { json!("fake") } else { Value::Null };
        self.objects
            .patch(
                &format!("/api/v1/nodes/{node}"),
                &json!({"metadata": {"labels": {KWOK_LABEL: value}}}),
            )
            .await;
    }

    /// Deletes the pool's nodes (their pods go with them through pod GC).
    pub async fn delete(self) {
        for node in &self.nodes {
            self.objects.delete(&format!("/api/v1/nodes/{node}")).await;
        }
    }
}

/// The status of a Node's `Ready` condition.
pub fn ready(node: &Value) -> Option<&str> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
}
