//! A plain TCP relay on a loopback port in front of another, as a load balancer or proxy in
//! front of kube-apiserver is: bytes are copied both ways and nothing else. It gives one
//! process a port of its own to the apiserver, so that a test can cut that process off
//! entirely (every packet to and from the relay's port, on connections old and new) while
//! other processes reach the apiserver directly; or [`Relay::freeze`] the connections it
//! holds, as a proxy that lost its upstream streams but keeps TCP alive does.

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running relay; stopped (with every connection through it) when dropped.
pub struct Relay {
    pub port: u16,
    /// Bumped by [`Relay::freeze`]: connections accepted before stop copying.
    epoch: watch::Sender<u64>,
    task: JoinHandle<()>,
}

impl Relay {
    /// Relays 127.0.0.1:`port` (returned) to 127.0.0.1:`target`.
    pub async fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the relay on loopback");
        let port = listener.local_addr().expect("the relay's address").port();
        let (epoch, rx) = watch::channel(0u64);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut frozen = rx.clone();
                frozen.borrow_and_update();
                conns.spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = frozen.changed() => {
                            // Both sockets stay open, and nothing more is copied.
                            std::future::pending::<()>().await;
                        }
                    }
                });
            }
        });
        Relay { port, epoch, task }
    }

    /// Stops copying on every connection open now, keeping them open (TCP answers, no byte
    /// passes); new connections are relayed as before.
    pub fn freeze(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// A copy of the kubeconfig at `from` that reaches the apiserver (on `port`) through
    /// this relay, written to `to`.
    pub fn kubeconfig(&self, from: &std::path::Path, port: u16, to: &std::path::Path) {
        let text = std::fs::read_to_string(from)
            .unwrap_or_else(|e| panic!("reading {}: {e}", from.display()));
        let text = text.replace(
            &format!("https://127.0.0.1:{port}"),
            &format!("https://127.0.0.1:{}", self.port),
        );
        std::fs::write(to, text).unwrap_or_else(|e| panic!("writing {}: {e}", to.display()));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The JoinSet inside goes with the task, and with it every relayed connection.
        self.task.abort();
    }
}
