//! One interface over rumqttc's MQTT 5 and MQTT 3.1.1 clients: connect options, publish
//! without blocking, and the few event-loop notifications the sink acts on.
//!
//! A [`Client`] and its [`Loop`] live for one connection only: after an error both are
//! dropped and new ones made. rumqttc would otherwise carry publishes queued during the
//! failure into the next connection, and the sink could no longer tell which packet id
//! belongs to which event.

use bytes::Bytes;
use rumqttc::v5::mqttbytes::v5::{PubAckReason, PublishProperties};
use rumqttc::{TlsConfiguration, Transport};

use super::{MqttSettings, Protocol};

/// One message to publish at QoS 1.
#[derive(Debug, Clone)]
pub struct Message {
    pub topic: String,
    pub payload: Bytes,
    pub retain: bool,
    /// MQTT 5 only: user properties and content type.
    pub properties: Vec<(String, String)>,
    pub content_type: Option<String>,
}

/// What the event loop reported.
#[derive(Debug)]
pub enum Note {
    /// A new connection is up (the broker kept no session: `clean_start`).
    Connected,
    /// The next queued publish went out with this packet id.
    Sent(u16),
    /// The broker acknowledged a packet id; `Some(reason)` if it refused the message.
    Acked(u16, Option<String>),
    /// Another packet from the broker (a PINGRESP, say): the connection is alive.
    Heard,
    /// Anything else (a packet that went out).
    Other,
}

/// Why a connection failed, classified where it arises: [`ConnError::is_fatal`] errors are
/// not retried.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The broker refused the login; `fatal` when retrying cannot help (bad user name or
    /// password, not authorized, banned).
    #[error("the broker refused the connection: {code}")]
    Refused { code: String, fatal: bool },
    /// The network or the broker failed: retried with backoff.
    #[error("MQTT connection failed")]
    V5(#[source] rumqttc::v5::ConnectionError),
    /// The network or the broker failed: retried with backoff.
    #[error("MQTT connection failed")]
    V311(#[source] rumqttc::ConnectionError),
    /// The first connection's TLS handshake was refused (either side's certificate).
    #[error("{0}")]
    TlsRefused(String),
    /// The broker handed the session to another client with the same client id (MQTT 5
    /// DISCONNECT with reason 0x8E, Session taken over).
    #[error("the broker gave this connection's session to another client with the same client id (DISCONNECT 0x8E, Session taken over)")]
    TakenOver,
    /// Nothing came from the broker for keep-alive plus the PINGRESP wait: rumqttc PINGs
    /// every keep-alive, so the connection is taken for dead (black-holed, not reset).
    #[error("the broker answered nothing for {}s (keep_alive_seconds + pingresp_timeout_seconds): the connection is taken for dead", .0.as_secs())]
    Silent(std::time::Duration),
    /// A TLS file could not be read.
    #[error("reading {}", path.display())]
    TlsFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConnError {
    /// Whether retrying cannot help.
    pub fn is_fatal(&self) -> bool {
        match self {
            ConnError::Refused { fatal, .. } => *fatal,
            ConnError::TlsFile { .. } | ConnError::TlsRefused(_) => true,
            ConnError::V5(_) | ConnError::V311(_) | ConnError::TakenOver | ConnError::Silent(_) => {
                false
            }
        }
    }
}

/// The publishing side of one connection.
pub enum Client {
    V5(rumqttc::v5::AsyncClient),
    V311(rumqttc::AsyncClient),
}

/// The event loop of one connection.
pub enum Loop {
    V5(Box<rumqttc::v5::EventLoop>),
    V311(Box<rumqttc::EventLoop>),
}

/// Builds a client and its loop; the loop connects on its first [`Loop::poll`]. Reads the
/// TLS files.
pub async fn connect(s: &MqttSettings) -> Result<(Client, Loop), ConnError> {
    {
        let transport = match &s.tls {
            None => None,
            Some(files) => Some(Transport::tls_with_config(tls_config(files).await?)),
        };
        // The channel must hold every publish kubecast has in flight plus the acks
        // rumqttc queues itself, so that `try_publish` fails only when it should.
        let capacity = usize::from(s.in_flight) * 2 + 16;
        match s.protocol {
            Protocol::V5 => {
                let mut o = rumqttc::v5::MqttOptions::new(&s.client_id, &s.host, s.port);
                o.set_keep_alive(s.keep_alive)
                    .set_clean_start(true)
                    .set_max_packet_size(Some(s.max_packet_bytes as u32))
                    .set_outgoing_inflight_upper_limit(s.in_flight)
                    .set_connection_timeout(10);
                if let Some((u, p)) = &s.credentials {
                    o.set_credentials(u, &p.0);
                }
                if let Some(t) = transport {
                    o.set_transport(t);
                }
                let (client, lp) = rumqttc::v5::AsyncClient::new(o, capacity);
                Ok((Client::V5(client), Loop::V5(Box::new(lp))))
            }
            Protocol::V311 => {
                let mut o = rumqttc::MqttOptions::new(&s.client_id, &s.host, s.port);
                o.set_keep_alive(s.keep_alive)
                    .set_clean_session(true)
                    .set_max_packet_size(s.max_packet_bytes, s.max_packet_bytes)
                    .set_inflight(s.in_flight);
                if let Some((u, p)) = &s.credentials {
                    o.set_credentials(u, &p.0);
                }
                if let Some(t) = transport {
                    o.set_transport(t);
                }
                let (client, lp) = rumqttc::AsyncClient::new(o, capacity);
                Ok((Client::V311(client), Loop::V311(Box::new(lp))))
            }
        }
    }
}

impl Client {
    /// Queues `m` with rumqttc; `false` if its channel is full.
    pub fn try_publish(&self, m: &Message) -> bool {
        match self {
            Client::V5(c) => {
                let props = PublishProperties {
                    user_properties: m.properties.clone(),
                    content_type: m.content_type.clone(),
                    ..Default::default()
                };
                c.try_publish_with_properties(
                    m.topic.clone(),
                    rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                    m.retain,
                    m.payload.clone(),
                    props,
                )
                .is_ok()
            }
            Client::V311(c) => c
                .try_publish(
                    m.topic.clone(),
                    rumqttc::QoS::AtLeastOnce,
                    m.retain,
                    m.payload.clone(),
                )
                .is_ok(),
        }
    }

    /// Asks the broker to close the connection (best effort, on shutdown).
    pub fn disconnect(&self) {
        let _ = match self {
            Client::V5(c) => c.try_disconnect().is_ok(),
            Client::V311(c) => c.try_disconnect().is_ok(),
        };
    }
}

impl Loop {
    /// Drives the connection until the next notification or error.
    pub async fn poll(&mut self) -> Result<Note, ConnError> {
        match self {
            Loop::V5(lp) => {
                use rumqttc::v5::mqttbytes::v5::ConnectReturnCode as C;
                use rumqttc::v5::{ConnectionError as E, Event, Incoming};
                match lp.poll().await {
                    Ok(Event::Incoming(Incoming::ConnAck(_))) => Ok(Note::Connected),
                    Ok(Event::Incoming(Incoming::PubAck(ack))) => {
                        let refused = match ack.reason {
                            PubAckReason::Success | PubAckReason::NoMatchingSubscribers => None,
                            other => Some(format!(
                                "the broker refused the message: {other:?}{}",
                                ack.properties
                                    .and_then(|p| p.reason_string)
                                    .map(|r| format!(" ({r})"))
                                    .unwrap_or_default()
                            )),
                        };
                        Ok(Note::Acked(ack.pkid, refused))
                    }
                    Ok(Event::Outgoing(rumqttc::Outgoing::Publish(pkid))) => Ok(Note::Sent(pkid)),
                    Ok(Event::Incoming(_)) => Ok(Note::Heard),
                    Ok(_) => Ok(Note::Other),
                    Err(E::ConnectionRefused(code)) => Err(ConnError::Refused {
                        fatal: matches!(
                            code,
                            C::BadUserNamePassword
                                | C::NotAuthorized
                                | C::Banned
                                | C::BadAuthenticationMethod
                        ),
                        code: format!("{code:?}"),
                    }),
                    Err(E::MqttState(rumqttc::v5::StateError::ServerDisconnect {
                        reason_code: rumqttc::v5::mqttbytes::v5::DisconnectReasonCode::SessionTakenOver,
                        ..
                    })) => Err(ConnError::TakenOver),
                    Err(e) => Err(ConnError::V5(e)),
                }
            }
            Loop::V311(lp) => {
                use rumqttc::{ConnectReturnCode as C, ConnectionError as E, Event, Incoming};
                match lp.poll().await {
                    Ok(Event::Incoming(Incoming::ConnAck(_))) => Ok(Note::Connected),
                    Ok(Event::Incoming(Incoming::PubAck(ack))) => Ok(Note::Acked(ack.pkid, None)),
                    Ok(Event::Outgoing(rumqttc::Outgoing::Publish(pkid))) => Ok(Note::Sent(pkid)),
                    Ok(Event::Incoming(_)) => Ok(Note::Heard),
                    Ok(_) => Ok(Note::Other),
                    Err(E::ConnectionRefused(code)) => Err(ConnError::Refused {
                        fatal: matches!(code, C::BadUserNamePassword | C::NotAuthorized),
                        code: format!("{code:?}"),
                    }),
                    Err(e) => Err(ConnError::V311(e)),
                }
            }
        }
    }
}

async fn tls_config(files: &super::config::TlsFiles) -> Result<TlsConfiguration, ConnError> {
    let Some(ca_file) = &files.ca_file else {
        return Ok(TlsConfiguration::default());
    };
    async fn read(path: &std::path::Path) -> Result<Vec<u8>, ConnError> {
        tokio::fs::read(path).await.map_err(|source| ConnError::TlsFile {
            path: path.to_path_buf(),
            source,
        })
    }
    let ca = read(ca_file).await?;
    let client_auth = match &files.client {
        Some((cert, key)) => Some((read(cert).await?, read(key).await?)),
        None => None,
    };
    Ok(TlsConfiguration::Simple {
        ca,
        alpn: None,
        client_auth,
    })
}
