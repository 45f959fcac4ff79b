//! The label sets of kubecast's metrics families ([`super::metrics`]), and how a watch
//! scope's name becomes labels.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};

/// The label of a change type.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // The values are the label values.
pub enum Kind {
    added,
    modified,
    deleted,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TypeLabel {
    pub(super) r#type: Kind,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(super) enum AlertState {
    firing,
    resolved,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AlertLabel {
    pub(super) state: AlertState,
}

/// What became of an event at a sink.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// The destination acknowledged it.
    delivered,
    /// It can never be delivered; it went to the dead-letter destination.
    dead_lettered,
    /// The sink's queue was full (`when_full: drop`).
    dropped,
    /// A newer `modified` of the same pod replaced it in the queue (`when_full: coalesce`).
    coalesced,
    /// Sent again: after a reconnect (MQTT), or after a restart from the state directory.
    retried,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SinkOutcome {
    pub(super) sink: String,
    pub(super) outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SinkLabel {
    pub(super) sink: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct InstanceLabel {
    pub(super) sink: String,
    /// An Alertmanager instance's URL, as logs show it.
    pub(super) instance: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CodeLabel {
    pub(super) sink: String,
    pub(super) code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScopeLabel {
    /// A namespace, or `*` for all namespaces.
    pub(super) scope: String,
    /// The watched resource (`pods`, `deployments.apps`).
    pub(super) resource: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResourceLabel {
    pub(super) resource: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabel {
    pub(super) version: String,
}

/// Why a watch started again (`kubecast_watch_restarts_total`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RestartLabel {
    /// The watched resource (`pods`, `deployments.apps`).
    pub(super) resource: String,
    /// `connection`, `silent`, `error`, `unreadable` or `ended_early`.
    pub(super) reason: String,
}

/// A watch scope's labels: `*` or `shop` are Pods' scopes; `deployments.apps/*` another
/// resource's.
pub(super) fn scope_label(scope: &str) -> ScopeLabel {
    let (resource, ns) = scope
        .split_once('/')
        .unwrap_or((crate::model::legacy::PODS, scope));
    ScopeLabel {
        scope: ns.to_string(),
        resource: resource.to_string(),
    }
}

/// Who filters a sharded watch's objects by shard (`kubecast_watch_shard_filter`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // The values are the label values.
pub(super) enum FilterPlace {
    /// The apiserver (sharded list and watch).
    server,
    /// kubecast, by the same hash: the apiserver sent every object.
    client,
}

/// A resource's shard filter and where it runs.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShardFilterLabel {
    pub(super) resource: String,
    pub(super) r#where: FilterPlace,
}
