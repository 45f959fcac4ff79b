//! Prometheus Alertmanagers of a test's own (the stack's build, `target/stack/bin`), each on
//! a free loopback port with its own storage, not clustered, notifying a webhook receiver of
//! the test's own (the stack's, `scripts/stack.d/am_webhook.py`), which writes each
//! notification as a JSON line. Tests stop and start them without touching anyone else's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

use super::Stack;
use super::http::{free_port, get};

/// Waits until `GET path` on `port` answers 200, or fails naming `what`.
async fn answers(port: u16, path: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if matches!(get(port, path).await, Ok((200, _))) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not answer GET {path} on 127.0.0.1:{port} within 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The webhook receiver.
pub struct Webhook {
    _child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Webhook {
    pub async fn start(dir: &Path) -> Webhook {
        let port = free_port();
        let log = dir.join("notifications.jsonl");
        let child = Command::new("python3")
            .arg(super::repo().join("scripts/stack.d/am_webhook.py"))
            .args(["127.0.0.1", &port.to_string()])
            .arg(&log)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting the webhook receiver (python3 scripts/stack.d/am_webhook.py)");
        answers(port, "/healthz", "the webhook receiver").await;
        Webhook {
            _child: child,
            port,
            log,
        }
    }

    /// Every notification so far, in order.
    pub fn notifications(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The notifications `instance` sent for alerts named `alertname`, as (status, the
    /// statuses of the alerts in it).
    pub fn of(&self, instance: &str, alertname: &str) -> Vec<(String, Vec<String>)> {
        self.notifications()
            .into_iter()
            .filter(|n| {
                n["path"] == format!("/{instance}") && n["groupLabels"]["alertname"] == alertname
            })
            .map(|n| {
                let alerts = n["alerts"].as_array().into_iter().flatten();
                (
                    n["status"].as_str().unwrap_or_default().to_string(),
                    alerts
                        .map(|a| a["status"].as_str().unwrap_or_default().to_string())
                        .collect(),
                )
            })
            .collect()
    }
}

/// One Alertmanager.
pub struct Alertmanager {
    child: Option<Child>,
    pub name: String,
    pub port: u16,
    dir: PathBuf,
    binary: PathBuf,
    args: Vec<String>,
}

impl Alertmanager {
    /// Starts Alertmanager `name`, notifying `webhook` at `/{name}` (grouped by alertname,
    /// cluster and namespace; group_wait 1s, group_interval 2s, repeat_interval 4h), with
    /// `features` (`classic-mode`), and waits until it is ready.
    pub async fn start(
        stack: &Stack,
        dir: &Path,
        name: &str,
        webhook: &Webhook,
        features: &[&str],
    ) -> Alertmanager {
        let dir = dir.join(name);
        std::fs::create_dir_all(dir.join("data")).expect("the Alertmanager's directory");
        let config = dir.join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "route:\n  receiver: webhook\n  group_by: [alertname, cluster, namespace]\n  group_wait: 1s\n  group_interval: 2s\n  repeat_interval: 4h\nreceivers:\n  - name: webhook\n    webhook_configs:\n      - url: http://127.0.0.1:{}/{name}\n        send_resolved: true\n",
                webhook.port
            ),
        )
        .expect("writing the Alertmanager's config");
        let port = free_port();
        let mut args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--cluster.listen-address=".to_string(),
            "--log.level=warn".to_string(),
        ];
        if !features.is_empty() {
            args.push(format!("--enable-feature={}", features.join(",")));
        }
        let mut am = Alertmanager {
            child: None,
            name: name.to_string(),
            port,
            dir,
            binary: stack.dir.join("bin/alertmanager"),
            args,
        };
        am.start_again().await;
        am
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts it again (same port, same storage: its notification log and silences).
    pub async fn start_again(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))
            .expect("the Alertmanager's log");
        let child = Command::new(&self.binary)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {} (scripts/stack up builds it): {e}",
                    self.binary.display()
                )
            });
        self.child = Some(child);
        answers(self.port, "/-/ready", &self.name).await;
    }

    /// Stops it as an operator does (SIGTERM: it saves its notification log) and waits.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill")
                    .arg(pid.to_string())
                    .status();
            }
            let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
        }
    }

    /// The alerts it holds that are not resolved (`GET /api/v2/alerts`).
    pub async fn alerts(&self) -> Vec<Value> {
        match get(self.port, "/api/v2/alerts").await {
            Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The active alerts named `alertname`.
    pub async fn named(&self, alertname: &str) -> Vec<Value> {
        self.alerts()
            .await
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == alertname)
            .collect()
    }

    /// Waits until its alerts satisfy `done`; fails naming `what` with what it held.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let alerts = self.alerts().await;
            if done(&alerts) {
                return alerts;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {what} within {limit:?}; it holds {alerts:#?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Alertmanager {
    /// How many alerts it has received with `status` (`firing`: `endsAt` ahead, or
    /// `resolved`), by its own count (`alertmanager_alerts_received_total`).
    pub async fn received(&self, status: &str) -> u64 {
        let (code, body) = get(self.port, "/metrics")
            .await
            .unwrap_or_else(|e| panic!("{}: GET /metrics: {e}", self.name));
        assert_eq!(code, 200, "{}: GET /metrics: {body}", self.name);
        let label = format!("status=\"{status}\"");
        body.lines()
            .filter(|l| l.starts_with("alertmanager_alerts_received_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|n| n as u64)
            .sum()
    }

    /// Waits until it has received at least `n` alerts with `status` ([`Alertmanager::received`]).
    pub async fn wait_received(&self, status: &str, n: u64, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let got = self.received(status).await;
            if got >= n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: {n} {status} alerts received within {limit:?}; {got} were",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until kubecast has sent `alertname` again `times` times (each send moves the
    /// alert's `updatedAt`), and returns the alerts as held then.
    pub async fn resent(&self, alertname: &str, times: usize, limit: Duration) -> Vec<Value> {
        let updated = |a: &[Value]| {
            a.iter()
                .find(|a| a["labels"]["alertname"] == alertname)
                .map(|a| a["updatedAt"].clone())
        };
        let mut last = updated(&self.alerts().await);
        let mut held = Vec::new();
        for i in 0..times {
            held = self
                .wait_until(&format!("resend {} of {alertname}", i + 1), limit, |a| {
                    updated(a).is_some_and(|u| Some(&u) != last.as_ref())
                })
                .await;
            last = updated(&held);
        }
        held
    }
}

/// An `alertmanager` sink named `name` sending to `ams`, resending every `resend`.
pub fn sink(name: &str, ams: &[&Alertmanager], resend: &str) -> String {
    let urls: Vec<String> = ams.iter().map(|a| a.url()).collect();
    format!(
        "  {name}:\n    type: alertmanager\n    urls: [{}]\n    resend_interval: {resend}\n",
        urls.join(", ")
    )
}
