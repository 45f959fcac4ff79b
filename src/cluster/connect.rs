//! The kube client's HTTP stack, built as kube builds its own (the apiserver's address,
//! authentication, extra headers, retries of 429/503/504 answers) but over TCP connections
//! with keepalive and a user timeout, which kube's own builder does not set. Entry point:
//! [`build`].

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use tower::ServiceBuilder;

use super::{ClusterError, Keepalive};

/// A client for `config` whose connections are probed as `keepalive` says.
pub fn build(config: kube::Config, keepalive: Keepalive) -> Result<kube::Client, ClusterError> {
    if config.proxy_url.is_some() {
        return Err(ClusterError::Proxy);
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(config.connect_timeout);
    keepalive.tcp.apply(&mut tcp);
    let https = config
        .rustls_https_connector_with_connector(tcp)
        .map_err(ClusterError::Client)?;
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let auth = config.auth_layer().map_err(ClusterError::Client)?;
    let headers = config.extra_headers_layer().map_err(ClusterError::Client)?;
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(auth)
        .layer(headers)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}
