//! `--state-at TIME`: the objects as they were at a time, reconstructed from the events: for
//! every object not deleted by then, its last event at or before the time. One entry per live
//! object, whatever the topic's length; the table groups them by kind. Entry point:
//! [`StateAt`].
//!
//! An event's time is when kubecast observed the change (the CloudEvents `time`), so the
//! state at T is what kubecast knew at T. Events are taken in the order read; one older (by
//! resourceVersion) than a pod's entry does not move it back (a late copy after a restart).

use std::collections::HashMap;
use std::io::Write;

use cloudevents::{AttributesReader, Data, Event};
use serde::Serialize;
use serde_json::Value;

use super::args::StateFormat;
use super::decode::{data_is_json, json_of, time_text};
use super::facts::{Facts, Kind, ObjectKey, rv_order};

/// One object at the time.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAt {
    /// The cluster its events' `source` names (`None` for other producers').
    pub cluster: Option<String>,
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub phase: Option<String>,
    pub node: Option<String>,
    pub last_event: LastEvent,
    /// The last event's data (whichever data mode the topic was written in).
    pub data: Value,
}

/// The event a pod's entry comes from.
#[derive(Debug, Clone, Serialize)]
pub struct LastEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub time: String,
}

/// Builds the state at a time.
#[derive(Debug)]
pub struct StateAt {
    at_ms: i64,
    pods: HashMap<ObjectKey, Latest>,
}

/// A pod's latest event so far; its data is parsed once, at the end, not for every event.
#[derive(Debug)]
struct Latest {
    pod: PodAt,
    data: Option<Data>,
    /// Whether the data's content type is JSON.
    json: bool,
}

impl StateAt {
    pub fn new(at_ms: i64) -> StateAt {
        StateAt {
            at_ms,
            pods: HashMap::new(),
        }
    }

    /// Takes the next event (duplicates already left out).
    pub fn observe(&mut self, facts: &Facts, event: &Event) {
        let (Some(key), Some(rv), Some(time)) = (facts.key(), &facts.rv, facts.time_ms) else {
            return;
        };
        if !facts.is_change() || time > self.at_ms {
            return;
        }
        if let Some(known) = self.pods.get(&key)
            && rv_order(rv, &known.pod.resource_version) == Some(std::cmp::Ordering::Less)
        {
            return;
        }
        if facts.kind == Kind::Deleted {
            self.pods.remove(&key);
            return;
        }
        let pod = PodAt {
            cluster: facts.cluster.clone(),
            kind: facts.k8s_kind.clone(),
            api_version: facts.api_version.clone(),
            namespace: facts.namespace.clone().unwrap_or_default(),
            name: facts.name.clone().unwrap_or_default(),
            uid: key.uid.clone(),
            resource_version: rv.clone(),
            phase: None,
            node: None,
            last_event: LastEvent {
                id: event.id().to_string(),
                ty: event.ty().to_string(),
                time: time_text(event).unwrap_or_default(),
            },
            data: Value::Null,
        };
        self.pods.insert(
            key,
            Latest {
                pod,
                data: event.data().cloned(),
                json: data_is_json(event),
            },
        );
    }

    /// The pods, sorted by namespace and name, that `keep` accepts.
    pub fn pods(self, keep: impl Fn(&PodAt) -> bool) -> Vec<PodAt> {
        let mut pods: Vec<PodAt> = self
            .pods
            .into_values()
            .map(
                |Latest {
                     mut pod,
                     data,
                     json,
                 }| {
                    pod.data = data
                        .as_ref()
                        .and_then(|d| json_of(d, json))
                        .unwrap_or(Value::Null);
                    let text = |v: &Value| v.as_str().map(str::to_string);
                    // Full data has them under status/spec, summary data at the top.
                    pod.phase =
                        text(&pod.data["status"]["phase"]).or_else(|| text(&pod.data["phase"]));
                    pod.node =
                        text(&pod.data["spec"]["nodeName"]).or_else(|| text(&pod.data["nodeName"]));
                    pod
                },
            )
            .filter(|p| keep(p))
            .collect();
        // Pods first (the record's oldest kind), then the other kinds by name.
        let rank = |p: &PodAt| {
            (
                p.kind != "Pod" || p.api_version != "v1",
                p.kind.clone(),
                p.api_version.clone(),
            )
        };
        pods.sort_by(|a, b| {
            (rank(a), &a.cluster, &a.namespace, &a.name, &a.uid).cmp(&(
                rank(b),
                &b.cluster,
                &b.namespace,
                &b.name,
                &b.uid,
            ))
        });
        pods
    }
}

/// Prints `pods` as they were at `at` (as given on the command line).
pub fn print(
    out: &mut dyn Write,
    at: &str,
    at_ms: i64,
    pods: &[PodAt],
    format: StateFormat,
) -> std::io::Result<()> {
    let first = pods.first().map(|p| &p.cluster);
    let fleet = pods.iter().any(|p| Some(&p.cluster) != first);
    let at_text = jiff::Timestamp::from_millisecond(at_ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| at.to_string());
    match format {
        StateFormat::Json => {
            #[derive(Serialize)]
            struct Doc<'a> {
                at: &'a str,
                pods: &'a [PodAt],
            }
            serde_json::to_writer_pretty(&mut *out, &Doc { at: &at_text, pods })?;
            writeln!(out)
        }
        StateFormat::Table
            if pods
                .iter()
                .all(|p| p.kind == "Pod" && p.api_version == "v1") =>
        {
            table(
                out,
                &format!("# {} pod(s) at {at_text}", pods.len()),
                pods,
                fleet,
            )
        }
        StateFormat::Table => {
            writeln!(out, "# {} object(s) at {at_text}", pods.len())?;
            let mut rest = pods;
            while let Some(first) = rest.first() {
                let n = rest
                    .iter()
                    .take_while(|p| p.kind == first.kind && p.api_version == first.api_version)
                    .count();
                let (group, after) = rest.split_at(n);
                writeln!(out)?;
                table(
                    out,
                    &format!("## {} ({}): {n}", first.kind, first.api_version),
                    group,
                    fleet,
                )?;
                rest = after;
            }
            Ok(())
        }
    }
}

/// One table of `pods` under the line `title`; a `CLUSTER` column first when `fleet` (the
/// objects printed come from more than one cluster).
fn table(out: &mut dyn Write, title: &str, pods: &[PodAt], fleet: bool) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = pods
        .iter()
        .map(|p| {
            let mut row = vec![
                p.namespace.clone(),
                p.name.clone(),
                p.phase.clone().unwrap_or_else(|| "-".into()),
                p.node.clone().unwrap_or_else(|| "-".into()),
                p.resource_version.clone(),
                p.last_event.time.clone(),
            ];
            if fleet {
                row.insert(0, p.cluster.clone().unwrap_or_else(|| "-".into()));
            }
            row
        })
        .collect();
    let mut head = vec![
        "NAMESPACE",
        "NAME",
        "PHASE",
        "NODE",
        "RESOURCEVERSION",
        "LAST CHANGE",
    ];
    if fleet {
        head.insert(0, "CLUSTER");
    }
    writeln!(out, "{title}")?;
    columns(out, &head, &rows)
}

/// Writes `rows` under `head` in columns three spaces apart (the last column unpadded).
pub fn columns(out: &mut dyn Write, head: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[&str]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        s
    };
    writeln!(out, "{}", line(head))?;
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::testing::pod;

    fn table_of(pods: &[PodAt]) -> String {
        let mut out = Vec::new();
        print(&mut out, "0s", 0, pods, StateFormat::Table).unwrap_or_else(|e| panic!("{e}"));
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn every_table_of_a_fleet_has_the_cluster_column_and_one_cluster_has_none() {
        let fleet = [
            pod("eu-1", "ConfigMap", "flags", Value::Null),
            pod("eu-1", "Secret", "token", Value::Null),
            pod("us-1", "Secret", "token", Value::Null),
        ];
        let text = table_of(&fleet);
        let heads: Vec<&str> = text.lines().filter(|l| l.contains("NAMESPACE")).collect();
        assert_eq!(heads.len(), 2, "{text}");
        assert!(heads.iter().all(|h| h.starts_with("CLUSTER ")), "{text}");
        assert!(text.contains("eu-1      shop"), "{text}");
        let one = table_of(&fleet[..2]);
        assert!(!one.contains("CLUSTER"), "{one}");
    }
}
