//! Writing the selected events as JSON lines: one structured-mode CloudEvent per line
//! (`application/cloudevents+json`), to standard output or a file. Entry point: [`JsonLines`].
//!
//! JSON data is written inline as `data`, as the bytes it came in when they are compact
//! JSON already (no parse and re-serialization per event); other data goes as the SDK
//! writes it (`data` for text, `data_base64` for bytes).

use std::io::{BufWriter, Write};

use cloudevents::{AttributesWriter, Data, Event};

use super::decode::json_content_type;

/// A JSON-lines writer.
pub struct JsonLines {
    out: BufWriter<Box<dyn Write>>,
    line: Vec<u8>,
    /// Flush after every line (following: each line shows when it happens).
    live: bool,
    pub written: u64,
}

impl JsonLines {
    pub fn new(out: Box<dyn Write>, live: bool) -> JsonLines {
        JsonLines {
            out: BufWriter::with_capacity(1 << 16, out),
            line: Vec::with_capacity(4096),
            live,
            written: 0,
        }
    }

    /// Writes `event` as one line.
    pub fn write(&mut self, event: Event) -> std::io::Result<()> {
        self.line.clear();
        structured_line(event, &mut self.line)?;
        self.out.write_all(&self.line)?;
        self.written += 1;
        if self.live {
            self.out.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Appends `event` in structured mode and a newline to `buf`.
pub fn structured_line(mut event: Event, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let (ct, schema, data) = event.take_data();
    let json = json_content_type(ct.as_deref());
    event.set_datacontenttype(ct);
    event.set_dataschema(schema);
    match data {
        Some(Data::Binary(bytes)) if json && compact_json(&bytes) => {
            serde_json::to_writer(&mut *buf, &event)?;
            // The serialized attributes are one JSON object: its closing brace is the
            // last byte, replaced by the data member.
            buf.pop();
            buf.extend_from_slice(b",\"data\":");
            buf.extend_from_slice(&bytes);
            buf.push(b'}');
        }
        Some(Data::Binary(bytes)) if json => {
            let data = match serde_json::from_slice(&bytes) {
                Ok(v) => Data::Json(v),
                // Labelled JSON but not: kept as bytes (`data_base64`).
                Err(_) => Data::Binary(bytes),
            };
            event.set_data_unchecked(data);
            serde_json::to_writer(&mut *buf, &event)?;
        }
        Some(d) => {
            event.set_data_unchecked(d);
            serde_json::to_writer(&mut *buf, &event)?;
        }
        None => serde_json::to_writer(&mut *buf, &event)?,
    }
    buf.push(b'\n');
    Ok(())
}

/// Whether `bytes` are valid JSON on one line.
fn compact_json(bytes: &[u8]) -> bool {
    !bytes.contains(&b'\n') && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::decode::{Record, events_of};

    fn line_of(headers: Vec<(&str, &str)>, payload: &[u8]) -> serde_json::Value {
        let headers = headers
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes()))
            .collect();
        let mut events = events_of(
            Record::from_parts(headers, Some(payload)),
            &Default::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut buf = Vec::new();
        structured_line(events.remove(0), &mut buf).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 1, "one line");
        serde_json::from_slice(&buf)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&buf)))
    }

    const BINARY: [(&str, &str); 6] = [
        ("ce_specversion", "1.0"),
        ("ce_id", "u:7:modified"),
        ("ce_source", "k8s://c/api/v1/namespaces/ns/pods"),
        ("ce_type", "io.k8s.core.v1.pod.modified"),
        ("content-type", "application/json"),
        ("ce_dataschema", "urn:kubecast:schema:pod-full:v1"),
    ];

    #[test]
    fn binary_json_data_is_written_inline_as_it_came() {
        let v = line_of(BINARY.to_vec(), br#"{"metadata":{"name":"p"},"n":1.50}"#);
        assert_eq!(v["id"], "u:7:modified");
        assert_eq!(v["datacontenttype"], "application/json");
        assert_eq!(v["dataschema"], "urn:kubecast:schema:pod-full:v1");
        assert_eq!(v["data"]["metadata"]["name"], "p");
        assert!(v.get("data_base64").is_none());
    }

    #[test]
    fn pretty_printed_json_data_is_made_one_line() {
        let v = line_of(BINARY.to_vec(), b"{\n  \"a\": [1,\n 2]\n}");
        assert_eq!(v["data"]["a"][1], 2);
    }

    #[test]
    fn data_that_is_not_json_goes_as_base64() {
        let mut h = BINARY.to_vec();
        h[4] = ("content-type", "application/octet-stream");
        let v = line_of(h, &[0, 159, 146, 150]);
        assert_eq!(v["data_base64"], "AJ+Slg==");
        let v = line_of(BINARY.to_vec(), b"{not json");
        assert!(v.get("data_base64").is_some(), "{v}");
    }
}
