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

/// The bearer token of the current context's user in a kubeconfig (`path`, else `$KUBECONFIG`,
/// else `~/.kube/config`): its `token`, or the contents of its `tokenFile`.
pub fn current_user_token(path: Option<&Path>) -> anyhow::Result<String> {
    let path = match path {
        Some(path) => path.to_path_buf(),
        None => match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            // The first file of a list, as kubectl reads a merged one.
            Some(list) => std::env::split_paths(&list)
                .next()
                .context("KUBECONFIG is empty")?,
            None => std::env::home_dir()
                .context("no home directory for ~/.kube/config")?
                .join(".kube/config"),
        },
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
    token_of_current_user(&text).with_context(|| {
        format!(
            "no bearer token in the kubeconfig {}: pass --token",
            path.display()
        )
    })
}

/// The current context's user's token in kubeconfig text.
fn token_of_current_user(text: &str) -> anyhow::Result<String> {
    let config: serde_json::Value = serde_yaml::from_str(text).context("not a kubeconfig")?;
    let context = config["current-context"]
        .as_str()
        .context("no current-context")?;
    let named = |list: &str, name: &str| {
        config[list]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["name"].as_str() == Some(name)))
            .cloned()
    };
    let user = named("contexts", context)
        .and_then(|c| c["context"]["user"].as_str().map(String::from))
        .with_context(|| format!("context {context:?} names no user"))?;
    let auth = named("users", &user).with_context(|| format!("no user {user:?}"))?;
    if let Some(token) = auth["user"]["token"].as_str().filter(|t| !t.is_empty()) {
        return Ok(token.to_string());
    }
    if let Some(file) = auth["user"]["tokenFile"].as_str() {
        let token = std::fs::read_to_string(file)
            .with_context(|| format!("reading the tokenFile {file}"))?;
        return Ok(token.trim().to_string());
    }
    anyhow::bail!("user {user:?} has no token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_users_token_is_found() {
        let config = "apiVersion: v1\nkind: Config\ncurrent-context: b\ncontexts:\n- name: a\n  context: {cluster: c, user: ua}\n- name: b\n  context: {cluster: c, user: ub}\nusers:\n- name: ua\n  user: {token: token-a}\n- name: ub\n  user: {token: token-b}\n";
        assert_eq!(token_of_current_user(config).unwrap(), "token-b");
        let no_token = config.replace("{token: token-b}", "{username: x}");
        assert!(
            token_of_current_user(&no_token)
                .unwrap_err()
                .to_string()
                .contains("has no token")
        );
    }
}
