//! The replay's filters (`--cluster`, `--namespace`, `--name`, `--uid`, `--type`,
//! `--label`) applied to events. An event whose `source` names no cluster (another
//! producer's) matches no `--cluster`. Entry point: [`Filter`](super::args::Filter)'s methods here.
//!
//! The object filters pick whole objects: `--verify` and `--state-at` see every event of a
//! picked object. `--type` and `--label` pick events to write, after that.

use std::collections::BTreeMap;

use cloudevents::{AttributesReader, Event};
use serde_json::Value;

use super::args::Filter;
use super::decode::data_json;
use super::facts::Facts;
use kube::core::SelectorExt;

use crate::route::config::glob;

impl Filter {
    /// Whether the event's object is one of those asked for.
    pub fn takes_object(&self, facts: &Facts) -> bool {
        let any = |patterns: &[String], value: &Option<String>| {
            patterns.is_empty()
                || value
                    .as_deref()
                    .is_some_and(|v| patterns.iter().any(|p| glob(p, v)))
        };
        (self.resources.is_empty() || self.resources.iter().any(|r| facts.is_resource(r)))
            && any(&self.clusters, &facts.cluster)
            && any(&self.namespaces, &facts.namespace)
            && any(&self.names, &facts.name)
            && (self.uids.is_empty()
                || facts
                    .uid
                    .as_deref()
                    .is_some_and(|u| self.uids.iter().any(|x| x == u)))
    }

    /// Whether the event is of a type asked for and its pod's labels match.
    pub fn takes_event(&self, event: &Event) -> bool {
        // A word (`added`) takes that change of every kind; anything else is a whole type.
        let word = crate::model::ChangeKind::of_type(event.ty()).map(|k| k.word());
        if !self.types.is_empty()
            && !self
                .types
                .iter()
                .any(|t| t == event.ty() || Some(t.as_str()) == word)
        {
            return false;
        }
        match &self.labels {
            None => true,
            Some(_) => self.takes_labels_of(&data_json(event).unwrap_or(Value::Null)),
        }
    }

    /// Whether the labels in a pod's data (`metadata.labels`, in the full and summary data
    /// modes) match `--label`; data without labels has none.
    pub fn takes_labels_of(&self, data: &Value) -> bool {
        let Some(selector) = &self.labels else {
            return true;
        };
        let labels: BTreeMap<String, String> = data["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        selector.matches(&labels)
    }
}
