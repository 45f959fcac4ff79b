//! The MQTT sink: CloudEvents MQTT binding at QoS 1, MQTT 5 binary mode by default, MQTT
//! 3.1.1 structured mode as an option. Entry point: [`MqttConfig`], whose validated form
//! [`MqttSettings`] is the running sink.

mod config;
mod conn;
mod sink;
mod window;

pub use config::{MqttConfig, MqttSettings, Protocol};
pub use conn::ConnError;
