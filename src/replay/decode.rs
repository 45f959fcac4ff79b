//! Reading CloudEvents out of Kafka records through the CloudEvents SDK: a small adapter
//! from an rdkafka 0.39 record to the SDK's deserializer traits (the SDK's own `rdkafka`
//! binding pins an older rdkafka). Entry point: [`events_of`].
//!
//! Any valid CloudEvent is taken, not only the exact bytes kubecast writes: binary mode
//! (`ce_` headers in any casing, `content-type` as `datacontenttype`, attributes and
//! extensions told apart by the spec version's attribute names), structured mode
//! (`application/cloudevents+json`, or a JSON object with `specversion` and no content
//! type) and structured batches (`application/cloudevents-batch+json`). A record that is
//! none of these is not an error of the replay: [`NotCloudEvent`] says why, and the caller
//! counts and skips it.

use cloudevents::event::{ExtensionValue, SpecVersion};
use cloudevents::message::{
    BinaryDeserializer, BinarySerializer, Encoding, Error as SdkError, MessageAttributeValue,
    MessageDeserializer, StructuredDeserializer, StructuredSerializer,
};
use cloudevents::{AttributesReader, Data, Event};
use rdkafka::Message;
use rdkafka::message::Headers;

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";
const SPEC_VERSION: &str = "ce_specversion";

/// Why a record is not a CloudEvent (or a batch of them).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotCloudEvent(pub String);

/// A Kafka record as the SDK's deserializers see it: header names in lower case (Kafka
/// header names are case-sensitive, but producers differ in how they write `ce_id` or
/// `Content-Type`), values as bytes, and the payload.
pub struct Record<'m> {
    headers: Vec<(String, &'m [u8])>,
    payload: Option<&'m [u8]>,
}

impl<'m> Record<'m> {
    /// The record of `message`; headers without a value are left out.
    pub fn of(message: &'m impl Message) -> Record<'m> {
        let headers = message
            .headers()
            .map(|hs| {
                hs.iter()
                    .filter_map(|h| Some((h.key.to_ascii_lowercase(), h.value?)))
                    .collect()
            })
            .unwrap_or_default();
        Record {
            headers,
            payload: message.payload(),
        }
    }

    /// A record from its parts (tests).
    pub fn from_parts(headers: Vec<(String, &'m [u8])>, payload: Option<&'m [u8]>) -> Record<'m> {
        let headers = headers
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        Record { headers, payload }
    }

    fn header(&self, name: &str) -> Option<&'m [u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    fn content_type(&self) -> Option<String> {
        self.header("content-type")
            .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
    }

    fn is_batch(&self) -> bool {
        self.content_type().is_some_and(|c| c.starts_with(BATCH))
    }
}

/// The events of `record`: one, or a batch's, their data redacted by `redact` (see
/// [`redact_data`]). The kubecast extensions that are booleans (`k8sinitial`,
/// `k8sinferred`) become booleans also when they came as binary-mode header strings, so that
/// both modes replay to the same JSON.
pub fn events_of(
    record: Record<'_>,
    redact: &crate::redact::RedactConfig,
) -> Result<Vec<Event>, NotCloudEvent> {
    let mut events = if record.is_batch() {
        let bytes = record.payload.unwrap_or_default();
        serde_json::from_slice::<Vec<Event>>(bytes)
            .map_err(|e| NotCloudEvent(format!("not a CloudEvents batch: {e}")))?
    } else {
        match record.encoding() {
            Encoding::UNKNOWN => {
                return Err(NotCloudEvent(
                    "neither binary mode (no ce_specversion header) nor structured mode".into(),
                ));
            }
            _ => vec![
                MessageDeserializer::into_event(record).map_err(|e| NotCloudEvent(describe(&e)))?,
            ],
        }
    };
    for e in &mut events {
        normalize_booleans(e);
        redact_data(e, redact);
    }
    Ok(events)
}

/// Replay's outputs go through the same redaction as kubecast's own: the data of every event
/// that is a JSON object is redacted again by `redact` (the default rules and what the
/// writer's config named), whatever its type — kubecast's own changes, its `compat`
/// shapes (`dev.knative.apiserver.*`), alerts, older versions' and other producers' events.
/// That changes nothing kubecast wrote with the same rules. A Secret is known by its
/// extensions (`k8skind`/`k8sapiversion`, or a compat shape's `kind`/`apiversion`) or by its
/// own `apiVersion` and `kind`. Data that is not an object is left as it is.
fn redact_data(event: &mut Event, redact: &crate::redact::RedactConfig) {
    if !data_is_json(event) {
        return;
    }
    let Some(bytes) = data_bytes(event) else {
        return;
    };
    // The extensions where they name a kind; only then is the data read for its own.
    let secret = [("k8skind", "k8sapiversion"), ("kind", "apiversion")]
        .iter()
        .find_map(|(kind, version)| {
            let kind = extension_text(event, kind)?;
            Some(kind == "Secret" && extension_text(event, version).as_deref() == Some("v1"))
        })
        .unwrap_or_else(|| {
            serde_json::from_slice::<SecretShape>(&bytes).is_ok_and(|s| {
                s.kind.as_deref() == Some("Secret") && s.api_version.as_deref() == Some("v1")
            })
        });
    let shape = crate::redact::Shape { secret };
    let Ok(out) = crate::redact::redacted(&bytes, redact, shape) else {
        return;
    };
    if out[..] == bytes[..] {
        return;
    }
    let data = match event.data() {
        Some(Data::Json(_)) => match serde_json::from_slice(&out) {
            Ok(v) => Data::Json(v),
            Err(_) => return,
        },
        Some(Data::String(_)) => match String::from_utf8(out) {
            Ok(s) => Data::String(s),
            Err(_) => return,
        },
        _ => Data::Binary(out),
    };
    event.set_data_unchecked(data);
}

/// An object's own `apiVersion` and `kind`, the rest skipped.
#[derive(serde::Deserialize)]
struct SecretShape {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
}

fn describe(e: &SdkError) -> String {
    match e {
        SdkError::EventBuilderError { source } => format!("not a valid CloudEvent: {source}"),
        other => format!("not a valid CloudEvent: {other}"),
    }
}

fn normalize_booleans(event: &mut Event) {
    for name in ["k8sinitial", "k8sinferred", "k8struncated"] {
        let flag = match event.extension(name) {
            Some(ExtensionValue::String(s)) if s == "true" => true,
            Some(ExtensionValue::String(s)) if s == "false" => false,
            _ => continue,
        };
        event.set_extension(name, flag);
    }
}

fn utf8(bytes: &[u8], what: &str) -> Result<String, SdkError> {
    String::from_utf8(bytes.to_vec()).map_err(|e| SdkError::Other {
        source: format!("header {what} is not UTF-8: {e}").into(),
    })
}

impl MessageDeserializer for Record<'_> {
    fn encoding(&self) -> Encoding {
        if self
            .content_type()
            .is_some_and(|c| c.starts_with(STRUCTURED))
        {
            return Encoding::STRUCTURED;
        }
        if self.header(SPEC_VERSION).is_some() {
            return Encoding::BINARY;
        }
        // Structured mode without its content type: some producers leave it out. Only a
        // JSON object that names its spec version is taken for an event.
        let looks_structured = self.content_type().is_none()
            && self.payload.is_some_and(|p| {
                p.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
                    && serde_json::from_slice::<SpecOnly>(p).is_ok_and(|s| s.specversion.is_some())
            });
        if looks_structured {
            Encoding::STRUCTURED
        } else {
            Encoding::UNKNOWN
        }
    }
}

/// Just enough of a structured event to tell whether it is one.
#[derive(serde::Deserialize)]
struct SpecOnly {
    specversion: Option<String>,
}

impl StructuredDeserializer for Record<'_> {
    fn deserialize_structured<R: Sized, V: StructuredSerializer<R>>(
        self,
        visitor: V,
    ) -> cloudevents::message::Result<R> {
        visitor.set_structured_event(self.payload.unwrap_or_default().to_vec())
    }
}

impl BinaryDeserializer for Record<'_> {
    fn deserialize_binary<R: Sized, V: BinarySerializer<R>>(
        self,
        mut visitor: V,
    ) -> cloudevents::message::Result<R> {
        let Some(version) = self.header(SPEC_VERSION) else {
            return Err(SdkError::WrongEncoding {});
        };
        let version = SpecVersion::try_from(utf8(version, SPEC_VERSION)?.as_str())?;
        let names = version.attribute_names();
        visitor = visitor.set_spec_version(version)?;
        for (key, value) in &self.headers {
            let value = || utf8(value, key).map(MessageAttributeValue::String);
            if key == "content-type" {
                visitor = visitor.set_attribute("datacontenttype", value()?)?;
                continue;
            }
            let Some(name) = key.strip_prefix("ce_") else {
                continue;
            };
            if name == "specversion" {
                continue;
            }
            visitor = if names.contains(&name) {
                visitor.set_attribute(name, value()?)?
            } else {
                visitor.set_extension(name, value()?)?
            };
        }
        match self.payload {
            Some(p) => visitor.end_with_data(p.to_vec()),
            None => visitor.end(),
        }
    }
}

/// The string form of an extension's value (booleans and integers as JSON writes them).
pub fn extension_text(event: &Event, name: &str) -> Option<String> {
    event.extension(name).map(|v| match v {
        ExtensionValue::String(s) => s.clone(),
        ExtensionValue::Boolean(b) => b.to_string(),
        ExtensionValue::Integer(i) => i.to_string(),
    })
}

/// Whether `event`'s data is JSON by its content type (none counts as JSON, as in the
/// CloudEvents JSON format).
pub fn data_is_json(event: &Event) -> bool {
    json_content_type(event.datacontenttype())
}

/// Whether a `datacontenttype` is JSON (`application/json`, `text/json`, `...+json`; none
/// counts as JSON).
pub fn json_content_type(ct: Option<&str>) -> bool {
    match ct {
        None => true,
        Some(ct) => {
            let ct = ct.split(';').next().unwrap_or_default().trim();
            ct == "application/json" || ct == "text/json" || ct.ends_with("+json")
        }
    }
}

/// The event's `time` in RFC 3339 (UTC, `Z`, as many fractional digits as it has).
pub fn time_text(event: &Event) -> Option<String> {
    let nanos = event.time()?.timestamp_nanos_opt()?;
    jiff::Timestamp::from_nanosecond(i128::from(nanos))
        .ok()
        .map(|t| t.to_string())
}

/// The event's data as bytes: JSON as it came, a string's text, binary as is.
pub fn data_bytes(event: &Event) -> Option<std::borrow::Cow<'_, [u8]>> {
    use std::borrow::Cow;
    Some(match event.data()? {
        Data::Binary(b) => Cow::Borrowed(b.as_slice()),
        Data::String(s) => Cow::Borrowed(s.as_bytes()),
        // A JSON value always serializes.
        Data::Json(v) => Cow::Owned(serde_json::to_vec(v).unwrap_or_default()),
    })
}

/// The event's data as a JSON value, when it is JSON.
pub fn data_json(event: &Event) -> Option<serde_json::Value> {
    json_of(event.data()?, data_is_json(event))
}

/// `data` as a JSON value: parsed when `json` (its content type says JSON), else `None`.
pub fn json_of(data: &Data, json: bool) -> Option<serde_json::Value> {
    match data {
        Data::Json(v) => Some(v.clone()),
        Data::Binary(b) if json => serde_json::from_slice(b).ok(),
        Data::String(s) if json => serde_json::from_str(s).ok(),
        _ => None,
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
