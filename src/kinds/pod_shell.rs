//! A Pod's summary written straight from its JSON: a shell of the fields the summary uses is
//! read (metadata's identity, labels and owners, `spec.nodeName`, the status' phase, reason,
//! IPs, conditions and container states) and everything else skipped unparsed — the spec,
//! managed fields, annotations and the containers' other fields, most of a Pod's bytes —
//! then the summary is written from it without building a `serde_json::Value` of the Pod or
//! of the summary. A Pod of any other shape is parsed whole and read into the same shell
//! ([`summary_of_value`]), so both give the same summary.
//!
//! Entry points: [`summary`], [`summary_of_value`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The summary's JSON, or `None` when `obj` is not an object of a Pod's shape.
pub fn summary(obj: &[u8]) -> Option<Vec<u8>> {
    // A struct would also read from a JSON array.
    if obj.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let shell = serde_json::from_slice::<Shell>(obj).ok()?;
    with_summary(shell, |s| serde_json::to_vec(s).ok())
}

/// The summary of a parsed Pod of any shape (a field of another shape reads as missing).
pub fn summary_of_value(pod: &Value) -> Value {
    // A struct of strings, numbers and JSON values always serializes.
    with_summary(Shell::of_value(pod), |s| {
        serde_json::to_value(s).unwrap_or(Value::Null)
    })
}

/// Calls `f` with the summary `shell` gives.
fn with_summary<R>(shell: Shell, f: impl FnOnce(&Summary<'_>) -> R) -> R {
    let empty = Value::Object(Map::new());
    let m = &shell.metadata;
    let status = shell.status.unwrap_or_default();
    let containers = [
        (&status.init_container_statuses, true),
        (&status.container_statuses, false),
    ]
    .into_iter()
    .flat_map(|(list, init)| list.iter().flatten().map(move |c| (c, init)))
    .map(|(c, init)| Container {
        image: &c.image,
        init,
        last_state: state_of(&c.last_state),
        name: &c.name,
        ready: c.ready.as_bool().unwrap_or(false),
        restart_count: c.restart_count.as_u64().unwrap_or(0),
        state: state_of(&c.state),
    })
    .collect();
    let out = Summary {
        api_version: "v1",
        conditions: status
            .conditions
            .iter()
            .flatten()
            .map(|c| Condition {
                reason: &c.reason,
                status: &c.status,
                ty: &c.ty,
            })
            .collect(),
        containers,
        host_ip: &status.host_ip,
        kind: "Pod",
        metadata: Meta {
            deletion_timestamp: &m.deletion_timestamp,
            labels: if m.labels.is_object() {
                &m.labels
            } else {
                &empty
            },
            name: &m.name,
            namespace: &m.namespace,
            resource_version: &m.resource_version,
            uid: &m.uid,
        },
        node_name: &shell.spec.node_name,
        owner: owner(&m.owner_references),
        phase: &status.phase,
        pod_ips: status
            .pod_ips
            .as_array()
            .map(|ips| ips.iter().map(|ip| &ip["ip"]).collect())
            .unwrap_or_default(),
        reason: &status.reason,
    };
    f(&out)
}

/// The controlling owner reference, or the first one.
fn owner(references: &Value) -> Option<Owner<'_>> {
    let owners = references.as_array()?;
    let o = owners
        .iter()
        .find(|o| o["controller"].as_bool() == Some(true))
        .or(owners.first())?;
    Some(Owner {
        api_version: &o["apiVersion"],
        kind: &o["kind"],
        name: &o["name"],
        uid: &o["uid"],
    })
}

/// A container state (`{"waiting": {...}}`) as its name, reason and exit code.
fn state_of(state: &Value) -> Option<State<'_>> {
    let (name, detail) = state.as_object()?.iter().next()?;
    Some(State {
        exit_code: &detail["exitCode"],
        reason: &detail["reason"],
        state: name,
    })
}

// The summary's fields by name, the order a JSON map of them is written in.

#[derive(Serialize)]
struct Summary<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    conditions: Vec<Condition<'a>>,
    containers: Vec<Container<'a>>,
    #[serde(rename = "hostIP")]
    host_ip: &'a Value,
    kind: &'static str,
    metadata: Meta<'a>,
    #[serde(rename = "nodeName")]
    node_name: &'a Value,
    owner: Option<Owner<'a>>,
    phase: &'a Value,
    #[serde(rename = "podIPs")]
    pod_ips: Vec<&'a Value>,
    reason: &'a Value,
}

#[derive(Serialize)]
struct Condition<'a> {
    reason: &'a Value,
    status: &'a Value,
    #[serde(rename = "type")]
    ty: &'a Value,
}

#[derive(Serialize)]
struct Container<'a> {
    image: &'a Value,
    init: bool,
    #[serde(rename = "lastState")]
    last_state: Option<State<'a>>,
    name: &'a Value,
    ready: bool,
    #[serde(rename = "restartCount")]
    restart_count: u64,
    state: Option<State<'a>>,
}

#[derive(Serialize)]
struct State<'a> {
    #[serde(rename = "exitCode")]
    exit_code: &'a Value,
    reason: &'a Value,
    state: &'a str,
}

#[derive(Serialize)]
struct Meta<'a> {
    #[serde(rename = "deletionTimestamp")]
    deletion_timestamp: &'a Value,
    labels: &'a Value,
    name: &'a Value,
    namespace: &'a Value,
    #[serde(rename = "resourceVersion")]
    resource_version: &'a Value,
    uid: &'a Value,
}

#[derive(Serialize)]
struct Owner<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a Value,
    kind: &'a Value,
    name: &'a Value,
    uid: &'a Value,
}

/// What the summary reads of a Pod; every other field is skipped unparsed. A field missing
/// here reads as `null`, as it does through a parsed object.
#[derive(Deserialize)]
struct Shell {
    #[serde(default)]
    metadata: MetaShell,
    #[serde(default)]
    spec: SpecShell,
    /// `null` reads as missing, as through a parsed object.
    #[serde(default)]
    status: Option<StatusShell>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StatusShell {
    phase: Value,
    reason: Value,
    #[serde(rename = "hostIP")]
    host_ip: Value,
    #[serde(rename = "podIPs")]
    pod_ips: Value,
    conditions: Option<Vec<ConditionShell>>,
    init_container_statuses: Option<Vec<ContainerShell>>,
    container_statuses: Option<Vec<ContainerShell>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ConditionShell {
    #[serde(rename = "type")]
    ty: Value,
    status: Value,
    reason: Value,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ContainerShell {
    name: Value,
    image: Value,
    ready: Value,
    restart_count: Value,
    state: Value,
    last_state: Value,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct MetaShell {
    namespace: Value,
    name: Value,
    uid: Value,
    resource_version: Value,
    labels: Value,
    deletion_timestamp: Value,
    owner_references: Value,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct SpecShell {
    node_name: Value,
}

impl Shell {
    /// The shell of a parsed Pod, each field read as the summary reads it, whatever its
    /// shape: what is not there, or not a list where a list is read, is missing.
    fn of_value(pod: &Value) -> Shell {
        let (meta, status) = (&pod["metadata"], &pod["status"]);
        let containers = |list: &str| {
            status[list].as_array().map(|items| {
                items
                    .iter()
                    .map(|c| ContainerShell {
                        name: c["name"].clone(),
                        image: c["image"].clone(),
                        ready: c["ready"].clone(),
                        restart_count: c["restartCount"].clone(),
                        state: c["state"].clone(),
                        last_state: c["lastState"].clone(),
                    })
                    .collect()
            })
        };
        Shell {
            metadata: MetaShell {
                namespace: meta["namespace"].clone(),
                name: meta["name"].clone(),
                uid: meta["uid"].clone(),
                resource_version: meta["resourceVersion"].clone(),
                labels: meta["labels"].clone(),
                deletion_timestamp: meta["deletionTimestamp"].clone(),
                owner_references: meta["ownerReferences"].clone(),
            },
            spec: SpecShell {
                node_name: pod["spec"]["nodeName"].clone(),
            },
            status: Some(StatusShell {
                phase: status["phase"].clone(),
                reason: status["reason"].clone(),
                host_ip: status["hostIP"].clone(),
                pod_ips: status["podIPs"].clone(),
                conditions: status["conditions"].as_array().map(|cs| {
                    cs.iter()
                        .map(|c| ConditionShell {
                            ty: c["type"].clone(),
                            status: c["status"].clone(),
                            reason: c["reason"].clone(),
                        })
                        .collect()
                }),
                init_container_statuses: containers("initContainerStatuses"),
                container_statuses: containers("containerStatuses"),
            }),
        }
    }
}
