//! Aspects that only one kind's objects have (a Pod's phase, readiness, container states,
//! restart counts, node and IPs): what a route's change predicate can name beyond the
//! aspects every kind has. Each is a name, the resource whose objects have it, and what it
//! feeds into the aspect's fingerprint. Entry point: [`KindAspect`]; the kinds' lists are
//! [`super::own_aspects`].

use std::sync::Arc;

use serde_json::Value;

use super::Resource;

/// Where an aspect's parts go: the route's fingerprint (a hash fed value by value).
pub trait Feed {
    /// A JSON value, in a canonical form.
    fn value(&mut self, v: &Value);
    /// Bytes, such as an object key that is itself the fact.
    fn bytes(&mut self, b: &[u8]);
}

/// One aspect of one kind.
pub struct KindAspect {
    /// The name a predicate uses (`phase`).
    pub name: &'static str,
    /// What the kind's objects are called in messages (`Pods`).
    pub what: &'static str,
    /// The resource whose objects have it.
    pub resource: fn() -> Arc<Resource>,
    /// Feeds the aspect of an object into a fingerprint.
    pub feed: fn(&Value, &mut dyn Feed),
}

impl std::fmt::Debug for KindAspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.name, self.what)
    }
}

impl PartialEq for KindAspect {
    fn eq(&self, other: &KindAspect) -> bool {
        self.name == other.name && self.what == other.what
    }
}

impl Eq for KindAspect {}
