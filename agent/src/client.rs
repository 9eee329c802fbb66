//! The agent's side of the gRPC protocol: the command stream (with reconnection across server
//! replicas) and the event publisher (retrying until a server confirms).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;
use tink_proto::workflow::v2::{
    Event, GetWorkflowsRequest, GetWorkflowsResponse, PublishEventRequest, get_workflows_response,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tracing::{debug, error, info, warn};

use crate::config::{AgentConfig, Backoff, ServerAddress};
use crate::metrics::Metrics;

/// Errors building the client side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No server address was given.
    #[error("at least one server address is required")]
    NoServers,
    /// An address or the TLS material is unusable.
    #[error("server {address}: {source}")]
    Endpoint {
        /// The address.
        address: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// An address's scheme contradicts the TLS setting (tonic would talk plaintext to an
    /// `http://` address even with TLS configured).
    #[error("server {address}: {reason}")]
    Scheme {
        /// The address.
        address: String,
        /// Why.
        reason: &'static str,
    },
    /// The agent secret cannot be sent as gRPC metadata.
    #[error("agent secret: must be printable ASCII (it is sent as gRPC metadata)")]
    Secret,
}

/// The trace context keys carried in gRPC metadata.
const TRACE_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The metadata key of the session token the servers issue (see tink-server's identity docs).
pub const TOKEN_HEADER: &str = "x-tink-agent-token";
/// The metadata key of the machine's pre-shared secret (see tink-server's secrets docs).
pub const SECRET_HEADER: &str = "x-tink-agent-secret";

/// Refuses addresses whose scheme contradicts the TLS setting: tonic talks plaintext to an
/// `http://` address even with TLS configured, and cannot reach an `https://` one without it.
pub fn check_schemes(servers: &[ServerAddress], tls: bool) -> Result<(), ClientError> {
    for server in servers {
        let reason = match (server.scheme.as_deref(), tls) {
            (Some("http"), true) => {
                "an http:// address is plaintext but TLS is on: give host:port or https://host:port"
            }
            (Some("https"), false) => {
                "an https:// address needs TLS: give the servers' CA (--tls-ca)"
            }
            _ => continue,
        };
        return Err(ClientError::Scheme {
            address: server.to_string(),
            reason,
        });
    }
    Ok(())
}

/// Lazily connected channels to every server replica, and which one currently serves the
/// command stream (events go there first).
#[derive(Clone, Debug)]
pub struct ServerPool {
    channels: Arc<Vec<(String, Channel)>>,
    preferred: Arc<AtomicUsize>,
    /// The session token the servers issued to this agent, presented on every call.
    token: Arc<Mutex<Option<String>>>,
    /// Where the token is kept across restarts of the agent process.
    token_file: Option<std::path::PathBuf>,
    /// The machine's pre-shared secret, as metadata (checked once at start).
    secret: Option<MetadataValue<tonic::metadata::Ascii>>,
    /// True while a command stream is open (the session token is then current).
    connected: Arc<tokio::sync::watch::Sender<bool>>,
    /// True once a server refused the stream because no Hardware names this machine yet and
    /// said enrollment is open ([`ENROLLMENT_TRAILER`]): the inventory is then reported
    /// without credentials, to enroll.
    enrollment_open: Arc<tokio::sync::watch::Sender<bool>>,
    /// The latest inventory request a server forwarded (its id), for the inventory task.
    inventory_requests: Arc<tokio::sync::watch::Sender<Option<String>>>,
}

/// The trailer a server adds to a refused stream of an unknown machine when it takes
/// enrollments (value `open`).
pub const ENROLLMENT_TRAILER: &str = "x-tink-enrollment";

impl ServerPool {
    /// Channels for each configured server (no connection is made yet).
    pub fn new(config: &AgentConfig) -> Result<Self, ClientError> {
        if config.servers.is_empty() {
            return Err(ClientError::NoServers);
        }
        check_schemes(&config.servers, config.tls.is_some())?;
        let tls = config.tls.as_ref().map(|t| {
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&t.ca_pem));
            if let Some((cert, key)) = &t.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            if let Some(domain) = &t.domain {
                tls = tls.domain_name(domain.clone());
            }
            tls
        });
        let mut channels = Vec::with_capacity(config.servers.len());
        for server in &config.servers {
            let address = server.to_string();
            let err = |source| ClientError::Endpoint {
                address: address.clone(),
                source,
            };
            let mut endpoint = Endpoint::from_shared(server.uri(tls.is_some()))
                .map_err(err)?
                .connect_timeout(config.request_timeout)
                .http2_keep_alive_interval(config.keepalive_interval)
                .keep_alive_timeout(config.request_timeout)
                .keep_alive_while_idle(true);
            if let Some(tls) = &tls {
                endpoint = endpoint.tls_config(tls.clone()).map_err(err)?;
            }
            channels.push((address, endpoint.connect_lazy()));
        }
        let token = config
            .token_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        Ok(Self {
            channels: Arc::new(channels),
            preferred: Arc::new(AtomicUsize::new(0)),
            token: Arc::new(Mutex::new(token)),
            token_file: config.token_file.clone(),
            secret: match config.agent_secret.as_deref().map(str::trim) {
                Some(s) if !s.is_empty() => {
                    Some(MetadataValue::try_from(s).map_err(|_| ClientError::Secret)?)
                }
                _ => None,
            },
            connected: Arc::new(tokio::sync::watch::channel(false).0),
            enrollment_open: Arc::new(tokio::sync::watch::channel(false).0),
            inventory_requests: Arc::new(tokio::sync::watch::channel(None).0),
        })
    }

    /// Turns true while a command stream is open.
    pub fn connected(&self) -> tokio::sync::watch::Receiver<bool> {
        self.connected.subscribe()
    }

    /// Whether a server said this unknown machine may enroll (see [`ENROLLMENT_TRAILER`]).
    pub fn enrollment_open(&self) -> tokio::sync::watch::Receiver<bool> {
        self.enrollment_open.subscribe()
    }

    /// Inventory requests forwarded on the command stream (the latest id; see
    /// [`crate::inventory::serve`]).
    pub fn inventory_requests(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inventory_requests.subscribe()
    }

    /// Adds the session token to a request's metadata.
    pub(crate) fn authenticate<T>(&self, request: &mut tonic::Request<T>) {
        let token = self.token.lock().ok().and_then(|t| t.clone());
        if let Some(value) = token.and_then(|t| MetadataValue::try_from(t.as_str()).ok()) {
            request
                .metadata_mut()
                .insert(MetadataKey::from_static(TOKEN_HEADER), value);
        }
        if let Some(secret) = &self.secret {
            request
                .metadata_mut()
                .insert(MetadataKey::from_static(SECRET_HEADER), secret.clone());
        }
    }

    /// Keeps a token a server issued (in memory and in the token file, readable by root only).
    fn adopt_token(&self, token: &str) {
        if let Ok(mut t) = self.token.lock() {
            *t = Some(token.to_owned());
        }
        if let Some(path) = &self.token_file
            && let Err(e) = write_private(path, token)
        {
            warn!(path = %path.display(), error = %e, "cannot keep the session token; a restarted agent waits for its session to expire");
        }
    }

    fn len(&self) -> usize {
        self.channels.len()
    }

    /// The server currently holding the command stream (calls go there first).
    pub(crate) fn preferred_index(&self) -> usize {
        self.preferred.load(Ordering::Relaxed)
    }

    pub(crate) fn get(&self, index: usize) -> (&str, WorkflowServiceClient<Channel>) {
        let (address, channel) = &self.channels[index % self.channels.len()];
        (address, WorkflowServiceClient::new(channel.clone()))
    }
}

fn write_private(path: &std::path::Path, token: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path)?.write_all(token.as_bytes())
}

fn with_trace<T>(message: T, trace: &HashMap<String, String>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for key in TRACE_KEYS {
        if let Some(value) = trace.get(key)
            && let Ok(value) = MetadataValue::try_from(value.as_str())
        {
            request
                .metadata_mut()
                .insert(MetadataKey::from_static(key), value);
        }
    }
    request
}

/// The W3C trace context of the current span, if tracing is exported; otherwise `fallback`
/// (the context received with the command), so traces still join up through the server.
pub fn trace_context(fallback: &HashMap<String, String>) -> HashMap<String, String> {
    use opentelemetry::trace::TraceContextExt as _;
    let cx = tink_telemetry::propagation::current_context();
    if cx.span().span_context().is_valid() {
        let mut map = HashMap::new();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut map));
        if !map.is_empty() {
            return map;
        }
    }
    fallback
        .iter()
        .filter(|(k, _)| TRACE_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Holds the `GetWorkflows` stream, forwarding commands to `commands`; reconnects with capped
/// exponential back-off, moving to the next server after each failure, until `shutdown`.
pub async fn command_stream(
    pool: ServerPool,
    config: Arc<AgentConfig>,
    commands: mpsc::Sender<GetWorkflowsResponse>,
    health: tink_runtime::Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(config.backoff_initial, config.backoff_max);
    let mut index = 0;
    loop {
        let (address, mut client) = pool.get(index);
        let mut request = with_trace(
            GetWorkflowsRequest {
                agent_id: config.agent_id.clone(),
                instance_id: config.instance_id.clone(),
            },
            &trace_context(&HashMap::new()),
        );
        pool.authenticate(&mut request);
        let opened = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(config.request_timeout, client.get_workflows(request)) => r,
        };
        match opened {
            Ok(Ok(response)) => {
                if let Some(token) = response
                    .metadata()
                    .get(TOKEN_HEADER)
                    .and_then(|v| v.to_str().ok())
                {
                    pool.adopt_token(token);
                    info!(
                        server = address,
                        "a new session began (the server issued a token)"
                    );
                }
                info!(server = address, "command stream open");
                pool.preferred.store(index % pool.len(), Ordering::Relaxed);
                pool.connected.send_replace(true);
                metrics.stream_connects.inc();
                metrics.connected.set(1);
                health.set_ready(true);
                backoff.reset();
                let mut stream = response.into_inner();
                loop {
                    let message = tokio::select! {
                        () = shutdown.cancelled() => {
                            health.set_ready(false);
                            metrics.connected.set(0);
                            pool.connected.send_replace(false);
                            return;
                        }
                        m = stream.message() => m,
                    };
                    match message {
                        Ok(Some(GetWorkflowsResponse {
                            cmd: Some(get_workflows_response::Cmd::RequestInventory(request)),
                            ..
                        })) => {
                            // Not a workflow command: for the inventory task, not the executor.
                            info!(server = address, request_id = %request.request_id, "the server asks for a fresh inventory");
                            pool.inventory_requests
                                .send_replace(Some(request.request_id));
                        }
                        Ok(Some(command)) => {
                            metrics.commands_received.inc();
                            if commands.send(command).await.is_err() {
                                // The executor is gone: the agent is shutting down.
                                return;
                            }
                        }
                        Ok(None) => {
                            info!(server = address, "the server ended the command stream");
                            break;
                        }
                        Err(status) => {
                            if status.code() == Code::Aborted {
                                warn!(
                                    server = address,
                                    message = status.message(),
                                    "the command stream was taken over by a newer stream for this agent id (is another agent using the same id?)"
                                );
                            } else {
                                warn!(server = address, code = ?status.code(), message = status.message(), "the command stream broke");
                            }
                            break;
                        }
                    }
                }
                health.set_ready(false);
                metrics.connected.set(0);
                pool.connected.send_replace(false);
            }
            Ok(Err(status))
                if status.code() == Code::PermissionDenied
                    && status
                        .metadata()
                        .get(ENROLLMENT_TRAILER)
                        .is_some_and(|v| v.as_bytes() == b"open") =>
            {
                if !pool.enrollment_open.send_replace(true) {
                    info!(
                        server = address,
                        "no Hardware names this machine yet and the server takes enrollments: reporting the inventory to enroll, then retrying the stream until the discovered Hardware exists"
                    );
                }
            }
            Ok(Err(status)) if status.code() == Code::PermissionDenied => {
                error!(
                    server = address,
                    message = status.message(),
                    "the server refused this agent's stream (retrying): its message says why; a machine no Hardware names yet is admitted once one does, and a session held by another stream ends when it expires or an operator runs `tinkctl agent reset <agent id>` (a re-installed machine)"
                );
            }
            Ok(Err(status)) => {
                warn!(server = address, code = ?status.code(), message = status.message(), "cannot open the command stream");
            }
            Err(_) => warn!(server = address, "opening the command stream timed out"),
        }
        index = (index + 1) % pool.len();
        let delay = backoff.next_delay();
        debug!(?delay, "reconnecting after a pause");
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// An event waiting to be published, with the trace context it belongs to.
#[derive(Debug)]
pub struct Outgoing {
    /// The event, its `event_id` fixed so retries are de-duplicated.
    pub event: Event,
    /// `traceparent` / `tracestate`.
    pub trace: HashMap<String, String>,
    /// Told once a server confirmed the event is stored (dropped if it never was).
    pub confirmed: Option<oneshot::Sender<()>>,
}

impl Outgoing {
    /// Stamps `event` with a fresh event id, the agent id, this process's instance id and the
    /// current time.
    pub fn new(
        mut event: Event,
        agent_id: &str,
        instance_id: &str,
        trace: HashMap<String, String>,
    ) -> Self {
        event.event_id = uuid::Uuid::new_v4().to_string();
        event.agent_id = agent_id.to_owned();
        event.agent_instance = instance_id.to_owned();
        event.occurred_at = Some(prost_types::Timestamp::from(SystemTime::now()));
        Self {
            event,
            trace,
            confirmed: None,
        }
    }
}

/// Publishes queued events in order, each retried (with back-off, across servers) until a
/// server confirms it. Ends when the queue is closed and empty, or when `abandon` fires (then
/// what is left is counted as dropped).
pub async fn publisher(
    pool: ServerPool,
    config: Arc<AgentConfig>,
    mut queue: mpsc::Receiver<Outgoing>,
    metrics: Metrics,
    abandon: CancellationToken,
) {
    let mut backoff = Backoff::new(config.backoff_initial, config.backoff_max);
    loop {
        let next = tokio::select! {
            () = abandon.cancelled() => None,
            next = queue.recv() => next,
        };
        let Some(mut outgoing) = next else { break };
        let mut index = pool.preferred.load(Ordering::Relaxed);
        let mut delivered = false;
        while !abandon.is_cancelled() {
            let (address, mut client) = pool.get(index);
            let mut request = with_trace(
                PublishEventRequest {
                    event: Some(outgoing.event.clone()),
                },
                &outgoing.trace,
            );
            request.set_timeout(config.request_timeout);
            pool.authenticate(&mut request);
            let result = tokio::select! {
                () = abandon.cancelled() => break,
                r = tokio::time::timeout(config.request_timeout, client.publish_event(request)) => r,
            };
            match result {
                Ok(Ok(_)) => {
                    metrics.events_published.inc();
                    debug!(server = address, event_id = %outgoing.event.event_id, "event confirmed");
                    if let Some(confirmed) = outgoing.confirmed.take() {
                        let _ = confirmed.send(());
                    }
                    backoff.reset();
                    delivered = true;
                    break;
                }
                Ok(Err(status)) if status.code() == Code::InvalidArgument => {
                    error!(server = address, message = status.message(), event = ?outgoing.event, "the server refused the event as malformed; dropping it");
                    metrics.events_dropped.inc();
                    delivered = true;
                    break;
                }
                Ok(Err(status)) => {
                    warn!(server = address, code = ?status.code(), message = status.message(), "publishing an event failed; retrying");
                }
                Err(_) => warn!(server = address, "publishing an event timed out; retrying"),
            }
            metrics.event_publish_failures.inc();
            index = (index + 1) % pool.len();
            let delay = backoff.next_delay();
            tokio::select! {
                () = abandon.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        metrics.events_queued.dec();
        if !delivered {
            warn!(event_id = %outgoing.event.event_id, "shutting down with an unpublished event");
            metrics.events_dropped.inc();
        }
    }
    while let Ok(left) = queue.try_recv() {
        warn!(event_id = %left.event.event_id, "shutting down with an unpublished event");
        metrics.events_queued.dec();
        metrics.events_dropped.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientTls;

    fn config(servers: &[&str], tls: bool) -> AgentConfig {
        let mut config = AgentConfig::new(
            "02:00:00:00:00:01",
            servers
                .iter()
                .map(|s| s.parse().expect("address"))
                .collect(),
        );
        config.tls = tls.then(ClientTls::default);
        config
    }

    #[tokio::test]
    async fn schemes_must_agree_with_tls() {
        // An http:// address would be plaintext even with TLS configured.
        let e = ServerPool::new(&config(&["a:1", "http://b:2"], true)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "server http://b:2: an http:// address is plaintext but TLS is on: give host:port or https://host:port"
        );
        let e = ServerPool::new(&config(&["https://b:2"], false)).unwrap_err();
        assert!(e.to_string().contains("needs TLS"), "{e}");
        for (servers, tls) in [
            (&["a:1", "https://b:2"][..], true),
            (&["a:1", "http://b:2"][..], false),
        ] {
            assert!(
                ServerPool::new(&config(servers, tls)).is_ok(),
                "{servers:?} {tls}"
            );
        }
    }
}
