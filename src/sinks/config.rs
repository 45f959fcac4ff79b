//! Settings shared by every sink: the sink enum keyed by `type`, TLS files, secrets, topic
//! templates and the dead-letter destination.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::file::FileConfig;
use super::kafka::KafkaConfig;
use super::mqtt::MqttConfig;
use super::stdout::StdoutConfig;

/// One sink, chosen by its `type` field.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SinkConfig {
    /// Apache Kafka through librdkafka.
    Kafka(KafkaConfig),
    /// An MQTT 5 or 3.1.1 broker.
    Mqtt(MqttConfig),
    /// JSON lines (structured CloudEvents) on standard output.
    Stdout(StdoutConfig),
    /// JSON lines (structured CloudEvents) appended to a file.
    File(FileConfig),
}

/// Client-side TLS: the CA to trust and, for mutual TLS, a client certificate and key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA certificates to trust. Default: the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (mutual TLS). Default: none.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key. Default: none.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// A value that must never appear in logs: `Debug` prints `***`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where events that a sink can never deliver (too large, rejected) are written, with the
/// reason. Without one, such an event is logged as an error with its id and counted.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Append a JSON line per dead letter to this file.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Kafka sinks only: produce dead letters to this topic (attributes and reason; the
    /// data too when it fits).
    #[serde(default)]
    pub topic: Option<String>,
}

/// Placeholders a topic template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    Cluster,
    Namespace,
    Name,
}

/// A parsed topic template such as `kubecast/{cluster}/{namespace}/{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Placeholder),
}

impl Template {
    /// Parses `text`, accepting only the placeholders in `allowed`.
    pub fn parse(text: &str, allowed: &[Placeholder]) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("`{text}`: a `{{` without its `}}`"))?;
            let name = &rest[open + 1..open + close];
            let var = match name {
                "cluster" => Placeholder::Cluster,
                "namespace" => Placeholder::Namespace,
                "name" => Placeholder::Name,
                other => return Err(format!("`{text}`: unknown placeholder `{{{other}}}`")),
            };
            if !allowed.contains(&var) {
                return Err(format!("`{text}`: `{{{name}}}` is not allowed here"));
            }
            parts.push(Part::Var(var));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("`{text}`: a `}}` without its `{{`"));
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        if parts.is_empty() {
            return Err("the template is empty".to_string());
        }
        Ok(Template { parts })
    }

    /// The literal text between placeholders, for character checks.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            Part::Var(_) => None,
        })
    }

    /// Renders the template.
    pub fn render(&self, cluster: &str, namespace: &str, name: &str) -> String {
        let mut out = String::with_capacity(64);
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(Placeholder::Cluster) => out.push_str(cluster),
                Part::Var(Placeholder::Namespace) => out.push_str(namespace),
                Part::Var(Placeholder::Name) => out.push_str(name),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Placeholder::*;

    #[test]
    fn a_template_renders_its_placeholders() {
        let t = Template::parse(
            "kubecast/{cluster}/{namespace}/{name}",
            &[Cluster, Namespace, Name],
        );
        assert_eq!(t.unwrap().render("c", "ns", "p"), "kubecast/c/ns/p");
    }

    #[test]
    fn a_template_rejects_unknown_disallowed_and_unbalanced_placeholders() {
        assert!(
            Template::parse("a.{pod}", &[Cluster])
                .unwrap_err()
                .contains("unknown")
        );
        assert!(
            Template::parse("a.{name}", &[Cluster])
                .unwrap_err()
                .contains("not allowed")
        );
        assert!(Template::parse("a.{cluster", &[Cluster]).is_err());
        assert!(Template::parse("a.cluster}", &[Cluster]).is_err());
        assert!(Template::parse("", &[Cluster]).is_err());
    }
}
