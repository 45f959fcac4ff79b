//! Cluster access: a kube client from a kubeconfig (a given file, `KUBECONFIG` or
//! `~/.kube/config`, optionally another context) or the in-cluster service account.
//!
//! Entry point: [`client`]. Only building the client happens here; it does not connect, so
//! an unreachable apiserver is the watch's business (retried), while a broken kubeconfig is
//! an error at start (fatal: retrying cannot fix a file).

use kube::config::{InferConfigError, KubeconfigError};

use crate::config::KubernetesConfig;

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
    #[error("building the kube client")]
    Client(#[source] kube::Error),
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
    kube::Client::try_from(config).map_err(ClusterError::Client)
}
