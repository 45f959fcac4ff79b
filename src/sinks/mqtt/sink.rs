//! Publishing events at QoS 1 and turning PUBACKs into acks. Entry point: [`run`], the
//! [`Sink`] of a validated [`MqttSettings`].
//!
//! Every publish stays in the [`Window`] until the broker's PUBACK for its packet id
//! arrives. After a connection error nothing unacknowledged is trusted: a new connection is
//! made (clean start) and the whole window is published again, in order. Receivers may see a
//! message twice, with the same event id; they never miss one. A connection the broker
//! stopped answering without closing it (a partition) is an error too, once nothing came for
//! keep-alive plus `pingresp_timeout_seconds`.
//!
//! The reconnect backoff starts again only after a connection that lasted ([`STABLE`]). A
//! session taken over by another client with the same client id (MQTT 5 DISCONNECT 0x8E, or
//! connections dropped again and again right after they were accepted, which is all MQTT 3.1.1
//! and Mosquitto show of it) is an ERROR naming the client id, and readiness says so.

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::conn::{self, Client, ConnError, Message, Note};
use super::window::Window;
use super::{MqttSettings, Protocol};
use crate::backoff::Backoff;
use crate::event::Event;
use crate::model::ChangeKind;
use crate::sinks::queue::QueueRx;
use crate::sinks::{Acks, Sink, SinkError};

impl Sink for MqttSettings {
    fn run(self: Box<Self>, rx: QueueRx, acks: Acks) -> BoxFuture<'static, Result<(), SinkError>> {
        Box::pin(run(*self, rx, acks))
    }
}

/// The messages of one event.
fn messages(s: &MqttSettings, event: &Event) -> Vec<Message> {
    let topic = s.topic.render(event);
    // The retained message is the pod's latest state; an alert must not replace it.
    let retain = s.retain && !event.kind.is_alert();
    let main = match s.protocol {
        Protocol::V5 => {
            let mut properties = Vec::with_capacity(16);
            let mut content_type = None;
            for (k, v) in event.attributes() {
                if k == "datacontenttype" {
                    content_type = Some(v.into_owned());
                } else {
                    properties.push((k.to_string(), v.into_owned()));
                }
            }
            Message {
                topic: topic.clone(),
                payload: event.data.clone(),
                retain,
                properties,
                content_type,
            }
        }
        Protocol::V311 => Message {
            topic: topic.clone(),
            payload: Bytes::from(event.structured_json()),
            retain,
            properties: Vec::new(),
            content_type: None,
        },
    };
    if s.retain && event.kind == ChangeKind::Deleted {
        // The delete itself is not retained; an empty retained message then clears the
        // pod's retained state.
        let clear = Message {
            topic,
            payload: Bytes::new(),
            retain: true,
            properties: Vec::new(),
            content_type: None,
        };
        vec![
            Message {
                retain: false,
                ..main
            },
            clear,
        ]
    } else {
        vec![main]
    }
}

/// Upper bound of the encoded size of a publish (fixed header, topic, properties, payload).
fn packet_size(m: &Message) -> usize {
    let props: usize = m
        .properties
        .iter()
        .map(|(k, v)| k.len() + v.len() + 5)
        .sum();
    let ct = m.content_type.as_ref().map_or(0, |c| c.len() + 3);
    5 + 2 + m.topic.len() + 2 + 4 + props + ct + m.payload.len()
}

/// The current connection, if any.
struct Link {
    client: Client,
    epoch: u64,
    /// When the broker accepted it (CONNACK); `None` until then.
    since: Option<Instant>,
}

/// A connection that lived this long before it was lost resets the backoff: shorter ones
/// (a broker that drops kubecast right after accepting it) make it grow instead.
const STABLE: Duration = Duration::from_secs(60);

/// Connections lost one after another, each soon after the broker accepted it, without a
/// reason (MQTT 3.1.1 has none to give, and Mosquitto closes an MQTT 5 connection it hands
/// over without one): this many say another client takes the session.
const SUSPECT_AFTER: u32 = 3;

/// Why the broker keeps dropping kubecast, when another client takes its session over
/// (`confirmed`: the broker said so).
fn taken_over(s: &MqttSettings, confirmed: bool) -> String {
    let how = if confirmed {
        "the broker said so (DISCONNECT 0x8E)"
    } else {
        "the broker drops each connection right after accepting it"
    };
    format!(
        "the MQTT session of client_id `{}` was taken over by another client connecting with the same client_id ({how}): another kubecast with this cluster name or client_id? (under leader election only the leader connects)",
        s.client_id
    )
}

/// Runs the sink until its queue closes and every queued event was acknowledged.
pub async fn run(s: MqttSettings, mut rx: QueueRx, acks: Acks) -> Result<(), SinkError> {
    let (notes_tx, mut notes) = mpsc::channel::<(u64, Result<Note, ConnError>)>(256);
    let mut window = Window::default();
    let mut link: Option<Link> = None;
    let mut epoch = 0u64;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let mut reconnect_at = Some(Instant::now());
    let mut open = true;
    // A connection failed since the last one was up: what the window holds goes again.
    let mut lost = false;
    let limit = usize::from(s.in_flight);
    // The broker accepted a connection once: a refused TLS handshake is retried from then on
    // (a certificate being rotated) instead of stopping the sink.
    let mut ever_connected = false;
    // Connections the broker dropped one after another, each within STABLE of its CONNACK.
    let mut drops = 0u32;
    loop {
        if !open && window.is_empty() {
            if let Some(l) = &link {
                l.client.disconnect();
            }
            return Ok(());
        }
        let room = window.len() < limit;
        tokio::select! {
            _ = crate::backoff::sleep_until(reconnect_at), if reconnect_at.is_some() => {
                reconnect_at = None;
                epoch += 1;
                let (client, lp) = conn::connect(&s).await.map_err(|e| acks.failed(e))?;
                tokio::spawn(drive(lp, epoch, notes_tx.clone(), s.keep_alive + s.pingresp_timeout));
                link = Some(Link { client, epoch, since: None });
            }
            Some((from, note)) = notes.recv() => {
                let Some(l) = link.as_mut().filter(|l| l.epoch == from) else { continue };
                match note {
                    Ok(Note::Connected) => {
                        tracing::info!(sink = %acks.sink(), host = %s.host, port = s.port, unacked = window.len(), "MQTT connected");
                        ever_connected = true;
                        l.since = Some(Instant::now());
                        acks.connected(true);
                        if std::mem::take(&mut lost) && !window.is_empty() {
                            acks.retried(window.len() as u64);
                        }
                        window.queue_with(|m| l.client.try_publish(m));
                    }
                    Ok(Note::Sent(pkid)) => window.sent(pkid),
                    Ok(Note::Acked(pkid, refused)) => {
                        window.acked(pkid, refused);
                        acks.settle(window.settle()).await?;
                        if l.since.is_some() {
                            window.queue_with(|m| l.client.try_publish(m));
                        }
                    }
                    Ok(Note::Heard | Note::Other) => {}
                    Err(e) if e.is_fatal() => return Err(acks.failed(e)),
                    Err(e) => {
                        if let Some(why) = crate::sinks::tls::refusal(&e) {
                            if !ever_connected {
                                return Err(acks.failed(ConnError::TlsRefused(why)));
                            }
                            tracing::error!(sink = %acks.sink(), host = %s.host, port = s.port, error = %crate::error_chain(&e), "MQTT broker's TLS handshake refused; retrying");
                        }
                        // The backoff starts again only after a connection that lasted; one
                        // dropped soon after it was accepted (its session taken by another
                        // client, say) makes it grow, not a reconnect every few milliseconds.
                        let lived = l.since.map(|t| t.elapsed());
                        let taken = matches!(e, ConnError::TakenOver);
                        match lived {
                            Some(d) if d >= STABLE => {
                                drops = 0;
                                if !taken {
                                    backoff.reset();
                                }
                            }
                            Some(_) => drops += 1,
                            // Not even accepted: the broker is away, not taken over.
                            None => drops = 0,
                        }
                        let wait = backoff.next_delay();
                        let suspected = taken || drops >= SUSPECT_AFTER;
                        if suspected {
                            let why = taken_over(&s, taken);
                            tracing::error!(sink = %acks.sink(), host = %s.host, port = s.port, client_id = %s.client_id,
                                error = %crate::error_chain(&e), retry_in_ms = wait.as_millis() as u64, unacked = window.len(),
                                "{why}; reconnecting with a growing backoff");
                            acks.down_because(why);
                        } else {
                            tracing::warn!(sink = %acks.sink(), host = %s.host, port = s.port, error = %crate::error_chain(&e),
                                retry_in_ms = wait.as_millis() as u64, unacked = window.len(), "MQTT connection failed; will publish the unacknowledged again");
                            acks.connected(false);
                        }
                        link = None;
                        lost = true;
                        window.reset();
                        reconnect_at = Some(Instant::now() + wait);
                    }
                }
            }
            next = rx.recv(), if open && room => match next {
                None => open = false,
                Some(event) => {
                    let mut event = event;
                    let mut msgs = messages(&s, &event);
                    let too_big = |msgs: &[Message]| msgs.iter().map(packet_size).max().filter(|n| *n > s.max_packet_bytes);
                    if s.too_large_reference && too_big(&msgs).is_some() {
                        tracing::warn!(sink = %acks.sink(), id = %event.id, subject = %event.subject(),
                            "event too large for max_packet_bytes: sent as reference data (k8struncated)");
                        event = std::sync::Arc::new(event.as_reference());
                        msgs = messages(&s, &event);
                    }
                    if let Some(big) = too_big(&msgs) {
                        // Dead-lettered in its place in the sequence, after what is before it.
                        window.push_refused(event, format!("MQTT packet of about {big} bytes exceeds max_packet_bytes {}", s.max_packet_bytes));
                        acks.settle(window.settle()).await?;
                        continue;
                    }
                    window.push(event, msgs);
                    if let Some(l) = link.as_mut().filter(|l| l.since.is_some()) {
                        window.queue_with(|m| l.client.try_publish(m));
                    }
                }
            },
        }
    }
}

/// Forwards one connection's notifications until its first error, or until the broker has
/// sent nothing for `silence` (keep-alive plus the PINGRESP wait). rumqttc PINGs every
/// keep-alive, so a broker that answers nothing for that long is gone; on its own, rumqttc
/// would notice only at its second unanswered PING, and never while a write into the dead
/// connection waits for room.
async fn drive(
    mut lp: conn::Loop,
    epoch: u64,
    tx: mpsc::Sender<(u64, Result<Note, ConnError>)>,
    silence: Duration,
) {
    let mut heard = Instant::now();
    loop {
        let note = match tokio::time::timeout_at(heard + silence, lp.poll()).await {
            Ok(note) => note,
            Err(_) => Err(ConnError::Silent(silence)),
        };
        if matches!(note, Ok(Note::Connected | Note::Acked(..) | Note::Heard)) {
            heard = Instant::now();
        }
        let failed = note.is_err();
        if tx.send((epoch, note)).await.is_err() || failed {
            return;
        }
    }
}
