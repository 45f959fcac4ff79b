//! The HTTP sink's config and its validated form ([`HttpConfig::settings`]).
//!
//! Knative's conventions are read here, once, from the environment: with no `url` the sink
//! sends to `K_SINK` (what a SinkBinding or a ContainerSource injects), and `K_CE_OVERRIDES`
//! (`{"extensions": {...}}`) adds its extensions to every event.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sinks::{Common, Secret, Sink, SinkSpec, TlsConfig, url};
use crate::vocab::Issue;

/// `type: http`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Where to POST events: `http://` or `https://`. Default: the `K_SINK` environment
    /// variable (a SinkBinding's or ContainerSource's sink); one of the two is required.
    #[serde(default)]
    pub url: Option<String>,
    /// `binary` (attributes as `ce-` headers, `data` as the body), `structured` (one
    /// `application/cloudevents+json` object) or `batch` (`application/cloudevents-batch+json`,
    /// several events per request). Default: `binary`.
    #[serde(default)]
    pub mode: Mode,
    /// Batch mode's limits: a request goes out when it holds `max_events` events or
    /// `max_bytes` bytes, or when its oldest event has waited `max_ms`.
    /// Default: 100 events, 1048576 bytes, 20 ms.
    #[serde(default)]
    pub batch: BatchConfig,
    /// Extra headers on every request (static values). Default: none.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Time for one request, from sending it to its response; longer counts as a failed
    /// attempt and is retried. Default: 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Requests at once. The events of one object (one `partitionkey`) never overtake each
    /// other: an object's next event waits for its previous one's answer. Default: 16.
    #[serde(default = "default_in_flight")]
    pub in_flight: usize,
    /// TLS for `https://`: the CA to trust and, for mutual TLS, a client certificate.
    /// Default: the system's roots, no client certificate.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Send `Authorization: Bearer` with the token in this file, read again whenever the file
    /// changes (projected service-account tokens rotate). Default: none.
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic authentication's user name. Default: none.
    #[serde(default)]
    pub username: Option<String>,
    /// Basic authentication's password; better set through
    /// `KUBECAST_SINKS__{NAME}__PASSWORD`. Default: none.
    #[serde(default)]
    pub password: Option<Secret>,
    /// `gzip` compresses request bodies (`Content-Encoding: gzip`); the receiver must accept
    /// it. Default: `none`.
    #[serde(default)]
    pub compression: Compression,
    /// Largest request body; an event larger than this on its own goes where `too_large`
    /// says. Default: 4194304 (4 MiB).
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
}

fn default_timeout_ms() -> u64 {
    10_000
}
fn default_in_flight() -> usize {
    16
}
fn default_max_request_bytes() -> usize {
    4 << 20
}

/// The HTTP binding's content mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Binary,
    Structured,
    Batch,
}

/// Request body compression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Gzip,
}

/// `batch:` of an HTTP sink.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Events per request at most. Default: 100.
    #[serde(default = "default_batch_events")]
    pub max_events: usize,
    /// Body bytes per request at most (one event is always let in). Default: 1048576.
    #[serde(default = "default_batch_bytes")]
    pub max_bytes: usize,
    /// How long the oldest waiting event waits for a batch to fill. Default: 20.
    #[serde(default = "default_batch_ms")]
    pub max_ms: u64,
}

fn default_batch_events() -> usize {
    100
}
fn default_batch_bytes() -> usize {
    1 << 20
}
fn default_batch_ms() -> u64 {
    20
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_events: default_batch_events(),
            max_bytes: default_batch_bytes(),
            max_ms: default_batch_ms(),
        }
    }
}

/// The validated HTTP sink.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Where requests go, without the userinfo the config's URL may have held.
    pub url: http::Uri,
    /// The URL as logs and errors show it ([`url::shown`]).
    pub shown_url: String,
    pub mode: Mode,
    /// Events and bytes per request, and the linger (batch mode; 1 event otherwise).
    pub max_events: usize,
    pub max_bytes: usize,
    pub linger: Duration,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub timeout: Duration,
    pub in_flight: usize,
    pub tls: TlsConfig,
    pub auth: Auth,
    pub gzip: bool,
    pub max_request_bytes: usize,
    pub too_large_reference: bool,
    /// `K_CE_OVERRIDES`' extensions, added to every event.
    pub overrides: Vec<(String, String)>,
}

/// How requests authenticate.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(PathBuf),
    Basic(String, Secret),
}

/// Attribute names kubecast sets itself (with the compat shape's extensions):
/// `K_CE_OVERRIDES` may not replace them.
const OWN_ATTRIBUTES: [&str; 24] = [
    "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema",
    "data", "partitionkey", "k8skind", "k8sapiversion", "k8suid", "k8snamespace", "k8sname",
    "k8srv", "k8sprevrv", "k8sinitial", "k8sinferred", "k8struncated", "kind", "apiversion",
    "name", "namespace",
];

impl SinkSpec for HttpConfig {
    fn validate(&self, at: &str, common: &Common, _cluster: &str) -> Result<Box<dyn Sink>, Vec<Issue>> {
        let env = |k: &str| std::env::var(k).ok();
        Ok(Box::new(self.settings(at, common, env)?))
    }
}

impl HttpConfig {
    /// Checks the values; `at` is this sink's field path (`sinks.NAME`), `env` reads
    /// `K_SINK` and `K_CE_OVERRIDES`.
    pub fn settings(
        &self,
        at: &str,
        common: &Common,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<HttpSettings, Vec<Issue>> {
        let mut issues = Vec::new();
        let url = match self.url.clone().or_else(|| env("K_SINK")) {
            None => {
                issues.push(Issue::new(
                    format!("{at}.url"),
                    "is required: set it, or run kubecast where K_SINK is set (a SinkBinding)",
                ));
                None
            }
            Some(text) => match text.parse::<http::Uri>() {
                Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => Some(u),
                _ => {
                    let from = if self.url.is_some() { "" } else { " (from K_SINK)" };
                    issues.push(Issue::new(
                        format!("{at}.url"),
                        format!("`{}`{from} is not an http:// or https:// URL", url::shown(&text)),
                    ));
                    None
                }
            },
        };
        // A user and password in the URL are basic authentication, as with curl; the URL
        // requests go to, and every log line, has none.
        let (url, userinfo) = match url.map(|u| url::userinfo(&u)) {
            Some((u, info)) => (Some(u), info),
            None => (None, None),
        };
        check_tls(&mut issues, at, self.tls.as_ref(), url.as_ref(), "url");
        let mut headers = Vec::new();
        for (k, v) in &self.headers {
            let name = http::HeaderName::from_bytes(k.as_bytes());
            let value = http::HeaderValue::from_str(v);
            match (name, value) {
                (Ok(n), Ok(v)) if !k.to_ascii_lowercase().starts_with("ce-") && !is_managed(&n) => {
                    headers.push((n, v))
                }
                (Ok(_), Ok(_)) => issues.push(Issue::new(
                    format!("{at}.headers.{k}"),
                    "is set by kubecast itself (ce- attributes, Content-Type, Content-Encoding, Authorization)",
                )),
                _ => issues.push(Issue::new(
                    format!("{at}.headers.{k}"),
                    "is not a valid HTTP header name and value",
                )),
            }
        }
        if userinfo.is_some() && (self.username.is_some() || self.bearer_token_file.is_some()) {
            issues.push(Issue::new(
                format!("{at}.url"),
                "holds a user and password (basic authentication) and username or bearer_token_file is set too: use one",
            ));
        }
        let auth = match (&self.bearer_token_file, &self.username, &self.password) {
            (None, None, None) if let Some((user, password)) = userinfo => Auth::Basic(user, Secret(password)),
            (Some(_), Some(_), _) => {
                issues.push(Issue::new(
                    format!("{at}.bearer_token_file"),
                    "and username (basic auth) exclude each other",
                ));
                Auth::None
            }
            (Some(f), None, _) => Auth::Bearer(f.clone()),
            (None, Some(u), p) => Auth::Basic(u.clone(), p.clone().unwrap_or_default()),
            (None, None, Some(_)) => {
                issues.push(Issue::new(format!("{at}.password"), "is set without a username"));
                Auth::None
            }
            (None, None, None) => Auth::None,
        };
        for (field, n, min) in [
            ("in_flight", self.in_flight as u64, 1),
            ("timeout_ms", self.timeout_ms, 100),
            ("max_request_bytes", self.max_request_bytes as u64, 1024),
            ("batch.max_events", self.batch.max_events as u64, 1),
            ("batch.max_bytes", self.batch.max_bytes as u64, 1024),
        ] {
            Issue::at_least(&mut issues, format!("{at}.{field}"), n, min);
        }
        let overrides = match env("K_CE_OVERRIDES") {
            None => Vec::new(),
            Some(text) => overrides(&text).unwrap_or_else(|e| {
                issues.push(Issue::new("K_CE_OVERRIDES", e));
                Vec::new()
            }),
        };
        let batch = self.mode == Mode::Batch;
        match url {
            Some(url) if issues.is_empty() => Ok(HttpSettings {
                shown_url: url::shown(&url.to_string()),
                url,
                mode: self.mode,
                max_events: if batch { self.batch.max_events } else { 1 },
                max_bytes: if batch { self.batch.max_bytes.min(self.max_request_bytes) } else { self.max_request_bytes },
                linger: if batch { Duration::from_millis(self.batch.max_ms) } else { Duration::ZERO },
                headers,
                timeout: Duration::from_millis(self.timeout_ms),
                in_flight: self.in_flight,
                tls: self.tls.clone().unwrap_or_default(),
                auth,
                gzip: self.compression == Compression::Gzip,
                max_request_bytes: self.max_request_bytes,
                too_large_reference: common.too_large == crate::sinks::TooLarge::Reference,
                overrides,
            }),
            _ => Err(issues),
        }
    }
}

/// The issues of `tls` for a sink sending to `url` (its field named `field`): TLS needs an
/// `https://` URL, and a client certificate its key.
pub(crate) fn check_tls(issues: &mut Vec<Issue>, at: &str, tls: Option<&TlsConfig>, url: Option<&http::Uri>, field: &str) {
    let Some(t) = tls else { return };
    if url.is_some_and(|u| u.scheme_str() != Some("https")) {
        issues.push(Issue::new(format!("{at}.tls"), format!("is set but the {field} is not https://")));
    }
    if t.cert_file.is_some() != t.key_file.is_some() {
        issues.push(Issue::new(format!("{at}.tls"), "cert_file and key_file go together"));
    }
}

/// Headers the sink writes itself.
fn is_managed(n: &http::HeaderName) -> bool {
    use http::header::*;
    [CONTENT_TYPE, CONTENT_ENCODING, CONTENT_LENGTH, AUTHORIZATION, HOST].contains(n)
}

/// The extensions of `K_CE_OVERRIDES` (`{"extensions": {"name": "value"}}`), as Knative's
/// sources read it: names are CloudEvents extension names, values strings.
fn overrides(text: &str) -> Result<Vec<(String, String)>, String> {
    // A misspelled member is an error, not an override silently ignored.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Overrides {
        #[serde(default)]
        extensions: BTreeMap<String, String>,
    }
    let o: Overrides = serde_json::from_str(text)
        .map_err(|e| format!("is not {{\"extensions\": {{NAME: \"VALUE\"}}}}: {e}"))?;
    let mut out = Vec::new();
    for (k, v) in o.extensions {
        if k.is_empty() || k.len() > 20 || !k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return Err(format!("extension `{k}`: names are 1 to 20 lower-case letters and digits"));
        }
        if OWN_ATTRIBUTES.contains(&k.as_str()) {
            return Err(format!("extension `{k}` is an attribute kubecast sets itself"));
        }
        out.push((k, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str, env: &[(&str, &str)]) -> Result<HttpSettings, Vec<Issue>> {
        let env: BTreeMap<String, String> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        serde_saphyr::from_str::<HttpConfig>(yaml)
            .unwrap()
            .settings("sinks.h", &Common::default(), |k| env.get(k).cloned())
    }

    fn fields(issues: Vec<Issue>) -> Vec<String> {
        issues.into_iter().map(|i| i.field).collect()
    }

    #[test]
    fn the_url_comes_from_k_sink_when_the_config_has_none() {
        let s = settings("{}", &[("K_SINK", "http://broker-ingress.knative-eventing.svc/ns/default")]).unwrap();
        assert_eq!(s.url.host(), Some("broker-ingress.knative-eventing.svc"));
        assert_eq!((s.mode, s.max_events, s.in_flight), (Mode::Binary, 1, 16));
        let own = settings("url: https://127.0.0.1:8443/\n", &[("K_SINK", "http://other/")]).unwrap();
        assert_eq!(own.url.port_u16(), Some(8443), "the config's url wins over K_SINK");
        assert_eq!(fields(settings("{}", &[]).unwrap_err()), ["sinks.h.url"]);
    }

    #[test]
    fn k_ce_overrides_add_extensions_and_may_not_replace_kubecasts_attributes() {
        let s = settings("url: http://x/\n", &[("K_CE_OVERRIDES", r#"{"extensions":{"team":"shop","tier":"1"}}"#)]).unwrap();
        assert_eq!(s.overrides, [("team".to_string(), "shop".to_string()), ("tier".into(), "1".into())]);
        for bad in [
            r#"{"extensions":{"id":"x"}}"#,
            r#"{"extensions":{"Bad-Name":"x"}}"#,
            "not json",
            r#"{"extension":{"team":"shop"}}"#,
        ] {
            let issues = settings("url: http://x/\n", &[("K_CE_OVERRIDES", bad)]).unwrap_err();
            assert_eq!(fields(issues), ["K_CE_OVERRIDES"], "{bad}");
        }
    }

    #[test]
    fn bad_urls_headers_auth_and_limits_are_named() {
        let yaml = "url: ftp://x\ntls: {cert_file: /c.pem}\nheaders: {ce-id: x, Content-Type: y, 'a b': c}\n\
                    bearer_token_file: /t\nusername: u\nin_flight: 0\nbatch: {max_events: 0}\n";
        assert_eq!(
            fields(settings(yaml, &[]).unwrap_err()),
            [
                "sinks.h.url",
                "sinks.h.tls",
                "sinks.h.headers.Content-Type",
                "sinks.h.headers.a b",
                "sinks.h.headers.ce-id",
                "sinks.h.bearer_token_file",
                "sinks.h.in_flight",
                "sinks.h.batch.max_events",
            ]
        );
        assert_eq!(fields(settings("url: http://x/\ntls: {}\n", &[]).unwrap_err()), ["sinks.h.tls"]);
    }

    #[test]
    fn a_urls_user_and_password_are_basic_auth_and_never_shown() {
        let s = settings("url: 'https://alice:p%40ss@events.example/ingest?code=t0k3n'\n", &[]).unwrap();
        assert!(matches!(s.auth, Auth::Basic(ref u, ref p) if u == "alice" && p.0 == "p@ss"));
        assert_eq!(s.url.to_string(), "https://events.example/ingest?code=t0k3n");
        assert_eq!(s.shown_url, "https://events.example/ingest?…");
        let both = settings("url: 'https://alice:pw@events.example/'\nusername: bob\n", &[]).unwrap_err();
        assert_eq!(fields(both), ["sinks.h.url"]);
        let bad = settings("url: 'ftp://alice:pw@x/?token=t0k3n'\n", &[]).unwrap_err();
        let text = format!("{bad:?}");
        assert!(!text.contains("pw") && !text.contains("t0k3n"), "{text}");
    }

    #[test]
    fn batch_mode_takes_its_limits_and_other_modes_send_one_event_per_request() {
        let s = settings("url: http://x/\nmode: batch\nbatch: {max_events: 7, max_ms: 5}\n", &[]).unwrap();
        assert_eq!((s.max_events, s.max_bytes, s.linger), (7, 1 << 20, Duration::from_millis(5)));
        let s = settings("url: http://x/\nmode: structured\nusername: u\npassword: p\n", &[]).unwrap();
        assert_eq!((s.max_events, s.linger), (1, Duration::ZERO));
        assert!(matches!(s.auth, Auth::Basic(ref u, ref p) if u == "u" && p.0 == "p"));
        assert!(!format!("{s:?}").contains("\"p\""), "the password is never printed");
    }

    #[test]
    fn the_knative_example_is_valid() {
        let text = include_str!("../../../examples/knative.yaml");
        let config = crate::config::load_str("examples/knative.yaml", text, Vec::new())
            .unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = config.validate() {
            panic!("examples/knative.yaml: {e}");
        }
    }
}
