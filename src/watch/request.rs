//! The list and watch requests of a scope (any resource), built as plain HTTP requests so
//! that the responses can be read as bytes (kube's typed API would deserialize every object).

use http::Request;

use crate::classify::Scope;

/// The collection path of a scope.
fn path(scope: &Scope) -> String {
    scope.resource.collection_path(scope.namespace.as_deref())
}

fn build(
    scope: &Scope,
    query: form_urlencoded::Serializer<'_, String>,
    watch: bool,
) -> Request<Vec<u8>> {
    let mut query = query;
    let uri = format!("{}?{}", path(scope), query.finish());
    let mut builder = Request::get(uri).header(http::header::ACCEPT, "application/json");
    if watch {
        // A watch stream is read line by line as it arrives; no compression.
        builder = builder.header(http::header::ACCEPT_ENCODING, "identity");
    }
    // The URI is built from a path of DNS labels and a urlencoded query, so it always parses.
    builder.body(Vec::new()).unwrap_or_default()
}

fn selectors(
    q: &mut form_urlencoded::Serializer<'_, String>,
    label: Option<&str>,
    field: Option<&str>,
    shard: Option<&str>,
) {
    if let Some(l) = label {
        q.append_pair("labelSelector", l);
    }
    if let Some(f) = field {
        q.append_pair("fieldSelector", f);
    }
    if let Some(s) = shard {
        q.append_pair("shardSelector", s);
    }
}

/// One page of a paginated list.
#[derive(Debug, Clone, Default)]
pub struct ListRequest<'a> {
    pub label_selector: Option<&'a str>,
    pub field_selector: Option<&'a str>,
    /// The shard's `shardSelector` ([`crate::model::Shard::selector`]).
    pub shard_selector: Option<&'a str>,
    pub limit: u32,
    /// The `continue` token of the previous page.
    pub continue_token: Option<&'a str>,
}

impl ListRequest<'_> {
    pub fn to_http(&self, scope: &Scope) -> Request<Vec<u8>> {
        let mut q = form_urlencoded::Serializer::new(String::new());
        selectors(
            &mut q,
            self.label_selector,
            self.field_selector,
            self.shard_selector,
        );
        q.append_pair("limit", &self.limit.to_string());
        if let Some(c) = self.continue_token {
            q.append_pair("continue", c);
        }
        build(scope, q, false)
    }
}

/// A watch from a resourceVersion, or a streaming list (`sendInitialEvents`).
#[derive(Debug, Clone, Default)]
pub struct WatchRequest<'a> {
    pub label_selector: Option<&'a str>,
    pub field_selector: Option<&'a str>,
    /// The shard's `shardSelector`.
    pub shard_selector: Option<&'a str>,
    /// Where to resume; `None` with `initial_events` asks for the current state first.
    pub resource_version: Option<&'a str>,
    /// Ask for every existing pod as `ADDED` first, ended by a bookmark.
    pub initial_events: bool,
    pub timeout_seconds: u32,
}

impl WatchRequest<'_> {
    pub fn to_http(&self, scope: &Scope) -> Request<Vec<u8>> {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("watch", "true");
        selectors(
            &mut q,
            self.label_selector,
            self.field_selector,
            self.shard_selector,
        );
        q.append_pair("allowWatchBookmarks", "true");
        q.append_pair("timeoutSeconds", &self.timeout_seconds.to_string());
        if self.initial_events {
            q.append_pair("sendInitialEvents", "true");
            q.append_pair("resourceVersionMatch", "NotOlderThan");
        }
        q.append_pair("resourceVersion", self.resource_version.unwrap_or(""));
        build(scope, q, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaced_list_page_carries_selectors_limit_and_continue() {
        let r = ListRequest {
            label_selector: Some("app=web,tier!=cache"),
            field_selector: None,
            limit: 50,
            continue_token: Some("abc=="),
            ..Default::default()
        }
        .to_http(&Scope::new(crate::kinds::Resource::pods(), Some("team-a")));
        assert_eq!(
            r.uri().to_string(),
            "/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb%2Ctier%21%3Dcache&limit=50&continue=abc%3D%3D"
        );
    }

    #[test]
    fn a_streaming_list_asks_for_initial_events_and_bookmarks() {
        let r = WatchRequest {
            initial_events: true,
            timeout_seconds: 300,
            ..Default::default()
        }
        .to_http(&Scope::all_pods());
        let uri = r.uri().to_string();
        assert!(uri.starts_with("/api/v1/pods?watch=true"), "{uri}");
        for part in [
            "allowWatchBookmarks=true",
            "sendInitialEvents=true",
            "resourceVersionMatch=NotOlderThan",
            "timeoutSeconds=300",
        ] {
            assert!(uri.contains(part), "{uri} lacks {part}");
        }
        assert_eq!(r.headers()[http::header::ACCEPT_ENCODING], "identity");
    }

    #[test]
    fn a_shards_list_and_watch_carry_its_shard_selector() {
        let selector = crate::model::Shard::new(1, 2).unwrap().selector();
        let scope = Scope::all_pods();
        let list = ListRequest {
            shard_selector: Some(&selector),
            limit: 10,
            ..Default::default()
        }
        .to_http(&scope);
        let watch = WatchRequest {
            shard_selector: Some(&selector),
            resource_version: Some("7"),
            timeout_seconds: 60,
            ..Default::default()
        }
        .to_http(&scope);
        let encoded = "shardSelector=shardRange%28object.metadata.uid%2C+%270x8000000000000000%27%2C+%270x10000000000000000%27%29";
        for r in [list, watch] {
            let uri = r.uri().to_string();
            assert!(uri.contains(encoded), "{uri}");
        }
    }

    #[test]
    fn a_resumed_watch_names_its_resource_version() {
        let r = WatchRequest {
            resource_version: Some("42"),
            timeout_seconds: 60,
            ..Default::default()
        }
        .to_http(&Scope::new(
            std::sync::Arc::new(crate::kinds::Resource::new(
                "apps",
                "v1",
                "Deployment",
                "deployments",
                true,
            )),
            Some("shop"),
        ));
        let uri = r.uri().to_string();
        assert!(
            uri.starts_with("/apis/apps/v1/namespaces/shop/deployments?watch=true"),
            "{uri}"
        );
        assert!(uri.ends_with("resourceVersion=42"), "{uri}");
        assert!(!uri.contains("sendInitialEvents"), "{uri}");
    }
}
