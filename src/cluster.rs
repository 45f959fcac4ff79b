//! Cluster access: a kube client from a kubeconfig (a given file, `KUBECONFIG` or
//! `~/.kube/config`, optionally another context) or the in-cluster service account.
//!
//! Entry point: [`client`]. Only building the client happens here; it does not connect, so
//! an unreachable apiserver is the watch's business (retried), while a broken kubeconfig is
//! an error at start.

use crate::config::KubernetesConfig;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("kubernetes.kubeconfig: cannot read {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("kubernetes.context: {0}")]
    Context(String),
    #[error("no cluster access: {0} (set kubernetes.kubeconfig or KUBECONFIG, or run in a Pod)")]
    Infer(String),
    #[error("building the kube client: {0}")]
    Client(String),
}

/// Builds the client described by `k`.
pub async fn client(k: &KubernetesConfig) -> Result<kube::Client, ClusterError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: k.context.clone(),
        ..Default::default()
    };
    let config = match (&k.kubeconfig, &k.context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|e| ClusterError::Kubeconfig {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| ClusterError::Context(e.to_string()))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| ClusterError::Context(e.to_string()))?,
        (None, None) => kube::Config::infer()
            .await
            .map_err(|e| ClusterError::Infer(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| ClusterError::Client(e.to_string()))
}
