//! `--diff-clusters A B [--at TIME]`: how two clusters differ — the objects each had at a
//! time (as `--state-at` reconstructs them), matched by API group, kind, namespace and name, compared
//! field by field with [`changes::diff`](super::changes::diff). Values kubecast redacted are
//! compared as written (`<redacted>` equals `<redacted>`): the record holds nothing else.
//! Entry points: [`compare`] and [`print`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use super::args::{DiffClusters, StateFormat};
use super::changes::{FieldChange, diff};
use super::state::{PodAt, columns};

/// Fields that differ between any two clusters' copies of an object and say nothing about
/// its configuration or state: identities, bookkeeping counters and the times conditions
/// were last looked at. Left out of the comparison (and named in the report).
pub const IGNORED: [&str; 11] = [
    "metadata.uid",
    "metadata.resourceVersion",
    "metadata.creationTimestamp",
    "metadata.generation",
    "metadata.managedFields",
    "metadata.ownerReferences[].uid",
    "status.observedGeneration",
    "status.conditions[].lastUpdateTime",
    "status.conditions[].lastTransitionTime",
    "status.conditions[].lastHeartbeatTime",
    "status.conditions[].lastProbeTime",
];

fn ignored(path: &str) -> bool {
    // `metadata.ownerReferences[0].uid` is `metadata.ownerReferences[].uid`.
    let general = match (path.find('['), path.find(']')) {
        (Some(open), Some(close)) if open < close => {
            format!("{}[]{}", &path[..open], &path[close + 1..])
        }
        _ => path.to_string(),
    };
    IGNORED.iter().any(|i| {
        general
            .strip_prefix(i)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    })
}

/// An object by what matches it across clusters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Object {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
}

/// An object both clusters have, and the fields in which they differ.
#[derive(Debug, Clone, Serialize)]
pub struct Differs {
    #[serde(flatten)]
    pub object: Object,
    /// Each field: its path and its value in each cluster (a cluster without it is absent).
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Field {
    pub path: String,
    pub values: BTreeMap<String, Value>,
}

/// The comparison.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub at: String,
    pub clusters: [String; 2],
    pub differ: Vec<Differs>,
    /// The objects only one cluster has, by cluster.
    pub only_in: BTreeMap<String, Vec<Object>>,
    pub same: usize,
    pub ignored: Vec<&'static str>,
}

impl Drift {
    /// Whether the clusters differ at all.
    pub fn differs(&self) -> bool {
        !self.differ.is_empty() || self.only_in.values().any(|o| !o.is_empty())
    }
}

/// A cluster the record does not hold: exit 2, naming the clusters it does hold.
#[derive(Debug, thiserror::Error)]
#[error("cluster `{cluster}` has no events in what was read (clusters read: {seen})")]
pub struct UnknownCluster {
    pub cluster: String,
    pub seen: String,
}

/// One cluster's objects by (API group, kind, namespace, name).
type Side = BTreeMap<(String, String, String, String), (Object, Value)>;

/// The API group of `api_version` (`serving.knative.dev/v1` -> `serving.knative.dev`; `v1`,
/// the core group, -> empty).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Compares the objects `pods` (of every cluster, at `d.at_ms`) of clusters `d.a` and `d.b`;
/// `seen` are the clusters any event read named.
pub fn compare(
    pods: Vec<PodAt>,
    d: &DiffClusters,
    seen: &BTreeSet<String>,
    at_text: String,
) -> Result<Drift, UnknownCluster> {
    for c in [&d.a, &d.b] {
        if !seen.contains(c) {
            let names: Vec<&str> = seen.iter().map(String::as_str).collect();
            return Err(UnknownCluster {
                cluster: c.clone(),
                seen: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            });
        }
    }
    // Matched by API group, kind, namespace and name: the version a kind is served at may
    // differ between clusters of different Kubernetes versions and still be the same object,
    // but a kind of another group (a Knative `Service` beside a core one) is another object.
    let mut sides: [Side; 2] = Default::default();
    for p in pods {
        let side = match p.cluster.as_deref() {
            Some(c) if c == d.a => 0,
            Some(c) if c == d.b => 1,
            _ => continue,
        };
        let key = (
            group(&p.api_version).to_string(),
            p.kind.clone(),
            p.namespace.clone(),
            p.name.clone(),
        );
        let object = Object {
            kind: p.kind,
            api_version: p.api_version,
            namespace: p.namespace,
            name: p.name,
        };
        sides[side].insert(key, (object, p.data));
    }
    let [a, mut b] = sides;
    let mut drift = Drift {
        at: at_text,
        clusters: [d.a.clone(), d.b.clone()],
        differ: Vec::new(),
        only_in: BTreeMap::from([(d.a.clone(), Vec::new()), (d.b.clone(), Vec::new())]),
        same: 0,
        ignored: IGNORED.to_vec(),
    };
    for (key, (object, left)) in a {
        let Some((_, right)) = b.remove(&key) else {
            drift.only_in.entry(d.a.clone()).or_default().push(object);
            continue;
        };
        let fields: Vec<Field> = diff(&left, &right)
            .into_iter()
            .filter(|c| !ignored(&c.path))
            .map(|c| field(c, d))
            .collect();
        if fields.is_empty() {
            drift.same += 1;
        } else {
            drift.differ.push(Differs { object, fields });
        }
    }
    drift
        .only_in
        .entry(d.b.clone())
        .or_default()
        .extend(b.into_values().map(|(o, _)| o));
    Ok(drift)
}

fn field(c: FieldChange, d: &DiffClusters) -> Field {
    let mut values = BTreeMap::new();
    if let Some(v) = c.old {
        values.insert(d.a.clone(), v);
    }
    if let Some(v) = c.new {
        values.insert(d.b.clone(), v);
    }
    Field {
        path: c.path,
        values,
    }
}

/// Prints the comparison as JSON or as a table.
pub fn print(out: &mut dyn Write, drift: &Drift, format: StateFormat) -> std::io::Result<()> {
    if format == StateFormat::Json {
        serde_json::to_writer_pretty(&mut *out, drift)?;
        return writeln!(out);
    }
    let [a, b] = &drift.clusters;
    let only = |c: &str| drift.only_in.get(c).map_or(0, Vec::len);
    writeln!(
        out,
        "# {a} against {b} at {}: {} differ, {} only in {a}, {} only in {b}, {} the same",
        drift.at,
        drift.differ.len(),
        only(a),
        only(b),
        drift.same
    )?;
    writeln!(out, "# not compared: {}", drift.ignored.join(", "))?;
    let name = |o: &Object| {
        let at = if o.namespace.is_empty() {
            o.name.clone()
        } else {
            format!("{}/{}", o.namespace, o.name)
        };
        format!("{} ({}) {at}", o.kind, o.api_version)
    };
    for d in &drift.differ {
        writeln!(out)?;
        writeln!(out, "DIFFERS  {}", name(&d.object))?;
        let show = |c: &str, f: &Field| f.values.get(c).map_or("(absent)".into(), Value::to_string);
        let rows: Vec<Vec<String>> = d
            .fields
            .iter()
            .map(|f| vec![format!("  {}", f.path), show(a, f), show(b, f)])
            .collect();
        columns(out, &["  FIELD", a, b], &rows)?;
    }
    for c in [a, b] {
        for o in drift.only_in.get(c).into_iter().flatten() {
            writeln!(out)?;
            writeln!(out, "ONLY IN {c}  {}", name(o))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::testing::pod;
    use serde_json::json;

    fn plan() -> DiffClusters {
        DiffClusters {
            a: "eu-1".into(),
            b: "us-1".into(),
            at_ms: 0,
            at: "now".into(),
        }
    }

    fn seen() -> BTreeSet<String> {
        ["eu-1", "us-1", "ap-1"].map(String::from).into()
    }

    #[test]
    fn objects_match_by_kind_namespace_and_name_and_differ_field_by_field() {
        let meta = |uid: &str| json!({"uid": uid, "resourceVersion": uid, "ownerReferences": [{"uid": uid, "name": "o"}]});
        let status = |t: &str| json!({"conditions": [{"type": "Ready", "lastTransitionTime": t}]});
        let pods = vec![
            pod(
                "eu-1",
                "ConfigMap",
                "flags",
                json!({"metadata": meta("1"), "data": {"mode": "a", "secret": "<redacted>"}}),
            ),
            pod(
                "us-1",
                "ConfigMap",
                "flags",
                json!({"metadata": meta("2"), "data": {"mode": "b", "secret": "<redacted>"}}),
            ),
            pod(
                "eu-1",
                "ConfigMap",
                "same",
                json!({"metadata": meta("3"), "data": {}, "status": status("1")}),
            ),
            pod(
                "us-1",
                "ConfigMap",
                "same",
                json!({"metadata": meta("4"), "data": {}, "status": status("2")}),
            ),
            pod("eu-1", "ConfigMap", "only-eu", json!({})),
            pod("us-1", "Secret", "only-eu", json!({})),
            pod("ap-1", "ConfigMap", "flags", json!({"data": {"mode": "c"}})),
        ];
        let drift = compare(pods, &plan(), &seen(), "now".into()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(drift.same, 1);
        assert_eq!(drift.differ.len(), 1);
        let f = &drift.differ[0].fields;
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].path, "data.mode");
        assert_eq!(f[0].values["eu-1"], "a");
        assert_eq!(f[0].values["us-1"], "b");
        assert_eq!(drift.only_in["eu-1"][0].name, "only-eu");
        assert_eq!(drift.only_in["us-1"][0].kind, "Secret");
        assert!(drift.differs());
        let mut table = Vec::new();
        print(&mut table, &drift, StateFormat::Table).unwrap_or_else(|e| panic!("{e}"));
        let table = String::from_utf8_lossy(&table);
        assert!(
            table.starts_with(
                "# eu-1 against us-1 at now: 1 differ, 1 only in eu-1, 1 only in us-1, 1 the same"
            ),
            "{table}"
        );
        assert!(
            table.contains("DIFFERS  ConfigMap (v1) shop/flags"),
            "{table}"
        );
        assert!(table.contains("  data.mode   \"a\"    \"b\""), "{table}");
        assert!(
            table.contains("ONLY IN us-1  Secret (v1) shop/only-eu"),
            "{table}"
        );
    }

    #[test]
    fn a_cluster_with_no_events_is_named_with_the_clusters_read() {
        let mut d = plan();
        d.b = "us-2".into();
        let e = compare(Vec::new(), &d, &seen(), "now".into())
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("cluster `us-2` has no events in what was read (clusters read: ap-1, eu-1, us-1)")
        );
    }

    #[test]
    fn identical_clusters_do_not_differ() {
        let pods = vec![
            pod(
                "eu-1",
                "Pod",
                "a",
                json!({"spec": {"x": 1}, "metadata": {"uid": "1"}}),
            ),
            pod(
                "us-1",
                "Pod",
                "a",
                json!({"spec": {"x": 1}, "metadata": {"uid": "2"}}),
            ),
        ];
        let drift = compare(pods, &plan(), &seen(), "now".into()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!drift.differs());
        assert_eq!(drift.same, 1);
    }

    #[test]
    fn kinds_of_one_name_in_two_api_groups_are_two_objects() {
        let at = |cluster: &str, api_version: &str, image: &str| {
            let mut p = pod(cluster, "Service", "web", json!({"spec": {"image": image}}));
            p.api_version = api_version.into();
            p
        };
        let pods = vec![
            at("eu-1", "v1", "core"),
            at("eu-1", "serving.knative.dev/v1", "knative-a"),
            at("us-1", "v1", "core"),
            at("us-1", "serving.knative.dev/v1", "knative-b"),
        ];
        let drift = compare(pods, &plan(), &seen(), "now".into()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(drift.same, 1, "the core Services are the same: {drift:?}");
        assert_eq!(drift.differ.len(), 1, "{drift:?}");
        assert_eq!(drift.differ[0].object.api_version, "serving.knative.dev/v1");
        assert_eq!(drift.differ[0].fields[0].values["eu-1"], "knative-a");
        // A version served in one cluster and not the other is the same object.
        let pods = vec![
            at("eu-1", "serving.knative.dev/v1", "x"),
            at("us-1", "serving.knative.dev/v1beta1", "x"),
        ];
        let drift = compare(pods, &plan(), &seen(), "now".into()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((drift.same, drift.differs()), (1, false), "{drift:?}");
    }
}
