//! The OTLP sink's config (`type: otlp`) and its validated form ([`OtlpConfig::settings`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::encode::Encoding;
use super::record::Shape;
use crate::sinks::http::{Auth, ClientSettings};
use crate::sinks::{Common, Secret, Sink, SinkSpec, TlsConfig, url};
use crate::vocab::Issue;

/// `type: otlp`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The receiver: `http://` or `https://`, host and port (`http://127.0.0.1:4318`). Over
    /// HTTP `/v1/logs` is appended to its path, as to `OTEL_EXPORTER_OTLP_ENDPOINT`, unless
    /// the path already ends in it (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`'s form, used as it is);
    /// over gRPC the path is the service's. Required.
    pub endpoint: String,
    /// `http/protobuf`, `http/json` or `grpc`. Default: `http/protobuf`.
    #[serde(default)]
    pub protocol: Protocol,
    /// Extra headers (gRPC metadata) on every request: an API key, a tenant. Their values
    /// are never logged; better set through `KUBECAST_SINKS__{NAME}__HEADERS__{HEADER}`.
    /// Default: none.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// TLS for `https://`: the CA to trust and, for mutual TLS, a client certificate.
    /// Default: the system's roots, no client certificate.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// `gzip` compresses requests (`Content-Encoding: gzip`, gRPC's `grpc-encoding`).
    /// Default: `none`.
    #[serde(default)]
    pub compression: crate::sinks::http::Compression,
    /// A request goes out when it holds `max_records` records or `max_bytes` bytes, or when
    /// its oldest record has waited `max_ms`. Default: 512 records, 1048576 bytes, 20 ms.
    #[serde(default)]
    pub batch: BatchConfig,
    /// Time for one request, from sending it to its answer; longer is retried. Default: 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Requests at once. The records of one object never overtake each other. Default: 4.
    #[serde(default = "default_in_flight")]
    pub in_flight: usize,
    /// `kubecast` (the semantic conventions' attributes, the event's data as the body) or
    /// `k8sobjects` (what the Collector's `k8sobjects` receiver emits in watch mode, for a
    /// pipeline built on it; needs `data: full` from every route that feeds it, or
    /// `encoding.data: full` without routes). Default: `kubecast`.
    #[serde(default)]
    pub shape: Shape,
    /// Largest request; a record larger than this on its own goes where `too_large` says.
    /// Default: 4194304 (4 MiB, what gRPC servers take by default).
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
}

fn default_timeout_ms() -> u64 {
    10_000
}
fn default_in_flight() -> usize {
    4
}
fn default_max_request_bytes() -> usize {
    4 << 20
}

/// OTLP's transports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "http/json")]
    HttpJson,
    #[serde(rename = "grpc")]
    Grpc,
}

/// `batch:` of an OTLP sink.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Records per request at most. Default: 512.
    #[serde(default = "default_records")]
    pub max_records: usize,
    /// Bytes per request at most (one record is always let in). Default: 1048576.
    #[serde(default = "default_bytes")]
    pub max_bytes: usize,
    /// How long the oldest waiting record waits for a request to fill. Default: 20.
    #[serde(default = "default_ms")]
    pub max_ms: u64,
}

fn default_records() -> usize {
    512
}
fn default_bytes() -> usize {
    1 << 20
}
fn default_ms() -> u64 {
    20
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_records: default_records(),
            max_bytes: default_bytes(),
            max_ms: default_ms(),
        }
    }
}

/// The validated OTLP sink.
#[derive(Debug, Clone)]
pub struct OtlpSettings {
    /// The connection: the full URL requests go to (`…/v1/logs`, or the gRPC method).
    pub client: ClientSettings,
    /// The URL as logs and errors show it ([`url::shown`]).
    pub shown_url: String,
    pub protocol: Protocol,
    pub shape: Shape,
    /// The config's `cluster`: `k8s.cluster.name`.
    pub cluster: String,
    pub gzip: bool,
    pub max_records: usize,
    pub max_bytes: usize,
    pub linger: Duration,
    pub max_request_bytes: usize,
    pub too_large_reference: bool,
}

impl OtlpSettings {
    pub fn encoding(&self) -> Encoding {
        match self.protocol {
            Protocol::HttpJson => Encoding::Json,
            Protocol::HttpProtobuf | Protocol::Grpc => Encoding::Protobuf,
        }
    }
}

/// OTLP/HTTP's path for logs.
const LOGS_PATH: &str = "/v1/logs";

/// The gRPC method of `LogsService.Export`.
pub const GRPC_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

impl SinkSpec for OtlpConfig {
    fn validate(
        &self,
        at: &str,
        common: &Common,
        cluster: &str,
    ) -> Result<Box<dyn Sink>, Vec<Issue>> {
        Ok(Box::new(self.settings(at, common, cluster)?))
    }
}

impl OtlpConfig {
    /// Checks the values; `at` is this sink's field path (`sinks.NAME`), `cluster` the
    /// config's.
    pub fn settings(
        &self,
        at: &str,
        common: &Common,
        cluster: &str,
    ) -> Result<OtlpSettings, Vec<Issue>> {
        let mut issues = Vec::new();
        let url = match self.endpoint.parse::<http::Uri>() {
            Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {
                let base = u.path().trim_end_matches('/');
                let path = match self.protocol {
                    Protocol::Grpc => GRPC_PATH.to_string(),
                    // The signal's full URL, as `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` holds it.
                    _ if base.ends_with(LOGS_PATH) => base.to_string(),
                    _ => format!("{base}{LOGS_PATH}"),
                };
                let mut parts = u.into_parts();
                let query = parts
                    .path_and_query
                    .as_ref()
                    .and_then(|p| p.query())
                    .map(|q| format!("?{q}"));
                parts.path_and_query = format!("{path}{}", query.unwrap_or_default()).parse().ok();
                http::Uri::from_parts(parts).ok()
            }
            _ => None,
        };
        if url.is_none() {
            issues.push(Issue::new(
                format!("{at}.endpoint"),
                format!(
                    "`{}` is not an http:// or https:// URL",
                    url::shown(&self.endpoint)
                ),
            ));
        }
        crate::sinks::http::check_tls(&mut issues, at, self.tls.as_ref(), url.as_ref(), "endpoint");
        let mut headers = Vec::new();
        for (k, v) in &self.headers {
            let name = http::HeaderName::from_bytes(k.as_bytes());
            let value = http::HeaderValue::from_str(&v.0);
            match (name, value) {
                (Ok(n), Ok(mut v)) if !is_managed(&n) => {
                    v.set_sensitive(true);
                    headers.push((n, v));
                }
                (Ok(_), Ok(_)) => issues.push(Issue::new(
                    format!("{at}.headers.{k}"),
                    "is set by kubecast itself (Content-Type, Content-Encoding, TE, grpc-*)",
                )),
                _ => issues.push(Issue::new(
                    format!("{at}.headers.{k}"),
                    "is not a valid header name and value",
                )),
            }
        }
        for (field, n, min) in [
            ("in_flight", self.in_flight as u64, 1),
            ("timeout_ms", self.timeout_ms, 100),
            ("max_request_bytes", self.max_request_bytes as u64, 1024),
            ("batch.max_records", self.batch.max_records as u64, 1),
            ("batch.max_bytes", self.batch.max_bytes as u64, 1024),
        ] {
            Issue::at_least(&mut issues, format!("{at}.{field}"), n, min);
        }
        match url {
            Some(url) if issues.is_empty() => Ok(OtlpSettings {
                shown_url: url::shown(&url.to_string()),
                client: ClientSettings {
                    url,
                    headers,
                    timeout: Duration::from_millis(self.timeout_ms),
                    in_flight: self.in_flight,
                    tls: self.tls.clone().unwrap_or_default(),
                    auth: Auth::None,
                    http2_only: self.protocol == Protocol::Grpc,
                },
                protocol: self.protocol,
                shape: self.shape,
                cluster: cluster.to_string(),
                gzip: self.compression == crate::sinks::http::Compression::Gzip,
                max_records: self.batch.max_records,
                max_bytes: self.batch.max_bytes.min(self.max_request_bytes),
                linger: Duration::from_millis(self.batch.max_ms),
                max_request_bytes: self.max_request_bytes,
                too_large_reference: common.too_large == crate::sinks::TooLarge::Reference,
            }),
            _ => Err(issues),
        }
    }
}

/// Headers the sink writes itself.
fn is_managed(n: &http::HeaderName) -> bool {
    use http::header::*;
    [CONTENT_TYPE, CONTENT_ENCODING, CONTENT_LENGTH, HOST, TE].contains(n)
        || n.as_str().starts_with("grpc-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<OtlpSettings, Vec<String>> {
        serde_saphyr::from_str::<OtlpConfig>(yaml)
            .unwrap()
            .settings("sinks.o", &Common::default(), "test")
            .map_err(|issues| issues.into_iter().map(|i| i.field).collect())
    }

    #[test]
    fn the_signal_path_is_appended_over_http_and_the_service_path_used_over_grpc() {
        let s = settings("endpoint: http://127.0.0.1:4318\n").unwrap();
        assert_eq!(s.client.url.to_string(), "http://127.0.0.1:4318/v1/logs");
        assert_eq!(
            (s.protocol, s.encoding(), s.max_records),
            (Protocol::HttpProtobuf, Encoding::Protobuf, 512)
        );
        let s = settings("endpoint: https://otel.example/prefix/\nprotocol: http/json\n").unwrap();
        assert_eq!(
            s.client.url.to_string(),
            "https://otel.example/prefix/v1/logs"
        );
        let s = settings("endpoint: http://127.0.0.1:4317\nprotocol: grpc\n").unwrap();
        assert_eq!(s.client.url.path(), GRPC_PATH);
        assert!(s.client.http2_only);
    }

    #[test]
    fn an_endpoint_that_already_ends_in_v1_logs_is_used_as_it_is() {
        for (endpoint, url) in [
            (
                "http://127.0.0.1:4318/v1/logs",
                "http://127.0.0.1:4318/v1/logs",
            ),
            (
                "https://otel.example/prefix/v1/logs/",
                "https://otel.example/prefix/v1/logs",
            ),
            (
                "http://127.0.0.1:4318/v1/logs?tenant=a",
                "http://127.0.0.1:4318/v1/logs?tenant=a",
            ),
            (
                "http://127.0.0.1:4318/v1/traces",
                "http://127.0.0.1:4318/v1/traces/v1/logs",
            ),
            (
                "http://127.0.0.1:4318/v1/logsx",
                "http://127.0.0.1:4318/v1/logsx/v1/logs",
            ),
        ] {
            let s = settings(&format!("endpoint: '{endpoint}'\n")).unwrap();
            assert_eq!(s.client.url.to_string(), url, "{endpoint}");
        }
        let s = settings("endpoint: http://127.0.0.1:4317/v1/logs\nprotocol: grpc\n").unwrap();
        assert_eq!(s.client.url.path(), GRPC_PATH);
    }

    #[test]
    fn bad_endpoints_headers_and_limits_are_named_and_header_values_never_shown() {
        let yaml = "endpoint: ftp://x\nheaders: {content-type: a, 'a b': c, grpc-timeout: 1}\nin_flight: 0\nbatch: {max_records: 0}\n";
        assert_eq!(
            settings(yaml).unwrap_err(),
            [
                "sinks.o.endpoint",
                "sinks.o.headers.a b",
                "sinks.o.headers.content-type",
                "sinks.o.headers.grpc-timeout",
                "sinks.o.in_flight",
                "sinks.o.batch.max_records"
            ]
        );
        assert_eq!(
            settings("endpoint: http://x\ntls: {}\n").unwrap_err(),
            ["sinks.o.tls"]
        );
        let s = settings("endpoint: http://x\nheaders: {x-api-key: s3cr3t}\n").unwrap();
        assert!(
            !format!("{s:?}").contains("s3cr3t"),
            "header values are never printed"
        );
        assert!(
            serde_saphyr::from_str::<OtlpConfig>("endpoint: http://x\nprotocol: http\n").is_err()
        );
    }

    #[test]
    fn the_otel_example_is_valid() {
        let text = include_str!("../../../examples/otel.yaml");
        let config = crate::config::load_str("examples/otel.yaml", text, Vec::new())
            .unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = config.validate() {
            panic!("examples/otel.yaml: {e}");
        }
    }
}
