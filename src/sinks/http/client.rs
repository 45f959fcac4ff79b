//! One HTTP client per sink: keep-alive connections (HTTP/2 where a TLS receiver offers it
//! through ALPN), TLS from the sink's files, authentication, and the classification of every
//! answer. Entry point: [`Client::send`].
//!
//! A connection that stops answering without closing (a partition) is dropped on its own:
//! a request into it by the request timeout, an idle pooled one by TCP keepalive, and an
//! HTTP/2 connection, which every request shares, by PINGs.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::config::{Auth, HttpSettings};
use crate::sinks::TlsConfig;
use crate::sinks::tls::{self, TlsError};

/// An HTTP/2 connection is PINGed after this long without a frame, and dropped when the
/// PING is not answered within [`H2_PING_TIMEOUT`]: a dead one is found within 25 s.
const H2_PING_EVERY: Duration = Duration::from_secs(15);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request came to.
#[derive(Debug)]
pub enum Answer {
    /// The receiver answered with a status (any status).
    Status {
        code: StatusCode,
        /// `Retry-After`, when the answer has one.
        retry_after: Option<Duration>,
        /// The start of the response body, for dead letters and logs.
        body: String,
        /// `Location`, on a redirect.
        location: Option<String>,
        /// The response body as received (up to 64 KiB): what protocols with a body of
        /// their own (OTLP's partial success, its `Status`) read.
        raw: Bytes,
        /// The trailers (gRPC's `grpc-status`), or the headers of a response without a body
        /// (gRPC's trailers-only answer).
        trailers: HeaderMap,
        /// Where the request was answered, when 307 or 308 redirects were followed there.
        moved_to: Option<http::Uri>,
    },
}

/// Redirects followed for one request at most.
const MAX_HOPS: usize = 3;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the request failed")]
    Request(#[source] hyper_util::client::legacy::Error),
    #[error("the TLS handshake failed")]
    Handshake(#[source] std::io::Error),
    /// The request could not be built (a parsed URL and valid headers always can).
    #[error("building the request")]
    Build(#[source] http::Error),
}

impl SendError {
    /// The refused TLS handshake behind this failure, if it is one.
    pub fn tls_refusal(&self) -> Option<String> {
        match self {
            SendError::Timeout(_) | SendError::Build(_) => None,
            SendError::Request(e) => tls::refusal(e),
            SendError::Handshake(e) => tls::refusal(e),
        }
    }
}

/// Why the client could not be made, or a request authenticated. Fatal.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("reading the bearer token file {}", path.display())]
    Token {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the bearer token in {} is not a valid header value", path.display())]
    TokenValue { path: PathBuf },
}

/// What a [`Client`] is made from: the HTTP sink's settings, or another sink's that speaks
/// HTTP (OTLP).
#[derive(Debug, Clone)]
pub struct ClientSettings {
    pub url: http::Uri,
    /// Extra headers on every request.
    pub headers: Vec<(http::HeaderName, HeaderValue)>,
    pub timeout: Duration,
    /// Idle connections kept.
    pub in_flight: usize,
    pub tls: TlsConfig,
    pub auth: Auth,
    /// HTTP/2 only, also without TLS (prior knowledge): what gRPC needs.
    pub http2_only: bool,
}

impl From<&HttpSettings> for ClientSettings {
    fn from(s: &HttpSettings) -> Self {
        ClientSettings {
            url: s.url.clone(),
            headers: s.headers.clone(),
            timeout: s.timeout,
            in_flight: s.in_flight,
            tls: s.tls.clone(),
            auth: s.auth.clone(),
            http2_only: false,
        }
    }
}

/// The sink's client.
pub struct Client {
    pool: Pool<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: http::Uri,
    headers: Vec<(http::HeaderName, HeaderValue)>,
    auth: Authorization,
    timeout: Duration,
    /// For `https://`: the TLS configuration, host and port, for [`Client::probe`]'s own
    /// handshake.
    tls: Option<(std::sync::Arc<rustls::ClientConfig>, String, u16)>,
}

/// The `Authorization` header, with a bearer token read again when its file changes.
enum Authorization {
    None,
    Fixed(HeaderValue),
    Bearer {
        path: PathBuf,
        /// The file's modification time and length when it was read, and its header.
        current: Mutex<(Option<(SystemTime, u64)>, HeaderValue)>,
    },
}

impl Client {
    /// Builds the client: reads the TLS files and the bearer token.
    pub fn new(s: &ClientSettings) -> Result<Client, ClientError> {
        let config = tls::client_config(&s.tls)?;
        let https = s.url.scheme_str() == Some("https");
        let check = https.then(|| {
            let host = s.url.host().unwrap_or_default();
            // `[::1]` in a URL is `::1` to a socket.
            let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
            (std::sync::Arc::new(config.clone()), host, s.url.port_u16().unwrap_or(443))
        });
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(s.timeout.min(Duration::from_secs(10))));
        // A pooled connection that died while idle is dropped within 45 s, before a request
        // is sent into it; a request written into a dead one fails as soon (the request
        // timeout usually comes first).
        crate::net::TcpKeepalive::DEFAULT.apply(&mut http);
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
        // HTTP/2 only offers just `h2` through ALPN.
        let https = if s.http2_only {
            builder.enable_http2().wrap_connector(http)
        } else {
            builder.enable_http1().enable_http2().wrap_connector(http)
        };
        // Every request shares one HTTP/2 connection, which a request that times out does
        // not close: without PINGs a dead one would take every retry with it until the
        // kernel gives up (about 15 minutes).
        let pool = Pool::builder(TokioExecutor::new())
            .http2_only(s.http2_only)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(s.in_flight)
            .pool_idle_timeout(Duration::from_secs(60))
            .http2_keep_alive_interval(Some(H2_PING_EVERY))
            .http2_keep_alive_timeout(H2_PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(https);
        let auth = match &s.auth {
            Auth::None => Authorization::None,
            Auth::Basic(user, password) => {
                use std::io::Write;
                let mut raw = Vec::new();
                let _ = write!(raw, "{user}:{}", password.0);
                let mut v = HeaderValue::from_str(&format!("Basic {}", base64(&raw)))
                    .map_err(|_| ClientError::TokenValue { path: PathBuf::from("(username)") })?;
                v.set_sensitive(true);
                Authorization::Fixed(v)
            }
            Auth::Bearer(path) => {
                let (stamp, value) = read_token(path)?;
                Authorization::Bearer { path: path.clone(), current: Mutex::new((stamp, value)) }
            }
        };
        Ok(Client {
            pool,
            url: s.url.clone(),
            headers: s.headers.clone(),
            auth,
            timeout: s.timeout,
            tls: check,
        })
    }

    /// The `Authorization` header for the next request: a changed token file is read again
    /// (a file that cannot be read now keeps the token read before, with a warning).
    fn authorization(&self) -> Option<HeaderValue> {
        match &self.auth {
            Authorization::None => None,
            Authorization::Fixed(v) => Some(v.clone()),
            Authorization::Bearer { path, current } => {
                let mut cur = current.lock().unwrap_or_else(|p| p.into_inner());
                if stamp(path) != cur.0 {
                    match read_token(path) {
                        Ok(fresh) => *cur = fresh,
                        Err(e) => tracing::warn!(error = %crate::error_chain(&e), "keeping the bearer token read before"),
                    }
                }
                Some(cur.1.clone())
            }
        }
    }

    /// POSTs `body` with `headers` and reads the answer. A 307 or 308 is followed with the
    /// same method and body, up to [`MAX_HOPS`] times and never from https to http; its
    /// `Authorization` goes only to the configured URL's own scheme, host and port.
    pub async fn send(&self, headers: HeaderMap, body: Bytes, gzip: bool) -> Result<Answer, SendError> {
        let mut url = self.url.clone();
        let mut hops = 0;
        loop {
            let mut answer = self
                .exchange(http::Method::POST, url.clone(), headers.clone(), body.clone(), gzip)
                .await?;
            let Answer::Status { code, location, moved_to, .. } = &mut answer;
            *moved_to = (hops > 0).then(|| url.clone());
            let next = match (code.as_u16(), location.as_deref()) {
                (307 | 308, Some(l)) if hops < MAX_HOPS => follow(&url, l),
                _ => None,
            };
            match next {
                Some(next) => {
                    url = next;
                    hops += 1;
                }
                None => return Ok(answer),
            }
        }
    }

    /// Asks the receiver `OPTIONS` (what the CloudEvents webhook spec asks a receiver first):
    /// any answer says it is there. Over TLS, a handshake of its own first, which sees a
    /// refused client certificate that a pooled connection may report only as closed.
    pub async fn probe(&self) -> Result<Answer, SendError> {
        self.handshake().await?;
        self.exchange(http::Method::OPTIONS, self.url.clone(), HeaderMap::new(), Bytes::new(), false).await
    }

    /// Over TLS, a handshake of its own (nothing without TLS): it sees a refused client
    /// certificate, which a pooled connection may report only as closed.
    pub async fn handshake(&self) -> Result<(), SendError> {
        if let Some((config, host, port)) = &self.tls {
            let wait = Duration::from_millis(500);
            let check = tls::handshake(config.clone(), host, *port, wait);
            tokio::time::timeout(self.timeout, check)
                .await
                .unwrap_or(Err(std::io::ErrorKind::TimedOut.into()))
                .map_err(SendError::Handshake)?;
        }
        Ok(())
    }

    async fn exchange(
        &self,
        method: http::Method,
        url: http::Uri,
        mut headers: HeaderMap,
        body: Bytes,
        gzip: bool,
    ) -> Result<Answer, SendError> {
        // Credentials go only where they were configured for, as curl and browsers do.
        let own = (url.scheme(), url.authority()) == (self.url.scheme(), self.url.authority());
        let mut req = Request::builder().method(method).uri(url);
        for (k, v) in &self.headers {
            headers.insert(k.clone(), v.clone());
        }
        if own && let Some(a) = self.authorization() {
            headers.insert(header::AUTHORIZATION, a);
        }
        let body = if gzip && !body.is_empty() {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            super::encode::gzip(&body)
        } else {
            body
        };
        if let Some(h) = req.headers_mut() {
            *h = headers;
        }
        let req = req.body(Full::new(body)).map_err(SendError::Build)?;
        let exchange = async {
            let resp = self.pool.request(req).await.map_err(SendError::Request)?;
            let code = resp.status();
            let retry_after = resp.headers().get(header::RETRY_AFTER).and_then(retry_after);
            let location = resp.headers().get(header::LOCATION).and_then(|l| l.to_str().ok()).map(str::to_string);
            let (parts, body) = resp.into_parts();
            // Read (a bounded part of) the body, so that the connection can be used again.
            let (raw, trailers) = match Limited::new(body, 64 * 1024).collect().await {
                Ok(b) => {
                    let trailers = b.trailers().cloned();
                    (b.to_bytes(), trailers)
                }
                Err(_) => (Bytes::new(), None),
            };
            let trailers = trailers.unwrap_or(parts.headers);
            let body = String::from_utf8_lossy(&raw).chars().take(200).collect();
            Ok(Answer::Status { code, retry_after, body, location, moved_to: None, raw, trailers })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(SendError::Timeout(self.timeout)))
    }
}

fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn read_token(path: &std::path::Path) -> Result<(Option<(SystemTime, u64)>, HeaderValue), ClientError> {
    let stamp = stamp(path);
    let text = std::fs::read_to_string(path).map_err(|source| ClientError::Token { path: path.to_path_buf(), source })?;
    let mut v = HeaderValue::from_str(&format!("Bearer {}", text.trim()))
        .map_err(|_| ClientError::TokenValue { path: path.to_path_buf() })?;
    v.set_sensitive(true);
    Ok((stamp, v))
}

/// Where a redirect from `from` to `location` leads: an absolute URL, a scheme-relative one
/// or a path, resolved against `from`. `None` for what cannot be followed: another scheme
/// than http and https, or https to http.
pub fn follow(from: &http::Uri, location: &str) -> Option<http::Uri> {
    let scheme = from.scheme_str()?;
    // `scheme:` before any `/`, `?` or `#`: an absolute URL.
    let absolute = location
        .split_once(':')
        .is_some_and(|(s, _)| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b)));
    let text = if absolute {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else {
        let authority = from.authority()?.as_str();
        let path = if location.starts_with('/') {
            location.to_string()
        } else {
            // Relative to the directory of the current path.
            let dir = from.path().rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{location}")
        };
        format!("{scheme}://{authority}{path}")
    };
    let to: http::Uri = text.parse().ok()?;
    match (scheme, to.scheme_str()) {
        ("https", Some("https")) | ("http", Some("http" | "https")) if to.host().is_some() => Some(to),
        _ => None,
    }
}

/// `Retry-After` as seconds or as an HTTP date, capped at 10 minutes.
pub fn retry_after(v: &HeaderValue) -> Option<Duration> {
    let text = v.to_str().ok()?.trim();
    let wait = match text.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = jiff::fmt::rfc2822::parse(text).ok()?.timestamp();
            let ms = at.as_millisecond() - jiff::Timestamp::now().as_millisecond();
            Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        }
    };
    Some(wait.min(Duration::from_secs(600)))
}

/// Standard base64 with padding (basic auth's credentials).
fn base64(raw: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(raw.len().div_ceil(3) * 4);
    for chunk in raw.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(retry_after(&HeaderValue::from_static("2")), Some(Duration::from_secs(2)));
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let date = jiff::fmt::rfc2822::to_string(&later.to_zoned(jiff::tz::TimeZone::UTC)).unwrap();
        let d = retry_after(&HeaderValue::from_str(&date).unwrap()).unwrap();
        assert!(d > Duration::from_secs(25) && d <= Duration::from_secs(30), "{date}: {d:?}");
        assert_eq!(retry_after(&HeaderValue::from_static("soon")), None);
    }

    #[test]
    fn redirects_resolve_against_the_url_and_never_downgrade_https() {
        let from: http::Uri = "https://a.example:8443/in/events?x=1".parse().unwrap();
        let to = |l: &str| follow(&from, l).map(|u| u.to_string());
        assert_eq!(to("https://b.example/new").as_deref(), Some("https://b.example/new"));
        assert_eq!(to("//c.example/p").as_deref(), Some("https://c.example/p"));
        assert_eq!(to("/moved?y=2").as_deref(), Some("https://a.example:8443/moved?y=2"));
        assert_eq!(to("other").as_deref(), Some("https://a.example:8443/in/other"));
        assert_eq!(to("http://a.example/in"), None, "https is never downgraded");
        assert_eq!(to("ftp://a.example/in"), None);
        let plain: http::Uri = "http://a.example/".parse().unwrap();
        assert!(follow(&plain, "https://a.example/").is_some(), "http may go to https");
    }

    #[test]
    fn basic_credentials_are_base64() {
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }
}
