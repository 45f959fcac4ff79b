//! What an OTLP receiver got, as plain records: the stack's Collector (its file exporter's
//! OTLP/JSON lines, `KUBECAST_STACK_OTLP_LOG`) or the fake receiver's http/json bodies.
//! `AnyValue`s become plain JSON again (`intValue` a number, `kvlistValue` an object, an
//! empty value `null`), so a body compares with the event's data as it is.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::Stack;

/// One log record with its resource and scope.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpRecord {
    pub resource: BTreeMap<String, Value>,
    pub scope: String,
    /// `timeUnixNano` and `observedTimeUnixNano`; 0 when unset.
    pub time: u64,
    pub observed: u64,
    pub severity_number: i64,
    pub severity_text: String,
    pub event_name: String,
    pub attributes: BTreeMap<String, Value>,
    pub body: Value,
}

impl OtlpRecord {
    /// A string attribute (empty when absent).
    pub fn attr(&self, name: &str) -> &str {
        self.attributes
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// An OTLP/JSON `AnyValue` as plain JSON.
pub fn plain(v: &Value) -> Value {
    let Some((kind, inner)) = v.as_object().and_then(|m| m.iter().next()) else {
        return Value::Null;
    };
    match kind.as_str() {
        "intValue" => match inner {
            Value::String(s) => s.parse::<i64>().map(Value::from).unwrap_or(Value::Null),
            n => n.clone(),
        },
        "arrayValue" => Value::Array(
            inner["values"]
                .as_array()
                .map(|a| a.iter().map(plain).collect())
                .unwrap_or_default(),
        ),
        "kvlistValue" => Value::Object(key_values(&inner["values"]).into_iter().collect()),
        _ => inner.clone(),
    }
}

fn key_values(list: &Value) -> Map<String, Value> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap_or_default().to_string(),
                        plain(&kv["value"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn nanos(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        n => n.as_u64().unwrap_or(0),
    }
}

/// The records of one OTLP/JSON `ExportLogsServiceRequest` (or `LogsData`).
pub fn records_of(request: &Value) -> Vec<OtlpRecord> {
    let mut out = Vec::new();
    for rl in request["resourceLogs"].as_array().into_iter().flatten() {
        let resource: BTreeMap<String, Value> = key_values(&rl["resource"]["attributes"])
            .into_iter()
            .collect();
        for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
            let scope = sl["scope"]["name"].as_str().unwrap_or_default().to_string();
            for r in sl["logRecords"].as_array().into_iter().flatten() {
                out.push(OtlpRecord {
                    resource: resource.clone(),
                    scope: scope.clone(),
                    time: nanos(&r["timeUnixNano"]),
                    observed: nanos(&r["observedTimeUnixNano"]),
                    severity_number: r["severityNumber"].as_i64().unwrap_or(0),
                    severity_text: r["severityText"].as_str().unwrap_or_default().to_string(),
                    event_name: r["eventName"].as_str().unwrap_or_default().to_string(),
                    attributes: key_values(&r["attributes"]).into_iter().collect(),
                    body: plain(&r["body"]),
                });
            }
        }
    }
    out
}

/// A file of OTLP/JSON lines that a Collector's file exporter writes.
pub struct CollectorFile {
    pub path: PathBuf,
}

impl CollectorFile {
    /// The stack's Collector's.
    pub fn stack(stack: &Stack) -> CollectorFile {
        CollectorFile {
            path: PathBuf::from(&stack.vars()["KUBECAST_STACK_OTLP_LOG"]),
        }
    }

    /// Every record so far (a line being written is left for later).
    pub fn records(&self) -> Vec<OtlpRecord> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .flat_map(|v| records_of(&v))
            .collect()
    }

    /// Waits until `done` holds for the records `keep` selects, and returns those.
    pub async fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        keep: impl Fn(&OtlpRecord) -> bool,
        done: impl Fn(&[OtlpRecord]) -> bool,
    ) -> Result<Vec<OtlpRecord>, String> {
        let select = || {
            self.records()
                .into_iter()
                .filter(|r| keep(r))
                .collect::<Vec<_>>()
        };
        super::consume::wait_for(limit, what, || Some(select()).filter(|r| done(r)))
            .await
            .ok_or_else(|| {
                format!(
                    "timed out after {limit:?} waiting for {what}; {} records seen",
                    select().len()
                )
            })
    }
}

/// The stack's Collector's OTLP endpoints: (HTTP, gRPC).
pub fn endpoints(stack: &Stack) -> (String, String) {
    let vars = stack.vars();
    (
        vars["KUBECAST_STACK_OTLP_HTTP"].clone(),
        vars["KUBECAST_STACK_OTLP_GRPC"].clone(),
    )
}

/// An OTLP sink block named `name`; `extra` holds more of its fields.
pub fn otlp_sink(name: &str, endpoint: &str, protocol: &str, extra: &str) -> String {
    format!(
        "  {name}:\n    type: otlp\n    endpoint: '{endpoint}'\n    protocol: {protocol}\n{extra}"
    )
}

/// An OpenTelemetry Collector of a test's own (the stack's build, `scripts/stack tool
/// otelcol`): the OTLP receiver on free loopback ports and the file exporter into `dir`.
/// Stopped for a fault and started again on the same ports; killed when dropped.
pub struct Collector {
    child: Option<std::process::Child>,
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    pub http: String,
    pub grpc: String,
    pub file: CollectorFile,
    /// With mutual TLS: the CA, client certificate and key the readiness check uses.
    client: Option<[String; 3]>,
    /// The signal its pipeline takes, whose path the readiness check posts to.
    signal: &'static str,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Collector {
    pub async fn start(stack: &Stack, dir: &std::path::Path) -> Collector {
        Collector::start_with(stack, dir, false, "logs").await
    }

    /// One whose only pipeline takes traces: its OTLP receiver serves no logs (HTTP 404 on
    /// `/v1/logs`, gRPC `UNIMPLEMENTED` for the logs service), as a Collector set up for
    /// another signal answers.
    pub async fn start_without_logs(stack: &Stack, dir: &std::path::Path) -> Collector {
        Collector::start_with(stack, dir, false, "traces").await
    }

    /// Over TLS with the stack's server certificate, requiring a client certificate of the
    /// stack's CA (mutual TLS) on both protocols: its endpoints are `https://`.
    pub async fn start_mtls(stack: &Stack, dir: &std::path::Path) -> Collector {
        Collector::start_with(stack, dir, true, "logs").await
    }

    /// `signal`: what its one pipeline takes (`logs`, `traces`).
    async fn start_with(
        stack: &Stack,
        dir: &std::path::Path,
        mtls: bool,
        signal: &'static str,
    ) -> Collector {
        let bin = PathBuf::from(stack.script(&["tool", "otelcol"]).trim());
        let (http, grpc) = (free_port(), free_port());
        let path = dir.join(format!("otelcol-{http}.jsonl"));
        let config = dir.join(format!("otelcol-{http}.yaml"));
        let pki = |f: &str| stack.pki.join(f).display().to_string();
        let tls = if mtls {
            format!(
                ", tls: {{cert_file: '{}', key_file: '{}', client_ca_file: '{}'}}",
                pki("tls-server.crt"),
                pki("tls-server.key"),
                pki("ca.crt")
            )
        } else {
            String::new()
        };
        let text = format!(
            "receivers:\n  otlp:\n    protocols:\n      grpc: {{endpoint: '127.0.0.1:{grpc}'{tls}}}\n      http: {{endpoint: '127.0.0.1:{http}'{tls}}}\n\
             exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n    append: true\n\
             service:\n  telemetry:\n    logs: {{level: warn}}\n    metrics: {{level: none}}\n  pipelines:\n    {signal}: {{receivers: [otlp], exporters: [file]}}\n",
            path.display()
        );
        std::fs::write(&config, text).expect("writing the Collector's config");
        let scheme = if mtls { "https" } else { "http" };
        let mut c = Collector {
            child: None,
            bin,
            config,
            log: dir.join(format!("otelcol-{http}.log")),
            http: format!("{scheme}://127.0.0.1:{http}"),
            grpc: format!("{scheme}://127.0.0.1:{grpc}"),
            file: CollectorFile { path },
            client: mtls.then(|| [pki("ca.crt"), pki("client.crt"), pki("client.key")]),
            signal,
        };
        c.resume().await;
        c
    }

    /// Starts it again (after [`Collector::stop`]) and waits until it accepts a request.
    pub async fn resume(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("its log");
        let child = std::process::Command::new(&self.bin)
            .arg(format!("--config={}", self.config.display()))
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting the Collector");
        self.child = Some(child);
        let url = format!("{}/v1/{}", self.http, self.signal);
        let up = super::consume::wait_for(Duration::from_secs(30), "the Collector", || {
            let mut curl = std::process::Command::new("curl");
            let json = "Content-Type: application/json";
            curl.args(["-fsS", "--max-time", "2", "-H", json, "-d", "{}", &url]);
            if let Some([ca, cert, key]) = &self.client {
                curl.args(["--cacert", ca, "--cert", cert, "--key", key]);
            }
            let out = curl.output().ok()?;
            out.status.success().then_some(())
        })
        .await;
        assert!(
            up.is_some(),
            "the Collector did not answer within 30 s; its log: {}",
            self.log.display()
        );
    }

    /// Stops it with SIGTERM and waits: it flushes its file, so that what it accepted is
    /// there to count.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

/// The Collector with the contrib k8sobjects receiver (`scripts/stack tool
/// otelcol-k8sobjects`) on the pods of `namespace` in `mode` (`watch`, or `pull` once an
/// hour), its file exporter writing `dir/file`. Killed when dropped.
pub struct K8sObjectsReceiver {
    child: std::process::Child,
    pub file: CollectorFile,
}

impl Drop for K8sObjectsReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl K8sObjectsReceiver {
    pub fn start(
        stack: &Stack,
        dir: &std::path::Path,
        namespace: &str,
        mode: &str,
        file: &str,
    ) -> K8sObjectsReceiver {
        let bin = PathBuf::from(stack.script(&["tool", "otelcol-k8sobjects"]).trim());
        let path = dir.join(file);
        let config = dir.join(format!("{file}.yaml"));
        let text = format!(
            "receivers:\n  k8sobjects:\n    auth_type: kubeConfig\n    objects:\n      - name: pods\n        mode: {mode}\n        namespaces: [{namespace}]\n\
             exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n    append: true\n\
             service:\n  telemetry:\n    logs: {{level: warn}}\n    metrics: {{level: none}}\n  pipelines:\n    logs: {{receivers: [k8sobjects], exporters: [file]}}\n",
            path.display()
        );
        std::fs::write(&config, text).expect("writing the receiver's config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{file}.log")))
            .expect("its log");
        let child = std::process::Command::new(bin)
            .arg(format!("--config={}", config.display()))
            .env("KUBECONFIG", &stack.kubeconfig)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting the k8sobjects Collector");
        K8sObjectsReceiver {
            child,
            file: CollectorFile { path },
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it with SIGTERM (a rolling update's stop) and waits.
    pub fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
