//! TCP keepalive shared by every connection kubecast opens through hyper (to kube-apiserver,
//! to HTTP receivers): probes after a time without traffic, and a user timeout as long, so
//! that the kernel drops a connection whose peer stopped answering without closing it (a
//! partition). Entry point: [`TcpKeepalive::apply`].

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;

/// When probes start, how far apart they go, and how many may go unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpKeepalive {
    pub idle: Duration,
    pub interval: Duration,
    pub probes: u32,
}

impl TcpKeepalive {
    /// Probes after 15 s without traffic, 10 s apart, 3 unanswered: a dead connection is
    /// dropped within 45 s.
    pub const DEFAULT: TcpKeepalive = TcpKeepalive {
        idle: Duration::from_secs(15),
        interval: Duration::from_secs(10),
        probes: 3,
    };

    /// How long after its last answer a dead connection is dropped: idle + interval ×
    /// probes. Also the longest data may stay unacknowledged (`TCP_USER_TIMEOUT`).
    pub fn dead_after(&self) -> Duration {
        self.idle + self.interval * self.probes
    }

    /// Sets these on `connector`'s sockets.
    pub fn apply(&self, connector: &mut HttpConnector) {
        connector.set_keepalive(Some(self.idle));
        connector.set_keepalive_interval(Some(self.interval));
        connector.set_keepalive_retries(Some(self.probes));
        // Data written into a dead connection is never acknowledged: without this the kernel
        // retransmits for about 15 minutes before a request into it fails.
        connector.set_tcp_user_timeout(Some(self.dead_after()));
    }
}
