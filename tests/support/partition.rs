//! Network partitions on loopback for the partition tests: every packet of one process's
//! established TCP connections to a port dropped for good, as a load balancer that lost its
//! state, a NAT timeout or a partition does it (no reset, no FIN), while new connections
//! still work ([`BlackHole::established`]); or every packet to and from a port, established
//! or new ([`BlackHole::port`]); or every packet a process sends, as a node cut off from the
//! network ([`BlackHole::cgroup`]).
//!
//! The rules are iptables `DROP`s in `INPUT` on `lo`, matched by port pair (so nothing else
//! on the machine is touched, other tests' connections included), or in `OUTPUT` matched by
//! the sender's cgroup (v2: a process started in its own, as the stack starts the Kafka
//! cluster's nodes), each carrying the comment
//! [`TAG`]. They are removed when the [`BlackHole`] is dropped, also when the test fails;
//! `scripts/test` removes any that a killed test run left behind.

use std::process::Command;
use std::time::{Duration, Instant};

/// The comment on every rule these tests add.
pub const TAG: &str = "kubecast-test-blackhole";

/// Local ports of `pid`'s established TCP connections to 127.0.0.1:`port`.
pub fn established(pid: u32, port: u16) -> Vec<u16> {
    let out = Command::new("ss")
        .args(["-Htnp", "state", "established"])
        .arg(format!("( dport = :{port} )"))
        .output()
        .unwrap_or_else(|e| panic!("running ss (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ss failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let owner = format!("pid={pid},");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&owner))
        .filter_map(|l| {
            // Recv-Q Send-Q Local:Port Peer:Port users:(...)
            let local = l.split_whitespace().nth(2)?;
            local.rsplit_once(':')?.1.parse().ok()
        })
        .collect()
}

/// Runs `iptables -w OP CHAIN RULE...`; a rule's first word is its chain.
fn iptables(op: &str, rule: &[String]) -> Result<(), String> {
    let out = Command::new("iptables")
        .args(["-w", op])
        .args(rule)
        .output()
        .map_err(|e| format!("running iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {op} {}: {}",
            rule.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn rule(matches: &[&str]) -> Vec<String> {
    let mut r: Vec<String> = ["INPUT", "-i", "lo", "-p", "tcp"]
        .iter()
        .chain(matches)
        .map(|s| s.to_string())
        .collect();
    r.extend(
        ["-m", "comment", "--comment", TAG, "-j", "DROP"]
            .iter()
            .map(|s| s.to_string()),
    );
    r
}

/// DROP rules in force until dropped.
pub struct BlackHole {
    rules: Vec<Vec<String>>,
    /// When the rules went in.
    pub cut: Instant,
    /// The port whose connections were cut, and the local ports of those connections.
    pub port: u16,
    pub cut_ports: Vec<u16>,
    /// What is cut off, for messages ("kube-apiserver").
    pub what: String,
}

impl BlackHole {
    fn install(rules: Vec<Vec<String>>, port: u16, cut_ports: Vec<u16>, what: &str) -> BlackHole {
        let mut hole = BlackHole {
            rules: Vec::new(),
            cut: Instant::now(),
            port,
            cut_ports,
            what: what.to_string(),
        };
        for r in rules {
            if let Err(e) = iptables("-I", &r) {
                // The rules already in go when `hole` is dropped by this panic.
                panic!("{e} (the partition tests need root and iptables)");
            }
            hole.rules.push(r);
        }
        hole.cut = Instant::now();
        hole
    }

    /// Waits (up to 30 s) until `pid` holds an established connection to `port`, then drops
    /// every packet of each such connection, both ways, for good.
    pub async fn established(pid: u32, port: u16, what: &str) -> BlackHole {
        let deadline = Instant::now() + Duration::from_secs(30);
        let ports = loop {
            let ports = established(pid, port);
            if !ports.is_empty() {
                break ports;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: process {pid} has no established connection to port {port} after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut rules = Vec::new();
        for local in &ports {
            let (l, p) = (local.to_string(), port.to_string());
            rules.push(rule(&["--sport", &l, "--dport", &p]));
            rules.push(rule(&["--sport", &p, "--dport", &l]));
        }
        let hole = BlackHole::install(rules, port, ports, what);
        eprintln!(
            "partition: {what}: dropping every packet of process {pid}'s {} established connection(s) to port {port} (local ports {:?})",
            hole.cut_ports.len(),
            hole.cut_ports
        );
        hole
    }

    /// Drops every packet to and from `port`, on connections old and new.
    pub fn port(port: u16, what: &str) -> BlackHole {
        let p = port.to_string();
        let rules = vec![rule(&["--dport", &p]), rule(&["--sport", &p])];
        eprintln!("partition: {what}: dropping every packet to and from port {port}");
        BlackHole::install(rules, port, Vec::new(), what)
    }

    /// Drops every packet sent by the processes of cgroup `path` (relative to the cgroup v2
    /// root): they can neither answer nor reach anyone, on connections old and new.
    pub fn cgroup(path: &str, what: &str) -> BlackHole {
        let rule: Vec<String> = [
            "OUTPUT",
            "-m",
            "cgroup",
            "--path",
            path,
            "-m",
            "comment",
            "--comment",
            TAG,
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        eprintln!("partition: {what}: dropping every packet the processes of cgroup {path} send");
        BlackHole::install(vec![rule], 0, Vec::new(), what)
    }

    /// Waits until `pid` has let go of every cut connection and holds a new one to the port;
    /// returns how long after the cut each happened (`closed`, `replaced`) and prints it.
    pub async fn replaced(&self, pid: u32, limit: Duration) -> Replacement {
        let mut closed = None;
        // When each cut connection went, for the message.
        let mut gone: Vec<(u16, Duration)> = Vec::new();
        loop {
            let now = established(pid, self.port);
            let elapsed = self.cut.elapsed();
            for p in &self.cut_ports {
                if !now.contains(p) && !gone.iter().any(|(g, _)| g == p) {
                    gone.push((*p, elapsed));
                }
            }
            if closed.is_none() && gone.len() == self.cut_ports.len() {
                closed = Some(elapsed);
                if gone.len() > 1 {
                    let each: Vec<String> = gone
                        .iter()
                        .map(|(p, d)| format!("{p} after {:.1} s", d.as_secs_f64()))
                        .collect();
                    eprintln!(
                        "partition: {}: each cut connection closed: {}",
                        self.what,
                        each.join(", ")
                    );
                }
            }
            let fresh: Vec<u16> = now
                .into_iter()
                .filter(|p| !self.cut_ports.contains(p))
                .collect();
            if let (Some(closed), false) = (closed, fresh.is_empty()) {
                let r = Replacement {
                    closed,
                    replaced: elapsed,
                };
                eprintln!(
                    "partition: {}: the cut connection(s) closed {:.1} s after the cut, replaced after {:.1} s (local ports {fresh:?})",
                    self.what,
                    r.closed.as_secs_f64(),
                    r.replaced.as_secs_f64()
                );
                return r;
            }
            assert!(
                elapsed < limit,
                "{}: after {limit:?}, process {pid} still holds a cut connection ({}) or no new one to port {}",
                self.what,
                if closed.is_none() { "held" } else { "closed" },
                self.port
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        for r in self.rules.drain(..) {
            if let Err(e) = iptables("-D", &r) {
                eprintln!("partition: could not remove a rule: {e}");
            }
        }
    }
}

/// How long after a cut the connections were let go of and replaced.
#[derive(Debug, Clone, Copy)]
pub struct Replacement {
    pub closed: Duration,
    pub replaced: Duration,
}
