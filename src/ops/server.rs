//! The operations endpoint: `/metrics` (Prometheus text format), `/healthz` (alive: 200
//! `ok`) and `/readyz` (200 `ready`, or 503 with every reason it is not), over plain HTTP/1.
//! Entry point: [`serve`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::Ops;

/// The endpoint could not listen.
#[derive(Debug, thiserror::Error)]
#[error("metrics.address: cannot listen on {address}")]
pub struct BindError {
    address: SocketAddr,
    #[source]
    source: std::io::Error,
}

/// Listens on `address` (fails at once if it cannot) and returns the task serving it.
pub async fn serve(
    address: SocketAddr,
    ops: Arc<Ops>,
) -> Result<tokio::task::JoinHandle<()>, BindError> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| BindError { address, source })?;
    tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    Ok(tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a metrics connection failed");
                    continue;
                }
            };
            let ops = ops.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let ops = ops.clone();
                    async move { Ok::<_, Infallible>(respond(&ops, &req)) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(error = %e, "a metrics connection ended with an error");
                }
            });
        }
    }))
}

fn respond(ops: &Ops, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            ops.metrics.encode(),
        ),
        "/healthz" => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "ok\n".to_string(),
        ),
        "/readyz" => {
            // With sharding, the body names the shards this replica holds.
            let held = match ops.health.held() {
                Some(shards) if shards.is_empty() => "shards held: none\n".to_string(),
                Some(shards) => format!(
                    "shards held: {}\n",
                    shards
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                None => String::new(),
            };
            match ops.health.readiness() {
                Ok(()) => (
                    StatusCode::OK,
                    "text/plain; charset=utf-8",
                    format!("ready\n{held}"),
                ),
                Err(why) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain; charset=utf-8",
                    format!("not ready:\n- {}\n{held}", why.join("\n- ")),
                ),
            }
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics, /healthz or /readyz\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    response
}
