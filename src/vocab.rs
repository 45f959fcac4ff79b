//! The words the config and its components share: a validation [`Issue`] (a field path and
//! what is wrong), the name checks, the [`DataMode`] and the [`Compat`] shape. A leaf: it depends on nothing of
//! kubecast's, so `config` (which gathers every component's config) and the components
//! (which report issues in their own validation) both use it and the dependencies run one way.

use serde::{Deserialize, Serialize};

/// One problem: the field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub field: String,
    pub message: String,
}

impl Issue {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Adds "must be at least `min`" for `field` to `issues` when `value` is below `min`.
    pub fn at_least(issues: &mut Vec<Issue>, field: impl Into<String>, value: u64, min: u64) {
        if value < min {
            issues.push(Issue::new(field, format!("must be at least {min}")));
        }
    }
}

/// A name of the config's own choosing (a sink's, a route's): letters, digits, `-`, `_`.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
}

/// A DNS-1123 label: 1 to 63 of [a-z0-9-], not beginning or ending with `-`.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The data modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataMode {
    /// The object without `metadata.managedFields`, with redactions applied.
    #[default]
    Full,
    /// A compact summary of the object's state (per kind).
    Summary,
    /// Only the object's identity.
    Reference,
}

/// A compatibility shape for events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compat {
    /// Knative Eventing's ApiServerSource.
    Apiserversource,
}
