//! The delta classifier: turns what the watch reports (list items, watch events) into the
//! changes worth an event, from a small known state per object.
//!
//! Entry point: [`Classifier`]. Per object it keeps only the uid, the last emitted
//! resourceVersion, the resource and namespace (interned) and the name, never the object.
//! The same resourceVersion twice emits nothing; a re-list emits only the real differences,
//! and objects that vanished during the gap come out as deletes flagged `inferred`. It knows
//! no kind: every resource's objects are kept the same way, keyed by uid.

mod object;
#[cfg(test)]
mod proptests;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use object::{Object, Scope, label_of_stored};

use crate::kinds::Resource;
use crate::model::{ChangeKind, KnownObject, ObjectKey, ObjectRef};

/// What a fresh start does with pods that already exist.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitialList {
    /// Emit each existing pod once as `added`, flagged `k8sinitial=true`.
    #[default]
    Emit,
    /// Remember existing pods without emitting them; their later changes are emitted.
    Skip,
}

/// A change worth an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    /// The resource of the object.
    pub resource: Arc<Resource>,
    /// The label of the watch scope it came from ([`Scope::label`]).
    pub scope: Arc<str>,
    pub uid: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
    /// The object's resourceVersion; for an inferred delete, the last one known.
    pub rv: String,
    /// The resourceVersion of this object's previous event; empty when there was none.
    pub prev_rv: String,
    pub inferred: bool,
    pub initial: bool,
    /// The object; `None` for an inferred delete.
    pub object: Option<Bytes>,
}

#[derive(Debug, Clone)]
struct Known {
    rv: Box<str>,
    /// The resource's key (`pods`, `deployments.apps`), interned.
    resource: Arc<str>,
    namespace: Arc<str>,
    name: Box<str>,
    /// The list epoch in which this object was last seen, for the re-list diff.
    seen: u32,
}

/// Known state and the diff logic. Entry points: [`Classifier::list_start`],
/// [`Classifier::listed`], [`Classifier::list_done`], [`Classifier::applied`],
/// [`Classifier::deleted`].
#[derive(Debug)]
pub struct Classifier {
    known: HashMap<Box<str>, Known>,
    /// Interned namespaces and resource keys.
    names: HashSet<Arc<str>>,
    /// Known objects per resource key, kept as objects come and go.
    counts: HashMap<Arc<str>, usize>,
    initial: InitialList,
    /// Whether the known state came from a saved checkpoint; then no list is "initial".
    restored: bool,
    /// Scopes that completed at least one list since the start.
    listed_once: HashSet<Scope>,
    /// Current list epoch per scope being listed.
    listing: HashMap<Scope, u32>,
    epoch: u32,
}

impl Classifier {
    /// A classifier with no known state (a fresh start).
    pub fn new(initial: InitialList) -> Classifier {
        Classifier {
            known: HashMap::new(),
            names: HashSet::new(),
            counts: HashMap::new(),
            initial,
            restored: false,
            listed_once: HashSet::new(),
            listing: HashMap::new(),
            epoch: 0,
        }
    }

    /// A classifier that continues from saved state: no list counts as initial.
    pub fn restored(initial: InitialList, known: Vec<KnownObject>) -> Classifier {
        let mut c = Classifier::new(initial);
        c.restored = true;
        for k in known {
            c.remember(k.object.key(), &k.rv, 0);
        }
        c
    }

    /// Forgets the objects of resources not among `keys` (no longer watched): they are
    /// neither diffed nor deleted.
    pub fn retain_resources(&mut self, keys: &[&str]) {
        self.known.retain(|_, k| keys.contains(&&*k.resource));
        self.counts.retain(|r, _| keys.contains(&&**r));
    }

    /// Sets one object's known state (replaying a logged state); `gone`: forgets it.
    pub fn restore_object(&mut self, object: ObjectKey<'_>, rv: &str, gone: bool) {
        if gone {
            self.forget(object.uid);
        } else {
            self.remember(object, rv, self.epoch);
        }
    }

    /// The known state, for a snapshot.
    pub fn known_objects(&self) -> Vec<KnownObject> {
        self.known
            .iter()
            .map(|(uid, k)| KnownObject {
                object: ObjectRef {
                    uid: uid.to_string(),
                    resource: k.resource.clone(),
                    namespace: k.namespace.clone(),
                    name: k.name.to_string(),
                },
                rv: k.rv.to_string(),
            })
            .collect()
    }

    /// Number of known objects.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether no object is known.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Number of known objects per resource key.
    pub fn counts(&self) -> &HashMap<Arc<str>, usize> {
        &self.counts
    }

    /// The last emitted resourceVersion of an object, if known.
    pub fn known_rv(&self, uid: &str) -> Option<&str> {
        self.known.get(uid).map(|k| &*k.rv)
    }

    /// A (re-)list of `scope` begins: what it does not report again was deleted meanwhile.
    pub fn list_start(&mut self, scope: &Scope) {
        self.epoch = self.epoch.wrapping_add(1);
        self.listing.insert(scope.clone(), self.epoch);
    }

    /// An object reported by the list of `scope`.
    pub fn listed(&mut self, scope: &Scope, pod: Object) -> Option<Change> {
        let epoch = self.listing.get(scope).copied().unwrap_or(self.epoch);
        let initial = !self.restored && !self.listed_once.contains(scope);
        if let Some(k) = self.known.get_mut(pod.uid.as_str()) {
            k.seen = epoch;
        }
        if initial
            && self.initial == InitialList::Skip
            && !self.known.contains_key(pod.uid.as_str())
        {
            self.remember_object(scope, &pod, epoch);
            return None;
        }
        let mut change = self.apply(scope, pod, epoch)?;
        change.initial = initial && change.kind == ChangeKind::Added;
        Some(change)
    }

    /// The list of `scope` is complete: every known pod of the scope that it did not report
    /// was deleted during the gap. Returns those inferred deletes.
    pub fn list_done(&mut self, scope: &Scope) -> Vec<Change> {
        let Some(epoch) = self.listing.remove(scope) else {
            return Vec::new();
        };
        self.listed_once.insert(scope.clone());
        let gone: Vec<Box<str>> = self
            .known
            .iter()
            .filter(|(_, k)| k.seen != epoch && scope.holds(&k.resource, &k.namespace))
            .map(|(uid, _)| uid.clone())
            .collect();
        let mut out = Vec::with_capacity(gone.len());
        for uid in gone {
            if let Some(k) = self.forget(&uid) {
                out.push(Change {
                    kind: ChangeKind::Deleted,
                    resource: scope.resource.clone(),
                    scope: scope.label().clone(),
                    uid: uid.into(),
                    namespace: k.namespace.to_string(),
                    name: k.name.into(),
                    rv: k.rv.to_string(),
                    prev_rv: k.rv.into(),
                    inferred: true,
                    initial: false,
                    object: None,
                });
            }
        }
        // A stable order makes runs comparable.
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// An object added or modified on the watch of `scope`.
    pub fn applied(&mut self, scope: &Scope, pod: Object) -> Option<Change> {
        let epoch = self.epoch;
        self.apply(scope, pod, epoch)
    }

    /// An object deleted on the watch of `scope`.
    pub fn deleted(&mut self, scope: &Scope, pod: Object) -> Change {
        let prev = self.forget(pod.uid.as_str());
        Change {
            kind: ChangeKind::Deleted,
            resource: scope.resource.clone(),
            scope: scope.label().clone(),
            prev_rv: prev.map(|k| k.rv.into()).unwrap_or_default(),
            uid: pod.uid,
            namespace: pod.namespace,
            name: pod.name,
            rv: pod.rv,
            inferred: false,
            initial: false,
            object: Some(pod.bytes),
        }
    }

    fn apply(&mut self, scope: &Scope, pod: Object, epoch: u32) -> Option<Change> {
        let (kind, prev_rv) = match self.known.get(pod.uid.as_str()) {
            Some(k) if *k.rv == *pod.rv => return None,
            Some(k) => (ChangeKind::Modified, k.rv.to_string()),
            None => (ChangeKind::Added, String::new()),
        };
        self.remember_object(scope, &pod, epoch);
        Some(Change {
            kind,
            resource: scope.resource.clone(),
            scope: scope.label().clone(),
            uid: pod.uid,
            namespace: pod.namespace,
            name: pod.name,
            rv: pod.rv,
            prev_rv,
            inferred: false,
            initial: false,
            object: Some(pod.bytes),
        })
    }

    fn remember(&mut self, object: ObjectKey<'_>, rv: &str, seen: u32) {
        let ObjectKey {
            uid,
            resource,
            namespace,
            name,
        } = object;
        let namespace = self.intern(namespace);
        let resource = self.intern(resource);
        let known = Known {
            rv: rv.into(),
            resource,
            namespace,
            name: name.into(),
            seen,
        };
        let added = known.resource.clone();
        if let Some(old) = self.known.insert(uid.into(), known) {
            self.count(&old.resource, -1);
        }
        self.count(&added, 1);
    }

    /// Remembers `o`, an object of `scope`'s resource, as seen in list epoch `seen`.
    fn remember_object(&mut self, scope: &Scope, o: &Object, seen: u32) {
        let key = ObjectKey {
            uid: &o.uid,
            resource: scope.resource.key(),
            namespace: &o.namespace,
            name: &o.name,
        };
        self.remember(key, &o.rv, seen);
    }

    /// Removes `uid` from the known state (and from its resource's count).
    fn forget(&mut self, uid: &str) -> Option<Known> {
        let k = self.known.remove(uid)?;
        self.count(&k.resource, -1);
        Some(k)
    }

    fn count(&mut self, resource: &Arc<str>, by: isize) {
        let n = self.counts.entry(resource.clone()).or_default();
        *n = n.saturating_add_signed(by);
    }

    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.names.get(name) {
            return n.clone();
        }
        let n: Arc<str> = name.into();
        self.names.insert(n.clone());
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn pod(uid: &str, ns: &str, rv: &str) -> Object {
        Object {
            uid: uid.into(),
            namespace: ns.into(),
            name: format!("name-{uid}"),
            rv: rv.into(),
            bytes: Bytes::from(format!("{{\"rv\":\"{rv}\"}}")),
        }
    }

    pub(super) fn all() -> Scope {
        Scope::all_pods()
    }

    fn kinds(changes: &[Change]) -> Vec<(ChangeKind, &str, bool)> {
        changes
            .iter()
            .map(|c| (c.kind, c.uid.as_str(), c.inferred))
            .collect()
    }

    #[test]
    fn a_fresh_start_emits_each_existing_pod_once_as_initial_added() {
        let mut c = Classifier::new(InitialList::Emit);
        c.list_start(&all());
        let a = c.listed(&all(), pod("a", "ns", "1")).unwrap();
        assert_eq!(
            (a.kind, a.initial, a.prev_rv.as_str()),
            (ChangeKind::Added, true, "")
        );
        assert!(c.list_done(&all()).is_empty());
        let b = c.applied(&all(), pod("b", "ns", "2")).unwrap();
        assert!(
            !b.initial,
            "a pod created after the initial list is not initial"
        );
    }

    #[test]
    fn skipping_the_initial_list_remembers_pods_without_emitting_them() {
        let mut c = Classifier::new(InitialList::Skip);
        c.list_start(&all());
        assert!(c.listed(&all(), pod("a", "ns", "1")).is_none());
        c.list_done(&all());
        let m = c.applied(&all(), pod("a", "ns", "2")).unwrap();
        assert_eq!((m.kind, m.prev_rv.as_str()), (ChangeKind::Modified, "1"));
    }

    #[test]
    fn the_same_resource_version_twice_emits_nothing() {
        let mut c = Classifier::new(InitialList::Emit);
        assert!(c.applied(&all(), pod("a", "ns", "1")).is_some());
        assert!(c.applied(&all(), pod("a", "ns", "1")).is_none());
        let m = c.applied(&all(), pod("a", "ns", "3")).unwrap();
        assert_eq!(
            (m.kind, m.prev_rv.as_str(), m.rv.as_str()),
            (ChangeKind::Modified, "1", "3")
        );
    }

    #[test]
    fn a_relist_emits_only_real_differences_and_infers_deletes() {
        let mut c = Classifier::new(InitialList::Emit);
        c.list_start(&all());
        for (uid, rv) in [("a", "1"), ("b", "2"), ("c", "3")] {
            c.listed(&all(), pod(uid, "ns", rv));
        }
        c.list_done(&all());
        c.list_start(&all());
        let mut out: Vec<Change> = [
            pod("a", "ns", "1"),
            pod("b", "ns", "9"),
            pod("d", "ns", "8"),
        ]
        .into_iter()
        .filter_map(|p| c.listed(&all(), p))
        .collect();
        out.extend(c.list_done(&all()));
        assert_eq!(
            kinds(&out),
            vec![
                (ChangeKind::Modified, "b", false),
                (ChangeKind::Added, "d", false),
                (ChangeKind::Deleted, "c", true)
            ]
        );
        let del = &out[2];
        assert_eq!((del.rv.as_str(), del.prev_rv.as_str()), ("3", "3"));
        assert!(del.object.is_none());
        assert!(
            !out[1].initial,
            "a pod found by a re-list is not from the initial list"
        );
    }

    #[test]
    fn a_relist_of_one_namespace_leaves_other_namespaces_alone() {
        let mut c = Classifier::new(InitialList::Emit);
        c.applied(&all(), pod("a", "one", "1"));
        c.applied(&all(), pod("b", "two", "2"));
        let one = Scope::new(Resource::pods(), Some("one"));
        c.list_start(&one);
        let gone = c.list_done(&one);
        assert_eq!(kinds(&gone), vec![(ChangeKind::Deleted, "a", true)]);
        assert_eq!(c.known_rv("b"), Some("2"));
    }

    #[test]
    fn a_watched_delete_links_to_the_last_emitted_version_and_forgets_the_pod() {
        let mut c = Classifier::new(InitialList::Emit);
        c.applied(&all(), pod("a", "ns", "1"));
        let d = c.deleted(&all(), pod("a", "ns", "4"));
        assert_eq!(
            (d.kind, d.rv.as_str(), d.prev_rv.as_str(), d.inferred),
            (ChangeKind::Deleted, "4", "1", false)
        );
        assert!(c.is_empty());
    }
}

#[cfg(test)]
mod resource_tests {
    use super::tests::pod;
    use super::*;

    #[test]
    fn a_relist_of_one_resource_leaves_the_objects_of_other_resources_alone() {
        let mut c = Classifier::new(InitialList::Emit);
        let pods = Scope::all_pods();
        let nodes = Scope::new(
            Arc::new(Resource::new("", "v1", "Node", "nodes", false)),
            None,
        );
        c.applied(&pods, pod("p", "ns", "1"));
        let n = c.applied(&nodes, pod("n", "", "2")).expect("a new node");
        assert_eq!((n.resource.kind.as_str(), &*n.scope), ("Node", "nodes/*"));
        c.list_start(&nodes);
        let gone = c.list_done(&nodes);
        assert_eq!(gone.len(), 1);
        assert_eq!(
            (gone[0].uid.as_str(), gone[0].resource.plural.as_str()),
            ("n", "nodes")
        );
        assert_eq!(c.known_rv("p"), Some("1"));
        let counts = c.counts();
        assert_eq!(counts.get("pods"), Some(&1));
        assert_eq!(counts.get("nodes"), Some(&0));
    }

    #[test]
    fn objects_of_resources_no_longer_watched_are_forgotten() {
        let known = |uid: &str, resource: &str| KnownObject {
            object: ObjectRef {
                uid: uid.into(),
                resource: resource.into(),
                namespace: "ns".into(),
                name: uid.into(),
            },
            rv: "1".into(),
        };
        let mut c = Classifier::restored(
            InitialList::Emit,
            vec![known("a", "pods"), known("b", "deployments.apps")],
        );
        c.retain_resources(&["pods"]);
        assert_eq!((c.known_rv("a"), c.known_rv("b")), (Some("1"), None));
    }
}
