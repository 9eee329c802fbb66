//! How a service authenticates to NATS: a credentials file (JWT + NKey), an NKey seed, a user
//! and password, and TLS (a CA to trust, a client certificate). With none set the connection is
//! anonymous, as a development nats-server accepts.

use std::path::PathBuf;

use async_nats::{Client, ConnectErrorKind, ConnectOptions};

/// NATS credentials and TLS settings (flags of every service: [`crate::BusArgs`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsAuth {
    /// A `.creds` file (JWT and NKey seed, as `nsc` writes it).
    pub credentials_file: Option<PathBuf>,
    /// A file holding an NKey seed (`SU...`).
    pub nkey_seed_file: Option<PathBuf>,
    /// A user name (with `password`).
    pub user: Option<String>,
    /// The user's password.
    pub password: Option<String>,
    /// A CA certificate (PEM) to trust for the NATS servers; turns TLS on.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for mutual TLS, with `tls_key`.
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub tls_key: Option<PathBuf>,
}

/// Errors setting up or opening a NATS connection.
#[derive(Debug, thiserror::Error)]
pub enum NatsConnectError {
    /// A credentials or key file cannot be read.
    #[error("cannot read {what} {path}: {source}")]
    File {
        /// Which setting.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The NATS server refused the credentials or the TLS handshake failed: retrying cannot
    /// help, so the service stops at start with this message.
    #[error(
        "NATS at {url} refused the connection ({kind}): check the service's NATS credentials and TLS settings: {source}"
    )]
    Refused {
        /// The URL.
        url: String,
        /// What failed.
        kind: String,
        /// The error.
        source: async_nats::ConnectError,
    },
    /// The connection failed otherwise.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// The error.
        source: async_nats::ConnectError,
    },
    /// The URL setting names no server at all (empty, or only commas).
    #[error(
        "the NATS URL setting ({url:?}) names no server: give nats://host:port, or several comma separated"
    )]
    NoServer {
        /// The setting as given.
        url: String,
    },
}

impl NatsAuth {
    /// Adds the credentials and TLS settings to `options`.
    pub async fn apply(
        &self,
        mut options: ConnectOptions,
    ) -> Result<ConnectOptions, NatsConnectError> {
        if let Some(path) = &self.credentials_file {
            options =
                options
                    .credentials_file(path)
                    .await
                    .map_err(|source| NatsConnectError::File {
                        what: "the NATS credentials file",
                        path: path.clone(),
                        source,
                    })?;
        }
        if let Some(path) = &self.nkey_seed_file {
            let seed = std::fs::read_to_string(path).map_err(|source| NatsConnectError::File {
                what: "the NATS NKey seed file",
                path: path.clone(),
                source,
            })?;
            options = options.nkey(seed.trim().to_string());
        }
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            options = options
                .user_and_password(user.clone(), password.clone())
                .custom_inbox_prefix(inbox_prefix(user));
        }
        if let Some(ca) = &self.tls_ca {
            options = options.require_tls(true).add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options)
    }
}

/// The inbox prefix of a connection as NATS user `user`: `_INBOX_<user>`. Replies to its
/// JetStream requests and its pull and watch deliveries arrive under it, so each user's
/// permissions allow subscribing to its own inbox only (`_INBOX_<user>.>`, deploy/nats/nats.yaml)
/// and no user can read another's deliveries (commands, secrets). Connections with a
/// credentials file or an NKey keep NATS's default `_INBOX`.
pub fn inbox_prefix(user: &str) -> String {
    format!("_INBOX_{user}")
}

/// Connects to NATS. A refusal (bad credentials, TLS) is an error at once, so a misconfigured
/// service stops with a clear message; a server that is not reachable yet is waited for (the
/// connection is then retried for as long as it takes). `options` builds the connection's
/// options (name, callbacks) each time it is called.
pub async fn connect(
    url: &str,
    auth: &NatsAuth,
    options: impl Fn() -> ConnectOptions,
) -> Result<Client, NatsConnectError> {
    // A comma-separated list names several nodes of a cluster (any one that answers will do;
    // the client learns the rest from it); one URL works as before.
    let servers: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if servers.is_empty() {
        // Retrying an empty list would wait for ever.
        return Err(NatsConnectError::NoServer {
            url: url.to_string(),
        });
    }
    match auth.apply(options()).await?.connect(&servers).await {
        Ok(client) => return Ok(client),
        Err(e)
            if matches!(
                e.kind(),
                ConnectErrorKind::AuthorizationViolation
                    | ConnectErrorKind::Authentication
                    | ConnectErrorKind::Tls
            ) =>
        {
            return Err(NatsConnectError::Refused {
                url: url.to_string(),
                kind: e.kind().to_string(),
                source: e,
            });
        }
        Err(_) => {}
    }
    auth.apply(options().retry_on_initial_connect())
        .await?
        .connect(&servers)
        .await
        .map_err(|source| NatsConnectError::Connect {
            url: url.to_string(),
            source,
        })
}
