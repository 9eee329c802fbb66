//! Action output on a workflow's page, read from tink-server's `LogService.ReadLogs` with the
//! user's own bearer token: the server checks it (TokenReview, then SubjectAccessReview for
//! `get` on `workflows/log`), so the console shows output only to those allowed to read it.
//! Optional: without `--server-url` the page points at `tinkctl workflow logs`.
//!
//! TLS by default, as tinkctl and the server: the users' tokens travel on this connection, so
//! the console refuses to start with a server and no `--server-tls-ca`, or with an `http://`
//! server, unless `--insecure` says plaintext is meant (development only).

use std::path::PathBuf;
use std::time::Duration;

use tink_bus::proto::ReadLogsRequest;
use tink_bus::proto::log_service_client::LogServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Where the servers are.
#[derive(Debug, Clone)]
pub struct LogsConfig {
    /// `HOST:PORT` (or `https://HOST:PORT`) of the servers, comma separated.
    pub servers: String,
    /// The servers' CA (PEM); required unless `insecure`.
    pub tls_ca: Option<PathBuf>,
    /// Plaintext gRPC (`--insecure`): the users' tokens cross the network in the clear.
    pub insecure: bool,
    /// The most lines one page shows (the first ones; `--action` narrows).
    pub max_lines: usize,
    /// How long one read may take.
    pub timeout: Duration,
}

/// One line shown.
#[derive(Debug, Clone)]
pub struct Line {
    /// The action's name.
    pub action: String,
    /// The text.
    pub text: String,
}

/// The lines of a workflow, or why not.
#[derive(Debug)]
pub enum LogsError {
    /// The server refused the token (401).
    Unauthenticated(String),
    /// The user may not read them (403).
    Forbidden(String),
    /// No such workflow or action (404).
    NotFound(String),
    /// The server did not answer.
    Unavailable(String),
}

/// A client of the servers (one lazy, load-balanced channel).
#[derive(Clone)]
pub struct Logs {
    channel: Channel,
    config: LogsConfig,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logs")
            .field("config", &self.config)
            .finish()
    }
}

impl LogsConfig {
    /// The servers as `HOST:PORT`, after checking that the configuration is TLS or says
    /// `--insecure`: a clear message naming the flags otherwise.
    pub fn check(&self) -> Result<Vec<String>, String> {
        let mut servers = Vec::new();
        for server in self
            .servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let host_port = if let Some(rest) = server.strip_prefix("https://") {
                if self.insecure {
                    return Err(format!(
                        "--server-url {server:?} asks for TLS but --insecure (TINK_CONSOLE_INSECURE) asks for plaintext: drop one"
                    ));
                }
                rest
            } else if let Some(rest) = server.strip_prefix("http://") {
                if !self.insecure {
                    return Err(format!(
                        "--server-url {server:?} is plaintext gRPC, which would send the users' tokens in the clear: use HOST:PORT with --server-tls-ca (TINK_CONSOLE_SERVER_TLS_CA), or pass --insecure (TINK_CONSOLE_INSECURE) for a plaintext server (development only)"
                    ));
                }
                rest
            } else {
                server
            };
            servers.push(host_port.trim_end_matches('/').to_string());
        }
        if servers.is_empty() {
            return Err("--server-url is empty".into());
        }
        match (&self.tls_ca, self.insecure) {
            (Some(_), true) => Err(
                "--server-tls-ca and --insecure (TINK_CONSOLE_INSECURE) contradict each other: drop one".into(),
            ),
            (None, false) => Err(
                "the servers' TLS CA is needed for --server-url: pass --server-tls-ca (TINK_CONSOLE_SERVER_TLS_CA), or --insecure (TINK_CONSOLE_INSECURE) for a plaintext server (development only)".into(),
            ),
            _ => Ok(servers),
        }
    }
}

impl Logs {
    /// A client; connects on first use. Refuses plaintext unless `config.insecure`
    /// ([`LogsConfig::check`]).
    pub fn new(config: LogsConfig) -> Result<Logs, String> {
        let servers = config.check()?;
        let tls = match &config.tls_ca {
            Some(ca) => {
                let pem = std::fs::read(ca)
                    .map_err(|e| format!("--server-tls-ca: cannot read {}: {e}", ca.display()))?;
                Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            }
            None => None,
        };
        if !config.insecure && tls.is_none() {
            return Err("TLS is required for --server-url".into());
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoints = Vec::new();
        for server in &servers {
            let mut e = Endpoint::from_shared(format!("{scheme}://{server}"))
                .map_err(|e| format!("--server-url {server:?}: expected HOST:PORT ({e})"))?
                .connect_timeout(Duration::from_secs(5))
                .timeout(config.timeout);
            if let Some(tls) = &tls {
                e = e.tls_config(tls.clone()).map_err(|e| format!("TLS: {e}"))?;
            }
            endpoints.push(e);
        }
        Ok(Logs {
            channel: Channel::balance_list(endpoints.into_iter()),
            config,
        })
    }

    /// The output so far of workflow `namespace/name` (of `action` when not empty), at most
    /// `max_lines`; `Ok(None)` when the workflow was not dispatched yet. Whether lines were left
    /// out is the second value.
    pub async fn read(
        &self,
        token: &str,
        namespace: &str,
        name: &str,
        action: &str,
    ) -> Result<Option<(Vec<Line>, bool)>, LogsError> {
        let mut client = LogServiceClient::new(self.channel.clone());
        let mut request = tonic::Request::new(ReadLogsRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
            action: action.to_string(),
            follow: false,
            since_seconds: 0,
        });
        let value = format!("Bearer {token}").parse().map_err(|_| {
            LogsError::Unauthenticated("the token cannot be sent as gRPC metadata".into())
        })?;
        request.metadata_mut().insert("authorization", value);
        let read = async {
            let response = client.read_logs(request).await.map_err(status)?;
            if response
                .metadata()
                .contains_key(tink_bus::NOT_DISPATCHED_HEADER)
            {
                return Ok(None);
            }
            let mut stream = response.into_inner();
            let mut lines = Vec::new();
            while let Some(r) = stream.message().await.map_err(status)? {
                if lines.len() >= self.config.max_lines {
                    return Ok(Some((lines, true)));
                }
                lines.push(Line {
                    action: r.action_name,
                    text: r.line.map(|l| l.text).unwrap_or_default(),
                });
            }
            Ok(Some((lines, false)))
        };
        match tokio::time::timeout(self.config.timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(LogsError::Unavailable(format!(
                "the server did not finish answering within {:?}",
                self.config.timeout
            ))),
        }
    }
}

fn status(s: tonic::Status) -> LogsError {
    let m = s.message().to_string();
    match s.code() {
        tonic::Code::Unauthenticated => LogsError::Unauthenticated(m),
        tonic::Code::PermissionDenied => LogsError::Forbidden(m),
        tonic::Code::NotFound | tonic::Code::InvalidArgument => LogsError::NotFound(m),
        _ => LogsError::Unavailable(format!(
            "reading the output from tink-server: {}: {m}",
            s.code()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(servers: &str, ca: bool, insecure: bool) -> LogsConfig {
        LogsConfig {
            servers: servers.into(),
            tls_ca: ca.then(|| PathBuf::from("/nonexistent/ca.pem")),
            insecure,
            max_lines: 10,
            timeout: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn plaintext_needs_insecure() {
        let e = config("http://server:42113", false, false)
            .check()
            .unwrap_err();
        assert!(
            e.contains("--insecure") && e.contains("http://server:42113"),
            "{e}"
        );
        let e = config("http://server:42113", true, false)
            .check()
            .unwrap_err();
        assert!(e.contains("--insecure"), "{e}");
        let e = config("server:42113", false, false).check().unwrap_err();
        assert!(
            e.contains("--server-tls-ca") && e.contains("--insecure"),
            "{e}"
        );
        assert!(config("server:42113", true, true).check().is_err());
        assert!(config("https://server:42113", false, true).check().is_err());
        assert_eq!(
            config("server-0:1, https://server-1:2", true, false)
                .check()
                .unwrap(),
            vec!["server-0:1".to_string(), "server-1:2".to_string()]
        );
        assert_eq!(
            config("http://server:1", false, true).check().unwrap(),
            vec!["server:1".to_string()]
        );
        let e = Logs::new(config("server:1", true, false)).unwrap_err();
        assert!(e.contains("--server-tls-ca: cannot read"), "{e}");
        assert!(Logs::new(config("server:1", false, true)).is_ok());
    }
}
