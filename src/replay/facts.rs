//! What the replay needs to know of one event, read once from its attributes and
//! kubecast's extensions (README, "Event contract"). Entry point: [`Facts::of`].

use cloudevents::{AttributesReader, Event};

use super::decode::extension_text;
use crate::event::ChangeKind;

/// Where a record was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub partition: i32,
    pub offset: i64,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
        let subject = event.subject().and_then(|s| s.split_once('/'));
        Facts {
            kind,
            uid: extension_text(event, "k8suid"),
            namespace: extension_text(event, "k8snamespace")
                .or_else(|| subject.map(|(ns, _)| ns.to_string())),
            name: extension_text(event, "k8sname").or_else(|| subject.map(|(_, n)| n.to_string())),
            rv: extension_text(event, "k8srv"),
            prev_rv: extension_text(event, "k8sprevrv"),
            time_ms: event.time().map(|t| t.timestamp_millis()),
            place,
        }
    }

    /// `namespace/name`, or what is known of it.
    pub fn object(&self) -> String {
        format!(
            "{}/{}",
            self.namespace.as_deref().unwrap_or("?"),
            self.name.as_deref().unwrap_or("?")
        )
    }

    /// Whether it is a change of a pod (added, modified, deleted), which has a chain.
    pub fn is_change(&self) -> bool {
        matches!(self.kind, Kind::Added | Kind::Modified | Kind::Deleted)
    }
}

/// Orders two resourceVersions: as numbers when both are (etcd's are), else `None`
/// (resourceVersions are opaque to clients in general).
pub fn rv_order(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    Some(a.parse::<u64>().ok()?.cmp(&b.parse::<u64>().ok()?))
}
