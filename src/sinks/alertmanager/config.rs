//! `type: alertmanager`: every instance's URL, the resend interval, the request's limits, the
//! link back (`generator_url`) and the HTTP client's TLS and authentication (as the HTTP
//! sink's). [`AlertmanagerConfig::validate`] checks it without any I/O.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sinks::http::{HttpConfig, HttpSettings};
use crate::sinks::{Common, Secret, Sink, SinkSpec, Template, TlsConfig, url};
use crate::vocab::Issue;

/// An Alertmanager sink's config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Every Alertmanager instance, by its own URL (`http://alertmanager-0:9093`); never one
    /// load-balanced address for an HA pair, since each instance must get every alert.
    /// `/api/v2/alerts` is appended. Required.
    #[serde(default)]
    pub urls: Vec<String>,
    /// How often every active alert is sent again (`endsAt` is four of these ahead).
    /// Default: `1m`.
    #[serde(default = "default_resend")]
    pub resend_interval: String,
    /// Time for one request; longer counts as failed. Default: 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Alerts per request, at most. Default: 256.
    #[serde(default = "default_max_alerts")]
    pub max_alerts: usize,
    /// The alerts' `generatorURL`, a template like a topic's: `{cluster}`, `{namespace}`,
    /// `{name}`, `{kind}` and `{resource}` of the object the alert is about. Default: none.
    #[serde(default)]
    pub generator_url: Option<String>,
    /// TLS for `https://` URLs: the CA to trust and, for mutual TLS, a client certificate.
    /// Default: the system's roots, no client certificate.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Send `Authorization: Bearer` with the token in this file. Default: none.
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic authentication's user name. Default: none.
    #[serde(default)]
    pub username: Option<String>,
    /// Basic authentication's password; better set through
    /// `KUBECAST_SINKS__{NAME}__PASSWORD`. Default: none.
    #[serde(default)]
    pub password: Option<Secret>,
}

fn default_resend() -> String {
    "1m".into()
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_max_alerts() -> usize {
    256
}

/// The validated sink.
#[derive(Debug, Clone)]
pub struct AmSettings {
    /// One HTTP client's settings per instance, each URL ending in `/api/v2/alerts`.
    pub instances: Vec<HttpSettings>,
    pub resend: Duration,
    pub max_alerts: usize,
    pub generator_url: Option<Template>,
    /// The configured cluster name (the alerts' `cluster` label).
    pub cluster: String,
    /// The standing alerts from the durable episodes ([`Sink::restore_alerts`]).
    pub restored: Vec<std::sync::Arc<crate::event::Event>>,
}

impl SinkSpec for AlertmanagerConfig {
    fn validate(&self, at: &str, common: &Common, cluster: &str) -> Result<Box<dyn Sink>, Vec<Issue>> {
        Ok(Box::new(self.settings(at, common, cluster)?))
    }
}

impl AlertmanagerConfig {
    /// Checks the values; `at` is this sink's field path (`sinks.NAME`).
    pub fn settings(&self, at: &str, common: &Common, cluster: &str) -> Result<AmSettings, Vec<Issue>> {
        let mut issues = Vec::new();
        if self.urls.is_empty() {
            issues.push(Issue::new(
                format!("{at}.urls"),
                "is required: the URL of every Alertmanager instance",
            ));
        }
        let resend = match crate::alert::duration::parse_duration(&self.resend_interval) {
            Some(ms) if ms >= 1_000 => Duration::from_millis(ms.unsigned_abs()),
            _ => {
                issues.push(Issue::new(
                    format!("{at}.resend_interval"),
                    format!("`{}` is not a duration of a second or more (such as `1m`)", self.resend_interval),
                ));
                Duration::from_secs(60)
            }
        };
        if !(1..=10_000).contains(&self.max_alerts) {
            issues.push(Issue::new(format!("{at}.max_alerts"), "must be between 1 and 10000"));
        }
        let generator_url = self.generator_url.as_deref().and_then(|g| {
            Template::parse(g, &super::alert::GENERATOR_PLACEHOLDERS, cluster)
                .map_err(|e| issues.push(Issue::new(format!("{at}.generator_url"), e)))
                .ok()
        });
        let mut instances = Vec::new();
        for (i, u) in self.urls.iter().enumerate() {
            let field = format!("{at}.urls[{i}]");
            if self.urls[..i].contains(u) {
                issues.push(Issue::new(field.clone(), format!("`{}` is listed twice", url::shown(u))));
            }
            let full = format!("{}/api/v2/alerts", u.trim_end_matches('/'));
            let http = HttpConfig {
                url: Some(full),
                mode: Default::default(),
                batch: Default::default(),
                headers: Default::default(),
                timeout_ms: self.timeout_ms,
                in_flight: 1,
                tls: self.tls.clone(),
                bearer_token_file: self.bearer_token_file.clone(),
                username: self.username.clone(),
                password: self.password.clone(),
                compression: Default::default(),
                max_request_bytes: 64 << 20,
            };
            match http.settings(at, common, |_| None) {
                Ok(s) => instances.push(s),
                Err(found) => issues.extend(found.into_iter().map(|mut issue| {
                    if issue.field == format!("{at}.url") {
                        issue.field = field.clone();
                    }
                    issue
                })),
            }
        }
        if issues.is_empty() {
            Ok(AmSettings {
                instances,
                resend,
                max_alerts: self.max_alerts,
                generator_url,
                cluster: cluster.to_string(),
                restored: Vec::new(),
            })
        } else {
            Err(issues)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<AmSettings, Vec<Issue>> {
        let c: AlertmanagerConfig = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        c.settings("sinks.am", &Common::default(), "prod")
    }

    #[test]
    fn each_instance_gets_its_own_client_at_the_v2_alerts_path() {
        let s = settings("urls: [http://127.0.0.1:9093, 'http://127.0.0.1:9094/']\n").expect("valid");
        let urls: Vec<String> = s.instances.iter().map(|i| i.url.to_string()).collect();
        assert_eq!(urls, ["http://127.0.0.1:9093/api/v2/alerts", "http://127.0.0.1:9094/api/v2/alerts"]);
        assert_eq!((s.resend, s.max_alerts), (Duration::from_secs(60), 256));
        assert_eq!(s.instances[0].timeout, Duration::from_secs(10));
    }

    #[test]
    fn bad_entries_are_named_by_their_path() {
        let issues = settings("urls: ['ftp://x', 'http://a:1', 'http://a:1']\nresend_interval: soon\nmax_alerts: 0\n")
            .expect_err("invalid");
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            ["sinks.am.resend_interval", "sinks.am.max_alerts", "sinks.am.urls[0]", "sinks.am.urls[2]"],
            "{issues:?}"
        );
        let none = settings("{}\n").expect_err("no urls");
        assert_eq!(none[0].field, "sinks.am.urls");
    }

    #[test]
    fn generator_url_is_a_template_like_a_topic() {
        let s = settings("urls: [http://a:1]\ngenerator_url: 'https://ui/{cluster}/{namespace}/{name}'\n").expect("valid");
        assert!(s.generator_url.is_some());
        let issues = settings("urls: [http://a:1]\ngenerator_url: 'https://ui/{rule}'\n").expect_err("unknown placeholder");
        assert_eq!(issues[0].field, "sinks.am.generator_url", "{issues:?}");
    }
}
