//! The Kubernetes client of the commands that talk to a cluster.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where the cluster is.
#[derive(Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl KubeArgs {
    /// A client for the configured cluster.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        match &self.kubeconfig {
            Some(path) => client_from(path).await,
            None => kube::Client::try_default()
                .await
                .context("no cluster configured: pass --kubeconfig or set KUBECONFIG"),
        }
    }
}

/// A client from one kubeconfig file.
pub async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("using the kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).context("building the Kubernetes client")
}
