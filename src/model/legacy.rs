//! State written when kubecast watched Pods only: durable-log records, snapshot entries,
//! routing states and exactly-once checkpoint records that name no resource. Such a record
//! is a Pod's; Pods' records still leave the resource out, so old and new readers agree.
//! This is the one place that rule is written down.

/// The key of the resource every record without one belongs to.
pub const PODS: &str = "pods";

/// [`PODS`] as an owned string: the serde default of a record's `resource`.
pub fn pods() -> String {
    PODS.to_string()
}

/// [`PODS`] as a shared string: the serde default of an object's `resource`.
pub fn pods_key() -> std::sync::Arc<str> {
    PODS.into()
}

/// The resource a record names, reading an empty one as Pods'.
pub fn resource_of(stored: &str) -> &str {
    if stored.is_empty() { PODS } else { stored }
}

/// The resource as a record stores it: empty for Pods, as before other kinds were watched.
pub fn stored_resource(resource: &str) -> &str {
    if resource == PODS { "" } else { resource }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_without_a_resource_is_a_pods_and_pods_are_stored_without_one() {
        assert_eq!(resource_of(""), "pods");
        assert_eq!(resource_of("deployments.apps"), "deployments.apps");
        assert_eq!(stored_resource("pods"), "");
        assert_eq!(stored_resource("nodes"), "nodes");
    }
}
