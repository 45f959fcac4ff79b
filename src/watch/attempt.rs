//! What one attempt of a scope's list or watch ends with ([`Next`] or a [`Failure`]), and
//! how a request error is sorted into them ([`classify`]).

use crate::classify::Scope;

/// What one attempt ended with.
pub(super) enum Next {
    /// Watch again from the position reached.
    Resume,
    /// The resourceVersion is gone (410) or the list was cut short: list again.
    Relist,
    /// The pipeline went away: stop.
    Closed,
    /// The resync period passed: list again.
    Resync,
    /// The resource is no longer served (404 on a custom resource): its CRD was deleted.
    Unserved,
}

/// Why an attempt failed.
pub(super) enum Failure {
    /// The apiserver refuses kubecast (`what` says how).
    Fatal { what: String, source: kube::Error },
    /// Worth another try after a backoff; `relist` when the position was lost too.
    Retry {
        reason: String,
        relist: bool,
        /// What went wrong, as the restarts metric counts it.
        cause: Cause,
    },
    /// The apiserver refused `sendInitialEvents`: use paginated lists from now on.
    NoStreaming(String),
}

pub(super) type Attempt = Result<Next, Failure>;

/// Why a watch or list is started again after a failure: the `reason` label of
/// `kubecast_watch_restarts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// The connection failed (refused, reset, or dropped by TCP keepalive as dead).
    Connection,
    /// Neither an event nor a bookmark came for `kubernetes.keepalive.watch_silence_seconds`.
    Silent,
    /// The apiserver answered with an error (5xx, 429, an error status on the watch).
    Error,
    /// A list page could not be read.
    Unreadable,
    /// A streaming list ended before its initial events did.
    EndedEarly,
}

impl Cause {
    /// The metric's label value.
    pub(super) fn label(self) -> &'static str {
        match self {
            Cause::Connection => "connection",
            Cause::Silent => "silent",
            Cause::Error => "error",
            Cause::Unreadable => "unreadable",
            Cause::EndedEarly => "ended_early",
        }
    }
}

/// Sorts a request error: `410 Gone` means list again; rejected credentials or permissions
/// are fatal; `404` means a custom resource is no longer served; anything else (connection
/// refused, timeouts, 5xx, 429) is retried.
pub(super) fn classify(e: kube::Error, scope: &Scope) -> Attempt {
    let custom = crate::kinds::resolve::is_custom_group(&scope.resource.group);
    match e {
        kube::Error::Api(s) if s.code == 410 => Ok(Next::Relist),
        kube::Error::Api(s) if s.code == 404 && custom => Ok(Next::Unserved),
        // A saved resourceVersion this apiserver has never reached (state from another
        // cluster, or etcd restored from an older backup): nothing to resume, list again.
        kube::Error::Api(s)
            if s.code == 504 && s.message.contains("Too large resource version") =>
        {
            tracing::warn!(reason = %s.message, "the saved resourceVersion is ahead of this apiserver; listing again");
            Ok(Next::Relist)
        }
        kube::Error::Api(ref s) if s.code == 401 => Err(Failure::Fatal {
            what: "the apiserver rejected kubecast's credentials (401 Unauthorized)".into(),
            source: e,
        }),
        kube::Error::Api(ref s) if s.code == 403 => {
            let verb = if s.message.contains("cannot watch") {
                "watch"
            } else {
                "list"
            };
            Err(Failure::Fatal {
                what: format!(
                    "kubecast may not {verb} {} (403 Forbidden); grant `list` and `watch` on `{}`",
                    scope.resource, scope.resource
                ),
                source: e,
            })
        }
        kube::Error::Api(s) => Err(Failure::Retry {
            reason: format!("{} {}: {}", s.code, s.reason, s.message),
            relist: false,
            cause: Cause::Error,
        }),
        other => Err(Failure::Retry {
            reason: other.to_string(),
            relist: false,
            cause: Cause::Connection,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        let status: kube::core::Status =
            serde_json::from_value(serde_json::json!({"code": code, "message": message}))
                .expect("a Status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn request_errors_are_sorted_into_relist_fatal_and_retry() {
        let pods = Scope::all_pods();
        let classify = |e| classify(e, &pods);
        assert!(matches!(
            classify(api(410, "too old resource version")),
            Ok(Next::Relist)
        ));
        assert!(matches!(
            classify(api(504, "Too large resource version: 99, current: 5")),
            Ok(Next::Relist)
        ));
        assert!(matches!(
            classify(api(504, "the server was slow")),
            Err(Failure::Retry { .. })
        ));
        assert!(matches!(
            classify(api(401, "Unauthorized")),
            Err(Failure::Fatal { .. })
        ));
        assert!(matches!(
            classify(api(403, "forbidden")),
            Err(Failure::Fatal { .. })
        ));
        assert!(matches!(
            classify(api(500, "etcd down")),
            Err(Failure::Retry { relist: false, .. })
        ));
        // A built-in resource that answers 404 is an apiserver in trouble, not a deleted CRD.
        assert!(matches!(
            classify(api(404, "not found")),
            Err(Failure::Retry { .. })
        ));
    }

    #[test]
    fn a_forbidden_watch_names_the_verb_and_the_resource_it_lacks() {
        let d = Scope::new(
            Arc::new(crate::kinds::Resource::new(
                "apps",
                "v1",
                "Deployment",
                "deployments",
                true,
            )),
            None,
        );
        let e = api(
            403,
            r#"deployments.apps is forbidden: User "x" cannot watch resource "deployments" in API group "apps" at the cluster scope"#,
        );
        let Err(Failure::Fatal { what, .. }) = classify(e, &d) else {
            panic!("not fatal")
        };
        assert!(what.contains("may not watch deployments.apps"), "{what}");
        let w = Scope::new(
            Arc::new(crate::kinds::Resource::new(
                "example.com",
                "v1",
                "Widget",
                "widgets",
                true,
            )),
            None,
        );
        assert!(matches!(
            classify(api(404, "not found"), &w),
            Ok(Next::Unserved)
        ));
    }
}
