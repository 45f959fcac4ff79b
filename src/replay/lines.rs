//! The changes as people and scripts read them: one compact line per change (`--format
//! line`, `--follow`'s default on a terminal) or one JSON object per change (`--format
//! json`). Each names the time, cluster, kind, namespace/name and the change, and what
//! changed against the object's previous version as [`changes::diff`] computes it; alert
//! episodes get lines of their own. Entry point: [`ChangeLines`].

use std::io::{self, BufWriter, Write};

use cloudevents::{AttributesReader, Event};
use serde::Serialize;
use serde_json::Value;

use super::changes::{Edit, FieldChange, Versions};
use super::decode::{data_json, time_text};
use super::facts::{Facts, Kind};

/// Fields named on a compact line; the rest are counted.
const FIELDS_ON_A_LINE: usize = 4;
/// Characters of a value shown on a compact line.
const VALUE_CHARS: usize = 40;

/// Bookkeeping fields that change with every version: never listed as a change.
fn is_bookkeeping(path: &str) -> bool {
    path == "metadata.resourceVersion" || path.starts_with("metadata.managedFields")
}

/// One change as a JSON line.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonChange<'a> {
    time: Option<String>,
    cluster: Option<&'a str>,
    kind: &'a str,
    api_version: &'a str,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    uid: Option<&'a str>,
    change: &'static str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a str>,
    /// What changed since the previous version read (absent: none was read).
    #[serde(skip_serializing_if = "Option::is_none")]
    fields: Option<Vec<FieldChange>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// Another producer's event: its type and source.
    #[serde(skip_serializing_if = "Option::is_none", rename = "type")]
    ty: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'a str>,
}

/// Writes changes as compact lines or JSON lines.
pub struct ChangeLines {
    out: BufWriter<Box<dyn Write>>,
    json: bool,
    color: bool,
    /// Flush after every line (following: each line shows when it happens).
    live: bool,
    versions: Versions,
    /// The date of the last compact line: a new date gets a line of its own.
    date: Option<String>,
}

impl ChangeLines {
    /// `json`: JSON lines, else compact lines (`color`ed with ANSI escapes).
    pub fn new(out: Box<dyn Write>, json: bool, color: bool, live: bool) -> ChangeLines {
        ChangeLines {
            out: BufWriter::with_capacity(1 << 16, out),
            json,
            color,
            live,
            versions: Versions::default(),
            date: None,
        }
    }

    /// Writes the change `event` (whose facts are `facts`).
    pub fn write(&mut self, facts: &Facts, event: &Event) -> io::Result<()> {
        let fields = self.fields(facts, event);
        if self.json {
            self.json_line(facts, event, fields)?;
        } else {
            self.compact_line(facts, event, fields)?;
        }
        if self.live {
            self.out.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// What changed since the object's previous version, for a `modified` (and an `added`
    /// after a re-list); keeps its version for the next.
    fn fields(&mut self, facts: &Facts, event: &Event) -> Option<Vec<FieldChange>> {
        let key = facts.key()?;
        match facts.kind {
            Kind::Deleted => {
                self.versions.forget(&key);
                None
            }
            Kind::Added | Kind::Modified => {
                let data = data_json(event).unwrap_or(Value::Null);
                // An `added` keeps its version for the next change; only a change lists fields.
                let changes = self.versions.next(&key, data)?;
                (facts.kind == Kind::Modified).then(|| {
                    changes
                        .into_iter()
                        .filter(|c| !is_bookkeeping(&c.path))
                        .collect()
                })
            }
            _ => None,
        }
    }

    fn json_line(
        &mut self,
        facts: &Facts,
        event: &Event,
        fields: Option<Vec<FieldChange>>,
    ) -> io::Result<()> {
        let other = facts.kind == Kind::Other;
        let (rule, message) = alert_of(facts, event);
        let line = JsonChange {
            time: time_text(event),
            cluster: facts.cluster.as_deref(),
            kind: &facts.k8s_kind,
            api_version: &facts.api_version,
            namespace: facts.namespace.as_deref(),
            name: facts.name.as_deref(),
            uid: facts.uid.as_deref(),
            change: facts.change_word(event),
            id: event.id(),
            resource_version: facts.rv.as_deref(),
            fields,
            rule,
            message,
            ty: other.then(|| event.ty()),
            source: other.then(|| event.source().as_str()),
        };
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")
    }

    fn compact_line(
        &mut self,
        facts: &Facts,
        event: &Event,
        fields: Option<Vec<FieldChange>>,
    ) -> io::Result<()> {
        let (date, time) = match facts
            .time_ms
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        {
            Some(t) => (
                t.strftime("%Y-%m-%d").to_string(),
                t.strftime("%H:%M:%S%.3f").to_string(),
            ),
            None => (String::new(), "--:--:--.---".to_string()),
        };
        if !date.is_empty() && self.date.as_deref() != Some(date.as_str()) {
            writeln!(self.out, "--- {date} (UTC) ---")?;
            self.date = Some(date);
        }
        let word = facts.change_word(event);
        let paint = |code: &str, text: &str| {
            if self.color {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_string()
            }
        };
        let colour = match word {
            "added" | "initial" => "32",
            "modified" => "33",
            "deleted" => "31",
            "inferred" => "35",
            "firing" => "1;31",
            "resolved" => "1;32",
            _ => "2",
        };
        let cluster = facts.cluster.as_deref().unwrap_or("-");
        let object = if facts.kind == Kind::Other {
            format!("{} {}", event.ty(), event.source())
        } else {
            let at = match facts.namespace.as_deref() {
                Some("") | None => facts.name.clone().unwrap_or_default(),
                Some(ns) => format!("{ns}/{}", facts.name.as_deref().unwrap_or("?")),
            };
            format!("{} {at}", facts.k8s_kind)
        };
        let detail = match facts.kind {
            Kind::Alert => {
                let (rule, message) = alert_of(facts, event);
                format!(
                    "{}: {}",
                    rule.unwrap_or_default(),
                    message.unwrap_or_default()
                )
            }
            Kind::Modified => match &fields {
                None => paint("2", "(no earlier version read)"),
                Some(f) if f.is_empty() => paint("2", "(no field changed)"),
                Some(f) => compact_fields(f),
            },
            _ => String::new(),
        };
        let line = format!(
            "{}  {}  {object}  {}  {detail}",
            paint("2", &time),
            paint("36", cluster),
            paint(colour, &format!("{word:<8}")),
        );
        writeln!(self.out, "{}", line.trim_end())
    }
}

/// An alert's rule (from its id, `{uid}:{rv}:alert:{rule}:{firing|resolved}`) and message.
fn alert_of(facts: &Facts, event: &Event) -> (Option<String>, Option<String>) {
    if facts.kind != Kind::Alert {
        return (None, None);
    }
    let rule = event
        .id()
        .split_once(":alert:")
        .and_then(|(_, r)| r.rsplit_once(':'))
        .map(|(rule, _)| rule.to_string());
    let message = data_json(event).and_then(|d| d["message"].as_str().map(str::to_string));
    (rule, message)
}

/// `status.phase: "Pending" → "Running"; +status.podIP: "10.0.0.1"; -metadata.labels.x`,
/// the first few, then how many more.
fn compact_fields(fields: &[FieldChange]) -> String {
    let value = |v: &Option<Value>| {
        let text = v.as_ref().map(Value::to_string).unwrap_or_default();
        if text.chars().count() > VALUE_CHARS {
            let cut: String = text.chars().take(VALUE_CHARS - 1).collect();
            format!("{cut}…")
        } else {
            text
        }
    };
    let mut parts: Vec<String> = fields
        .iter()
        .take(FIELDS_ON_A_LINE)
        .map(|f| match f.kind {
            Edit::Changed => format!("{}: {} → {}", f.path, value(&f.old), value(&f.new)),
            Edit::Added => format!("+{}: {}", f.path, value(&f.new)),
            Edit::Removed => format!("-{}", f.path),
        })
        .collect();
    if fields.len() > FIELDS_ON_A_LINE {
        parts.push(format!("(+{} more)", fields.len() - FIELDS_ON_A_LINE));
    }
    parts.join("; ")
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
