//! Workloads (Deployments, ReplicaSets, StatefulSets, DaemonSets) and Jobs and CronJobs:
//! summaries of their rollout or run state and their templates' images.

use serde_json::{Value, json};

use super::{Kind, Resource};

/// Deployment, ReplicaSet, StatefulSet, DaemonSet.
pub struct Workload;

/// batch/v1 Job.
pub struct Job;

/// batch/v1 CronJob.
pub struct CronJob;

impl Kind for Workload {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut m = super::identity(obj, r);
        let (spec, status) = (&obj["spec"], &obj["status"]);
        // A DaemonSet counts scheduled nodes; the others count replicas (desired defaults to 1).
        let replicas = if status.get("desiredNumberScheduled").is_some() {
            json!({
                "desired": status["desiredNumberScheduled"].as_u64().unwrap_or(0),
                "ready": status["numberReady"].as_u64().unwrap_or(0),
                "updated": status["updatedNumberScheduled"].as_u64().unwrap_or(0),
                "available": status["numberAvailable"].as_u64().unwrap_or(0),
            })
        } else {
            json!({
                "desired": spec["replicas"].as_u64().unwrap_or(1),
                "ready": status["readyReplicas"].as_u64().unwrap_or(0),
                "updated": status["updatedReplicas"].as_u64().unwrap_or(0),
                "available": status["availableReplicas"].as_u64().unwrap_or(0),
            })
        };
        m.insert("replicas".into(), replicas);
        m.insert("generation".into(), obj["metadata"]["generation"].clone());
        m.insert(
            "observedGeneration".into(),
            status["observedGeneration"].clone(),
        );
        m.insert("conditions".into(), super::conditions(status));
        m.insert("images".into(), images(&spec["template"]["spec"]));
        Value::Object(m)
    }
}

impl Kind for Job {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut m = super::identity(obj, r);
        let status = &obj["status"];
        for k in ["active", "succeeded", "failed"] {
            m.insert(k.into(), json!(status[k].as_u64().unwrap_or(0)));
        }
        m.insert("startTime".into(), status["startTime"].clone());
        m.insert("completionTime".into(), status["completionTime"].clone());
        m.insert("conditions".into(), super::conditions(status));
        Value::Object(m)
    }
}

impl Kind for CronJob {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut m = super::identity(obj, r);
        let (spec, status) = (&obj["spec"], &obj["status"]);
        m.insert("schedule".into(), spec["schedule"].clone());
        m.insert(
            "suspend".into(),
            json!(spec["suspend"].as_bool().unwrap_or(false)),
        );
        m.insert(
            "active".into(),
            json!(status["active"].as_array().map_or(0, Vec::len)),
        );
        m.insert(
            "lastScheduleTime".into(),
            status["lastScheduleTime"].clone(),
        );
        m.insert(
            "lastSuccessfulTime".into(),
            status["lastSuccessfulTime"].clone(),
        );
        Value::Object(m)
    }
}

/// The images of a pod spec's containers (init containers first).
fn images(pod_spec: &Value) -> Value {
    let mut out = Vec::new();
    for list in ["initContainers", "containers"] {
        for c in pod_spec[list].as_array().into_iter().flatten() {
            out.push(json!({"container": c["name"], "image": c["image"]}));
        }
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_summary_counts_replicas_and_lists_conditions_and_images() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "shop", "name": "web", "uid": "u", "resourceVersion": "3", "generation": 2},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
            "status": {"observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2,
                "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}});
        let s = Workload.summary(
            &d,
            &Resource::new("apps", "v1", "Deployment", "deployments", true),
        );
        assert_eq!(s["kind"], "Deployment");
        assert_eq!(
            s["replicas"],
            json!({"desired": 3, "ready": 2, "updated": 3, "available": 2})
        );
        assert_eq!(s["conditions"][0]["reason"], "ProgressDeadlineExceeded");
        assert_eq!(s["images"][0]["image"], "nginx:1.27");
    }

    #[test]
    fn a_daemon_set_counts_scheduled_nodes() {
        let d = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "status": {"desiredNumberScheduled": 5, "numberReady": 4, "updatedNumberScheduled": 5, "numberAvailable": 4}});
        assert_eq!(
            Workload.summary(
                &d,
                &Resource::new("apps", "v1", "Deployment", "deployments", true)
            )["replicas"]["desired"],
            5
        );
    }

    #[test]
    fn a_job_summary_counts_pods() {
        let j = json!({"metadata": {"name": "j"}, "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}});
        let s = Job.summary(&j, &Resource::new("batch", "v1", "Job", "jobs", true));
        assert_eq!(
            (s["active"].clone(), s["failed"].clone()),
            (json!(0), json!(2))
        );
        assert_eq!(s["conditions"][0]["type"], "Failed");
    }
}
