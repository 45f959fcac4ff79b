//! The Pod watch: list + watch against the kube-apiserver, one stream per scope (all
//! namespaces, or one per configured namespace), shared by every sink.
//!
//! Entry point: [`run`] watches one scope and sends what it sees as [`Observed`] items into
//! a bounded channel. The channel is the backpressure point: when the
//! pipeline stops taking items, the watch stops reading the apiserver's stream.
//!
//! The objects are carried as the apiserver's JSON bytes; only their metadata is parsed here.
//! A watch never ends on an error: it retries with exponential backoff and logs why, and after
//! `410 Gone` it re-lists so that the classifier can diff. Only credentials or permissions the
//! apiserver rejects stop it, as [`WatchError::Fatal`].

mod parse;
mod request;
mod source;
mod stream;

#[cfg(test)]
mod proptests;

pub use parse::{ListPage, ParseError, WatchLine, parse_list_page, parse_watch_line};
pub use source::{WatchSettings, run};
pub use stream::{LineOutcome, Stream};

use crate::classify::{PodObject, Scope};

/// What a watch reports to the pipeline, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A (re-)list of `scope` begins.
    ListStart { scope: Scope },
    /// One pod of that list.
    Listed { scope: Scope, pod: PodObject },
    /// The list is complete, at resourceVersion `rv`; the watch goes on from there.
    ListDone { scope: Scope, rv: String },
    /// A pod added or modified on the watch.
    Applied { scope: Scope, pod: PodObject },
    /// A pod deleted on the watch.
    Deleted { scope: Scope, pod: PodObject },
    /// The apiserver's bookmark: the watch has seen everything up to `rv`.
    Bookmark { scope: Scope, rv: String },
}

/// Why a watch stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Retrying cannot help: the apiserver rejected kubecast's credentials or permissions.
    #[error("watching pods{scope}: {what}")]
    Rejected {
        scope: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// `" in namespace NS"` or `" in all namespaces"`, for messages.
pub(crate) fn describe(scope: &Scope) -> String {
    match scope {
        Some(ns) => format!(" in namespace {ns}"),
        None => " in all namespaces".to_string(),
    }
}
