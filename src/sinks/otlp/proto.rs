//! Protocol Buffers on the wire, as much as OTLP needs: writing the messages of
//! `opentelemetry.proto.logs.v1` (through [`Writer`]) and reading the few answers a receiver
//! sends back (`ExportLogsServiceResponse`, `google.rpc.Status`, `RetryInfo`) with [`Reader`].
//!
//! Written by hand rather than generated: the logs messages are a dozen fields, and writing
//! them straight from the event's JSON needs no intermediate objects. The reader is a parser
//! of outside input: it never panics and stops at the first malformed byte
//! (`fuzz/fuzz_targets/otlp_answer.rs`).

/// The wire types used.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// Appends protobuf fields to a buffer.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    /// A varint field (int32, int64, uint32, bool, enum); zero is left out, as proto3 does.
    pub fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    /// A varint field written even when zero (inside a `oneof`, where presence matters).
    pub fn uint_always(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.varint(v);
    }

    pub fn fixed64(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, FIXED64);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// A double inside a `oneof` (written even when zero).
    pub fn double_always(&mut self, field: u32, v: f64) {
        self.key(field, FIXED64);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A string or bytes field; empty is left out.
    pub fn bytes(&mut self, field: u32, v: &[u8]) {
        if !v.is_empty() {
            self.bytes_always(field, v);
        }
    }

    /// A string or bytes field written even when empty (inside a `oneof`).
    pub fn bytes_always(&mut self, field: u32, v: &[u8]) {
        self.key(field, LEN);
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// An embedded message, written by `f` (always present, even when empty) into this
    /// buffer, its length put in front of it afterwards: no buffer of its own per message.
    pub fn message(&mut self, field: u32, f: impl FnOnce(&mut Writer)) {
        self.key(field, LEN);
        let start = self.buf.len();
        f(self);
        let mut len = Writer { buf: Vec::with_capacity(5) };
        len.varint((self.buf.len() - start) as u64);
        self.buf.splice(start..start, len.buf);
    }
}

/// A field read by [`Reader`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'a [u8]),
}

/// Reads the fields of one message, in order. Any malformed input ends it with `None` and
/// sets [`Reader::broken`].
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
    pub broken: bool,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes, broken: false }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.rest.split_first()?;
            self.rest = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    fn field(&mut self) -> Option<(u32, Field<'a>)> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).ok()?;
        let value = match (key & 7) as u8 {
            VARINT => Field::Varint(self.varint()?),
            FIXED64 => Field::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().ok()?)),
            FIXED32 => Field::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().ok()?)),
            LEN => {
                let n = usize::try_from(self.varint()?).ok()?;
                Field::Len(self.take(n)?)
            }
            _ => return None,
        };
        Some((number, value))
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = (u32, Field<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.broken {
            return None;
        }
        let f = self.field();
        self.broken = f.is_none();
        f
    }
}

/// `ExportLogsServiceResponse.partial_success`: the records the receiver rejected and why.
/// `None` when the answer says nothing was rejected (or cannot be read).
pub fn partial_success(body: &[u8]) -> Option<(i64, String)> {
    let mut out = None;
    for (n, f) in Reader::new(body) {
        if let (1, Field::Len(m)) = (n, f) {
            let (mut rejected, mut message) = (0i64, String::new());
            for (n, f) in Reader::new(m) {
                match (n, f) {
                    (1, Field::Varint(v)) => rejected = v as i64,
                    (2, Field::Len(s)) => message = String::from_utf8_lossy(s).into_owned(),
                    _ => {}
                }
            }
            out = (rejected != 0 || !message.is_empty()).then_some((rejected, message));
        }
    }
    out
}

/// A `google.rpc.Status`: its message and, from a `google.rpc.RetryInfo` among its
/// details, the delay the server asks for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Status {
    pub code: i32,
    pub message: String,
    pub retry_delay: Option<std::time::Duration>,
}

const RETRY_INFO: &[u8] = b"type.googleapis.com/google.rpc.RetryInfo";

pub fn status(body: &[u8]) -> Status {
    let mut s = Status::default();
    for (n, f) in Reader::new(body) {
        match (n, f) {
            (1, Field::Varint(v)) => s.code = v as i32,
            (2, Field::Len(m)) => s.message = String::from_utf8_lossy(m).into_owned(),
            (3, Field::Len(any)) => {
                let (mut url, mut value) = (&[][..], &[][..]);
                for (n, f) in Reader::new(any) {
                    match (n, f) {
                        (1, Field::Len(u)) => url = u,
                        (2, Field::Len(v)) => value = v,
                        _ => {}
                    }
                }
                if url == RETRY_INFO {
                    s.retry_delay = retry_delay(value).or(s.retry_delay);
                }
            }
            _ => {}
        }
    }
    s
}

/// `RetryInfo.retry_delay` (a `google.protobuf.Duration`), capped at 10 minutes.
fn retry_delay(info: &[u8]) -> Option<std::time::Duration> {
    let mut out = None;
    for (n, f) in Reader::new(info) {
        if let (1, Field::Len(d)) = (n, f) {
            let (mut secs, mut nanos) = (0i64, 0i64);
            for (n, f) in Reader::new(d) {
                match (n, f) {
                    (1, Field::Varint(v)) => secs = v as i64,
                    (2, Field::Varint(v)) => nanos = i64::from(v as i32),
                    _ => {}
                }
            }
            let ms = secs.saturating_mul(1000).saturating_add(nanos / 1_000_000).clamp(0, 600_000);
            out = Some(std::time::Duration::from_millis(ms as u64));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_success_is_read_with_its_count_and_message() {
        let mut inner = Writer::default();
        inner.uint(1, 3);
        inner.bytes(2, b"3 records too old");
        let mut w = Writer::default();
        w.bytes(1, &inner.buf);
        assert_eq!(partial_success(&w.buf), Some((3, "3 records too old".into())));
        assert_eq!(partial_success(&[]), None, "an empty answer is full success");
        let mut empty = Writer::default();
        empty.message(1, |_| {});
        assert_eq!(partial_success(&empty.buf), None, "an empty partial_success is full success");
    }

    #[test]
    fn a_status_names_its_retry_delay() {
        let mut duration = Writer::default();
        duration.uint(1, 2);
        duration.uint(2, 500_000_000);
        let mut info = Writer::default();
        info.bytes(1, &duration.buf);
        let mut any = Writer::default();
        any.bytes(1, RETRY_INFO);
        any.bytes(2, &info.buf);
        let mut status_w = Writer::default();
        status_w.uint(1, 8);
        status_w.bytes(2, b"slow down");
        status_w.bytes(3, &any.buf);
        let s = status(&status_w.buf);
        assert_eq!((s.code, s.message.as_str()), (8, "slow down"));
        assert_eq!(s.retry_delay, Some(std::time::Duration::from_millis(2500)));
    }

    #[test]
    fn malformed_input_is_read_as_far_as_it_goes_without_panicking() {
        for bad in [&[0xff][..], &[0x0a, 0x05, 1], &[0x0b], &[0x80; 12]] {
            let mut r = Reader::new(bad);
            assert!(r.by_ref().count() <= 1);
            assert!(r.broken, "{bad:?}");
            let _ = (status(bad), partial_success(bad));
        }
    }

    #[test]
    fn varints_are_written_as_protobuf_does() {
        let mut w = Writer::default();
        w.uint(1, 150);
        assert_eq!(w.buf, [0x08, 0x96, 0x01]);
        let mut w = Writer::default();
        w.uint(1, 0);
        w.bytes(2, b"");
        assert!(w.buf.is_empty(), "proto3 leaves zero values out");
    }
}
