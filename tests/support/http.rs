//! A plain HTTP/1.0 GET against kubecast's operations endpoint on 127.0.0.1, and waits on
//! what it answers.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A free port on 127.0.0.1 (bound and released; the caller binds it next).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    l.local_addr().expect("local address").port()
}

/// The value of the series `name{labels}` in a Prometheus text exposition, if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `GET path` on `127.0.0.1:port`: the status code and the body, or why not.
pub async fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .map_err(|e| format!("sending GET {path}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| format!("reading the answer to GET {path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no HTTP answer: {text}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("GET {path}: no status in {head}"))?;
    Ok((code, body.to_string()))
}

/// Polls `GET path` until `done(code, body)` holds; fails with the last answer after `limit`.
pub async fn wait_for(
    port: u16,
    path: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(u16, &str) -> bool,
) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let answer = get(port, path).await;
        if let Ok((code, body)) = &answer
            && done(*code, body)
        {
            return (*code, body.clone());
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {limit:?} waiting for {what}; last answer to GET {path}: {answer:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
