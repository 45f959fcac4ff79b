//! The watches: list + watch against the kube-apiserver, one stream per scope (a resource in
//! all namespaces, or in each configured namespace), shared by every sink. They know no kind.
//!
//! Entry points: [`run_resource`] resolves one configured resource (waiting for a custom
//! resource whose CRD is not installed yet) and watches its scopes; [`run`] watches one
//! scope. What they see goes as [`Observed`] items into a bounded channel. The channel is the
//! backpressure point: when the pipeline stops taking items, the watch stops reading the
//! apiserver's stream.
//!
//! The objects are carried as the apiserver's JSON bytes; only their metadata is parsed here.
//! A watch never ends on an error: it retries with exponential backoff and logs why, and after
//! `410 Gone` it re-lists so that the classifier can diff. Only credentials or permissions the
//! apiserver rejects stop it, as [`WatchError::Rejected`].

mod attempt;
mod found;
mod parse;
mod passes;
mod request;
mod resource;
mod source;
mod stream;

#[cfg(test)]
mod proptests;

pub use parse::{ListPage, ParseError, WatchLine, parse_list_page, parse_watch_line};
pub use resource::{Target, run_resource, scopes};
pub use source::{Ended, WatchSettings, run};
pub use stream::{LineOutcome, Stream};

use serde::{Deserialize, Serialize};

use crate::classify::{Object, Scope};

/// Whether the initial state is requested as a watch stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamingList {
    /// The faster way as measured (BENCHMARKS.md, issue 48): paginated lists, the next page
    /// asked for while one is handed on. The apiserver sends 10,000 pods in pages of 500 in
    /// about 1.1 times the time of one LIST and streamed in about 1.8 times; a page bounds
    /// kubecast's memory as a stream does, at one or two pages.
    #[default]
    Auto,
    /// A watch stream (`sendInitialEvents`); paginated lists if the apiserver rejects it.
    On,
    /// Always paginated lists.
    Off,
}

/// What a watch reports to the pipeline, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A (re-)list of `scope` begins.
    ListStart { scope: Scope },
    /// One object of that list.
    Listed { scope: Scope, object: Object },
    /// The list is complete, at resourceVersion `rv`; the watch goes on from there.
    ListDone { scope: Scope, rv: String },
    /// An object added or modified on the watch.
    Applied { scope: Scope, object: Object },
    /// An object deleted on the watch.
    Deleted { scope: Scope, object: Object },
    /// The apiserver's bookmark: the watch has seen everything up to `rv`.
    Bookmark { scope: Scope, rv: String },
    /// The resource is no longer served (its CRD was deleted): every object still known in
    /// the scope is gone (inferred deletes), and the next watch lists afresh.
    Unserved { scope: Scope },
}

/// Why a watch stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Retrying cannot help: the apiserver rejected kubecast's credentials or permissions.
    #[error("watching {scope}: {what}")]
    Rejected {
        scope: String,
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Discovery refused kubecast, or a resource name stopped resolving for good.
    #[error("watching {name}")]
    Discovery {
        name: String,
        #[source]
        source: crate::kinds::discovery::DiscoveryError,
    },
}
