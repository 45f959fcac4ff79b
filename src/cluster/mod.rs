//! Cluster access: a kube client from a kubeconfig (a given file, `KUBECONFIG` or
//! `~/.kube/config`, optionally another context) or the in-cluster service account, over
//! connections that notice when the apiserver stops answering (`kubernetes.keepalive`).
//!
//! Entry point: [`client`]. Only building the client happens here; it does not connect, so
//! an unreachable apiserver is the watch's business (retried), while a broken kubeconfig is
//! an error at start (fatal: retrying cannot fix a file).

mod connect;
mod keepalive;

pub use keepalive::{Keepalive, KeepaliveConfig};

use std::path::PathBuf;

use kube::config::{InferConfigError, KubeconfigError};
use serde::{Deserialize, Serialize};

/// Cluster access (`kubernetes:`). Without a kubeconfig path, `KUBECONFIG` or
/// `~/.kube/config` is used, and inside a Pod the service account.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Path of a kubeconfig file. Default: none (infer: `KUBECONFIG`, `~/.kube/config`, then
    /// the in-cluster service account).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use. Default: its current context.
    #[serde(default)]
    pub context: Option<String>,
    /// How soon a dead connection to the apiserver is noticed: TCP keepalive on every
    /// connection, and how long a watch may bring nothing. Default: a dead connection is
    /// dropped within 45 s, a watch silent for 120 s is opened again.
    #[serde(default)]
    pub keepalive: KeepaliveConfig,
}

/// Why no client could be built. All are fatal.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("kubernetes.kubeconfig: cannot read {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("kubernetes.context: cannot use the kubeconfig's context")]
    Context(#[source] KubeconfigError),
    #[error("no cluster access (set kubernetes.kubeconfig or KUBECONFIG, or run in a Pod)")]
    Infer(#[source] InferConfigError),
    #[error(
        "the kubeconfig names a proxy (proxy-url); kubecast connects to the apiserver directly"
    )]
    Proxy,
    #[error("building the kube client")]
    Client(#[source] kube::Error),
}

/// Builds the client described by `k`, its connections kept alive as `keepalive` says.
pub async fn client(
    k: &KubernetesConfig,
    keepalive: Keepalive,
) -> Result<kube::Client, ClusterError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: k.context.clone(),
        ..Default::default()
    };
    let config = match (&k.kubeconfig, &k.context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClusterError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(ClusterError::Context)?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(ClusterError::Context)?,
        (None, None) => kube::Config::infer().await.map_err(ClusterError::Infer)?,
    };
    connect::build(config, keepalive)
}
