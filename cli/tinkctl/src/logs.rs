//! `tinkctl workflow logs NAME`: the output of a Workflow's actions.
//!
//! Two ways to read them:
//!
//! - Through a server (the default; `--server HOST:PORT` or `TINK_SERVER`): `LogService.ReadLogs`
//!   with the bearer token of the kubeconfig's current user (or `--token`). The server checks the
//!   token and asks Kubernetes whether that user may `get` `workflows/log` of the Workflow
//!   (RBAC: bind the ClusterRole `tink-workflow-log-reader`), so access follows the cluster's
//!   RBAC. TLS with the servers' CA (`--tls-ca`), or `--insecure` for a plaintext server.
//! - Administrator mode (`--nats-url`, given on the command line): the Workflow is read with the
//!   Kubernetes API and the lines straight from NATS JetStream (`tink.logs.<dispatch
//!   token>.<action token>`, stream `TINK_LOGS`). This bypasses RBAC: whoever holds NATS
//!   credentials that can read `TINK_LOGS` reads every workflow's output.
//!
//! Both print the same: each line prefixed by its action's name, lines a resent batch stored
//! twice shown once (the shared reader in `tink_bus::read_logs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use clap::Args;
use futures::StreamExt as _;
use kube::api::Api;
use tink_api::v1alpha2::Workflow;
use tink_bus::proto::log_line::Stream;
use tink_bus::proto::log_service_client::LogServiceClient;
use tink_bus::proto::{LogLine, ReadLogsRequest, ReadLogsResponse};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::kubeconfig::KubeArgs;

/// Arguments of `tinkctl workflow logs`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// The Workflow's name.
    pub name: String,
    /// The Workflow's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Only this action's output (its name, or its id).
    #[arg(long)]
    pub action: Option<String>,
    /// Keep printing new lines until the Workflow ends.
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines stored within this long before now (`30s`, `5m`, `2h`, `1h30m`).
    #[arg(long, value_parser = parse_since)]
    pub since: Option<Duration>,
    /// Prefix each line with the time the agent read it (RFC 3339).
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub server: ServerArgs,
    /// Administrator mode: read the lines straight from NATS at this URL (comma separated),
    /// bypassing RBAC (NATS permissions decide). Takes precedence over --server.
    #[arg(long)]
    pub nats_url: Option<String>,
    #[command(flatten)]
    pub nats: NatsLogin,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// How tinkctl logs in to NATS (administrator mode: `workflow logs`/`watch --nats-url`, `agent
/// reset`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NatsLogin {
    /// NATS credentials file (JWT and NKey seed, as `nsc` writes it).
    #[arg(long, env = "NATS_CREDS")]
    pub nats_creds: Option<std::path::PathBuf>,
    /// NATS user (with --nats-password); deploy/'s is `tink-admin` (the dev stack's env file
    /// sets it).
    #[arg(long, env = "NATS_USER", requires = "nats_password")]
    pub nats_user: Option<String>,
    /// NATS password.
    #[arg(
        long,
        env = "NATS_PASSWORD",
        requires = "nats_user",
        hide_env_values = true
    )]
    pub nats_password: Option<String>,
    /// CA certificate (PEM) of the NATS servers; turns TLS on.
    #[arg(long, env = "NATS_TLS_CA")]
    pub nats_tls_ca: Option<std::path::PathBuf>,
}

impl NatsLogin {
    /// The login as the bus takes it.
    pub fn auth(&self) -> tink_bus::NatsAuth {
        tink_bus::NatsAuth {
            credentials_file: self.nats_creds.clone(),
            user: self.nats_user.clone(),
            password: self.nats_password.clone(),
            tls_ca: self.nats_tls_ca.clone(),
            ..Default::default()
        }
    }
}

/// How to reach the servers' `LogService` (shared by `workflow logs` and `workflow watch`).
#[derive(Args, Debug, Clone, Default)]
pub struct ServerArgs {
    /// The server to read from (`HOST:PORT`, or a comma-separated list tried in order; when the
    /// serving one fails, the read resumes on the next without repeating a line); access is
    /// checked with Kubernetes RBAC (`get` on `workflows/log`).
    #[arg(long, env = "TINK_SERVER")]
    pub server: Option<String>,
    /// CA certificate (PEM) of the servers' TLS certificates (default: `TINK_TLS_CA`, else
    /// `TINK_AGENT_TLS_CA`, which the dev stack's env file sets).
    #[arg(long, env = "TINK_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Talk plaintext gRPC to the server (a server started with --insecure).
    #[arg(long, conflicts_with = "tls_ca")]
    pub insecure: bool,
    /// The Kubernetes bearer token to present (default: the kubeconfig's current user's token).
    #[arg(long, env = "TINK_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl LogsArgs {
    fn nats_auth(&self) -> tink_bus::NatsAuth {
        self.nats.auth()
    }
}

/// Parses `--since`: a duration such as `90s`, `5m`, `2h` or `1h30m`.
pub fn parse_since(text: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = text.trim().parse().map_err(|e| {
        format!("--since {text:?}: expected a duration like 30s, 5m or 1h30m ({e})")
    })?;
    Duration::try_from(d).map_err(|_| format!("--since {text:?}: must not be negative"))
}

/// Runs `tinkctl workflow logs`.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    match (&args.nats_url, &args.server.server) {
        (Some(nats_url), _) => run_nats(nats_url.clone(), args).await,
        (None, Some(_)) => run_server(args).await,
        (None, None) => anyhow::bail!(
            "no server to read from: pass --server HOST:PORT (or set TINK_SERVER); administrators can read NATS directly with --nats-url (bypasses RBAC)"
        ),
    }
}

fn not_dispatched(args: &LogsArgs) {
    eprintln!(
        "workflow {}/{} has not been dispatched to an agent yet: no output",
        args.namespace, args.name
    );
}

/// Reads through a server's `LogService`, printing each line.
async fn run_server(args: LogsArgs) -> anyhow::Result<()> {
    let access = args.server.access(args.kube.kubeconfig.as_deref())?;
    let mut out = std::io::stdout().lock();
    let end = access
        .read(
            ReadLogsRequest {
                namespace: args.namespace.clone(),
                name: args.name.clone(),
                action: args.action.clone().unwrap_or_default(),
                follow: args.follow,
                since_seconds: 0,
            },
            args.since,
            |read| {
                let line = read.line.unwrap_or_default();
                show(&read.action_name, &line, args.timestamps, &mut out)
            },
        )
        .await;
    std::io::Write::flush(&mut out)?;
    if end? == ReadEnd::NotDispatched {
        not_dispatched(&args);
    }
    Ok(())
}

/// How a read through the servers ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    /// Every line was read (and, following, the Workflow ended).
    Done,
    /// The Workflow has no dispatch id and will not get one (not following, or it ended).
    NotDispatched,
}

/// The servers, their TLS settings and the caller's token.
#[derive(Clone)]
pub struct ServerAccess {
    servers: Vec<String>,
    tls: Option<ClientTlsConfig>,
    authorization: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl ServerArgs {
    /// The servers to read from and the token to present (`--token`, else the kubeconfig's
    /// current user's).
    pub fn access(&self, kubeconfig: Option<&std::path::Path>) -> anyhow::Result<ServerAccess> {
        let servers: Vec<String> = self
            .server
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if servers.is_empty() {
            anyhow::bail!("--server is empty: expected HOST:PORT[,HOST:PORT...]");
        }
        let token = match &self.token {
            Some(token) => token.clone(),
            None => crate::kubeconfig::current_user_token(kubeconfig)?,
        };
        let authorization = format!("Bearer {token}")
            .parse()
            .context("the token holds characters gRPC metadata cannot carry")?;
        Ok(ServerAccess {
            servers,
            tls: tls_config(self)?,
            authorization,
        })
    }
}

impl ServerAccess {
    /// Reads `request`'s lines through the servers, handing each new one to `on_line`. When
    /// the server serving the call dies or its connection drops, the read goes on through the
    /// next server of the list (or the same one, back), from where it was: lines already handed
    /// over (known by their action and sequence) are not handed over again, and `since` (lines
    /// stored within this long before the call) keeps the window first asked for.
    pub async fn read(
        &self,
        request: ReadLogsRequest,
        since: Option<Duration>,
        mut on_line: impl FnMut(ReadLogsResponse) -> anyhow::Result<()>,
    ) -> anyhow::Result<ReadEnd> {
        let started = std::time::Instant::now();
        // The highest line sequence handed over per action: a resumed read hands over only what
        // follows (the same de-duplication the stored lines get).
        let mut printed = tink_bus::LogDeduplicator::default();
        let mut next = 0;
        let mut failures: Vec<String> = Vec::new();
        loop {
            if failures.len() >= RESUME_ATTEMPTS {
                anyhow::bail!(
                    "gave up reading the logs after {} failed attempts: {}",
                    failures.len(),
                    failures.join("; ")
                );
            }
            if !failures.is_empty() {
                // 0.2 s, 0.4 s, ... at most 3.2 s between attempts.
                let pause = Duration::from_millis(200) * (1 << (failures.len() - 1).min(4));
                tokio::time::sleep(pause).await;
            }
            let server = &self.servers[next % self.servers.len()];
            next += 1;
            let channel = match endpoint(server, self.tls.as_ref())?.connect().await {
                Ok(channel) => channel,
                Err(e) => {
                    failures.push(format!("{server}: {e}"));
                    continue;
                }
            };
            let mut call = tonic::Request::new(ReadLogsRequest {
                since_seconds: since.map_or(0, |d| (d + started.elapsed()).as_secs().max(1)),
                ..request.clone()
            });
            call.metadata_mut()
                .insert("authorization", self.authorization.clone());
            let response = match LogServiceClient::new(channel).read_logs(call).await {
                Ok(response) => response,
                Err(status) if resumable(&status) => {
                    failures.push(format!("{server}: {}", status.message()));
                    continue;
                }
                Err(status) => return Err(explain(status)),
            };
            if response
                .metadata()
                .contains_key(tink_bus::NOT_DISPATCHED_HEADER)
            {
                return Ok(ReadEnd::NotDispatched);
            }
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(read)) => {
                        let sequence = read.line.as_ref().map_or(0, |l| l.sequence);
                        if printed.is_new(&request.name, &read.action_id, sequence) {
                            on_line(read)?;
                            // Progress: a later failure starts a fresh count.
                            failures.clear();
                        }
                    }
                    Ok(None) => return Ok(ReadEnd::Done),
                    Err(status) if resumable(&status) => {
                        failures.push(format!("{server}: {}", status.message()));
                        break;
                    }
                    Err(status) => return Err(explain(status)),
                }
            }
        }
    }
}

/// Attempts in a row (connecting or reading) without a new line before `workflow logs` gives up.
const RESUME_ATTEMPTS: usize = 8;

/// Whether a failed call is worth resuming on a server: the server or the connection failed,
/// or it was busy; not a refusal or a bad request.
fn resumable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
            | tonic::Code::Aborted
            | tonic::Code::Internal
            | tonic::Code::ResourceExhausted
            | tonic::Code::DeadlineExceeded
    )
}

/// The TLS settings for the servers, `None` with `--insecure`.
pub(crate) fn tls_config(args: &ServerArgs) -> anyhow::Result<Option<ClientTlsConfig>> {
    if args.insecure {
        return Ok(None);
    }
    let ca = args
        .tls_ca
        .clone()
        .or_else(|| std::env::var_os("TINK_AGENT_TLS_CA").map(PathBuf::from))
        .context(
            "the servers' TLS CA is needed: pass --tls-ca (or set TINK_TLS_CA), or --insecure for a plaintext server",
        )?;
    let pem = std::fs::read(&ca).with_context(|| format!("cannot read {}", ca.display()))?;
    Ok(Some(
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
    ))
}

/// The endpoint of one server (`HOST:PORT`).
pub(crate) fn endpoint(server: &str, tls: Option<&ClientTlsConfig>) -> anyhow::Result<Endpoint> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Channel::from_shared(format!("{scheme}://{server}"))
        .with_context(|| format!("--server {server:?}: expected HOST:PORT"))?
        .connect_timeout(Duration::from_secs(10));
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls.clone())
            .context("invalid TLS configuration")?;
    }
    Ok(endpoint)
}

/// A server's refusal as an error an operator can act on.
fn explain(status: tonic::Status) -> anyhow::Error {
    let hint = match status.code() {
        tonic::Code::Unauthenticated => {
            " (the token comes from --token or the kubeconfig's current user)"
        }
        tonic::Code::PermissionDenied => {
            " (ask for a RoleBinding to the ClusterRole tink-workflow-log-reader in the workflow's namespace)"
        }
        _ => "",
    };
    anyhow::anyhow!("{:?}: {}{hint}", status.code(), status.message())
}

/// Administrator mode: the Workflow from Kubernetes, the lines from NATS.
async fn run_nats(nats_url: String, args: LogsArgs) -> anyhow::Result<()> {
    let client = args.kube.client().await?;
    let api: Api<Workflow> = Api::namespaced(client, &args.namespace);
    let wf = wait_for_dispatch(&api, &args).await?;
    let Some(wf) = wf else {
        not_dispatched(&args);
        return Ok(());
    };
    let nats = tink_bus::connect(&nats_url, &args.nats_auth(), || {
        async_nats::ConnectOptions::new().name("tinkctl workflow logs")
    })
    .await
    .with_context(|| format!("cannot connect to NATS at {nats_url}"))?;
    let js = async_nats::jetstream::new(nats);
    let ended = || {
        let api = api.clone();
        let name = args.name.clone();
        async move {
            api.get(&name)
                .await
                .ok()
                .and_then(|w| w.status)
                .is_none_or(|s| s.state.is_terminal())
        }
    };
    let status = wf.status.as_ref().context("the workflow has no status")?;
    let dispatch = status
        .dispatch_id
        .as_deref()
        .context("the workflow has not been dispatched")?;
    let selection = tink_bus::LogSelection::new(
        dispatch,
        status
            .actions
            .iter()
            .map(|a| (a.id.clone(), a.rendered.name.clone())),
        args.action.as_deref(),
    )
    .map_err(|e| match e {
        tink_bus::SelectionError::NoSuchAction { .. } => anyhow::anyhow!("--{e}"),
        tink_bus::SelectionError::Token(e) => {
            anyhow::anyhow!("the workflow's dispatch id is unusable: {e}")
        }
    })?;
    let options = tink_bus::ReadOptions {
        since: args.since,
        follow: args.follow,
    };
    let out = std::cell::RefCell::new(std::io::stdout().lock());
    let failed = std::cell::RefCell::new(None);
    let emit = |read: tink_bus::ReadLine| {
        let result = show(
            &read.action_name,
            &read.line,
            args.timestamps,
            &mut *out.borrow_mut(),
        );
        let ok = result.is_ok();
        if let Err(e) = result {
            *failed.borrow_mut() = Some(e);
        }
        std::future::ready(ok)
    };
    let summary = tink_bus::read_logs(&js, &selection, options, ended, emit)
        .await
        .context("reading the logs stream (is this the stack's NATS?)")?;
    if let Some(e) = failed.into_inner() {
        return Err(e);
    }
    if summary.malformed > 0 {
        eprintln!("skipped {} malformed log batches", summary.malformed);
    }
    std::io::Write::flush(&mut *out.borrow_mut())?;
    Ok(())
}

/// Reads the Workflow; with `--follow`, waits until it has a dispatch id.
async fn wait_for_dispatch(
    api: &Api<Workflow>,
    args: &LogsArgs,
) -> anyhow::Result<Option<Workflow>> {
    loop {
        let wf = api
            .get(&args.name)
            .await
            .with_context(|| format!("cannot read workflow {}/{}", args.namespace, args.name))?;
        let status = wf.status.as_ref();
        if status.and_then(|s| s.dispatch_id.as_ref()).is_some() {
            return Ok(Some(wf));
        }
        if !args.follow || status.is_some_and(|s| s.state.is_terminal()) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The last output line of each action of one Workflow, kept up to date by a background task.
#[derive(Debug, Clone, Default)]
pub struct LastLines(std::sync::Arc<std::sync::Mutex<HashMap<String, String>>>);

impl LastLines {
    /// A copy of the current lines (action id -> line).
    pub fn snapshot(&self) -> HashMap<String, String> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    fn set(&self, action_id: String, text: String) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(action_id, text);
        }
    }
}

/// Starts following the last output lines of workflow `namespace/name` through the servers'
/// `LogService` (RBAC: `get` on `workflows/log`); a refusal is printed on stderr and the watch
/// goes on without output.
pub fn last_lines_through(access: ServerAccess, namespace: String, name: String) -> LastLines {
    let last = LastLines::default();
    let out = last.clone();
    tokio::spawn(async move {
        let request = ReadLogsRequest {
            namespace,
            name,
            follow: true,
            ..Default::default()
        };
        let read = access.read(request, None, |read| {
            if let Some(line) = read.line {
                out.set(read.action_id, line.text);
            }
            Ok(())
        });
        if let Err(e) = read.await {
            eprintln!("not showing action output: {e:#}");
        }
    });
    last
}

/// Starts following the last output lines of workflow `name` (once it has a dispatch id);
/// `None`, with a warning on stderr, when NATS cannot be reached (the watch goes on without).
pub async fn last_lines(
    nats_url: &str,
    auth: &tink_bus::NatsAuth,
    api: Api<Workflow>,
    name: String,
) -> Option<LastLines> {
    let connect = tink_bus::connect(nats_url, auth, || {
        async_nats::ConnectOptions::new().name("tinkctl workflow watch")
    });
    let client = match connect.await {
        Ok(client) => client,
        Err(e) => {
            eprintln!("not showing action output: cannot connect to NATS at {nats_url}: {e}");
            return None;
        }
    };
    let js = async_nats::jetstream::new(client);
    let last = LastLines::default();
    let out = last.clone();
    tokio::spawn(async move {
        let dispatch = loop {
            if let Ok(wf) = api.get(&name).await
                && let Some(id) = wf.status.and_then(|s| s.dispatch_id)
            {
                break id;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let Ok(filter) = tink_bus::logs_workflow_filter(&dispatch) else {
            return;
        };
        let Ok(stream) = js.get_stream(tink_bus::LOGS_STREAM).await else {
            return;
        };
        let Ok(consumer) = stream
            .create_consumer(OrderedConfig {
                filter_subject: filter,
                deliver_policy: DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
        else {
            return;
        };
        let Ok(mut messages) = consumer.messages().await else {
            return;
        };
        while let Some(Ok(message)) = messages.next().await {
            if let Ok(batch) = tink_bus::decode_log_batch(&message.payload)
                && let Some(line) = batch.lines.last()
            {
                out.set(batch.action_id.clone(), line.text.clone());
            }
        }
    });
    Some(last)
}

/// Prints one line as `[action] text`, `(stderr)` after the name for standard error, the
/// agent's time first with `--timestamps`.
fn show<W: std::io::Write>(
    action: &str,
    line: &LogLine,
    timestamps: bool,
    out: &mut W,
) -> anyhow::Result<()> {
    let stream = match Stream::try_from(line.stream) {
        Ok(Stream::Stderr) => " (stderr)",
        _ => "",
    };
    if timestamps {
        let at = line
            .time
            .as_ref()
            .and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok())
            .map(|t| t.to_string())
            .unwrap_or_default();
        writeln!(out, "{at} [{action}]{stream} {}", line.text)?;
    } else {
        writeln!(out, "[{action}]{stream} {}", line.text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_read_prints_only_lines_after_the_last_printed_of_each_action() {
        let mut printed = tink_bus::LogDeduplicator::default();
        assert!(printed.is_new("wf", "0-wipe", 1));
        assert!(printed.is_new("wf", "0-wipe", 2));
        assert!(printed.is_new("wf", "1-image", 1));
        // The second server sends everything again.
        assert!(!printed.is_new("wf", "0-wipe", 1));
        assert!(!printed.is_new("wf", "0-wipe", 2));
        assert!(!printed.is_new("wf", "1-image", 1));
        assert!(printed.is_new("wf", "1-image", 2));
        assert!(printed.is_new("wf", "0-wipe", 3));
    }

    #[test]
    fn refusals_end_the_read_and_server_failures_resume_it() {
        assert!(resumable(&tonic::Status::unavailable("gone")));
        assert!(resumable(&tonic::Status::resource_exhausted("busy")));
        assert!(!resumable(&tonic::Status::permission_denied("no")));
        assert!(!resumable(&tonic::Status::unauthenticated("no")));
        assert!(!resumable(&tonic::Status::not_found("no")));
        assert!(!resumable(&tonic::Status::invalid_argument("no")));
    }

    #[test]
    fn since_takes_friendly_durations() {
        assert_eq!(parse_since("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_since("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_since("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_since("soon").unwrap_err().contains("--since"));
    }
}
