//! Shared helpers for the integration tests: where the local stack is (read from the
//! `target/stack/env` file that `scripts/stack up` writes), clients for it, unique names, and
//! bounded waits with clear failure messages.
//!
//! Every integration test talks to the real components. If the stack is not up, the tests
//! fail with a message saying so rather than skipping: a skipped test proves nothing.

#![allow(dead_code)] // Each test binary uses a different part of this module.

pub mod alertmanager;
pub mod apiproxy;
pub mod browser;
pub mod churn;
pub mod consume;
pub mod deliver;
pub mod deploy;
pub mod follow;
pub mod http;
pub mod kafka_cluster;
pub mod kafka_relay;
pub mod kubecast;
pub mod nodes;
pub mod objects;
pub mod observer;
pub mod otlp;
pub mod page;
pub mod partition;
pub mod pods;
pub mod proc;
pub mod pty;
pub mod receiver;
pub mod relay;
pub mod replicas;
pub mod scene;
pub mod schema;
pub mod shards;
pub mod since;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The `spec.schedulerName` of every pod a test drives by hand (and of the pod templates of
/// tests that count their pods' changes): a scheduler that does not run, so the pod stays
/// unscheduled, no simulated node's kwok ever touches it, and kube-scheduler writes nothing
/// into it, even while another test has made simulated nodes.
pub const NO_SCHEDULER: &str = "kubecast-by-hand";

/// Addresses and files of the running local stack.
#[derive(Debug, Clone)]
pub struct Stack {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// kube-apiserver's port on 127.0.0.1.
    pub kube_port: u16,
    pub kafka_bootstrap: String,
    pub mqtt_host: String,
    pub mqtt_port: u16,
    /// Kafka's SASL_PLAINTEXT (PLAIN) listener, which takes only the stack's account.
    pub kafka_sasl_bootstrap: String,
    /// Mosquitto's listener that takes only the stack's account.
    pub mqtt_auth_port: u16,
    /// The stack's account on those listeners.
    pub user: String,
    pub password: String,
    /// Kafka's SSL listeners: server certificate only, and requiring a client certificate.
    pub kafka_ssl_bootstrap: String,
    pub kafka_mtls_bootstrap: String,
    /// Mosquitto's TLS listeners (`mqtts://HOST:PORT`), likewise.
    pub mqtt_tls_url: String,
    pub mqtt_mtls_url: String,
    /// The stack's certificates: `ca.crt`, `tls-server.{crt,key}`, `client.{crt,key}`,
    /// `other-ca.crt`, `other-client.{crt,key}`.
    pub pki: PathBuf,
}

impl Stack {
    /// Reads the stack's exports from `$KUBECAST_STACK_DIR/env` (default `target/stack/env`).
    pub fn load() -> Stack {
        let dir = std::env::var_os("KUBECAST_STACK_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/stack"));
        let env_file = dir.join("env");
        let text = std::fs::read_to_string(&env_file).unwrap_or_else(|e| {
            panic!(
                "the local stack is not up ({}: {e}); run `scripts/stack up` first",
                env_file.display()
            )
        });
        let vars: HashMap<&str, &str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("export ")?.split_once('='))
            .collect();
        let get = |key: &str| -> String {
            vars.get(key)
                .unwrap_or_else(|| panic!("{} has no {key}", env_file.display()))
                .to_string()
        };
        let mqtt_url = get("KUBECAST_STACK_MQTT_URL");
        let (mqtt_host, mqtt_port) = mqtt_url
            .strip_prefix("mqtt://")
            .and_then(|hp| hp.rsplit_once(':'))
            .and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?)))
            .unwrap_or_else(|| {
                panic!("KUBECAST_STACK_MQTT_URL is not mqtt://HOST:PORT: {mqtt_url}")
            });
        let auth_url = get("KUBECAST_STACK_MQTT_AUTH_URL");
        let mqtt_auth_port = auth_url
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| {
                panic!("KUBECAST_STACK_MQTT_AUTH_URL is not mqtt://HOST:PORT: {auth_url}")
            });
        let kube_port: u16 = {
            let url = get("KUBECAST_STACK_KUBE_URL");
            url.rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or_else(|| {
                    panic!("KUBECAST_STACK_KUBE_URL is not https://HOST:PORT: {url}")
                })
        };
        let (kubeconfig, kube_port) =
            own_apiserver(&dir, PathBuf::from(get("KUBECONFIG")), kube_port);
        Stack {
            dir: dir.clone(),
            kubeconfig,
            kube_port,
            kafka_bootstrap: get("KUBECAST_STACK_KAFKA_BOOTSTRAP"),
            mqtt_host,
            mqtt_port,
            kafka_sasl_bootstrap: get("KUBECAST_STACK_KAFKA_SASL_BOOTSTRAP"),
            mqtt_auth_port,
            user: get("KUBECAST_STACK_USER"),
            password: get("KUBECAST_STACK_PASSWORD"),
            kafka_ssl_bootstrap: get("KUBECAST_STACK_KAFKA_SSL_BOOTSTRAP"),
            kafka_mtls_bootstrap: get("KUBECAST_STACK_KAFKA_MTLS_BOOTSTRAP"),
            mqtt_tls_url: get("KUBECAST_STACK_MQTT_TLS_URL"),
            mqtt_mtls_url: get("KUBECAST_STACK_MQTT_MTLS_URL"),
            pki: PathBuf::from(get("KUBECAST_STACK_PKI")),
        }
    }

    /// The stack's exports (`$KUBECAST_STACK_DIR/env`), read now: those of parts brought up
    /// after `load` (the Kafka cluster) too.
    pub fn vars(&self) -> HashMap<String, String> {
        let env_file = self.dir.join("env");
        std::fs::read_to_string(&env_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", env_file.display()))
            .lines()
            .filter_map(|line| line.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A kube client authenticated as the stack's admin, from the generated kubeconfig.
    pub async fn kube_client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("loading {}: {e}", self.kubeconfig.display()));
        kube::Client::try_from(config).expect("building a kube client from the kubeconfig")
    }

    /// Runs `scripts/stack ARGS...` and returns its standard output; fails the test with the
    /// script's own error output if it fails.
    pub fn script(&self, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/stack");
        let out = Command::new(&script)
            .args(args)
            .env("KUBECAST_STACK_DIR", &self.dir)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "scripts/stack {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// With `KUBECAST_TEST_KUBE_PORT`, the tests talk to the extra kube-apiserver on that port
/// (`scripts/stack apiserver PORT`, over the same etcd) instead of the stack's own, which other
/// tests stop and restart: a kubeconfig like the stack's with that port (written beside it),
/// and the port. Without it, `kubeconfig` and `port` as they are.
fn own_apiserver(dir: &Path, kubeconfig: PathBuf, port: u16) -> (PathBuf, u16) {
    let Some(own) = std::env::var("KUBECAST_TEST_KUBE_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
    else {
        return (kubeconfig, port);
    };
    let text = std::fs::read_to_string(&kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let copy = dir.join(format!("kubeconfig-{own}"));
    let text = text.replace(&format!("127.0.0.1:{port}"), &format!("127.0.0.1:{own}"));
    // Tests side by side write it at once: each writes a file of its own and renames it into
    // place, so that no test reads one half written.
    let tmp = dir.join(format!("kubeconfig-{own}.{}", unique_name("tmp")));
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
    std::fs::rename(&tmp, &copy).unwrap_or_else(|e| panic!("renaming {}: {e}", tmp.display()));
    (copy, own)
}

/// The repository's root (the crate's manifest directory).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A name no other test run has used: a DNS label (lower-case, digits, '-'), also valid as a
/// Kafka topic and an MQTT topic level.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}-{}-{:x}-{}",
        std::process::id(),
        nanos % 0xffff_ffff,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Awaits `fut`, failing the test with `what` if it does not finish within `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}
