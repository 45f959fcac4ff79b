//! The built-in alert conditions of the product's seed (a Pod alerting tool): restart count
//! above N, phase Failed, not Ready, OOMKilled (in general, and in a pod that requests a GPU),
//! CrashLoopBackOff, ImagePullBackOff / ErrImagePull, and pending unscheduled. Each says
//! whether it holds for a Pod now and, if so, with what evidence; how long it must hold
//! (`for`) is the episode's business. Entry point: [`holds`].

use serde_json::{Map, Value, json};

/// A built-in condition, with its thresholds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// A container restarted more than this many times.
    RestartsAbove(u64),
    /// `status.phase` is `Failed`.
    PhaseFailed,
    /// A pod that has not finished is not Ready.
    NotReady,
    /// A container was OOMKilled (now or last time); with `gpu`, only in a pod that requests
    /// one of these resources.
    OomKilled { gpu: Option<Vec<String>> },
    /// A container waits in `CrashLoopBackOff`.
    CrashLoopBackOff,
    /// A container waits in `ImagePullBackOff` or `ErrImagePull`.
    ImagePullBackOff,
    /// The pod is Pending and not scheduled to a node.
    Unscheduled,
    /// A Node's `Ready` condition is not `True` (`False`, `Unknown`, or missing).
    NodeNotReady,
    /// A Deployment's `Progressing` condition is `False` (ProgressDeadlineExceeded), or fewer
    /// replicas are available than desired.
    RolloutStuck,
    /// A Job's `Failed` condition is `True`.
    JobFailed,
    /// A core/v1 Event of type `Warning` with one of these reasons: judged per involved
    /// object and reason, resolved by quiet rather than by the condition clearing.
    WarningEvent { reasons: Vec<String> },
}

/// The reasons `warning_event` takes by default: what the controllers and kubelets write when
/// a workload cannot run.
pub const WARNING_REASONS: [&str; 8] = [
    "FailedScheduling",
    "FailedMount",
    "FailedAttachVolume",
    "Evicted",
    "BackOff",
    "OOMKilling",
    "FailedCreatePodSandBox",
    "Unhealthy",
];

impl Condition {
    /// The resource this condition judges, by its key (`pods`, `nodes`, `deployments.apps`,
    /// `jobs.batch`).
    pub fn resource(&self) -> &'static str {
        match self {
            Condition::NodeNotReady => "nodes",
            Condition::RolloutStuck => "deployments.apps",
            Condition::JobFailed => "jobs.batch",
            Condition::WarningEvent { .. } => "events",
            _ => "pods",
        }
    }
}

/// The condition of `type` in `object`'s `status.conditions`.
fn condition_of<'a>(object: &'a Value, ty: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
}

/// A condition's facts, as the evidence shows them.
fn condition_facts(c: Option<&Value>) -> Value {
    match c {
        None => Value::Null,
        Some(c) => json!({
            "type": c["type"],
            "status": c["status"],
            "reason": c["reason"],
            "message": c["message"],
            "since": c["lastTransitionTime"],
        }),
    }
}

/// Why a condition holds: the container concerned (if one is) and the facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub container: Option<String>,
    pub facts: Map<String, Value>,
}

fn facts(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Every container status, init containers first.
fn statuses(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainerStatuses", "containerStatuses"]
        .into_iter()
        .flat_map(move |l| pod["status"][l].as_array().into_iter().flatten())
}

/// The first container waiting for one of `reasons`.
fn waiting(pod: &Value, reasons: &[&str]) -> Option<Evidence> {
    statuses(pod).find_map(|c| {
        let w = &c["state"]["waiting"];
        let reason = w["reason"].as_str()?;
        reasons.contains(&reason).then(|| Evidence {
            container: c["name"].as_str().map(str::to_string),
            facts: facts(json!({"reason": reason, "message": w["message"], "restartCount": c["restartCount"]})),
        })
    })
}

/// Whether `condition` holds for `pod` (the object as JSON: a Pod, or the Node, Deployment or
/// Job of the other kinds' conditions), with its evidence.
pub fn holds(condition: &Condition, pod: &Value) -> Option<Evidence> {
    let status = &pod["status"];
    match condition {
        Condition::NodeNotReady => {
            let ready = condition_of(pod, "Ready");
            (ready.is_none_or(|c| c["status"] != "True")).then(|| Evidence {
                container: None,
                facts: facts(json!({
                    "status": ready.map_or(json!("Missing"), |c| c["status"].clone()),
                    "reason": ready.map_or(&Value::Null, |c| &c["reason"]),
                    "message": ready.map_or(&Value::Null, |c| &c["message"]),
                    "since": ready.map_or(&Value::Null, |c| &c["lastTransitionTime"]),
                })),
            })
        }
        Condition::RolloutStuck => {
            let desired = pod["spec"]["replicas"].as_u64().unwrap_or(1);
            let available = status["availableReplicas"].as_u64().unwrap_or(0);
            let progressing = condition_of(pod, "Progressing");
            let deadline = progressing.is_some_and(|c| {
                c["status"] == "False" && c["reason"] == "ProgressDeadlineExceeded"
            });
            (deadline || available < desired).then(|| Evidence {
                container: None,
                facts: facts(json!({
                    "desired": desired,
                    "updated": status["updatedReplicas"].as_u64().unwrap_or(0),
                    "available": available,
                    "condition": condition_facts(progressing),
                })),
            })
        }
        Condition::WarningEvent { reasons } => {
            let reason = pod["reason"].as_str()?;
            let warning = pod["type"] == "Warning" && reasons.iter().any(|r| r == reason);
            warning.then(|| {
                let o = &pod["involvedObject"];
                Evidence {
                    container: None,
                    facts: facts(json!({
                        "reason": reason,
                        "message": pod["message"],
                        "count": pod["count"].as_u64().or_else(|| pod["series"]["count"].as_u64()).unwrap_or(1),
                        "event": pod["metadata"]["name"],
                        "involvedObject": {"kind": o["kind"], "apiVersion": o["apiVersion"],
                            "namespace": o["namespace"], "name": o["name"], "uid": o["uid"]},
                    })),
                }
            })
        }
        Condition::JobFailed => {
            let failed = condition_of(pod, "Failed").filter(|c| c["status"] == "True")?;
            Some(Evidence {
                container: None,
                facts: facts(json!({
                    "reason": failed["reason"],
                    "message": failed["message"],
                    "failed": status["failed"].as_u64().unwrap_or(0),
                })),
            })
        }
        Condition::RestartsAbove(n) => statuses(pod).find_map(|c| {
            let count = c["restartCount"].as_u64()?;
            (count > *n).then(|| Evidence {
                container: c["name"].as_str().map(str::to_string),
                facts: facts(json!({
                    "restartCount": count,
                    "threshold": n,
                    "lastReason": c["lastState"]["terminated"]["reason"],
                    "lastExitCode": c["lastState"]["terminated"]["exitCode"],
                })),
            })
        }),
        Condition::PhaseFailed => (status["phase"] == "Failed").then(|| Evidence {
            container: None,
            facts: facts(json!({"phase": "Failed", "reason": status["reason"], "message": status["message"]})),
        }),
        Condition::NotReady => {
            let finished = matches!(status["phase"].as_str(), Some("Succeeded" | "Failed"));
            let ready = status["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
            let is_ready = ready.is_some_and(|c| c["status"] == "True");
            (!finished && !is_ready).then(|| Evidence {
                container: None,
                facts: facts(json!({
                    "phase": status["phase"],
                    "reason": ready.map_or(&Value::Null, |c| &c["reason"]),
                    "since": ready.map_or(&Value::Null, |c| &c["lastTransitionTime"]),
                })),
            })
        }
        Condition::OomKilled { gpu } => {
            let requested: Option<Vec<String>> = match gpu {
                None => None,
                Some(resources) => {
                    let found = gpu_requests(pod, resources);
                    if found.is_empty() {
                        return None;
                    }
                    Some(found)
                }
            };
            statuses(pod).find_map(|c| {
                let (which, t) = [("state", &c["state"]), ("lastState", &c["lastState"])]
                    .into_iter()
                    .find(|(_, s)| s["terminated"]["reason"] == "OOMKilled")?;
                Some(Evidence {
                    container: c["name"].as_str().map(str::to_string),
                    facts: facts(json!({
                        "reason": "OOMKilled",
                        "in": which,
                        "exitCode": t["terminated"]["exitCode"],
                        "finishedAt": t["terminated"]["finishedAt"],
                        "restartCount": c["restartCount"],
                        "gpu": requested,
                    })),
                })
            })
        }
        Condition::CrashLoopBackOff => waiting(pod, &["CrashLoopBackOff"]),
        Condition::ImagePullBackOff => waiting(pod, &["ImagePullBackOff", "ErrImagePull"]),
        Condition::Unscheduled => {
            let pending = status["phase"] == "Pending" && pod["spec"]["nodeName"].is_null();
            pending.then(|| {
                let scheduled = status["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"));
                Evidence {
                    container: None,
                    facts: facts(json!({
                        "reason": scheduled.map_or(&Value::Null, |c| &c["reason"]),
                        "message": scheduled.map_or(&Value::Null, |c| &c["message"]),
                    })),
                }
            })
        }
    }
}

/// The GPU resources among `resources` that a container of `pod` requests or is limited to.
fn gpu_requests(pod: &Value, resources: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for list in ["initContainers", "containers"] {
        for c in pod["spec"][list].as_array().into_iter().flatten() {
            for kind in ["requests", "limits"] {
                for r in resources {
                    if !c["resources"][kind][r.as_str()].is_null() && !found.contains(r) {
                        found.push(r.clone());
                    }
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: Value, spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec, "status": status})
    }

    fn running() -> Value {
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "restartCount": 0, "state": {"running": {}}}]})
    }

    #[test]
    fn a_healthy_running_pod_holds_no_condition() {
        let p = pod(
            running(),
            json!({"nodeName": "n1", "containers": [{"name": "app"}]}),
        );
        for c in [
            Condition::RestartsAbove(5),
            Condition::PhaseFailed,
            Condition::NotReady,
            Condition::OomKilled { gpu: None },
            Condition::CrashLoopBackOff,
            Condition::ImagePullBackOff,
            Condition::Unscheduled,
        ] {
            assert_eq!(holds(&c, &p), None, "{c:?}");
        }
    }

    #[test]
    fn each_condition_holds_with_its_evidence() {
        let mut s = running();
        s["containerStatuses"][0]["restartCount"] = json!(6);
        s["containerStatuses"][0]["lastState"] =
            json!({"terminated": {"reason": "OOMKilled", "exitCode": 137}});
        s["containerStatuses"][0]["state"] =
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}});
        s["conditions"][0]["status"] = json!("False");
        let gpu = json!({"nodeName": "n1", "containers": [{"name": "app",
            "resources": {"limits": {"nvidia.com/gpu": 1}}}]});
        let p = pod(s, gpu);
        let e = holds(&Condition::RestartsAbove(5), &p).expect("restarts");
        assert_eq!(e.container.as_deref(), Some("app"));
        assert_eq!(e.facts["restartCount"], 6);
        assert_eq!(e.facts["lastReason"], "OOMKilled");
        assert!(
            holds(&Condition::RestartsAbove(6), &p).is_none(),
            "above, not at"
        );
        assert!(holds(&Condition::NotReady, &p).is_some());
        let oom = holds(
            &Condition::OomKilled {
                gpu: Some(vec!["nvidia.com/gpu".into(), "amd.com/gpu".into()]),
            },
            &p,
        )
        .expect("GPU OOM");
        assert_eq!(oom.facts["gpu"], json!(["nvidia.com/gpu"]));
        assert_eq!(oom.facts["in"], "lastState");
        assert_eq!(
            holds(&Condition::CrashLoopBackOff, &p)
                .expect("crashloop")
                .facts["reason"],
            "CrashLoopBackOff"
        );

        let no_gpu = pod(
            p["status"].clone(),
            json!({"nodeName": "n1", "containers": [{"name": "app"}]}),
        );
        assert!(
            holds(
                &Condition::OomKilled {
                    gpu: Some(vec!["nvidia.com/gpu".into()])
                },
                &no_gpu
            )
            .is_none()
        );
        assert!(holds(&Condition::OomKilled { gpu: None }, &no_gpu).is_some());

        let pulling = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ErrImagePull"}}}]}),
            json!({"nodeName": "n1"}),
        );
        assert!(holds(&Condition::ImagePullBackOff, &pulling).is_some());
        assert!(
            holds(&Condition::Unscheduled, &pulling).is_none(),
            "it has a node"
        );
        let unscheduled = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
            json!({}),
        );
        assert_eq!(
            holds(&Condition::Unscheduled, &unscheduled)
                .expect("pending")
                .facts["reason"],
            "Unschedulable"
        );
        let failed = pod(json!({"phase": "Failed", "reason": "Evicted"}), json!({}));
        assert_eq!(
            holds(&Condition::PhaseFailed, &failed)
                .expect("failed")
                .facts["reason"],
            "Evicted"
        );
        assert!(
            holds(&Condition::NotReady, &failed).is_none(),
            "a finished pod is not 'not ready'"
        );
    }

    #[test]
    fn the_conditions_of_other_kinds_hold_with_their_evidence() {
        let node = |status: &str| {
            json!({"status": {"conditions": [{"type": "Ready", "status": status,
            "reason": "KubeletStopped", "message": "kubelet stopped posting", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
        };
        assert!(holds(&Condition::NodeNotReady, &node("True")).is_none());
        let e = holds(&Condition::NodeNotReady, &node("Unknown")).expect("holds");
        assert_eq!(
            Value::Object(e.facts),
            json!({"status": "Unknown", "reason": "KubeletStopped",
            "message": "kubelet stopped posting", "since": "2026-01-01T00:00:00Z"})
        );
        let e = holds(
            &Condition::NodeNotReady,
            &json!({"metadata": {"name": "n"}}),
        )
        .expect("no Ready condition");
        assert_eq!(e.facts["status"], "Missing");

        let deploy = |available: u64, progressing: &str, reason: &str| {
            json!({"spec": {"replicas": 3},
            "status": {"availableReplicas": available, "updatedReplicas": 3,
                "conditions": [{"type": "Progressing", "status": progressing, "reason": reason}]}})
        };
        assert!(
            holds(
                &Condition::RolloutStuck,
                &deploy(3, "True", "NewReplicaSetAvailable")
            )
            .is_none()
        );
        let e = holds(
            &Condition::RolloutStuck,
            &deploy(1, "True", "ReplicaSetUpdated"),
        )
        .expect("fewer available");
        assert_eq!(
            (e.facts["desired"].as_u64(), e.facts["available"].as_u64()),
            (Some(3), Some(1))
        );
        let e = holds(
            &Condition::RolloutStuck,
            &deploy(3, "False", "ProgressDeadlineExceeded"),
        )
        .expect("deadline");
        assert_eq!(e.facts["condition"]["reason"], "ProgressDeadlineExceeded");
        assert!(
            holds(&Condition::RolloutStuck, &json!({"spec": {"replicas": 0}})).is_none(),
            "scaled to zero"
        );

        let job = |failed: &str| {
            json!({"status": {"failed": 2, "conditions": [{"type": "Failed", "status": failed,
            "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}})
        };
        assert!(holds(&Condition::JobFailed, &job("False")).is_none());
        let e = holds(&Condition::JobFailed, &job("True")).expect("failed");
        assert_eq!(
            Value::Object(e.facts),
            json!({"reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit", "failed": 2})
        );
        assert_eq!(Condition::RolloutStuck.resource(), "deployments.apps");
    }
}
