//! The tinkerbell server: a stateless gRPC gateway between agents and NATS JetStream.
//!
//! Agents hold a `GetWorkflows` stream to any replica and call `PublishEvent`; the server keeps
//! no state of its own: commands come from the agent's queue in the dispatch stream, events go to
//! the workflow's events subject, presence goes to a KV bucket: one entry per agent, written
//! when its stream opens and deleted when it ends, kept alive by one heartbeat per replica
//! (module `replica`; all named in `tink-bus`).
//!
//! It also serves `LogService.ReadLogs` to operators (`tinkctl workflow logs`): the output of a
//! Workflow's actions from the logs stream, for callers Kubernetes RBAC allows (`get` on
//! `workflows/log`). Only that call uses the Kubernetes API (TokenReview, SubjectAccessReview,
//! reading the Workflow), and only when [`ServerConfig::kube`] is set; agents never cause a
//! Kubernetes API call.
//!
//! # Reading logs (`LogService.ReadLogs`)
//!
//! - Configure: `--kubeconfig PATH` (`TINK_SERVER_KUBECONFIG`) or `--kube-in-cluster`
//!   (`TINK_SERVER_KUBE_IN_CLUSTER`, the pod's ServiceAccount, as deploy/ does). Without either,
//!   the call answers FAILED_PRECONDITION ("log reading is not configured").
//! - The server's own RBAC (deploy/rbac/server.yaml): `create` tokenreviews and
//!   subjectaccessreviews, `get` workflows.
//! - Callers send `authorization: Bearer <Kubernetes token>`. No token, or one the TokenReview
//!   refuses: UNAUTHENTICATED. Then a SubjectAccessReview for verb `get`, group
//!   [`LOG_GROUP`], resource `workflows`, subresource `log`, the Workflow's namespace and name;
//!   refused: PERMISSION_DENIED naming that permission. A user is granted it with a
//!   RoleBinding (one namespace) or ClusterRoleBinding (all) to the ClusterRole
//!   `tink-workflow-log-reader`.
//! - Positive review answers are reused for `--log-access-cache-seconds` (default 5; bounded to
//!   4096 entries each), refusals never, so a new binding takes effect at once and a removed one
//!   within that time. The check is made when a call starts: a follower keeps its stream after
//!   its binding is removed, until the workflow ends.
//! - Then the Workflow (NOT_FOUND when missing) gives the dispatch id and action names; with
//!   `follow` and no dispatch yet the call waits for one; without, the stream is empty with the
//!   `x-tink-logs-not-dispatched` response metadata. Lines: stored ones in order, then new ones
//!   until the Workflow ends (`tink_bus::read_logs`, shared with `tinkctl workflow logs
//!   --nats-url`).
//! - Metrics: `tink_server_log_reads{result}` (`allowed`, `denied`, `unauthenticated`, `invalid`,
//!   `not_configured`, `error`) and `tink_server_log_lines_served`.
//!
//! Tests and the binary start it the same way:
//!
//! ```no_run
//! # async fn example() -> Result<(), tink_server::ServerError> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(tink_server::ServerError::Bind)?;
//! let config = tink_server::ServerConfig::new("nats://127.0.0.1:4222", "server-0");
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! tink_server::serve(
//!     config,
//!     listener,
//!     tink_runtime::Health::new(),
//!     tink_server::Metrics::default(),
//!     shutdown,
//! )
//! .await
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod auth;
mod inventory;
mod log_access;
mod logs;
mod metrics;
pub mod mirror;
mod read_logs;
mod replica;
pub mod secrets;
mod service;
mod session;
mod targets;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use tink_bus::BusConfig;
use tink_bus::proto::log_service_server::LogServiceServer;
use tink_bus::proto::workflow_service_server::WorkflowServiceServer;
use tink_bus::{ServiceConnection, StreamSetup};
use tink_runtime::{Health, TaskGroup};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tracing::{info, warn};

pub use log_access::{LOG_GROUP, LOG_RESOURCE, LOG_SUBRESOURCE, LOG_VERB};
pub use metrics::{ErrorLabel, KindLabel, Metrics, ReadResultLabel};
pub use read_logs::NOT_DISPATCHED_HEADER;

/// What `--allow-unauthenticated-agents` still allows, in the start-up log and `/readyz`.
pub const UNAUTHENTICATED_AGENTS_NOTE: &str = "--allow-unauthenticated-agents is on: agents without a certificate or session token are admitted (a stream without credentials takes over an agent's session), and an event without credentials is recorded for the agent a dispatch went to when that agent's stream had no credentials either, so whoever knows such a dispatch id can report for it; agents that authenticate keep their dispatches";

/// How long shutdown waits for presence cleanup after the last stream ended.
const CLEANUP_GRACE: Duration = Duration::from_secs(5);
/// Pause between attempts to set up the streams while NATS is unreachable.
const SETUP_RETRY: Duration = Duration::from_secs(1);
/// While the streams are missing, one warning per this many attempts.
const SETUP_LOG_EVERY: u32 = 30;
/// How long the background tasks get to stop once the gRPC server and the presence cleanup
/// are done (they all watch the token and stop at once; before the task group they were
/// aborted there).
const TASKS_DRAIN: Duration = Duration::from_secs(2);

/// TLS material (PEM).
#[derive(Clone, Debug)]
pub struct TlsConfig {
    /// The server's certificate chain.
    pub cert_pem: Vec<u8>,
    /// The server's private key.
    pub key_pem: Vec<u8>,
    /// When set, clients must present a certificate signed by this CA (mutual TLS).
    pub client_ca_pem: Option<Vec<u8>>,
}

/// The Kubernetes client `ReadLogs` uses (a newtype only so [`ServerConfig`] stays `Debug`).
#[derive(Clone)]
pub struct KubeClient(pub kube::Client);

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeClient")
    }
}

/// Configuration of one server replica.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The NATS server(s), comma separated (`nats://host:4222,...`).
    pub nats_url: String,
    /// This replica's name in presence entries and logs (the pod name).
    pub replica_id: String,
    /// Stream, bucket and consumer settings (the same for every service).
    pub bus: BusConfig,
    /// NATS credentials and TLS.
    pub nats_auth: tink_bus::NatsAuth,
    /// TLS for the gRPC endpoint; plain HTTP/2 when unset.
    pub tls: Option<TlsConfig>,
    /// HTTP/2 keepalive ping interval: detects agents whose connection died silently.
    pub keepalive_interval: Duration,
    /// How long a keepalive ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Admit agents that present neither a client certificate nor their session token (agents
    /// built from the seeds/004 protocol alone): their streams take over and their events are
    /// trusted as before. Off by default.
    pub allow_unauthenticated_agents: bool,
    /// Admit agent ids no Hardware names (tests and benchmarks of the server alone). Off by
    /// default: only ids in the admitted agents bucket, which the controller fills from the
    /// Hardware, may open a stream or publish.
    pub admit_unknown_agents: bool,
    /// The most agent streams this replica holds; more are refused (RESOURCE_EXHAUSTED).
    pub max_sessions: usize,
    /// `GetWorkflows` streams one peer address may open per second (bursts of ten times that);
    /// 0: no limit.
    pub stream_opens_per_peer: u32,
    /// `PublishEvent` and `PublishLogs` calls one agent may make per second (bursts of ten
    /// times that); 0: no limit.
    pub agent_calls_per_second: u32,
    /// Enrollment: take inventories without credentials from agent ids no Hardware names
    /// (unknown machines enrolling themselves; the controller makes discovered Hardware of
    /// them). Off by default.
    pub enrollment: bool,
    /// Enrollments this replica takes per second (bursts of ten times that); 0: no limit.
    pub enrollments_per_second: u32,
    /// The Kubernetes API that checks `ReadLogs` callers (TokenReview, SubjectAccessReview) and
    /// holds the Workflows; without it `ReadLogs` answers FAILED_PRECONDITION.
    pub kube: Option<KubeClient>,
    /// How long a positive TokenReview or SubjectAccessReview answer is reused (0: never).
    pub log_access_cache: Duration,
    /// `PublishLogs` calls stored at once by this replica; more wait their turn. Action output
    /// also travels on a NATS connection of its own, so events never queue behind it.
    pub logs_max_in_flight: usize,
    /// `ReadLogs` calls served at once by this replica; more are refused (RESOURCE_EXHAUSTED).
    pub log_readers_max: usize,
    /// How often a `ReadLogs` follower's token and permission are checked again.
    pub log_reauthorize: Duration,
}

impl ServerConfig {
    /// A configuration with default bus settings, no TLS and 30 s / 10 s keepalives.
    pub fn new(nats_url: impl Into<String>, replica_id: impl Into<String>) -> Self {
        ServerConfig {
            nats_url: nats_url.into(),
            replica_id: replica_id.into(),
            bus: BusConfig::default(),
            nats_auth: tink_bus::NatsAuth::default(),
            tls: None,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            allow_unauthenticated_agents: false,
            admit_unknown_agents: false,
            max_sessions: 50_000,
            stream_opens_per_peer: 20,
            agent_calls_per_second: 100,
            enrollment: false,
            enrollments_per_second: 20,
            kube: None,
            log_access_cache: Duration::from_secs(5),
            logs_max_in_flight: 8,
            log_readers_max: 256,
            log_reauthorize: Duration::from_secs(30),
        }
    }
}

/// Errors that stop the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listener could not be bound.
    #[error("cannot bind the gRPC listener: {0}")]
    Bind(#[source] std::io::Error),
    /// NATS refused the connection or the options are invalid.
    #[error(transparent)]
    Nats(tink_bus::NatsConnectError),
    /// The TLS material is invalid.
    #[error("invalid TLS configuration: {0}")]
    Tls(#[source] tonic::transport::Error),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
    /// A notice subscription (takeovers, inventory requests, command announcements) could not
    /// be made.
    #[error("cannot subscribe: {0}")]
    Subscribe(#[source] async_nats::SubscribeError),
    /// The log store's thread could not be started.
    #[error("cannot start the log store thread: {0}")]
    Thread(#[from] std::io::Error),
    /// A background task (the agent secrets or admitted agents watch, the NATS connection
    /// watcher, the takeover and command announcement listeners, the idle limits sweep) stopped while
    /// the replica was serving: the replica turned not ready and stopped.
    #[error("a background task stopped: {0}")]
    Task(String),
}

/// Runs one replica on `listener` until `shutdown` is cancelled.
///
/// Connects to NATS (retrying while it is unreachable), waits until the streams exist (the
/// controller creates them: this service's NATS user may not), then
/// serves `WorkflowService` and the gRPC health service. `health` turns ready only while NATS is
/// connected and the streams exist. On shutdown every agent stream ends with UNAVAILABLE (so
/// agents reconnect to another replica), in-flight calls finish, and presence entries are
/// removed. The background tasks run in one [`TaskGroup`]: if one stops while the replica
/// serves (the agent secrets watch, the takeover listener, ...), `health` turns not ready with
/// a note naming it, the replica shuts down as on a signal and returns [`ServerError::Task`].
pub async fn serve(
    config: ServerConfig,
    listener: TcpListener,
    health: Health,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    health.set_ready(false);
    // Every task of this replica stops on this group's token (a child of `shutdown`).
    let tasks = TaskGroup::<ServerError>::new(health.clone(), &shutdown);
    let shutdown = tasks.token().clone();
    let (events_tx, mut events_rx) = tokio::sync::mpsc::channel::<async_nats::Event>(16);
    let name = format!("tink-server {}", config.replica_id);
    let connection = {
        let events_tx = events_tx.clone();
        ServiceConnection::new(&config.nats_url, &config.nats_auth, name.clone()).on_event(
            move |event| {
                // Full: an older event is still queued, the watcher re-checks the state anyway.
                let _ = events_tx.try_send(event);
            },
        )
    };

    // The controller creates the streams and buckets; this replica only finds them (its NATS
    // user may not create one) and waits, not ready, until they exist.
    let mut attempts = 0u32;
    let Some((client, bus)) = connection
        .connect_and_wait_for_streams(
            &config.bus,
            StreamSetup::Verify,
            SETUP_RETRY,
            shutdown.cancelled(),
            |e, attempt| {
                if attempt.is_multiple_of(SETUP_LOG_EVERY) {
                    warn!(error = %e, attempts = attempt, "waiting for the JetStream streams and buckets (tink-controller creates them); not ready, retrying every {SETUP_RETRY:?}");
                }
                attempts = attempt.saturating_add(1);
                std::future::ready(())
            },
        )
        .await
        .map_err(ServerError::Nats)?
    else {
        return Ok(());
    };
    if attempts > 0 {
        info!(attempts, "the JetStream streams and buckets exist");
    }

    if config.allow_unauthenticated_agents {
        warn!("{UNAUTHENTICATED_AGENTS_NOTE}");
        health.add_note(UNAUTHENTICATED_AGENTS_NOTE);
    }
    if config.admit_unknown_agents {
        warn!("--admit-unknown-agents is on: agent ids that no Hardware names may connect");
        health
            .add_note("--admit-unknown-agents is on: agent ids that no Hardware names may connect");
    }
    let shared = Arc::new(session::Shared::new(
        bus,
        client.clone(),
        config.replica_id.clone(),
        metrics,
        shutdown.clone(),
        session::Limits::of(&config),
    ));

    {
        let (secrets, bucket) = (shared.secrets.clone(), shared.bus.agent_secrets.clone());
        let shutdown = shutdown.clone();
        tasks.spawn_critical("agent secrets watch", async move {
            secrets.mirror.watch(bucket, shutdown).await;
            Ok(())
        });
    }
    {
        let (admitted, bucket) = (shared.admitted.clone(), shared.bus.admitted_agents.clone());
        let shutdown = shutdown.clone();
        tasks.spawn_critical("admitted agents watch", async move {
            admitted.watch(bucket, shutdown).await;
            Ok(())
        });
    }
    {
        let (shared, shutdown) = (shared.clone(), shutdown.clone());
        tasks.spawn_critical("replica heartbeat", async move {
            replica::heartbeat(shared, shutdown).await;
            Ok(())
        });
    }
    {
        let (shared, shutdown) = (shared.clone(), shutdown.clone());
        tasks.spawn_critical("presence watch", async move {
            replica::watch_presence(shared, shutdown).await;
            Ok(())
        });
    }
    {
        let shared = shared.clone();
        tasks.spawn_periodic("idle limits sweep", Duration::from_secs(60), move || {
            shared.forget_idle_limits();
            std::future::ready(Ok::<(), std::convert::Infallible>(()))
        });
    }

    let (reporter, health_service) = tonic_health::server::health_reporter();
    let set_serving = {
        let reporter = reporter.clone();
        let health = health.clone();
        move |ready: bool| {
            let reporter = reporter.clone();
            health.set_ready(ready);
            async move {
                type Svc = WorkflowServiceServer<service::Gateway>;
                if ready {
                    reporter.set_serving::<Svc>().await;
                } else {
                    reporter.set_not_serving::<Svc>().await;
                }
            }
        }
    };
    // Ready once the agent secrets and the admitted agents are loaded (an empty bucket loads
    // at once) and a first heartbeat is stored (the agents' entries are alive from the start).
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = async {
            shared.beat.wait_stored().await;
            shared.secrets.mirror.wait_loaded().await;
            if !config.admit_unknown_agents {
                shared.admitted.wait_loaded().await;
            }
        } => {}
    }
    set_serving(true).await;

    // Readiness follows the NATS connection; after a reconnect the streams are verified again.
    {
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        let set_serving = set_serving.clone();
        tasks.spawn_critical("NATS connection watcher", async move {
            loop {
                let event = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    event = events_rx.recv() => event,
                };
                match event {
                    Some(async_nats::Event::Disconnected) => {
                        warn!("NATS disconnected; not ready");
                        set_serving(false).await;
                    }
                    Some(async_nats::Event::Connected) => {
                        // Not ready until the streams exist again (a NATS server that lost its
                        // store gets them back from the controller).
                        let found = tink_bus::wait_for_streams(
                            &shared.bus.jetstream,
                            &shared.bus.config,
                            StreamSetup::Verify,
                            SETUP_RETRY,
                            shutdown.cancelled(),
                            |e, attempts| {
                                // Not ready meanwhile (NATS may even have gone again while
                                // the Disconnected event waits behind this loop).
                                let not_serving = (attempts == 0).then(|| set_serving(false));
                                if attempts.is_multiple_of(SETUP_LOG_EVERY) {
                                    warn!(error = %e, attempts, "NATS connected but the streams are not there; not ready, waiting for tink-controller to create them");
                                }
                                async move {
                                    if let Some(not_serving) = not_serving {
                                        not_serving.await;
                                    }
                                }
                            },
                        )
                        .await;
                        // Found while the replica stops: it stays not ready.
                        if found.is_none() || shutdown.is_cancelled() {
                            return Ok(());
                        }
                        info!("NATS connected; ready");
                        // Announcements may have been lost meanwhile.
                        shared.reconnects.send_modify(|n| *n += 1);
                        set_serving(true).await;
                    }
                    Some(async_nats::Event::SlowConsumer(sid)) => {
                        // A subscription's buffer overflowed and the client dropped messages:
                        // announcements among them would leave commands waiting for the
                        // backstop. Every session reads its queue through.
                        warn!(sid, "a NATS subscription dropped messages (slow consumer); every session reads its command queue again");
                        shared.metrics.error("slow_consumer");
                        shared.commands_recheck.send_modify(|n| *n += 1);
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            Ok(())
        });
    }

    // One subscription per replica for "a newer stream for agent X opened elsewhere".
    {
        let shared = shared.clone();
        let takeovers = per_agent_notices(
            &client,
            tink_bus::TAKEOVER_ALL,
            tink_bus::TAKEOVER_PREFIX,
            shutdown.clone(),
        )
        .await?;
        tasks.spawn_critical(
            "takeover listener",
            takeovers.for_each(move |(token, message)| {
                match session::parse_takeover(&message.payload) {
                    Some((session_id, server)) => shared.on_takeover(&token, session_id, server),
                    None => {
                        warn!(subject = %message.subject, "ignoring a malformed takeover notice")
                    }
                }
                std::future::ready(())
            })
            .map(Ok),
        );
    }

    // One subscription per replica for the controller's inventory requests (core NATS, at most
    // once: the controller sends a request again until it is answered).
    {
        let shared = shared.clone();
        let requests = per_agent_notices(
            &client,
            tink_bus::INVENTORY_REQUEST_ALL,
            tink_bus::INVENTORY_REQUEST_PREFIX,
            shutdown.clone(),
        )
        .await?;
        tasks.spawn_critical(
            "inventory request listener",
            requests
                .for_each(move |(token, message)| {
                    let id = std::str::from_utf8(&message.payload).unwrap_or_default();
                    if id.is_empty() || tink_bus::check_inventory_request_id(id).is_err() {
                        warn!(subject = %message.subject, "ignoring a malformed inventory request");
                    } else {
                        shared.on_inventory_request(&token, id);
                    }
                    std::future::ready(())
                })
                .map(Ok),
        );
    }

    // One subscription per replica for the commands published to all agents: each wakes its
    // agent's session here, which reads the queue (core NATS; a lost one is covered by the
    // reads after a reconnect, a heartbeat regained and the periodic recheck).
    {
        let shared = shared.clone();
        let announced = per_agent_notices(
            &client,
            tink_bus::DISPATCH_ALL,
            tink_bus::DISPATCH_PREFIX,
            shutdown.clone(),
        )
        .await?;
        tasks.spawn_critical(
            "command announcement listener",
            announced
                .for_each(move |(token, _)| {
                    shared.on_command_announced(&token);
                    std::future::ready(())
                })
                .map(Ok),
        );
    }

    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_timeout));
    if let Some(tls) = &config.tls {
        let mut tls_config =
            ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
        if let Some(ca) = &tls.client_ca_pem {
            tls_config = tls_config.client_ca_root(Certificate::from_pem(ca));
        }
        builder = builder.tls_config(tls_config).map_err(ServerError::Tls)?;
    }
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, replica = %config.replica_id, tls = config.tls.is_some(), "serving WorkflowService");
    }
    // Action output on a connection of its own: a large log batch never sits in front of an
    // event in the same socket (here or in nats-server's reader of this client).
    let logs_store = {
        let name = format!("{name} logs");
        let client = ServiceConnection::new(&config.nats_url, &config.nats_auth, name)
            .connect()
            .await
            .map_err(ServerError::Nats)?;
        logs::LogStore::new(client, config.logs_max_in_flight)
    };
    let gateway = service::Gateway {
        shared: shared.clone(),
        logs: Arc::new(logs::Logs::new(logs_store)),
    };
    let log_reader = read_logs::LogReader {
        jetstream: shared.bus.jetstream.clone(),
        access: config.kube.clone().map(|KubeClient(client)| {
            Arc::new(log_access::LogAccess::new(client, config.log_access_cache))
        }),
        metrics: shared.metrics.clone(),
        shutdown: shutdown.clone(),
        readers: Arc::new(tokio::sync::Semaphore::new(config.log_readers_max)),
        reauthorize: config.log_reauthorize,
    };
    let result = builder
        .add_service(health_service)
        .add_service(WorkflowServiceServer::new(gateway))
        .add_service(LogServiceServer::new(log_reader))
        .serve_with_incoming_shutdown(
            // TCP_NODELAY on every accepted agent connection: the builder's `tcp_nodelay` does
            // not apply to an incoming stream, and without it Nagle's algorithm held each small
            // command and PublishEvent answer back for the peer's delayed ACK (~40 ms; it was
            // most of the controller's 80 ms dispatch p99).
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.clone().cancelled_owned(),
        )
        .await;

    // Streams have ended; finish their cleanup (presence removal) before leaving.
    set_serving(false).await;
    shared.cleanup.close();
    if tokio::time::timeout(CLEANUP_GRACE, shared.cleanup.wait())
        .await
        .is_err()
    {
        warn!(
            "presence cleanup did not finish in time; the entries left count offline once this replica's heartbeat expires, and the controller deletes them"
        );
    }
    let stopped = tasks.stop(TASKS_DRAIN).await;
    // After the heartbeat task stopped: nothing writes it again.
    replica::delete_heartbeat(&shared).await;
    if let Err(e) = client.flush().await {
        warn!(error = %e, "cannot flush NATS on shutdown");
    }
    // A dead background task is why the server stopped: it is the error to report.
    stopped.map_err(|failure| failure.into_error(ServerError::Task))?;
    result.map_err(ServerError::Serve)
}

/// The core-NATS notices on `all` (`<prefix>.<agent token>`), each with its agent token, until
/// `shutdown` (one subscription per replica; messages on other subjects are skipped).
async fn per_agent_notices(
    client: &async_nats::Client,
    all: &'static str,
    prefix: &'static str,
    shutdown: CancellationToken,
) -> Result<impl futures::Stream<Item = (String, async_nats::Message)> + Send + 'static, ServerError>
{
    let subscriber = client
        .subscribe(all)
        .await
        .map_err(ServerError::Subscribe)?;
    Ok(subscriber
        .take_until(shutdown.cancelled_owned())
        .filter_map(move |message| {
            let token = message
                .subject
                .as_str()
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('.'))
                .map(str::to_string);
            std::future::ready(token.map(|t| (t, message)))
        }))
}
