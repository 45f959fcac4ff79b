//! What the replay needs to know of one event, read once from its attributes and
//! kubecast's extensions (README, "Event contract"). Entry point: [`Facts::of`].

use cloudevents::{AttributesReader, Event};

use super::decode::extension_text;
use crate::model::ChangeKind;

/// Where a record was read (the default: nowhere in particular, for an event not read from a
/// topic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// The topic, named only when the replay reads more than one.
    pub topic: Option<std::sync::Arc<str>>,
    pub partition: i32,
    pub offset: i64,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(t) = &self.topic {
            write!(f, "topic {t} ")?;
        }
        write!(f, "partition {} offset {}", self.partition, self.offset)
    }
}

/// What an event is about, by its `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
    /// `io.kubecast.alert.firing` or `.resolved`: no chain of its own.
    Alert,
    /// Any other type: some other producer's event.
    Other,
}

/// One event's identity and its place in its object's chain.
#[derive(Debug, Clone)]
pub struct Facts {
    pub kind: Kind,
    /// The object's uid (`k8suid`); `None` for events of other producers.
    pub uid: Option<String>,
    /// `k8snamespace` and `k8sname`, or else the two halves of `subject` (`ns/name`).
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `k8skind` and `k8sapiversion`; events written before other kinds were watched have
    /// neither and are Pods' (`Pod`, `v1`).
    pub k8s_kind: String,
    pub api_version: String,
    /// The resource key of its `source` (`deployments.apps`, `pods`).
    pub resource: String,
    /// The cluster its `source` names (`k8s://{cluster}/…`); `None` for other producers'
    /// events.
    pub cluster: Option<String>,
    /// `k8srv` and `k8sprevrv`.
    pub rv: Option<String>,
    pub prev_rv: Option<String>,
    /// The `time` attribute, in milliseconds since the epoch.
    pub time_ms: Option<i64>,
    pub place: Place,
}

impl Facts {
    /// The facts of `event`, read at `place`.
    pub fn of(event: &Event, place: Place) -> Facts {
        let kind = match ChangeKind::of_type(event.ty()) {
            Some(ChangeKind::Added) => Kind::Added,
            Some(ChangeKind::Modified) => Kind::Modified,
            Some(ChangeKind::Deleted) => Kind::Deleted,
            Some(ChangeKind::AlertFiring | ChangeKind::AlertResolved) => Kind::Alert,
            None => Kind::Other,
        };
        // `ns/name`, or `name` alone for a cluster-scoped object.
        let subject = event
            .subject()
            .map(|s| s.split_once('/').unwrap_or(("", s)));
        Facts {
            kind,
            uid: extension_text(event, "k8suid"),
            namespace: extension_text(event, "k8snamespace")
                .or_else(|| subject.map(|(ns, _)| ns.to_string())),
            name: extension_text(event, "k8sname").or_else(|| subject.map(|(_, n)| n.to_string())),
            k8s_kind: extension_text(event, "k8skind").unwrap_or_else(|| "Pod".into()),
            api_version: extension_text(event, "k8sapiversion").unwrap_or_else(|| "v1".into()),
            resource: resource_of_source(event.source().as_str()),
            cluster: cluster_of_source(event.source().as_str()),
            rv: extension_text(event, "k8srv"),
            prev_rv: extension_text(event, "k8sprevrv"),
            time_ms: event.time().map(|t| t.timestamp_millis()),
            place,
        }
    }

    /// `namespace/name` (`name` for a cluster-scoped object), or what is known of it; with
    /// the kind when it is not a Pod.
    pub fn object(&self) -> String {
        let name = self.name.as_deref().unwrap_or("?");
        let at = match self.namespace.as_deref() {
            Some("") => name.to_string(),
            ns => format!("{}/{name}", ns.unwrap_or("?")),
        };
        if self.k8s_kind == "Pod" && self.api_version == "v1" {
            at
        } else {
            format!("{} {at}", self.k8s_kind)
        }
    }

    /// Whether the event's object is of the resource `name` names (kubectl's names: plural,
    /// singular, kind, the built-ins' short names, optionally with the group).
    pub fn is_resource(&self, name: &str) -> bool {
        let (group, version) = match self.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", self.api_version.as_str()),
        };
        let plural = self.resource.split('.').next().unwrap_or_default();
        // The kind matches its singular too (case is ignored).
        let names = [plural, self.k8s_kind.as_str()];
        let short = crate::kinds::resolve::builtin_short_names(group, plural);
        crate::kinds::names_answer(
            name,
            group,
            version,
            names.into_iter().chain(short.iter().copied()),
        )
    }

    /// The object's identity across a fleet: its cluster (empty for other producers'
    /// events) and its uid. Every stage that keeps per-object state keys it by this, so the
    /// same uid in two clusters (a restored backup, a copied etcd) is two objects.
    pub fn key(&self) -> Option<ObjectKey> {
        Some(ObjectKey {
            cluster: self.cluster.clone().unwrap_or_default(),
            uid: self.uid.clone()?,
        })
    }

    /// The word for the event's change, as `--type`, the compact lines and the report name
    /// it: `initial` and `inferred` for the adds and deletes kubecast flags so.
    pub fn change_word(&self, event: &Event) -> &'static str {
        let flag = |name| extension_text(event, name).as_deref() == Some("true");
        match self.kind {
            Kind::Added if flag("k8sinitial") => "initial",
            Kind::Added => "added",
            Kind::Modified => "modified",
            Kind::Deleted if flag("k8sinferred") => "inferred",
            Kind::Deleted => "deleted",
            Kind::Alert if event.ty().ends_with(".firing") => "firing",
            Kind::Alert => "resolved",
            Kind::Other => "event",
        }
    }

    /// Whether it is a change of a pod (added, modified, deleted), which has a chain.
    pub fn is_change(&self) -> bool {
        matches!(self.kind, Kind::Added | Kind::Modified | Kind::Deleted)
    }
}

/// An object in a fleet: (cluster, uid).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Empty when the event's `source` names no cluster.
    pub cluster: String,
    pub uid: String,
}

/// The cluster of a kubecast `source` (`k8s://{cluster}/api/v1/…`), `None` for any other.
pub(crate) fn cluster_of_source(source: &str) -> Option<String> {
    let rest = source.strip_prefix("k8s://")?;
    let cluster = rest.split('/').next().unwrap_or_default();
    (!cluster.is_empty()).then(|| cluster.to_string())
}

/// Orders two resourceVersions: as numbers when both are (etcd's are), else `None`
/// (resourceVersions are opaque to clients in general).
pub fn rv_order(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    Some(a.parse::<u64>().ok()?.cmp(&b.parse::<u64>().ok()?))
}

/// The resource key (`deployments.apps`, `pods`) of an event's `source`
/// (`k8s://{cluster}/apis/apps/v1/namespaces/ns/deployments`); `pods` when it is not one
/// kubecast writes.
pub(crate) fn resource_of_source(source: &str) -> String {
    let path = source
        .strip_prefix("k8s://")
        .and_then(|rest| rest.split_once('/'))
        .map(|(_, p)| p)
        .unwrap_or_default();
    let parts: Vec<&str> = path.split('/').collect();
    let plural = parts.last().copied().unwrap_or_default();
    match parts.first() {
        Some(&"api") if !plural.is_empty() => plural.to_string(),
        Some(&"apis") if parts.len() >= 4 => format!("{plural}.{}", parts[1]),
        _ => crate::model::legacy::pods(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_is_the_host_of_a_kubecast_source_and_nothing_else_has_one() {
        assert_eq!(
            cluster_of_source("k8s://eu-1/api/v1/namespaces/ns/pods").as_deref(),
            Some("eu-1")
        );
        assert_eq!(
            cluster_of_source("k8s://us-1/apis/apps/v1/deployments").as_deref(),
            Some("us-1")
        );
        assert_eq!(cluster_of_source("k8s:///api/v1/pods"), None);
        assert_eq!(cluster_of_source("https://example.com/orders"), None);
        assert_eq!(cluster_of_source("/billing"), None);
    }
}
