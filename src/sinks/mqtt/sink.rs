//! Publishing events at QoS 1 and turning PUBACKs into acks.
//!
//! Every publish kubecast hands to rumqttc stays in its own window until the broker's
//! PUBACK for that publish's packet id arrives. rumqttc reports packet ids in the order it
//! sends the publishes (`Outgoing::Publish(pkid)`), which is the order kubecast queued them,
//! so the n-th id reported belongs to the n-th unassigned publish. After a connection
//! error nothing unacknowledged is trusted: a new connection is made (clean start) and the
//! whole window is published again, in order. Receivers may see a message twice, with the
//! same event id; they never miss one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::conn::{self, Client, ConnError, Message, Note};
use super::{MqttSettings, Protocol};
use crate::backoff::Backoff;
use crate::event::{ChangeKind, Event};
use crate::sinks::runner::{Acks, SinkError};

/// One publish in the window.
struct Entry {
    event: Arc<Event>,
    message: Message,
    /// Whether this is the event's last publish (a delete with `retain` has two).
    last: bool,
    /// Handed to rumqttc on the current connection.
    queued: bool,
    /// The packet id rumqttc gave it on the current connection.
    pkid: Option<u16>,
    acked: bool,
}

/// The messages of one event.
fn messages(s: &MqttSettings, event: &Event) -> Vec<Message> {
    let topic = s
        .topic
        .render(event.cluster(), &event.namespace, &event.name);
    let main = match s.protocol {
        Protocol::V5 => {
            let mut properties = Vec::with_capacity(16);
            let mut content_type = None;
            for (k, v) in event.attributes() {
                if k == "datacontenttype" {
                    content_type = Some(v);
                } else {
                    properties.push((k.to_string(), v));
                }
            }
            Message {
                topic: topic.clone(),
                payload: event.data.clone(),
                retain: s.retain,
                properties,
                content_type,
            }
        }
        Protocol::V311 => Message {
            topic: topic.clone(),
            payload: Bytes::from(event.structured_json()),
            retain: s.retain,
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
    connected: bool,
}

/// Runs the sink until its queue closes and every queued event was acknowledged.
pub async fn run(
    s: MqttSettings,
    mut rx: crate::sinks::queue::QueueRx,
    acks: Acks,
) -> Result<(), SinkError> {
    let (notes_tx, mut notes) = mpsc::channel::<(u64, Result<Note, ConnError>)>(256);
    let mut window: VecDeque<Entry> = VecDeque::new();
    let mut link: Option<Link> = None;
    let mut epoch = 0u64;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let mut reconnect_at = Some(Instant::now());
    let mut open = true;
    let limit = usize::from(s.in_flight);
    loop {
        if !open && window.is_empty() {
            if let Some(l) = &link {
                l.client.disconnect();
            }
            return Ok(());
        }
        let connected = link.as_ref().is_some_and(|l| l.connected);
        let room = window.len() < limit;
        tokio::select! {
            _ = sleep_until(reconnect_at), if reconnect_at.is_some() => {
                reconnect_at = None;
                epoch += 1;
                let (client, lp) = conn::connect(&s).map_err(|e| acks.fatal(e))?;
                let tx = notes_tx.clone();
                let this = epoch;
                tokio::spawn(drive(lp, this, tx));
                link = Some(Link { client, epoch, connected: false });
            }
            Some((from, note)) = notes.recv() => {
                let Some(l) = link.as_mut().filter(|l| l.epoch == from) else { continue };
                match note {
                    Ok(Note::Connected) => {
                        tracing::info!(sink = %acks.sink, host = %s.host, port = s.port, unacked = window.len(), "MQTT connected");
                        backoff.reset();
                        l.connected = true;
                        queue_window(l, &mut window);
                    }
                    Ok(Note::Sent(pkid)) => {
                        if let Some(e) = window.iter_mut().find(|e| e.queued && e.pkid.is_none()) {
                            e.pkid = Some(pkid);
                        }
                    }
                    Ok(Note::Acked(pkid, refused)) => {
                        if let Some(e) = window.iter_mut().find(|e| e.pkid == Some(pkid) && !e.acked) {
                            e.acked = true;
                            if let Some(reason) = refused {
                                // The broker will never take it: dead-letter the event.
                                let event = e.event.clone();
                                window.retain(|x| x.event.seq != event.seq);
                                acks.dead_letter(&event, reason).await?;
                            }
                        }
                        settle(&mut window, &acks);
                        if let Some(l) = link.as_mut().filter(|l| l.connected) {
                            queue_window(l, &mut window);
                        }
                    }
                    Ok(Note::Other) => {}
                    Err(e) if e.fatal => return Err(acks.fatal(e.message)),
                    Err(e) => {
                        let wait = backoff.next_delay();
                        tracing::warn!(sink = %acks.sink, host = %s.host, port = s.port, error = %e.message,
                            retry_in_ms = wait.as_millis() as u64, unacked = window.len(), "MQTT connection failed; will publish the unacknowledged again");
                        link = None;
                        for e in window.iter_mut() {
                            e.queued = false;
                            e.pkid = None;
                            e.acked = false;
                        }
                        reconnect_at = Some(Instant::now() + wait);
                    }
                }
            }
            next = rx.recv(), if open && room => match next {
                None => open = false,
                Some(event) => {
                    let msgs = messages(&s, &event);
                    if let Some(big) = msgs.iter().map(packet_size).max().filter(|n| *n > s.max_packet_bytes) {
                        let reason = format!("MQTT packet of about {big} bytes exceeds max_packet_bytes {}", s.max_packet_bytes);
                        acks.dead_letter(&event, reason).await?;
                        continue;
                    }
                    let n = msgs.len();
                    for (i, message) in msgs.into_iter().enumerate() {
                        window.push_back(Entry { event: event.clone(), message, last: i + 1 == n, queued: false, pkid: None, acked: false });
                    }
                    if let Some(l) = link.as_mut().filter(|_| connected) {
                        queue_window(l, &mut window);
                    }
                }
            },
        }
    }
}

/// Hands every not-yet-queued entry to rumqttc, in order, while its channel has room.
fn queue_window(link: &mut Link, window: &mut VecDeque<Entry>) {
    for e in window.iter_mut().filter(|e| !e.queued) {
        if !link.client.try_publish(&e.message) {
            // rumqttc's channel is sized above the window; if it is full anyway, the rest
            // stays unqueued and goes with the next call.
            break;
        }
        e.queued = true;
    }
}

/// Pops acknowledged entries from the front and reports their events, in order.
fn settle(window: &mut VecDeque<Entry>, acks: &Acks) {
    while window.front().is_some_and(|e| e.acked) {
        if let Some(e) = window.pop_front()
            && e.last
        {
            acks.delivered(e.event.seq);
        }
    }
}

/// Forwards one connection's notifications until its first error.
async fn drive(mut lp: conn::Loop, epoch: u64, tx: mpsc::Sender<(u64, Result<Note, ConnError>)>) {
    loop {
        let note = lp.poll().await;
        let failed = note.is_err();
        if tx.send((epoch, note)).await.is_err() || failed {
            return;
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
