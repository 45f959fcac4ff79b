//! The records of the durable log and their byte encoding.
//!
//! Every record has a sequence number, one counter for the whole log. An `Event` record is
//! an event as the sinks send it, and says whether it came from the watch (then it also moves
//! the watch position of its scope to its resourceVersion). Event records written before
//! other kinds were watched (tag 1) are read as Pods' events; new ones (tag 4) carry the
//! object's type, apiVersion, kind, resource and watch scope. A `Position` record moves a
//! scope's watch position: to a bookmark's or a finished list's resourceVersion, or to
//! "list again" while a list is in progress. Replaying the records after a snapshot therefore
//! rebuilds both the known state and the resume point, consistent with each other.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::event::Event;
use crate::model::{ChangeKind, ObjectRef};
use crate::route::engine::ObjectState;

/// One entry of the log.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Event {
        event: Arc<Event>,
        from_watch: bool,
    },
    /// The watch position of `scope` (`None`: all namespaces); `rv: None` means a list is
    /// under way, so a restart must list again.
    Position {
        seq: u64,
        scope: Option<String>,
        rv: Option<String>,
    },
    /// With routes or alert rules: one object's routing state after a change (or after one
    /// of its alert timers fired), whether or not any event went out for it. `from_watch`
    /// moves its scope's watch position to the state's resourceVersion.
    State {
        seq: u64,
        state: Arc<ObjectState>,
        from_watch: bool,
    },
}

impl Record {
    pub fn seq(&self) -> u64 {
        match self {
            Record::Event { event, .. } => event.seq,
            Record::Position { seq, .. } | Record::State { seq, .. } => *seq,
        }
    }

    /// The record's bytes (without the log's framing).
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Record::Event {
                event: e,
                from_watch,
            } => {
                out.put_u8(4);
                out.put_u64_le(e.seq);
                out.put_u8(u8::from(*from_watch));
                out.put_u8(match e.kind {
                    ChangeKind::Added => 0,
                    ChangeKind::Modified => 1,
                    ChangeKind::Deleted => 2,
                    ChangeKind::AlertFiring => 3,
                    ChangeKind::AlertResolved => 4,
                });
                out.put_u8(u8::from(e.inferred) | (u8::from(e.initial) << 1));
                let time = e.time.to_string();
                for s in [
                    e.id.as_str(),
                    &e.source,
                    &time,
                    &e.object.uid,
                    &e.object.namespace,
                    &e.object.name,
                    &e.rv,
                    &e.prev_rv,
                ] {
                    put_bytes(out, s.as_bytes());
                }
                put_bytes(out, e.dataschema.as_bytes());
                put_bytes(out, &e.data);
                put_opt(out, e.route.as_deref());
                for s in [
                    &e.ty,
                    &e.api_version,
                    &e.k8s_kind,
                    &e.object.resource,
                    &e.scope,
                ] {
                    put_bytes(out, s.as_bytes());
                }
            }
            Record::Position { seq, scope, rv } => {
                out.put_u8(2);
                out.put_u64_le(*seq);
                put_opt(out, scope.as_deref());
                put_opt(out, rv.as_deref());
            }
            Record::State {
                seq,
                state,
                from_watch,
            } => {
                out.put_u8(3);
                out.put_u64_le(*seq);
                out.put_u8(u8::from(*from_watch));
                // A small struct of strings and numbers: serializing it cannot fail.
                put_bytes(out, &serde_json::to_vec(&**state).unwrap_or_default());
            }
        }
    }

    /// Decodes what [`Record::encode`] wrote; `None` if the bytes are not such a record.
    pub fn decode(mut b: Bytes) -> Option<Record> {
        let tag = get_u8(&mut b)?;
        match tag {
            1 | 4 => {
                let seq = get_u64(&mut b)?;
                let from_watch = get_u8(&mut b)? != 0;
                let kind = match get_u8(&mut b)? {
                    0 => ChangeKind::Added,
                    1 => ChangeKind::Modified,
                    2 => ChangeKind::Deleted,
                    3 => ChangeKind::AlertFiring,
                    4 => ChangeKind::AlertResolved,
                    _ => return None,
                };
                let flags = get_u8(&mut b)?;
                let mut strings = Vec::with_capacity(9);
                for _ in 0..9 {
                    strings.push(get_string(&mut b)?);
                }
                let data = get_bytes(&mut b)?;
                // Tag 1: the route after the data only when there is one (records written
                // before routes existed end with the data); Pods' events.
                let route = if tag == 4 || b.has_remaining() {
                    get_opt(&mut b)?.map(Arc::from)
                } else {
                    None
                };
                let [ty, api_version, k8s_kind, resource, scope]: [Arc<str>; 5] = if tag == 4 {
                    let mut five = Vec::with_capacity(5);
                    for _ in 0..5 {
                        five.push(Arc::from(get_string(&mut b)?));
                    }
                    five.try_into().ok()?
                } else {
                    [
                        kind.event_type().into(),
                        "v1".into(),
                        "Pod".into(),
                        crate::model::legacy::PODS.into(),
                        "".into(),
                    ]
                };
                let mut s = strings.into_iter();
                let mut next = || s.next().unwrap_or_default();
                let event = Event {
                    seq,
                    id: next(),
                    kind,
                    ty,
                    api_version,
                    k8s_kind,
                    scope,
                    source: next(),
                    // A time that does not parse makes the record unreadable, as any
                    // damaged field does.
                    time: next().parse().ok()?,
                    // Fields are evaluated in this order: uid, namespace, name as written.
                    object: ObjectRef {
                        uid: next(),
                        resource,
                        namespace: next().into(),
                        name: next(),
                    },
                    rv: next(),
                    prev_rv: next(),
                    dataschema: next().into(),
                    inferred: flags & 1 != 0,
                    initial: flags & 2 != 0,
                    truncated: false,
                    compat: None,
                    from_watch,
                    route,
                    data,
                };
                Some(Record::Event {
                    event: Arc::new(event),
                    from_watch,
                })
            }
            2 => {
                let seq = get_u64(&mut b)?;
                let scope = get_opt(&mut b)?;
                let rv = get_opt(&mut b)?;
                Some(Record::Position { seq, scope, rv })
            }
            3 => {
                let seq = get_u64(&mut b)?;
                let from_watch = get_u8(&mut b)? != 0;
                let state = serde_json::from_slice(&get_bytes(&mut b)?).ok()?;
                Some(Record::State {
                    seq,
                    state: Arc::new(state),
                    from_watch,
                })
            }
            _ => None,
        }
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.put_slice(b);
}

fn put_opt(out: &mut BytesMut, s: Option<&str>) {
    match s {
        None => out.put_u8(0),
        Some(s) => {
            out.put_u8(1);
            put_bytes(out, s.as_bytes());
        }
    }
}

fn get_u8(b: &mut Bytes) -> Option<u8> {
    (b.remaining() >= 1).then(|| b.get_u8())
}

fn get_u64(b: &mut Bytes) -> Option<u64> {
    (b.remaining() >= 8).then(|| b.get_u64_le())
}

fn get_bytes(b: &mut Bytes) -> Option<Bytes> {
    if b.remaining() < 4 {
        return None;
    }
    let n = b.get_u32_le() as usize;
    (b.remaining() >= n).then(|| b.split_to(n))
}

fn get_string(b: &mut Bytes) -> Option<String> {
    String::from_utf8(get_bytes(b)?.to_vec()).ok()
}

fn get_opt(b: &mut Bytes) -> Option<Option<String>> {
    match get_u8(b)? {
        0 => Some(None),
        1 => Some(Some(get_string(b)?)),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn event(seq: u64, uid: &str, rv: &str, kind: ChangeKind) -> Event {
        Event {
            seq,
            id: crate::event::event_id(uid, rv, kind),
            kind,
            ty: kind.event_type().into(),
            source: "k8s://c/api/v1/namespaces/ns/pods".into(),
            time: "2026-01-01T00:00:00Z".parse().expect("a time"),
            dataschema: crate::event::SCHEMA_FULL.into(),
            api_version: "v1".into(),
            k8s_kind: "Pod".into(),
            // Derived from the namespace, as for events logged by the Pod-only version.
            scope: "".into(),
            object: ObjectRef {
                uid: uid.into(),
                resource: "pods".into(),
                namespace: "ns".into(),
                name: format!("pod-{uid}"),
            },
            rv: rv.into(),
            prev_rv: String::new(),
            inferred: kind == ChangeKind::Deleted,
            initial: false,
            truncated: false,
            compat: None,
            from_watch: false,
            route: None,
            data: Bytes::from(format!("{{\"rv\":\"{rv}\"}}")),
        }
    }

    #[test]
    fn records_survive_their_encoding() {
        // An event's own flag says what its record's does.
        let watched = Event {
            from_watch: true,
            ..event(7, "u", "12", ChangeKind::Deleted)
        };
        for r in [
            Record::Event {
                event: Arc::new(watched),
                from_watch: true,
            },
            Record::Position {
                seq: 8,
                scope: Some("ns".into()),
                rv: None,
            },
            Record::Position {
                seq: 9,
                scope: None,
                rv: Some("99".into()),
            },
            // An alert on a route.
            Record::Event {
                event: Arc::new(Event {
                    route: Some("oncall".into()),
                    dataschema: crate::event::SCHEMA_ALERT.into(),
                    ..event(10, "u", "12", ChangeKind::AlertFiring)
                }),
                from_watch: false,
            },
            Record::State {
                seq: 11,
                state: Arc::new(ObjectState {
                    uid: "u".into(),
                    resource: "pods".into(),
                    scope: "*".into(),
                    namespace: "ns".into(),
                    name: "p".into(),
                    rv: "12".into(),
                    gone: false,
                    marks: vec![crate::route::engine::Mark {
                        fp: 7,
                        last: "11".into(),
                        matched: true,
                    }],
                    episodes: Vec::new(),
                }),
                from_watch: true,
            },
        ] {
            let mut b = BytesMut::new();
            r.encode(&mut b);
            assert_eq!(Record::decode(b.freeze()), Some(r));
        }
    }

    /// A record as the Pod-only version wrote it (tag 1, the route only when there is one).
    fn pod_only_record(e: &Event) -> BytesMut {
        let mut out = BytesMut::new();
        out.put_u8(1);
        out.put_u64_le(e.seq);
        out.put_u8(1);
        out.put_u8(1);
        out.put_u8(0);
        let time = e.time.to_string();
        for s in [
            &e.id,
            &e.source,
            &time,
            e.object.uid.as_str(),
            &e.object.namespace,
            &e.object.name,
            &e.rv,
            &e.prev_rv,
        ] {
            put_bytes(&mut out, s.as_bytes());
        }
        put_bytes(&mut out, e.dataschema.as_bytes());
        put_bytes(&mut out, &e.data);
        out
    }

    #[test]
    fn an_event_logged_by_the_pod_only_version_reads_as_a_pods_event() {
        let e = event(3, "u", "9", ChangeKind::Modified);
        let Some(Record::Event {
            event: read,
            from_watch,
        }) = Record::decode(pod_only_record(&e).freeze())
        else {
            panic!("not read")
        };
        assert!(from_watch);
        assert_eq!(&*read.ty, "io.k8s.core.v1.pod.modified");
        assert_eq!(
            (&*read.api_version, &*read.k8s_kind, &*read.object.resource),
            ("v1", "Pod", "pods")
        );
        assert_eq!(
            &*read.scope, "",
            "derived from the namespace, as it was then"
        );
        assert_eq!(
            (read.id.as_str(), read.route.as_deref()),
            (e.id.as_str(), None)
        );
    }

    #[test]
    fn an_event_of_another_kind_keeps_its_type_kind_resource_and_scope() {
        let mut e = Event {
            ty: "io.k8s.core.v1.node.added".into(),
            api_version: "v1".into(),
            k8s_kind: "Node".into(),
            scope: "nodes/*".into(),
            dataschema: "urn:kubecast:schema:node-full:v1".into(),
            from_watch: true,
            ..event(4, "n", "2", ChangeKind::Added)
        };
        e.object.resource = "nodes".into();
        e.object.namespace = "".into();
        let r = Record::Event {
            event: Arc::new(e),
            from_watch: true,
        };
        let mut b = BytesMut::new();
        r.encode(&mut b);
        assert_eq!(Record::decode(b.freeze()), Some(r));
    }

    #[test]
    fn truncated_bytes_are_not_a_record() {
        let mut b = BytesMut::new();
        Record::Event {
            event: Arc::new(event(7, "u", "12", ChangeKind::Added)),
            from_watch: false,
        }
        .encode(&mut b);
        let b = b.freeze();
        for cut in 0..b.len() {
            assert_eq!(Record::decode(b.slice(..cut)), None, "cut at {cut}");
        }
    }
}
