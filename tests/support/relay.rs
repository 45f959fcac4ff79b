//! A plain TCP relay on a loopback port in front of another, as a load balancer in front of
//! kube-apiserver is: bytes are copied both ways and nothing else. It gives one process a
//! port of its own to the apiserver, so that a test can cut that process off entirely
//! (every packet to and from the relay's port, on connections old and new) while other
//! processes reach the apiserver directly.

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running relay; stopped (with every connection through it) when dropped.
pub struct Relay {
    pub port: u16,
    task: JoinHandle<()>,
}

impl Relay {
    /// Relays 127.0.0.1:`port` (returned) to 127.0.0.1:`target`.
    pub async fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the relay on loopback");
        let port = listener.local_addr().expect("the relay's address").port();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                conns.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Relay { port, task }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The JoinSet inside goes with the task, and with it every relayed connection.
        self.task.abort();
    }
}
