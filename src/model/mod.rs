//! The ground floor: what every stage says about an object and its changes, so that the
//! watch, the classifier, routing, the events, the durable store, the sinks' checkpoints and
//! replay share one vocabulary instead of each spelling it out.
//!
//! It holds [`ObjectRef`] (which object: resource, namespace, name, uid; [`ObjectKey`]
//! borrowed), [`KnownObject`]
//! (an object as known at one resourceVersion), [`ChangeKind`] (what happened to it),
//! [`FieldPath`] (a path into an object's fields), [`Shard`] (which of the replicas' shards
//! an object's uid hashes into) and [`legacy`], the one place that reads state written when
//! kubecast watched Pods only. It imports nothing of the crate.

mod change;
pub mod legacy;
mod object;
mod path;
mod shard;

pub use change::ChangeKind;
pub use object::{KnownObject, ObjectKey, ObjectRef};
pub use path::{FieldPath, PathError, Step};
pub use shard::{Floors, Shard, continue_from, fnv1a64};
