//! A Kafka-aware TCP relay on a loopback port in front of the stack's broker, for one fault
//! the real broker cannot be made to produce on demand: a transaction's commit that reaches
//! the transaction coordinator late. Armed with [`KafkaRelay::hold_end_txn`], it holds back
//! every `EndTxn` request (API key 26) for a while before passing it on, as a congested or
//! partitioned network path does; the connection's later requests queue behind it, as they
//! would on one TCP stream. A held request is passed on even after its client went away
//! (`kill -9`): the bytes were sent, and the coordinator acts on them when they arrive.
//!
//! A Kafka client connects to the brokers' advertised listeners from the metadata, not only
//! to its bootstrap address: the relay rewrites the port in the broker addresses of the
//! answers that carry them (Metadata, FindCoordinator, DescribeCluster), so that every
//! connection of a client bootstrapped through it goes through it. Same-length rewrite: the
//! host stays `127.0.0.1`, the port is a fixed-width integer, no frame changes size.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

const END_TXN: i16 = 26;
/// The answers that carry broker addresses: Metadata, FindCoordinator, DescribeCluster.
const ADDRESSES: [i16; 3] = [3, 10, 60];

/// What the relay held, shared with its connections.
#[derive(Default)]
struct Held {
    /// How long each `EndTxn` request is held, once armed.
    hold: Mutex<Option<Duration>>,
    /// The held requests: the transactional id each names, and once the coordinator answered
    /// it, the answer's error code (0: committed or aborted as asked).
    requests: Mutex<Vec<(String, Option<i16>)>>,
    changed: Notify,
}

/// A running relay; stopped (with every connection through it) when dropped.
pub struct KafkaRelay {
    pub port: u16,
    held: Arc<Held>,
    task: JoinHandle<()>,
}

impl KafkaRelay {
    /// Relays 127.0.0.1:`port` (returned) to the broker at `upstream` (`127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> KafkaRelay {
        let upstream_port: u16 = upstream
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("the broker address {upstream} is not HOST:PORT"));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the Kafka relay on loopback");
        let port = listener.local_addr().expect("the relay's address").port();
        let held = Arc::new(Held::default());
        let shared = held.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let held = shared.clone();
                conns.spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream_port)).await {
                        relay(inbound, outbound, (upstream_port, port), held).await;
                    }
                });
            }
        });
        KafkaRelay { port, held, task }
    }

    /// The relay's address, for a sink's `brokers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// From now on, each `EndTxn` request is held for `hold` before it is passed on.
    pub fn hold_end_txn(&self, hold: Duration) {
        *self.held.hold.lock().unwrap() = Some(hold);
    }

    /// The transactional ids of the requests held so far, with the coordinator's answers
    /// (`None`: not answered yet).
    pub fn held(&self) -> Vec<(String, Option<i16>)> {
        self.held.requests.lock().unwrap().clone()
    }

    /// Waits until `n` requests are held, or fails saying how many are.
    pub async fn wait_held(&self, n: usize, limit: Duration) -> Result<(), String> {
        self.wait(limit, |h| h.len() >= n).await.map_err(|h| {
            format!(
                "{} of {n} EndTxn requests held after {limit:?}: {h:?}",
                h.len()
            )
        })
    }

    /// Waits until the coordinator answered every held request; returns the answers.
    pub async fn wait_answered(&self, limit: Duration) -> Result<Vec<(String, i16)>, String> {
        self.wait(limit, |h| h.iter().all(|(_, a)| a.is_some()))
            .await
            .map_err(|h| format!("held EndTxn requests not answered after {limit:?}: {h:?}"))?;
        Ok(self
            .held()
            .into_iter()
            .filter_map(|(id, a)| Some((id, a?)))
            .collect())
    }

    async fn wait(
        &self,
        limit: Duration,
        done: impl Fn(&[(String, Option<i16>)]) -> bool,
    ) -> Result<(), Vec<(String, Option<i16>)>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.held.changed.notified();
            if done(&self.held()) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(self.held());
            }
        }
    }
}

impl Drop for KafkaRelay {
    fn drop(&mut self) {
        // The JoinSet inside goes with the task, and with it every relayed connection.
        self.task.abort();
    }
}

/// Per correlation id of a request passed on: its API key and version, and which held
/// request it is.
type Pending = HashMap<i32, (i16, i16, Option<usize>)>;

/// One relayed connection, until the client is gone and every request passed on has its
/// answer (or the broker closed the connection).
async fn relay(inbound: TcpStream, outbound: TcpStream, ports: (u16, u16), held: Arc<Held>) {
    let (mut client_in, mut client_out) = inbound.into_split();
    let (mut broker_in, mut broker_out) = outbound.into_split();
    let pending: Arc<Mutex<Pending>> = Arc::default();
    let answered = Arc::new(Notify::new());
    let up = {
        let (pending, held) = (pending.clone(), held.clone());
        async move {
            while let Some(frame) = read_frame(&mut client_in).await {
                let Some((api, version, correlation)) = request_header(&frame) else {
                    break;
                };
                let hold = *held.hold.lock().unwrap();
                let mut which = None;
                if api == END_TXN
                    && let Some(hold) = hold
                {
                    let id = end_txn_id(&frame, version).unwrap_or_default();
                    which = Some({
                        let mut requests = held.requests.lock().unwrap();
                        requests.push((id, None));
                        requests.len() - 1
                    });
                    held.changed.notify_waiters();
                    tokio::time::sleep(hold).await;
                }
                pending
                    .lock()
                    .unwrap()
                    .insert(correlation, (api, version, which));
                if broker_out.write_all(&frame).await.is_err() {
                    break;
                }
            }
        }
    };
    let down = {
        let (pending, held, answered) = (pending.clone(), held.clone(), answered.clone());
        async move {
            let mut client_gone = false;
            while let Some(mut frame) = read_frame(&mut broker_in).await {
                let correlation = frame
                    .get(4..8)
                    .map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                let request = pending.lock().unwrap().remove(&correlation);
                match request {
                    Some((api, _, _)) if ADDRESSES.contains(&api) => {
                        rewrite_port(&mut frame, ports.0, ports.1)
                    }
                    Some((END_TXN, version, Some(i))) => {
                        let code = end_txn_error(&frame, version);
                        held.requests.lock().unwrap()[i].1 = Some(code.unwrap_or(-1));
                        held.changed.notify_waiters();
                    }
                    _ => {}
                }
                answered.notify_waiters();
                // A client that went away gets nothing; the broker's answers are still read.
                if !client_gone && client_out.write_all(&frame).await.is_err() {
                    client_gone = true;
                }
            }
        }
    };
    let down = tokio::spawn(down);
    up.await;
    // The client is gone (or sent garbage): wait for the answers to what was passed on, so
    // that the broker acts on each request before the connection closes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let next = answered.notified();
        if pending.lock().unwrap().is_empty() || down.is_finished() {
            break;
        }
        if tokio::time::timeout_at(deadline, next).await.is_err() {
            break;
        }
    }
    down.abort();
}

/// One Kafka frame (the 4-byte size and what follows); `None` at the stream's end.
async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    r.read_exact(&mut size).await.ok()?;
    let n = usize::try_from(i32::from_be_bytes(size)).ok()?;
    if n > 256 << 20 {
        return None;
    }
    let mut frame = vec![0u8; 4 + n];
    frame[..4].copy_from_slice(&size);
    r.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

/// A request's API key, version and correlation id.
fn request_header(frame: &[u8]) -> Option<(i16, i16, i32)> {
    let b = frame.get(4..12)?;
    Some((
        i16::from_be_bytes([b[0], b[1]]),
        i16::from_be_bytes([b[2], b[3]]),
        i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    ))
}

/// The transactional id an `EndTxn` request names: after the header's client id (a nullable
/// INT16-sized string) and, from version 3 (flexible), the header's tagged fields.
fn end_txn_id(frame: &[u8], version: i16) -> Option<String> {
    let mut at = 12;
    let client_id = i16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
    at += 2 + usize::try_from(client_id.max(0)).ok()?;
    let (len, skip) = if version >= 3 {
        // Tagged fields: none (one zero byte); then a compact string, its size plus one.
        at += 1;
        (usize::from(*frame.get(at)?).checked_sub(1)?, 1)
    } else {
        let b = frame.get(at..at + 2)?;
        (usize::try_from(i16::from_be_bytes([b[0], b[1]])).ok()?, 2)
    };
    at += skip;
    String::from_utf8(frame.get(at..at + len)?.to_vec()).ok()
}

/// An `EndTxn` answer's error code: after the correlation id (and from version 3 the
/// header's tagged fields) and the throttle time.
fn end_txn_error(frame: &[u8], version: i16) -> Option<i16> {
    let at = 8 + usize::from(version >= 3) + 4;
    let b = frame.get(at..at + 2)?;
    Some(i16::from_be_bytes([b[0], b[1]]))
}

/// Points every `127.0.0.1` broker address at port `from` in `frame` to port `to` instead.
fn rewrite_port(frame: &mut [u8], from: u16, to: u16) {
    let host = b"127.0.0.1";
    let (from, to) = (i32::from(from).to_be_bytes(), i32::from(to).to_be_bytes());
    let mut i = 0;
    while i + host.len() + 4 <= frame.len() {
        if &frame[i..i + host.len()] == host && frame[i + host.len()..i + host.len() + 4] == from {
            frame[i + host.len()..i + host.len() + 4].copy_from_slice(&to);
            i += host.len() + 4;
        } else {
            i += 1;
        }
    }
}
