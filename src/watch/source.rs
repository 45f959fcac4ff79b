//! The list-then-watch loop of one scope (one resource, in a namespace or in all). Entry
//! point: [`run`].
//!
//! The loop keeps one thing: the resourceVersion to resume from. Without one it lists
//! (paginated pages, or with `streaming_list: on` a streaming list where the apiserver
//! offers it); with one it
//! watches. A watch that ends normally is reopened from the last resourceVersion seen (a
//! bookmark or an object), and so is one that failed or brought nothing (no event, no
//! bookmark) for `silence`; `410 Gone` drops it and lists again, and the classifier turns the
//! new list into the real differences. A `404` on a custom resource asks discovery: served at
//! another version, the scope follows the preferred one and lists again; gone, its objects'
//! deletes are inferred; anything else infers nothing and retries.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::attempt::{Attempt, Cause, Failure, Next, classify};
use super::found::{self, Found};
use super::parse::parse_list_page;
use super::passes::passes;
use super::request::{ListRequest, WatchRequest};
use super::stream::{LineOutcome, Stream};
use super::{Observed, StreamingList, WatchError};
use crate::backoff::Backoff;
use crate::classify::Scope;
use crate::model::Shard;
use crate::ops::Ops;

/// How the watches of one resource run; shared by its scopes.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub page_size: u32,
    pub timeout_seconds: u32,
    /// A watch that brings neither an event nor a bookmark for this long is taken for dead
    /// (`kubernetes.keepalive.watch_silence_seconds`).
    pub silence: Duration,
    pub max_backoff: Duration,
    pub streaming: StreamingList,
    /// List again this often (`watch.resync_seconds`): the known state is compared with a
    /// fresh list, so anything the watch missed is emitted; unchanged pods emit nothing.
    pub resync: Option<Duration>,
    /// Where requests, lists and 410s are counted, and readiness is told when a scope has
    /// synced.
    pub ops: Arc<Ops>,
    /// With `sharding`, the one shard whose objects this watch passes on: asked of the
    /// apiserver (`shardSelector`) and checked again here, since an apiserver without
    /// sharded list and watch sends everything.
    pub shard: Option<Shard>,
    /// After a change of shard count: the changes the earlier count's shards had passed on,
    /// which a watch resumed from the earliest of their positions leaves out.
    pub floors: Option<Arc<crate::model::Floors>>,
}

/// After this many consecutive attempts to resume that the apiserver answered with an error,
/// the scope is listed again instead.
const RELIST_AFTER: u32 = 3;

/// How a scope's watch ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The pipeline closed the channel.
    Closed,
    /// The resource is no longer served (`Observed::Unserved` was sent).
    Unserved,
}

/// Watches `scope`, from `resume` if given (else with a list). Ends when `out` is closed or
/// the resource stops being served, and with an error only when retrying cannot help.
pub async fn run(
    client: kube::Client,
    scope: Scope,
    settings: Arc<WatchSettings>,
    resume: Option<String>,
    out: mpsc::Sender<Observed>,
) -> Result<Ended, WatchError> {
    let shard_selector = settings.shard.map(|s| s.selector());
    let mut w = Watch {
        client,
        scope,
        shard_selector,
        filter_known: false,
        settings,
        out,
        position: resume,
        next_resync: None,
        heard: tokio::time::Instant::now(),
    };
    w.run().await
}

struct Watch {
    client: kube::Client,
    scope: Scope,
    /// The shard's `shardSelector`, with `sharding`.
    shard_selector: Option<String>,
    /// Whether it is known yet who filters by shard (the apiserver or kubecast).
    filter_known: bool,
    settings: Arc<WatchSettings>,
    out: mpsc::Sender<Observed>,
    /// The resourceVersion everything up to which has been passed on: where the next watch
    /// starts. Moved by every object and bookmark read, so that a watch that fails resumes
    /// where it stopped instead of replaying older states. `None`: list first.
    position: Option<String>,
    /// When the next resync is due, with `watch.resync_seconds`.
    next_resync: Option<tokio::time::Instant>,
    /// When the apiserver last sent something on this scope's list or watch: how long a
    /// failed watch was silent.
    heard: tokio::time::Instant,
}

impl Watch {
    async fn run(&mut self) -> Result<Ended, WatchError> {
        let mut streaming = self.settings.streaming == StreamingList::On;
        let mut backoff = Backoff::new(Duration::from_millis(250), self.settings.max_backoff);
        let ns = self.scope.label().to_string();
        // Consecutive attempts to resume that the apiserver answered with an error.
        let mut refused = 0u32;
        self.next_resync = self
            .settings
            .resync
            .map(|d| tokio::time::Instant::now() + d);
        loop {
            if self.shard_selector.is_some() && !self.filter_known {
                self.filter_known = self.probe_shard_filter().await;
            }
            let attempt = match (self.position.clone(), streaming) {
                (Some(from), _) => self.watch(from, false).await,
                (None, true) => self.watch(String::new(), true).await,
                (None, false) => self.list().await,
            };
            if attempt.is_ok() {
                refused = 0;
            }
            match attempt {
                Ok(Next::Closed) => return Ok(Ended::Closed),
                // A 404 is no evidence that anything was deleted (a version no longer served,
                // an apiserver lagging behind its peers): discovery decides.
                Ok(Next::Unserved) => {
                    match found::found(&self.client, &self.scope.resource).await {
                        Found::Gone => {
                            tracing::warn!(scope = %ns, "the resource is no longer served, and discovery confirms it (its CRD was deleted): its objects are gone");
                            self.position = None;
                            let sent = self
                                .send(Observed::Unserved {
                                    scope: self.scope.clone(),
                                })
                                .await;
                            return Ok(if sent { Ended::Unserved } else { Ended::Closed });
                        }
                        Found::At(r) if r.api_version() != self.scope.resource.api_version() => {
                            tracing::warn!(scope = %ns, from = %self.scope.resource.api_version(), to = %r.api_version(),
                            "the resource is no longer served at its version; following its preferred served version and listing again (unchanged objects emit nothing)");
                            self.scope = Scope::new(r, self.scope.namespace.as_deref());
                            self.position = None;
                            backoff.reset();
                        }
                        Found::At(_) => {
                            let wait = backoff.next_delay();
                            tracing::warn!(scope = %ns, retry_in_ms = wait.as_millis() as u64,
                            "the apiserver answered 404, but discovery still serves the resource at this version (an apiserver behind its peers?); nothing inferred, retrying");
                            tokio::time::sleep(wait).await;
                        }
                        Found::Unknown(reason) => {
                            let wait = backoff.next_delay();
                            tracing::warn!(scope = %ns, %reason, retry_in_ms = wait.as_millis() as u64,
                            "the apiserver answered 404 and discovery did not prove the resource gone; nothing inferred, retrying");
                            tokio::time::sleep(wait).await;
                        }
                    }
                }
                Ok(Next::Resume) => backoff.reset(),
                Ok(Next::Resync) => {
                    tracing::info!(scope = %ns, "resync: listing again to compare with the known state");
                    self.position = None;
                    self.next_resync = self
                        .settings
                        .resync
                        .map(|d| tokio::time::Instant::now() + d);
                }
                Ok(Next::Relist) => {
                    self.settings.ops.metrics.gone(&ns);
                    tracing::info!(scope = %ns, "resourceVersion expired (410 Gone); listing again");
                    self.position = None;
                }
                Err(Failure::Fatal { what, source }) => {
                    tracing::error!(scope = %ns, reason = %what, error = %source, "watch stopped: the apiserver refuses kubecast");
                    return Err(WatchError::Rejected {
                        scope: self.scope.describe(),
                        what,
                        source,
                    });
                }
                Err(Failure::NoStreaming(reason)) => {
                    tracing::info!(scope = %ns, %reason, "the apiserver does not offer streaming lists; using paginated lists");
                    streaming = false;
                }
                Err(Failure::Retry {
                    reason,
                    mut relist,
                    cause,
                }) => {
                    // The apiserver refusing to resume from this position again and again
                    // (a 500 for an event whose history etcd compacted away, say): list again,
                    // as client-go's reflector does after a failed watch. Nothing is lost: the
                    // classifier diffs the list against the known state.
                    refused = if cause == Cause::Error && self.position.is_some() {
                        refused + 1
                    } else {
                        0
                    };
                    if refused >= RELIST_AFTER {
                        refused = 0;
                        relist = true;
                    }
                    let wait = backoff.next_delay();
                    let silent_s = self.heard.elapsed().as_secs();
                    self.settings.ops.metrics.watch_restart(&ns, cause.label());
                    tracing::warn!(scope = %ns, resource = %self.scope.resource, %reason, cause = %cause.label(), silent_s,
                        retry_in_ms = wait.as_millis() as u64, relist, "watch failed; retrying");
                    if relist {
                        self.position = None;
                    }
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// The scope's label in metrics and readiness: `*` or the namespace for Pods,
    /// `deployments.apps/*` for other resources.
    fn label(&self) -> &str {
        self.scope.label()
    }

    async fn send(&self, item: Observed) -> bool {
        self.out.send(item).await.is_ok()
    }

    /// Asks for one object of the shard to learn whether the apiserver filters by shard (it
    /// echoes the selector in `metadata.shardInfo`); says so once per resource, at INFO and
    /// in `kubecast_watch_shard_filter`. Objects of other shards are dropped here either way.
    /// `false` when the apiserver could not be asked (asked again before the next attempt).
    async fn probe_shard_filter(&mut self) -> bool {
        let s = self.settings.clone();
        let req = ListRequest {
            label_selector: s.label_selector.as_deref(),
            field_selector: s.field_selector.as_deref(),
            shard_selector: self.shard_selector.as_deref(),
            limit: 1,
            continue_token: None,
        }
        .to_http(&self.scope);
        let sharded = match self.client.request_text(req).await {
            Ok(body) => match parse_list_page(Bytes::from(body)) {
                Ok((page, _)) => page.sharded,
                Err(_) => return false,
            },
            Err(_) => return false,
        };
        let resource = self.scope.resource.key().to_string();
        if s.ops.metrics.shard_filter(&resource, sharded) {
            if sharded {
                tracing::info!(%resource, "the apiserver filters this resource's list and watch by shard");
            } else {
                tracing::info!(%resource, "the apiserver does not filter this resource by shard (sharded list and watch off, or an older apiserver): kubecast receives every object and keeps its shard's");
            }
        }
        true
    }

    /// A paginated list, then `ListDone` with the list's resourceVersion.
    async fn list(&mut self) -> Attempt {
        let s = self.settings.clone();
        s.ops.metrics.list(self.label());
        if !self
            .send(Observed::ListStart {
                scope: self.scope.clone(),
            })
            .await
        {
            return Ok(Next::Closed);
        }
        let mut list_rv: Option<String> = None;
        let mut count = 0usize;
        let page_request = |token: Option<&str>| {
            ListRequest {
                label_selector: s.label_selector.as_deref(),
                field_selector: s.field_selector.as_deref(),
                shard_selector: self.shard_selector.as_deref(),
                limit: s.page_size,
                continue_token: token,
            }
            .to_http(&self.scope)
        };
        let mut fetched = self.client.request_text(page_request(None)).await;
        loop {
            let body = match fetched {
                Ok(b) => Bytes::from(b),
                // A continue token that expired mid-list (410) starts the list over.
                Err(e) => return classify(e, &self.scope),
            };
            self.heard = tokio::time::Instant::now();
            let (page, bad) = parse_list_page(body).map_err(|e| Failure::Retry {
                reason: e.to_string(),
                relist: true,
                cause: Cause::Unreadable,
            })?;
            for e in bad {
                tracing::error!(scope = %self.scope.label(), error = %e, "skipping a listed object the apiserver sent without its identity");
            }
            list_rv.get_or_insert(page.rv);
            count += page.objects.len();
            // The next page is asked for while this one's objects are handed on, so the
            // apiserver prepares it while the pipeline takes these.
            let next = async {
                match page.continue_token.as_deref() {
                    Some(token) => Some(self.client.request_text(page_request(Some(token))).await),
                    None => None,
                }
            };
            let scope = &self.scope;
            let hand_on = async {
                for object in page.objects {
                    let item = Observed::Listed {
                        scope: scope.clone(),
                        object,
                    };
                    if passes(&s, scope.label(), &item) && !self.send(item).await {
                        return false;
                    }
                }
                true
            };
            let (next, handed) = tokio::join!(next, hand_on);
            if !handed {
                return Ok(Next::Closed);
            }
            match next {
                Some(n) => fetched = n,
                None => break,
            }
        }
        let rv = list_rv.unwrap_or_default();
        tracing::info!(scope = %self.scope.label(), objects = count, resource_version = %rv, "list complete");
        if !self
            .send(Observed::ListDone {
                scope: self.scope.clone(),
                rv: rv.clone(),
            })
            .await
        {
            return Ok(Next::Closed);
        }
        self.position = Some(rv);
        s.ops.health.synced(self.label());
        Ok(Next::Resume)
    }

    /// A watch from `from`, or (with `initial`) a streaming list followed by its watch.
    async fn watch(&mut self, from: String, initial: bool) -> Attempt {
        let s = self.settings.clone();
        let req = WatchRequest {
            label_selector: s.label_selector.as_deref(),
            field_selector: s.field_selector.as_deref(),
            shard_selector: self.shard_selector.as_deref(),
            resource_version: if initial { None } else { Some(&from) },
            initial_events: initial,
            timeout_seconds: s.timeout_seconds,
        }
        .to_http(&self.scope);
        s.ops.metrics.watch_request(self.label());
        if initial {
            s.ops.metrics.list(self.label());
        }
        let mut reader = match self.client.request_stream(req).await {
            Ok(r) => Box::pin(r),
            Err(kube::Error::Api(status)) if initial && matches!(status.code, 400 | 422) => {
                return Err(Failure::NoStreaming(status.message.clone()));
            }
            Err(e) => return classify(e, &self.scope),
        };
        if initial
            && !self
                .send(Observed::ListStart {
                    scope: self.scope.clone(),
                })
                .await
        {
            return Ok(Next::Closed);
        }
        if !initial {
            // A resumed watch is open: the known state from before is current from here on.
            s.ops.health.synced(self.label());
        }
        let label = self.label().to_string();
        let mut stream = Stream::new(self.scope.clone(), &mut self.position, initial);
        // The apiserver sends a bookmark about once a minute: a longer silence is a dead
        // connection (or a stream lost behind a proxy that keeps TCP alive).
        let idle = s.silence;
        self.heard = tokio::time::Instant::now();
        let mut buf = Vec::with_capacity(16 * 1024);
        loop {
            buf.clear();
            let resync_at = self.next_resync.filter(|_| !stream.in_initial());
            let read = async {
                match resync_at {
                    Some(at) => tokio::select! {
                        r = tokio::time::timeout(idle, reader.read_until(b'\n', &mut buf)) => Some(r),
                        _ = tokio::time::sleep_until(at) => None,
                    },
                    None => {
                        Some(tokio::time::timeout(idle, reader.read_until(b'\n', &mut buf)).await)
                    }
                }
            };
            let Some(read) = read.await else {
                return Ok(Next::Resync);
            };
            let n = match read {
                Err(_) => {
                    return Err(Failure::Retry {
                        reason: format!(
                            "neither an event nor a bookmark for {}s (kubernetes.keepalive.watch_silence_seconds)",
                            idle.as_secs()
                        ),
                        relist: stream.in_initial(),
                        cause: Cause::Silent,
                    });
                }
                Ok(Err(e)) => {
                    return Err(Failure::Retry {
                        reason: format!("reading the watch stream: {e}"),
                        relist: stream.in_initial(),
                        cause: Cause::Connection,
                    });
                }
                Ok(Ok(n)) => n,
            };
            self.heard = tokio::time::Instant::now();
            if n == 0 || buf.last() != Some(&b'\n') {
                // The apiserver ended the request (its timeout) or the connection closed.
                return if stream.in_initial() {
                    Err(Failure::Retry {
                        reason: "the streaming list ended early".into(),
                        relist: true,
                        cause: Cause::EndedEarly,
                    })
                } else {
                    Ok(Next::Resume)
                };
            }
            let item = match stream.on_line(Bytes::copy_from_slice(&buf[..n - 1])) {
                LineOutcome::Emit(item) => {
                    if matches!(item, Observed::ListDone { .. }) {
                        s.ops.health.synced(&label);
                    }
                    item
                }
                LineOutcome::Nothing => continue,
                LineOutcome::Skipped(e) => {
                    tracing::error!(error = %crate::error_chain(&e), "skipping a watch event kubecast cannot read");
                    continue;
                }
                LineOutcome::Gone => return Ok(Next::Relist),
                LineOutcome::Failed { code, message } => {
                    return Err(Failure::Retry {
                        reason: format!("the apiserver ended the watch: {code} {message}"),
                        relist: stream.in_initial(),
                        cause: Cause::Error,
                    });
                }
            };
            if passes(&s, &label, &item) && self.out.send(item).await.is_err() {
                return Ok(Next::Closed);
            }
        }
    }
}
