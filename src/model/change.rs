//! The kind of a change: an object added, modified or deleted, or an alert firing or
//! resolved. Entry point: [`ChangeKind`]; it picks an event's `type` and the word in its id.

/// The kind of a change, which picks the CloudEvents `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// An alert rule began to hold for the pod (after its `for`).
    AlertFiring,
    /// A firing alert stopped holding, or its pod was deleted.
    AlertResolved,
}

impl ChangeKind {
    /// The CloudEvents `type` of a Pod's change, or of an alert (other kinds' types come
    /// from their resource, `io.k8s.{group}.{version}.{kind}.{word}`).
    pub fn event_type(self) -> &'static str {
        match self {
            ChangeKind::Added => "io.k8s.core.v1.pod.added",
            ChangeKind::Modified => "io.k8s.core.v1.pod.modified",
            ChangeKind::Deleted => "io.k8s.core.v1.pod.deleted",
            ChangeKind::AlertFiring => "io.kubecast.alert.firing",
            ChangeKind::AlertResolved => "io.kubecast.alert.resolved",
        }
    }

    /// Every kind, in the order above.
    pub const ALL: [ChangeKind; 5] = [
        ChangeKind::Added,
        ChangeKind::Modified,
        ChangeKind::Deleted,
        ChangeKind::AlertFiring,
        ChangeKind::AlertResolved,
    ];

    /// The kind of change whose CloudEvents `type` is `ty`: an alert's, or any kind's
    /// `io.k8s.{group}.{version}.{kind}.added|modified|deleted`.
    pub fn of_type(ty: &str) -> Option<ChangeKind> {
        if let Some(k) = ChangeKind::ALL.into_iter().find(|k| k.event_type() == ty) {
            return Some(k);
        }
        let rest = ty.strip_prefix("io.k8s.")?;
        let (_, word) = rest.rsplit_once('.')?;
        [ChangeKind::Added, ChangeKind::Modified, ChangeKind::Deleted]
            .into_iter()
            .find(|k| k.word() == word)
    }

    /// The word used in ids.
    pub fn word(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::AlertFiring => "alert.firing",
            ChangeKind::AlertResolved => "alert.resolved",
        }
    }

    /// Whether this is an alert event rather than a change of the pod.
    pub fn is_alert(self) -> bool {
        matches!(self, ChangeKind::AlertFiring | ChangeKind::AlertResolved)
    }
}
