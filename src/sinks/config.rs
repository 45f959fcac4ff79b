//! Settings shared by every sink: the sink's config (its kind and the envelope every sink
//! gets: queue and dead letters), TLS files, secrets and topic templates.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::SinkKind;
use super::queue::QueueConfig;
use crate::vocab::Issue;

/// One sink under `sinks.NAME`: its `type` and that kind's fields, plus the envelope that the
/// sink contract gives every kind (`queue`, `dead_letter`). Unknown fields are errors.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The kind (`type: kafka`, ...) and its own settings.
    pub kind: SinkKind,
    /// The queue and dead-letter settings every sink has.
    pub common: Common,
}

/// The envelope of every sink.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Common {
    /// The sink's queue: its limits and what happens when it is full. Default: 1024 events,
    /// 64 MiB, `block`.
    #[serde(default)]
    pub queue: QueueConfig,
    /// Where events the sink can never deliver (too large, refused) go. Default: the log only.
    #[serde(default)]
    pub dead_letter: Option<DeadLetterConfig>,
    /// An event larger than the sink takes (`max_message_bytes`, `max_packet_bytes`; a
    /// ConfigMap holds up to 1 MiB): `dead_letter` sends it to the dead letter, naming the
    /// object; `reference` sends it in `reference` mode instead, with the same id, flagged
    /// `k8struncated=true`. Default: `dead_letter`.
    #[serde(default)]
    pub too_large: TooLarge,
    /// Send every event of this sink in another source's shape, so that its consumers keep
    /// matching: `apiserversource` (Knative's ApiServerSource types and extensions, beside
    /// kubecast's own id and extensions). Default: none, kubecast's own shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<crate::vocab::Compat>,
    /// The routes that feed this sink and set a `compat` of their own (route name, shape),
    /// filled in from `routes:` before validation; not a field of the sink.
    #[serde(skip)]
    pub route_compat: Vec<(String, crate::vocab::Compat)>,
    /// The topics of the routes that feed this sink and set their own (route name, template),
    /// filled in from `routes:` before validation; not a field of the sink.
    #[serde(skip)]
    pub route_topics: Vec<(String, String)>,
    /// The shard this sink publishes (`sharding`), set at validation; not a field of the
    /// sink. A shard's sink has its own transactional id, checkpoint and MQTT session.
    #[serde(skip)]
    pub shard: Option<crate::model::Shard>,
}

/// What a sink does with an event too large for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TooLarge {
    /// To the dead letter, with the reason.
    #[default]
    DeadLetter,
    /// In `reference` mode, flagged `k8struncated`.
    Reference,
}

/// The envelope's field names, taken out of a sink's map before its kind reads the rest.
const COMMON_FIELDS: [&str; 4] = ["queue", "dead_letter", "too_large", "compat"];

impl Common {
    /// The envelope's issues; `at` is the sink's field path, `topic_ok` whether its kind
    /// takes a `dead_letter.topic`.
    pub fn check(&self, at: &str, topic_ok: bool) -> Vec<Issue> {
        let mut issues = Vec::new();
        Issue::at_least(
            &mut issues,
            format!("{at}.queue.events"),
            self.queue.events as u64,
            1,
        );
        Issue::at_least(
            &mut issues,
            format!("{at}.queue.bytes"),
            self.queue.bytes as u64,
            1024,
        );
        if let Some(d) = &self.dead_letter {
            if d.topic.is_some() && !topic_ok {
                issues.push(Issue::new(
                    format!("{at}.dead_letter.topic"),
                    "is for Kafka sinks; use dead_letter.file",
                ));
            }
            if d.file.as_ref().is_some_and(|f| f.as_os_str().is_empty()) {
                issues.push(Issue::new(
                    format!("{at}.dead_letter.file"),
                    "is empty; leave it out to log dead letters only",
                ));
            }
        }
        issues
    }
}

impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut kind = Map::<String, Value>::deserialize(d)?;
        let mut common = Map::new();
        for field in COMMON_FIELDS {
            if let Some(v) = kind.remove(field) {
                common.insert(field.to_string(), v);
            }
        }
        let common: Common = from_map(common).map_err(D::Error::custom)?;
        let kind: SinkKind = from_map(kind).map_err(D::Error::custom)?;
        Ok(SinkConfig { kind, common })
    }
}

/// Deserializes `map`; an error names the field path inside it.
fn from_map<T: serde::de::DeserializeOwned>(map: Map<String, Value>) -> Result<T, String> {
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.into_inner().to_string()
        } else {
            format!("field `{path}`: {}", e.into_inner())
        }
    })
}

impl Serialize for SinkConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut map = match serde_json::to_value(&self.kind).map_err(S::Error::custom)? {
            Value::Object(m) => m,
            _ => return Err(S::Error::custom("a sink kind serializes as a map")),
        };
        if let Value::Object(common) =
            serde_json::to_value(&self.common).map_err(S::Error::custom)?
        {
            map.extend(common);
        }
        map.serialize(s)
    }
}

impl SinkConfig {
    /// Checks this sink's values; `name` is its key under `sinks`.
    pub fn validate(&self, name: &str, cluster: &str) -> Result<super::ValidSink, Vec<Issue>> {
        self.kind.validate(name, &self.common, cluster)
    }
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
    /// Append a JSON line per dead letter to this file. Default: none.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Kafka sinks only: produce dead letters to this topic (attributes and reason; the
    /// data too when it fits). Default: none.
    #[serde(default)]
    pub topic: Option<String>,
}

/// Placeholders a topic template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    Cluster,
    /// The object's namespace (empty for a cluster-scoped object).
    Namespace,
    Name,
    /// The object's kind in lower case (`deployment`).
    Kind,
    /// The object's resource as `{plural}.{group}` (`deployments.apps`; `pods` for core).
    Resource,
}

/// What a template is rendered for: one object's facts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Vars<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The kind as the API spells it (`Deployment`); rendered in lower case.
    pub kind: &'a str,
    pub resource: &'a str,
}

impl<'a> Vars<'a> {
    pub fn of(event: &'a crate::event::Event) -> Vars<'a> {
        Vars {
            namespace: &event.object.namespace,
            name: &event.object.name,
            kind: &event.k8s_kind,
            resource: &event.object.resource,
        }
    }
}

/// A sink's topic templates: its own, and those of the routes that set theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    own: Template,
    routes: Vec<(std::sync::Arc<str>, Template)>,
}

impl Topics {
    /// Parses the sink's own `topic` (field `at.topic`) and each route's (field
    /// `routes.NAME.topic`) with `parse`, which applies the sink kind's rules.
    pub fn parse(
        own: &str,
        at: &str,
        common: &Common,
        issues: &mut Vec<Issue>,
        parse: impl Fn(&str) -> Result<Template, String>,
    ) -> Option<Topics> {
        let own = parse(own)
            .map_err(|e| issues.push(Issue::new(format!("{at}.topic"), e)))
            .ok();
        let mut routes = Vec::new();
        for (route, text) in &common.route_topics {
            match parse(text) {
                Ok(t) => routes.push((std::sync::Arc::from(route.as_str()), t)),
                Err(e) => issues.push(Issue::new(
                    format!("routes.{route}.topic"),
                    format!("for {at}: {e}"),
                )),
            }
        }
        Some(Topics { own: own?, routes })
    }

    /// The sink's own template.
    pub fn own(&self) -> &Template {
        &self.own
    }

    /// Every template: the sink's own, then its routes'.
    pub fn all(&self) -> impl Iterator<Item = &Template> {
        std::iter::once(&self.own).chain(self.routes.iter().map(|(_, t)| t))
    }

    /// The topic of `event`: its route's, else the sink's own.
    pub fn render(&self, event: &crate::event::Event) -> String {
        let t = event
            .route
            .as_deref()
            .and_then(|r| self.routes.iter().find(|(n, _)| &**n == r))
            .map_or(&self.own, |(_, t)| t);
        t.render(&Vars::of(event))
    }
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
    /// Parses `text`, accepting only the placeholders in `allowed`. `{cluster}` is replaced by
    /// `cluster` here, once: it is the same for every event.
    pub fn parse(text: &str, allowed: &[Placeholder], cluster: &str) -> Result<Template, String> {
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
                "kind" => Placeholder::Kind,
                "resource" => Placeholder::Resource,
                other => return Err(format!("`{text}`: unknown placeholder `{{{other}}}`")),
            };
            if !allowed.contains(&var) {
                return Err(format!("`{text}`: `{{{name}}}` is not allowed here"));
            }
            match var {
                Placeholder::Cluster => parts.push(Part::Text(cluster.to_string())),
                _ => parts.push(Part::Var(var)),
            }
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

    /// The literal text between placeholders (the cluster name included), for character
    /// checks.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            Part::Var(_) => None,
        })
    }

    /// The text before the first placeholder, and whether there is none (the template is
    /// one fixed name).
    pub fn prefix(&self) -> (String, bool) {
        let mut prefix = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => prefix.push_str(t),
                Part::Var(_) => return (prefix, false),
            }
        }
        (prefix, true)
    }

    /// Renders the template for one object.
    pub fn render(&self, v: &Vars<'_>) -> String {
        let mut out = String::with_capacity(64);
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                // Bound in `parse`; never a `Var`.
                Part::Var(Placeholder::Cluster) => {}
                Part::Var(Placeholder::Namespace) => out.push_str(v.namespace),
                Part::Var(Placeholder::Name) => out.push_str(v.name),
                Part::Var(Placeholder::Kind) => {
                    out.extend(v.kind.chars().map(|c| c.to_ascii_lowercase()))
                }
                Part::Var(Placeholder::Resource) => out.push_str(v.resource),
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
            "c",
        );
        let v = Vars {
            namespace: "ns",
            name: "p",
            ..Vars::default()
        };
        assert_eq!(t.unwrap().render(&v), "kubecast/c/ns/p");
        let k = Template::parse(
            "k8s.{cluster}.{kind}.{resource}",
            &[Cluster, Kind, Resource],
            "c",
        );
        let v = Vars {
            kind: "Deployment",
            resource: "deployments.apps",
            ..Vars::default()
        };
        assert_eq!(k.unwrap().render(&v), "k8s.c.deployment.deployments.apps");
    }

    #[test]
    fn a_template_rejects_unknown_disallowed_and_unbalanced_placeholders() {
        assert!(
            Template::parse("a.{pod}", &[Cluster], "c")
                .unwrap_err()
                .contains("unknown")
        );
        assert!(
            Template::parse("a.{name}", &[Cluster], "c")
                .unwrap_err()
                .contains("not allowed")
        );
        assert!(Template::parse("a.{cluster", &[Cluster], "c").is_err());
        assert!(Template::parse("a.cluster}", &[Cluster], "c").is_err());
        assert!(Template::parse("", &[Cluster], "c").is_err());
    }
}
