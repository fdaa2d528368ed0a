//! The client `verify` and `audit` talk to the apiserver with.

use kube::config::{Config, KubeConfigOptions};

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No kubeconfig could be read and the program does not run in a pod.
    #[error("no cluster to talk to: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The kubeconfig was read, but the context in it could not be used.
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// The configuration was read, but no client could be built from it.
    #[error("building the client: {0}")]
    Build(#[from] kube::Error),
}

/// A client from the kubeconfig (`KUBECONFIG` or `~/.kube/config`) and its current context, or
/// the named `context`; in a pod without a kubeconfig, from its service account.
pub async fn client(context: Option<&str>) -> Result<kube::Client, ClientError> {
    let config = match context {
        Some(context) => {
            Config::from_kubeconfig(&KubeConfigOptions {
                context: Some(context.to_owned()),
                ..KubeConfigOptions::default()
            })
            .await?
        }
        None => Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// An error of [`run_with_client`]: the runtime's, the client's or the work's.
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `work` with a client of `context`'s cluster (as [`client`] makes it) on a runtime of
/// its own: the subcommands' one way to a cluster.
pub fn run_with_client<T, E, F, Fut>(context: Option<&str>, work: F) -> Result<T, RunError>
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = client(context).await?;
        Ok(work(client).await?)
    })
}
