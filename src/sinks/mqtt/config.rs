//! The MQTT sink's config and its validated form.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::vocab::Issue;
use crate::sinks::{Common, Placeholder, Secret, Sink, SinkSpec, Template, TlsConfig, Topics};

/// `type: mqtt`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttConfig {
    /// Broker URL: `mqtt://host:port` (plain) or `mqtts://host:port` (TLS). Required.
    pub url: String,
    /// `v5` (binary mode: attributes as user properties, `datacontenttype` as Content
    /// Type) or `v311` (structured JSON). Default: `v5`.
    #[serde(default)]
    pub protocol: Protocol,
    /// Topic template; may use `{cluster}`, `{namespace}` (empty for a cluster-scoped object),
    /// `{name}`, `{kind}` (lower case) and `{resource}` (`deployments.apps`).
    /// Default: `kubecast/{cluster}/{namespace}/{name}`.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Retain the latest event per pod topic, and clear it with an empty retained message
    /// when the pod is deleted. Default: false.
    #[serde(default)]
    pub retain: bool,
    /// MQTT client id. With `sharding`, each shard's session is this followed by
    /// `-shard-{i}`. Default: `kubecast-{cluster}`.
    #[serde(default)]
    pub client_id: Option<String>,
    /// User name. Default: none.
    #[serde(default)]
    pub username: Option<String>,
    /// Password; better set through `KUBECAST_SINKS__{NAME}__PASSWORD`. Default: none.
    #[serde(default)]
    pub password: Option<Secret>,
    /// TLS settings for `mqtts://`. Default: the system's roots.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Largest MQTT packet kubecast sends or accepts; a larger event is dead-lettered.
    /// Default: 16777216 (16 MiB).
    #[serde(default = "default_max_packet")]
    pub max_packet_bytes: u32,
    /// Keep-alive interval in seconds: kubecast PINGs the broker this often. Default: 30.
    #[serde(default = "default_keep_alive")]
    pub keep_alive_seconds: u16,
    /// How long past a keep-alive interval the broker may stay silent (no PINGRESP, no
    /// PUBACK, nothing) before the connection is taken for dead and replaced, in seconds:
    /// a black-holed connection is found within keep_alive_seconds + this. Default: 10.
    #[serde(default = "default_pingresp_timeout")]
    pub pingresp_timeout_seconds: u16,
    /// Publishes sent but not yet acknowledged, at most (the broker may allow fewer).
    /// Default: 100.
    #[serde(default = "default_in_flight")]
    pub in_flight: u16,
}

fn default_topic() -> String {
    "kubecast/{cluster}/{namespace}/{name}".to_string()
}
fn default_max_packet() -> u32 {
    16 * 1024 * 1024
}
fn default_keep_alive() -> u16 {
    30
}
fn default_pingresp_timeout() -> u16 {
    10
}
fn default_in_flight() -> u16 {
    100
}

/// MQTT protocol version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    V5,
    V311,
}

/// The validated MQTT sink.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// `too_large: reference`: an event above `max_packet_bytes` goes in reference mode.
    pub too_large_reference: bool,
    pub host: String,
    pub port: u16,
    pub tls: Option<TlsFiles>,
    pub protocol: Protocol,
    pub topic: Topics,
    pub retain: bool,
    pub client_id: String,
    pub credentials: Option<(String, Secret)>,
    pub max_packet_bytes: usize,
    pub keep_alive: Duration,
    /// `pingresp_timeout_seconds`.
    pub pingresp_timeout: Duration,
    pub in_flight: u16,
}

/// TLS files, read when the sink starts.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub ca_file: Option<PathBuf>,
    pub client: Option<(PathBuf, PathBuf)>,
}

impl SinkSpec for MqttConfig {
    fn validate(&self, at: &str, common: &Common, cluster: &str) -> Result<Box<dyn Sink>, Vec<Issue>> {
        Ok(Box::new(self.settings(at, common, cluster)?))
    }
}

impl MqttConfig {
    /// Checks the values; `at` is this sink's field path (`sinks.NAME`).
    pub fn settings(&self, at: &str, common: &Common, cluster: &str) -> Result<MqttSettings, Vec<Issue>> {
        let mut issues = Vec::new();
        let (tls, rest) = if let Some(r) = self.url.strip_prefix("mqtts://") {
            (true, r)
        } else if let Some(r) = self.url.strip_prefix("mqtt://") {
            (false, r)
        } else {
            issues.push(Issue::new(
                format!("{at}.url"),
                format!("`{}` must start with mqtt:// or mqtts://", crate::sinks::url::shown(&self.url)),
            ));
            (false, "")
        };
        let rest = rest.trim_end_matches('/');
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse::<u16>().ok()),
            None => (rest.to_string(), Some(if tls { 8883 } else { 1883 })),
        };
        if !rest.is_empty() && (host.is_empty() || port.is_none() || host.contains('@')) {
            issues.push(Issue::new(
                format!("{at}.url"),
                format!("`{}` is not mqtt[s]://HOST[:PORT] (a user and password go in username and password)", crate::sinks::url::shown(&self.url)),
            ));
        }
        if self.tls.is_some() && !tls {
            issues.push(Issue::new(
                format!("{at}.tls"),
                "is set but the url is not mqtts://",
            ));
        }
        let tls_files = self.tls.as_ref().map(|t| TlsFiles {
            ca_file: t.ca_file.clone(),
            client: t.cert_file.clone().zip(t.key_file.clone()),
        });
        if let Some(t) = &self.tls
            && t.cert_file.is_some() != t.key_file.is_some()
        {
            issues.push(Issue::new(
                format!("{at}.tls"),
                "cert_file and key_file go together",
            ));
        }
        let topic = Topics::parse(&self.topic, at, common, &mut issues, |text| {
            let t = Template::parse(
                text,
                &[
                    Placeholder::Cluster,
                    Placeholder::Namespace,
                    Placeholder::Name,
                    Placeholder::Kind,
                    Placeholder::Resource,
                ],
                cluster,
            )?;
            if t.literals().any(|l| l.contains(['+', '#', '\0'])) {
                return Err(format!("`{text}` must not contain the wildcards + or #"));
            }
            Ok(t)
        });
        if self.password.is_some() && self.username.is_none() {
            issues.push(Issue::new(
                format!("{at}.password"),
                "is set without a username",
            ));
        }
        Issue::at_least(
            &mut issues,
            format!("{at}.max_packet_bytes"),
            u64::from(self.max_packet_bytes),
            1024,
        );
        Issue::at_least(
            &mut issues,
            format!("{at}.in_flight"),
            self.in_flight as u64,
            1,
        );
        Issue::at_least(
            &mut issues,
            format!("{at}.pingresp_timeout_seconds"),
            u64::from(self.pingresp_timeout_seconds),
            1,
        );
        // The envelope (queue, dead_letter) is checked by the sink contract.
        match (topic, port) {
            (Some(topic), Some(port)) if issues.is_empty() => Ok(MqttSettings {
                host,
                port,
                tls: if tls {
                    Some(tls_files.unwrap_or_default())
                } else {
                    None
                },
                protocol: self.protocol,
                topic,
                retain: self.retain,
                client_id: {
                    let id = self
                        .client_id
                        .clone()
                        .unwrap_or_else(|| format!("kubecast-{cluster}"));
                    match common.shard {
                        Some(s) => format!("{id}-shard-{}", s.index),
                        None => id,
                    }
                },
                credentials: self
                    .username
                    .clone()
                    .map(|u| (u, self.password.clone().unwrap_or_default())),
                max_packet_bytes: self.max_packet_bytes as usize,
                too_large_reference: common.too_large == crate::sinks::TooLarge::Reference,
                keep_alive: Duration::from_secs(u64::from(self.keep_alive_seconds.max(5))),
                pingresp_timeout: Duration::from_secs(u64::from(self.pingresp_timeout_seconds)),
                in_flight: self.in_flight,
            }),
            _ => Err(issues),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(yaml: &str) -> Result<MqttSettings, Vec<Issue>> {
        serde_saphyr::from_str::<MqttConfig>(yaml)
            .unwrap()
            .settings("sinks.m", &Common::default(), "local")
    }

    #[test]
    fn a_plain_url_with_defaults_validates() {
        let s = validate("url: mqtt://127.0.0.1:11883\n").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.tls.is_none()),
            ("127.0.0.1", 11883, true)
        );
        assert_eq!(s.client_id, "kubecast-local");
        let v = crate::sinks::Vars {
            namespace: "ns",
            name: "p",
            ..Default::default()
        };
        assert_eq!(s.topic.own().render(&v), "kubecast/local/ns/p");
    }

    #[test]
    fn bad_urls_wildcard_topics_and_lone_passwords_are_named() {
        let issues = validate("url: http://x\ntopic: 'a/+/{name}'\npassword: p\n").unwrap_err();
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["sinks.m.url", "sinks.m.topic", "sinks.m.password"],
            "{issues:?}"
        );
    }
}
