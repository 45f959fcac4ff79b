//! OTLP's two encodings of a log record and of a request: protobuf (`http/protobuf`, `grpc`)
//! and JSON (`http/json`, with OTLP's rules: lowerCamelCase names, 64-bit integers as
//! strings, `AnyValue` as `{"stringValue": …}`). Entry points: [`record_bytes`] (one event's
//! record, held by the window) and [`request`] (records grouped into one
//! `ExportLogsServiceRequest`, one `ResourceLogs` per resource).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::proto::Writer;
use super::record::{Record, Shape, record_of, resource_of};
use crate::event::Event;

/// The encoding of a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// The instrumentation scope kubecast's records carry.
const SCOPE: &str = "kubecast";
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One event's `LogRecord`, encoded.
pub fn record_bytes(encoding: Encoding, shape: Shape, event: &Event) -> Bytes {
    let r = record_of(shape, event);
    match encoding {
        Encoding::Protobuf => {
            let mut w = Writer::default();
            proto_record(&mut w, &r);
            w.buf.into()
        }
        // A map of strings and JSON values always serializes.
        Encoding::Json => serde_json::to_vec(&json_record(&r)).unwrap_or_default().into(),
    }
}

/// One `ExportLogsServiceRequest` of `events` with their encoded records: one
/// `ResourceLogs` per resource (`k8s.cluster.name` the sink's `cluster`, and the namespace),
/// in the order the resources first appear, each record in the order of the events.
pub fn request(encoding: Encoding, shape: Shape, cluster: &str, events: &[(Arc<Event>, Bytes)]) -> Bytes {
    let mut groups: Vec<(Option<&str>, Vec<&Bytes>)> = Vec::new();
    for (event, record) in events {
        let resource = resource_of(shape, event);
        match groups.iter_mut().find(|(r, _)| *r == resource) {
            Some((_, records)) => records.push(record),
            None => groups.push((resource, vec![record])),
        }
    }
    // A resource's attributes: none in the k8sobjects shape (nor a scope).
    let attrs = |namespace: Option<&str>| -> Vec<(&'static str, String)> {
        let Some(ns) = namespace else { return Vec::new() };
        let mut out = vec![("k8s.cluster.name", cluster.to_string())];
        if !ns.is_empty() {
            out.push(("k8s.namespace.name", ns.to_string()));
        }
        out
    };
    match encoding {
        Encoding::Protobuf => {
            let mut w = Writer::default();
            for (namespace, records) in &groups {
                w.message(1, |rl| {
                    rl.message(1, |res| {
                        for (k, v) in attrs(*namespace) {
                            res.message(1, |kv| key_value(kv, k, &v));
                        }
                    });
                    rl.message(2, |sl| {
                        if namespace.is_some() {
                            sl.message(1, |s| {
                                s.bytes(1, SCOPE.as_bytes());
                                s.bytes(2, VERSION.as_bytes());
                            });
                        }
                        for r in records {
                            sl.bytes_always(2, r);
                        }
                    });
                });
            }
            w.buf.into()
        }
        Encoding::Json => {
            // The records are already JSON: they are spliced in, not parsed again.
            let mut out = Vec::with_capacity(events.iter().map(|(_, b)| b.len() + 1).sum::<usize>() + 256);
            out.extend_from_slice(b"{\"resourceLogs\":[");
            for (i, (namespace, records)) in groups.iter().enumerate() {
                let attrs: Vec<Value> =
                    attrs(*namespace).iter().map(|(k, v)| json!({"key": k, "value": {"stringValue": v}})).collect();
                let scope = if namespace.is_some() { json!({"name": SCOPE, "version": VERSION}) } else { json!({}) };
                // Everything of the ResourceLogs but its records, which go where `[]` is.
                let head = json!({"resource": {"attributes": attrs}, "scopeLogs": [{"scope": scope, "logRecords": []}]}).to_string();
                // The marker is there: `head` was written just above.
                let at = head.find("\"logRecords\":[]").map_or(head.len(), |i| i + "\"logRecords\":[".len());
                let (before, after) = head.split_at(at);
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(before.as_bytes());
                for (j, r) in records.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(r);
                }
                out.extend_from_slice(after.as_bytes());
            }
            out.extend_from_slice(b"]}");
            out.into()
        }
    }
}

fn key_value(w: &mut Writer, key: &str, value: &str) {
    w.bytes(1, key.as_bytes());
    w.message(2, |v| v.bytes_always(1, value.as_bytes()));
}

fn proto_record(w: &mut Writer, r: &Record) {
    w.fixed64(1, r.time_ns);
    w.uint(2, r.severity.0 as u64);
    w.bytes(3, r.severity.1.as_bytes());
    w.message(5, |v| any_value(v, &r.body));
    for (k, v) in &r.attributes {
        w.message(6, |kv| key_value(kv, k, v));
    }
    w.fixed64(11, r.observed_ns);
    w.bytes(12, r.event_name.as_bytes());
}

/// A JSON value as an `AnyValue`: integers as `int_value`, other numbers as `double_value`,
/// objects as `kvlist_value`, `null` as an empty value (what the Collector makes of a nil).
fn any_value(w: &mut Writer, v: &Value) {
    match v {
        Value::Null => {}
        Value::String(s) => w.bytes_always(1, s.as_bytes()),
        Value::Bool(b) => w.uint_always(2, u64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => w.uint_always(3, i as u64),
            None => w.double_always(4, n.as_f64().unwrap_or_default()),
        },
        Value::Array(items) => w.message(5, |a| {
            for item in items {
                a.message(1, |x| any_value(x, item));
            }
        }),
        Value::Object(map) => w.message(6, |l| {
            for (k, item) in map {
                l.message(1, |kv| {
                    kv.bytes(1, k.as_bytes());
                    kv.message(2, |x| any_value(x, item));
                });
            }
        }),
    }
}

fn json_record(r: &Record) -> Value {
    let mut m = Map::new();
    if r.time_ns != 0 {
        m.insert("timeUnixNano".into(), r.time_ns.to_string().into());
    }
    if r.observed_ns != 0 {
        m.insert("observedTimeUnixNano".into(), r.observed_ns.to_string().into());
    }
    if r.severity.0 != 0 {
        m.insert("severityNumber".into(), r.severity.0.into());
    }
    if !r.severity.1.is_empty() {
        m.insert("severityText".into(), r.severity.1.as_str().into());
    }
    if !r.event_name.is_empty() {
        m.insert("eventName".into(), r.event_name.into());
    }
    m.insert("body".into(), json_any(&r.body));
    let attrs: Vec<Value> =
        r.attributes.iter().map(|(k, v)| json!({"key": k, "value": {"stringValue": &**v}})).collect();
    m.insert("attributes".into(), attrs.into());
    Value::Object(m)
}

fn json_any(v: &Value) -> Value {
    match v {
        Value::Null => json!({}),
        Value::String(s) => json!({"stringValue": s}),
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) => match n.as_i64() {
            Some(i) => json!({"intValue": i.to_string()}),
            None => json!({"doubleValue": n}),
        },
        Value::Array(items) => json!({"arrayValue": {"values": items.iter().map(json_any).collect::<Vec<_>>()}}),
        Value::Object(map) => {
            let values: Vec<Value> = map.iter().map(|(k, item)| json!({"key": k, "value": json_any(item)})).collect();
            json!({"kvlistValue": {"values": values}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChangeKind;

    fn event(namespace: &str, data: Value) -> Arc<Event> {
        Arc::new(super::super::record::tests::event_in(ChangeKind::Added, namespace, data))
    }

    #[test]
    fn json_requests_group_records_by_namespace_and_follow_otlps_json_rules() {
        let data = json!({"n": 3, "f": 1.5, "b": true, "z": null, "a": ["x"], "m": {"k": "v"}});
        let events: Vec<_> = ["a", "b", "a"]
            .into_iter()
            .map(|ns| {
                let e = event(ns, data.clone());
                let r = record_bytes(Encoding::Json, Shape::Kubecast, &e);
                (e, r)
            })
            .collect();
        let body: Value = serde_json::from_slice(&request(Encoding::Json, Shape::Kubecast, "prod", &events)).expect("JSON");
        let rls = body["resourceLogs"].as_array().expect("resourceLogs");
        assert_eq!(rls.len(), 2, "one ResourceLogs per namespace");
        assert_eq!(rls[0]["scopeLogs"][0]["logRecords"].as_array().map(Vec::len), Some(2));
        assert_eq!(rls[0]["resource"]["attributes"][0], json!({"key": "k8s.cluster.name", "value": {"stringValue": "prod"}}));
        assert_eq!(rls[0]["resource"]["attributes"][1], json!({"key": "k8s.namespace.name", "value": {"stringValue": "a"}}));
        assert_eq!(rls[0]["scopeLogs"][0]["scope"]["name"], "kubecast");
        let record = &rls[0]["scopeLogs"][0]["logRecords"][0];
        assert_eq!(record["timeUnixNano"], "1767225601500000000");
        let fields = record["body"]["kvlistValue"]["values"].as_array().expect("a kvlist");
        let field = |k: &str| fields.iter().find(|f| f["key"] == k).map(|f| f["value"].clone());
        assert_eq!(field("n"), Some(json!({"intValue": "3"})));
        assert_eq!(field("f"), Some(json!({"doubleValue": 1.5})));
        assert_eq!(field("z"), Some(json!({})));
        assert_eq!(field("a"), Some(json!({"arrayValue": {"values": [{"stringValue": "x"}]}})));
    }

    #[test]
    fn protobuf_records_nest_as_the_logs_proto_says() {
        use super::super::proto::{Field, Reader};
        let e = event("a", json!({"n": -1}));
        let r = record_bytes(Encoding::Protobuf, Shape::Kubecast, &e);
        let fields: Vec<_> = Reader::new(&r).collect();
        assert!(fields.contains(&(1, Field::Fixed64(1_767_225_601_500_000_000))));
        assert!(fields.contains(&(12, Field::Len(b"io.k8s.core.v1.pod.added"))));
        let Some((_, Field::Len(body))) = fields.iter().find(|(n, _)| *n == 5) else { panic!("no body") };
        // body: kvlist_value { values { key "n" value { int_value -1 } } }
        let kvlist = Reader::new(body).next().expect("kvlist");
        let Field::Len(kvlist) = kvlist.1 else { panic!("{kvlist:?}") };
        let Some((1, Field::Len(kv))) = Reader::new(kvlist).next() else { panic!("no key value") };
        let kv: Vec<_> = Reader::new(kv).collect();
        assert_eq!(kv[0], (1, Field::Len(b"n")));
        let Field::Len(value) = kv[1].1 else { panic!() };
        assert_eq!(Reader::new(value).next(), Some((3, Field::Varint(u64::MAX))), "int64 -1 is ten bytes of ones");
        let req = request(Encoding::Protobuf, Shape::Kubecast, "prod", &[(e, r)]);
        assert_eq!(Reader::new(&req).filter(|(n, _)| *n == 1).count(), 1);
    }
}
