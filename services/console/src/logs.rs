//! Action output on a workflow's page, read from tink-server's `LogService.ReadLogs` with the
//! user's own bearer token: the server checks it (TokenReview, then SubjectAccessReview for
//! `get` on `workflows/log`), so the console shows output only to those allowed to read it.
//! Optional: without `--server-url` the page points at `tinkctl workflow logs`.

use std::path::PathBuf;
use std::time::Duration;

use tink_bus::proto::ReadLogsRequest;
use tink_bus::proto::log_service_client::LogServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Where the servers are.
#[derive(Debug, Clone)]
pub struct LogsConfig {
    /// `HOST:PORT` of the servers, comma separated.
    pub servers: String,
    /// The servers' CA (PEM); plaintext gRPC when `None`.
    pub tls_ca: Option<PathBuf>,
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

impl Logs {
    /// A client; connects on first use.
    pub fn new(config: LogsConfig) -> Result<Logs, String> {
        let tls = match &config.tls_ca {
            Some(ca) => {
                let pem =
                    std::fs::read(ca).map_err(|e| format!("cannot read {}: {e}", ca.display()))?;
                Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            }
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoints = Vec::new();
        for server in config
            .servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let mut e = Endpoint::from_shared(format!("{scheme}://{server}"))
                .map_err(|e| format!("--server-url {server:?}: expected HOST:PORT ({e})"))?
                .connect_timeout(Duration::from_secs(5))
                .timeout(config.timeout);
            if let Some(tls) = &tls {
                e = e.tls_config(tls.clone()).map_err(|e| format!("TLS: {e}"))?;
            }
            endpoints.push(e);
        }
        if endpoints.is_empty() {
            return Err("--server-url is empty".into());
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
