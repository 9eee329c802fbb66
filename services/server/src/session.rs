//! One agent's `GetWorkflows` stream: presence, command delivery from the agent's queue in the
//! dispatch stream, and the "newest stream wins" rule.
//!
//! Presence: the session writes the agent's entry once, when the stream opens, and deletes it
//! (only its own revision) when the stream ends; nothing is written while the agent is idle.
//! The entry stays alive through the replica's own heartbeat ([`crate::replica`]). The session
//! still learns of everything that ends it:
//! - a newer stream for the agent on another replica: its takeover notice (core NATS, at once)
//!   or, if the notice was missed, the replica's watch of the presence bucket, which sees the
//!   newer entry ([`Shared::on_presence_change`]);
//! - the entry deleted by someone else (`tinkctl agent reset`, the reset annotation, the
//!   controller's deletion of entries it counted dead): the same watch ends the stream, so the
//!   agent reconnects and its new stream writes a new entry;
//! - changes missed while the watch was down (NATS reconnect, a NATS restart that lost the
//!   memory-stored bucket): every session reads its entry again when the watch is back
//!   ([`Shared::presence_resync`]): a newer session's entry ends it, a lost entry is written
//!   again;
//! - this replica unable to store its heartbeat for the presence TTL: the replica ends every
//!   stream with `Unavailable` ([`Shared::end_all_nats_lost`]).
//!
//! Delivery: an agent's commands wait on its subject of the dispatch stream, and no JetStream
//! consumer exists for them (an idle agent costs NATS nothing: a consumer per agent cost about
//! 68 KiB in nats-server and made creating one O(agents), BENCHMARKS.md). The session reads
//! the oldest command itself ([`tink_bus::next_command`], from the stream's leader) and forwards
//! one at a time: a command is deleted only once the agent's receipt is stored: its
//! `WorkflowReceived` event (or, from an agent that sends none, its first event about the
//! workflow; for a stop, its `WorkflowCanceled`), watched on the dispatch's events subject,
//! subscribed before the command is forwarded. Then the next one is read. Nothing is handed
//! back: if no receipt comes within [`tink_bus::BusConfig::receipt_timeout`] (a silently dead
//! connection), or the stream ends first, or the replica dies, the command simply stays, and
//! the agent's next stream, on any replica, reads it again. A start whose dispatch an agent
//! already received (an event of it is stored) is deleted without forwarding it again: a
//! restarted agent must never run it twice. A start is forwarded only after its target is
//! recorded and a second read finds it still queued, so the controller's withdrawal (delete,
//! then look for a target) knows whether it may have gone out ([`tink_bus::withdraw_command`]).
//!
//! When to read: when the stream opens; when a command is announced (each replica subscribes
//! once to the dispatch subjects, core NATS, and wakes the agent's session, whatever the
//! payload; NATS may hand the publish to subscribers before the stream stored it, so an empty
//! read after an announcement is made again a few times within a second); after a receipt; after a NATS reconnect, the presence watch's return or the
//! replica's heartbeat stored again after failures (announcements may have been lost
//! meanwhile); and every [`tink_bus::BusConfig::dispatch_recheck`] (jittered) as a backstop for
//! an announcement lost without any of these (a route down between two NATS nodes).
//!
//! Cost per agent is kept small (the server holds thousands of idle streams): the work runs
//! inside the response stream itself (no task per agent), and the rare paths are boxed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::{Stream, StreamExt as _};
use tink_api::AgentId;
use tink_bus::proto::{GetWorkflowsResponse, get_workflows_response};
use tink_bus::{Bus, Presence};
use tink_runtime::jittered;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;
use tracing::{Instrument as _, debug, info, warn};

use crate::auth::{Auth, StreamGrant};
use crate::metrics::Metrics;

/// The response stream type of `GetWorkflows`.
pub type CommandStream = Pin<Box<dyn Stream<Item = Result<GetWorkflowsResponse, Status>> + Send>>;

/// Pause before reading the queue again after a failed read (doubled on each failure).
const RETRY: Duration = Duration::from_secs(1);
/// The longest pause between failed reads (NATS unreachable for long).
const RETRY_MAX: Duration = Duration::from_secs(30);
/// An announcement can arrive before the stream has stored its command (NATS hands the publish
/// to subscribers and to the stream at once): while an announcement has found no command, an
/// empty read is made again this many times, after 5, 10, 20, ... 320 ms (the store usually
/// lags by well under a millisecond; a 50 ms first pause was most of the dispatch p99 under
/// load).
const ANNOUNCED_REREADS: u8 = 7;
const ANNOUNCED_REREAD: Duration = Duration::from_millis(5);

/// State shared by all sessions of a replica.
#[derive(Debug)]
pub(crate) struct Shared {
    pub bus: Bus,
    pub client: async_nats::Client,
    pub replica_id: String,
    pub metrics: Metrics,
    pub shutdown: CancellationToken,
    /// Cleanup work (presence removal, naks) spawned when sessions end; awaited at shutdown.
    pub cleanup: TaskTracker,
    /// Bumped on every NATS reconnect: announcements may have been lost, read the queues.
    pub reconnects: watch::Sender<u64>,
    /// Bumped when the replica's heartbeat is stored again after failures (NATS was out of
    /// reach without a reconnect, e.g. a partition between NATS nodes): read the queues.
    pub commands_recheck: watch::Sender<u64>,
    /// The open session of each agent token on this replica.
    sessions: Mutex<HashMap<String, Arc<Control>>>,
    /// Admit agents without a certificate or token (compatibility).
    pub allow_unauthenticated: bool,
    /// Limits on who may connect and how often.
    pub(crate) limits: Limits,
    /// The admitted agent ids (a mirror of the bucket).
    pub admitted: Arc<crate::mirror::KvMirror>,
    /// Stream opens per peer address.
    pub(crate) stream_opens: Option<governor::DefaultKeyedRateLimiter<std::net::IpAddr>>,
    /// Event and log calls per agent.
    pub(crate) agent_calls: Option<governor::DefaultKeyedRateLimiter<String>>,
    /// Enrollments (inventories of unknown machines) taken per second by this replica.
    pub(crate) enrollments: Option<governor::DefaultDirectRateLimiter>,
    /// Session token hashes of other replicas' sessions, read from presence.
    pub(crate) token_cache: crate::auth::TokenCache,
    /// Per-machine pre-shared secrets (a mirror of the bucket).
    pub secrets: Arc<crate::secrets::AgentSecrets>,
    /// Where each dispatch went.
    pub(crate) targets: crate::targets::DispatchTargets,
    /// This replica's current instance: a random id in its heartbeat and its presence entries,
    /// replaced when the replica comes back from a NATS loss (see [`crate::replica`]).
    replica_instance: Mutex<String>,
    /// This replica's heartbeat state.
    pub(crate) beat: crate::replica::BeatState,
    /// Bumped each time the presence watch is (re)established: sessions read their entries
    /// again (changes may have been missed meanwhile).
    pub presence_resync: watch::Sender<u64>,
}

/// Why the replica ended a session from outside.
#[derive(Debug)]
enum Ending {
    /// A newer stream for the agent (the reason names where).
    Superseded(String),
    /// This replica could not store its heartbeat for the presence TTL.
    NatsLost(String),
    /// The agent's presence entry was deleted by someone else (a reset).
    Removed,
}

/// How the replica reaches a session: supersede it, hand it pulled messages.
#[derive(Debug)]
struct Control {
    session_id: String,
    /// The hex SHA-256 of the session's token (empty for a certificate session).
    token_sha256: String,
    /// Cancelled when the replica ends the session ([`Control::ending`] says why).
    superseded: CancellationToken,
    ending: OnceLock<Ending>,
    /// The revision of the session's presence entry in the bucket (0 until it is stored).
    revision: std::sync::atomic::AtomicU64,
    /// Woken when a command for the agent is announced.
    announced: Notify,
    /// Announcements received for the agent, ever: the session compares it with those its
    /// reads have accounted for, to know whether a read after a delete can find anything.
    announcements: std::sync::atomic::AtomicU64,
    /// The latest inventory request for the agent, not yet forwarded (a newer one replaces it).
    inventory_request: watch::Sender<Option<String>>,
}

impl Control {
    fn supersede(&self, reason: String) {
        self.end(Ending::Superseded(reason));
    }

    fn end(&self, ending: Ending) {
        let _ = self.ending.set(ending);
        self.superseded.cancel();
    }

    fn revision(&self) -> u64 {
        self.revision.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Who may connect and how often (from [`crate::ServerConfig`]).
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub allow_unauthenticated: bool,
    pub admit_unknown: bool,
    pub max_sessions: usize,
    pub stream_opens_per_peer: u32,
    pub agent_calls_per_second: u32,
    /// Take inventories of unknown machines without credentials (enrollment).
    pub enrollment: bool,
    pub enrollments_per_second: u32,
}

impl Limits {
    pub(crate) fn of(config: &crate::ServerConfig) -> Self {
        Limits {
            allow_unauthenticated: config.allow_unauthenticated_agents,
            admit_unknown: config.admit_unknown_agents,
            max_sessions: config.max_sessions.max(1),
            stream_opens_per_peer: config.stream_opens_per_peer,
            agent_calls_per_second: config.agent_calls_per_second,
            enrollment: config.enrollment,
            enrollments_per_second: config.enrollments_per_second,
        }
    }
}

/// A keyed limiter of `per_second` with bursts of ten times that; `None` for 0 (no limit).
fn limiter<K: std::hash::Hash + Eq + Clone>(
    per_second: u32,
) -> Option<governor::DefaultKeyedRateLimiter<K>> {
    let rate = std::num::NonZeroU32::new(per_second)?;
    let burst = std::num::NonZeroU32::new(per_second.saturating_mul(10)).unwrap_or(rate);
    Some(governor::RateLimiter::keyed(
        governor::Quota::per_second(rate).allow_burst(burst),
    ))
}

impl Shared {
    pub(crate) fn new(
        bus: Bus,
        client: async_nats::Client,
        replica_id: String,
        metrics: Metrics,
        shutdown: CancellationToken,
        limits: Limits,
    ) -> Self {
        let allow_unauthenticated = limits.allow_unauthenticated;
        let replica_instance = Mutex::new(uuid::Uuid::new_v4().simple().to_string());
        let targets = crate::targets::DispatchTargets::new(bus.dispatch_targets.clone());
        Shared {
            targets,
            bus,
            client,
            replica_id,
            metrics,
            shutdown,
            cleanup: TaskTracker::new(),
            reconnects: watch::Sender::new(0),
            commands_recheck: watch::Sender::new(0),
            sessions: Mutex::new(HashMap::new()),
            allow_unauthenticated,
            stream_opens: limiter(limits.stream_opens_per_peer),
            agent_calls: limiter(limits.agent_calls_per_second),
            enrollments: std::num::NonZeroU32::new(limits.enrollments_per_second).map(|rate| {
                let burst =
                    std::num::NonZeroU32::new(rate.get().saturating_mul(10)).unwrap_or(rate);
                governor::RateLimiter::direct(governor::Quota::per_second(rate).allow_burst(burst))
            }),
            limits,
            admitted: Arc::new(crate::mirror::KvMirror::new(
                tink_bus::ADMITTED_AGENTS_BUCKET,
            )),
            token_cache: crate::auth::TokenCache::default(),
            secrets: Arc::new(crate::secrets::AgentSecrets::default()),
            replica_instance,
            beat: crate::replica::BeatState::default(),
            presence_resync: watch::Sender::new(0),
        }
    }

    /// The live presence entry of an agent, if any: an entry whose replica process beats.
    ///
    /// No wall clock of another host is compared with ours. This replica judges its own entries
    /// by when its last heartbeat was stored (monotonic); another replica's by whether its
    /// heartbeat is in the replicas bucket at all, with the entry's process: NATS expires a
    /// heartbeat after the TTL on its own clock. Only an entry of a server from before
    /// per-replica heartbeats (no `replicaInstance`) counts by its own refreshed timestamp.
    pub(crate) async fn live_presence(&self, token: &str) -> Result<Option<Presence>, Status> {
        let entry = self.bus.presence.entry(token).await.map_err(|e| {
            self.metrics.error("presence");
            Status::unavailable(format!("cannot read the agent's presence: {e}"))
        })?;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let Ok(presence) = Presence::from_bytes(&entry.value) else {
            return Ok(None);
        };
        let ttl = self.bus.config.presence_ttl;
        let alive = if presence.replica_instance.is_empty() {
            tink_bus::fresh(presence.heartbeat, jiff::Timestamp::now(), ttl)
        } else if presence.server == self.replica_id {
            presence.replica_instance == self.replica_instance() && !self.beat.stored_over(ttl)
        } else {
            let key = tink_bus::replica_key(&presence.server);
            let beat = self.bus.replicas.entry(&key).await.map_err(|e| {
                self.metrics.error("presence");
                Status::unavailable(format!("cannot read the replica heartbeats: {e}"))
            })?;
            beat.filter(|e| e.operation == kv::Operation::Put)
                .and_then(|e| tink_bus::ReplicaHeartbeat::from_bytes(&e.value).ok())
                .is_some_and(|b| {
                    b.replica == presence.server && b.instance == presence.replica_instance
                })
        };
        Ok(alive.then_some(presence))
    }

    /// This replica's current instance id.
    pub(crate) fn replica_instance(&self) -> String {
        self.replica_instance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the instance id: the entries written under the previous one (of streams that
    /// ended while NATS was unreachable, which could not be deleted) stay dead even though
    /// this replica beats again, and the controller deletes them.
    pub(crate) fn new_replica_instance(&self) -> String {
        let instance = uuid::Uuid::new_v4().simple().to_string();
        *self
            .replica_instance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = instance.clone();
        instance
    }

    /// A change of the presence bucket seen by the replica's watch: a newer entry of another
    /// session for an agent whose stream is here ends that stream (its takeover notice was
    /// missed); a deletion of the entry ends it too (a reset). Changes older than the session's
    /// own entry (its own write, a deletion of a previous session's entry) change nothing.
    pub(crate) fn on_presence_change(&self, entry: &kv::Entry) {
        let sessions = self.sessions();
        let Some(control) = sessions.get(&entry.key) else {
            return;
        };
        let mine = control.revision();
        if mine == 0 || entry.revision <= mine {
            return;
        }
        match entry.operation {
            kv::Operation::Put => match Presence::from_bytes(&entry.value) {
                Ok(other) if other.session != control.session_id => {
                    control.supersede(format!(
                        "a newer GetWorkflows stream for this agent is held by server replica {}",
                        other.server
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    debug!(key = %entry.key, error = %e, "ignoring a malformed presence entry");
                }
            },
            kv::Operation::Delete | kv::Operation::Purge => control.end(Ending::Removed),
        }
    }

    /// This replica could not store its heartbeat for the presence TTL: readers count its
    /// agents offline, so every stream ends with `Unavailable` and the agents reconnect to a
    /// replica that reaches NATS.
    pub(crate) fn end_all_nats_lost(&self) {
        let ttl = self.bus.config.presence_ttl;
        let message = format!(
            "server replica {} has not reached NATS for {} s; reconnect to another replica",
            self.replica_id,
            ttl.as_secs()
        );
        for control in self.sessions().values() {
            control.end(Ending::NatsLost(message.clone()));
        }
    }

    /// Drops the rate limiters' state of keys that have been quiet long enough to be full again.
    pub(crate) fn forget_idle_limits(&self) {
        if let Some(l) = &self.stream_opens {
            l.retain_recent();
            l.shrink_to_fit();
        }
        if let Some(l) = &self.agent_calls {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }

    /// The number of agent streams this replica holds.
    pub(crate) fn session_count(&self) -> usize {
        self.sessions().len()
    }

    /// The session token hash of this replica's session of an agent (by bus token).
    pub(crate) fn local_token_hash(&self, token: &str) -> Option<String> {
        self.sessions().get(token).map(|c| c.token_sha256.clone())
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Control>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A takeover notice from any replica: supersede the local session of that agent unless it
    /// is the session the notice announces.
    pub(crate) fn on_takeover(&self, token: &str, session_id: &str, server: &str) {
        let sessions = self.sessions();
        if let Some(control) = sessions.get(token)
            && control.session_id != session_id
        {
            control.supersede(format!(
                "a newer GetWorkflows stream for this agent opened on server replica {server}"
            ));
        }
    }

    /// An inventory request from the controller for the agent with `token`: handed to its
    /// session when it is on this replica (the stream forwards it), ignored otherwise (the
    /// replica holding the agent's stream got the same message).
    pub(crate) fn on_inventory_request(&self, token: &str, id: &str) {
        if let Some(control) = self.sessions().get(token) {
            control.inventory_request.send_replace(Some(id.to_string()));
        }
    }

    /// A command announced for the agent with `token` (a publish on its dispatch subject):
    /// wakes its session when it is on this replica, which reads the queue (the payload is not
    /// trusted: only what the stream holds is forwarded).
    pub(crate) fn on_command_announced(&self, token: &str) {
        if let Some(control) = self.sessions().get(token) {
            control
                .announcements
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            control.announced.notify_one();
        }
    }
}

/// Payload of a takeover notice: `<session id> <server replica>`.
pub(crate) fn parse_takeover(payload: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    text.split_once(' ')
}

/// Opens a session for `agent_id`; errors are gRPC statuses for the agent.
pub(crate) async fn open(
    shared: Arc<Shared>,
    agent: AgentId,
    instance: String,
    auth: Auth,
) -> Result<(CommandStream, Option<String>), Status> {
    let agent_id = agent.as_str().to_string();
    let token = tink_bus::agent_token(&agent_id).map_err(|e| {
        shared.metrics.error("invalid_agent_id");
        Status::invalid_argument(format!("agent_id: {e}"))
    })?;
    let takeover = tink_bus::takeover_subject(&agent_id)
        .map_err(|e| Status::invalid_argument(format!("agent_id: {e}")))?;
    if shared.shutdown.is_cancelled() {
        return Err(Status::unavailable(
            "server shutting down; connect to another replica",
        ));
    }
    // A replica that gave up its streams for lack of NATS takes new ones once it can store its
    // heartbeat again (tried here too, not only every period).
    if shared.beat.is_lost() && shared.store_heartbeat().await.is_err() {
        shared.metrics.error("nats_lost");
        return Err(Status::unavailable(format!(
            "server replica {} cannot store its heartbeat in NATS; connect to another replica",
            shared.replica_id
        )));
    }
    if shared.session_count() >= shared.limits.max_sessions {
        shared.metrics.error("sessions_full");
        return Err(Status::resource_exhausted(format!(
            "this server replica holds its most agent streams ({}); connect to another replica",
            shared.limits.max_sessions
        )));
    }
    let live = shared.live_presence(&token).await?;
    let StreamGrant {
        token_sha256,
        issued,
        exchange,
    } = shared.authorize_stream(&agent, &token, &auth, live.as_ref())?;
    // The boot secret is single-use: its exchange is recorded before the session exists.
    if let Some(exchange) = exchange {
        crate::secrets::AgentSecrets::exchange(
            &shared.bus.agent_secrets_used,
            &token,
            &agent_id,
            &exchange,
        )
        .await
        .inspect_err(|s| {
            if s.code() == tonic::Code::PermissionDenied {
                shared.metrics.error("agent_secret_reused");
                warn!(agent_id = %agent_id, "refusing a new session with an already exchanged boot secret");
            } else {
                shared.metrics.error("agent_secret_exchange");
            }
        })?;
        info!(agent_id = %agent_id, "boot secret exchanged for a session");
    }
    let session_id = uuid::Uuid::new_v4().simple().to_string();
    let control = Arc::new(Control {
        session_id: session_id.clone(),
        token_sha256: token_sha256.clone(),
        superseded: CancellationToken::new(),
        ending: OnceLock::new(),
        revision: std::sync::atomic::AtomicU64::new(0),
        announced: Notify::new(),
        announcements: std::sync::atomic::AtomicU64::new(0),
        inventory_request: watch::Sender::new(None),
    });
    if let Some(previous) = shared.sessions().insert(token.clone(), control.clone()) {
        previous.supersede(format!(
            "a newer GetWorkflows stream for this agent opened on this server replica ({})",
            shared.replica_id
        ));
    }
    // From here on the session owns the registry entry and the gauge; Drop releases both.
    shared.metrics.connected_agents.inc();
    let now = jiff::Timestamp::now();
    let inventory_requests = (!instance.is_empty()).then(|| control.inventory_request.subscribe());
    let mut session = Session {
        presence: Presence {
            agent_id: agent_id.clone(),
            server: shared.replica_id.clone(),
            session: session_id.clone(),
            connected_since: now,
            heartbeat: now,
            replica_instance: shared.replica_instance(),
            instance,
            token_sha256,
            certificate: auth.certificate.is_some(),
        },
        inventory_requests,
        reconnects: shared.reconnects.subscribe(),
        recheck: shared.commands_recheck.subscribe(),
        resync: shared.presence_resync.subscribe(),
        shared: shared.clone(),
        agent_id,
        authenticated: auth.presented_credentials(),
        token,
        control,
        revision: None,
        read: Read::Needed,
        from: 1,
        failures: 0,
        rereads: ANNOUNCED_REREADS,
        accounted: 0,
        drain: true,
        in_flight: None,
        finished: false,
    };

    let notice = format!("{session_id} {}", shared.replica_id);
    if let Err(e) = shared.client.publish(takeover, notice.into()).await {
        warn!(agent_id = %session.agent_id, error = %e, "cannot announce the new stream to other replicas");
    }
    session.put_presence().await.map_err(|e| {
        shared.metrics.error("presence");
        Status::unavailable(format!("cannot record the agent's presence: {e}"))
    })?;
    info!(agent_id = %session.agent_id, session = %session_id, "agent stream opened");

    // No span around the whole stream: it would live as long as the agent stays connected (days),
    // cost every idle agent its registry entry, and reach a trace exporter only at the end. The
    // session's log lines name the agent themselves; a forwarded command has its own span.
    let stream = Box::pin(futures::stream::unfold(session, |mut session| async move {
        let item = session.next_item().await?;
        Some((item, session))
    }));
    Ok((stream, issued))
}

/// How long a session sleeps when no timer of its own is due (it wakes on messages anyway).
const IDLE_WAKE: Duration = Duration::from_secs(3600);

/// When this session reads the agent's queue next.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// Now (when no command is in flight).
    Needed,
    /// The queue was empty: on an announcement, or at this time (the backstop).
    Idle { recheck_at: Instant },
    /// A read failed: at this time.
    RetryAt(Instant),
}

struct Session {
    shared: Arc<Shared>,
    agent_id: String,
    /// Whether the stream presented a certificate or a session token (recorded with each
    /// dispatch forwarded to it).
    authenticated: bool,
    token: String,
    control: Arc<Control>,
    reconnects: watch::Receiver<u64>,
    /// [`Shared::commands_recheck`]: read the queue again.
    recheck: watch::Receiver<u64>,
    /// [`Shared::presence_resync`]: read the entry again.
    resync: watch::Receiver<u64>,
    presence: Presence,
    revision: Option<u64>,
    read: Read,
    /// The stream sequence the next read starts from (past the last command deleted here).
    from: u64,
    /// Failed reads in a row.
    failures: u32,
    /// Reads still to make while an announcement has found no command and the queue looks
    /// empty.
    rereads: u8,
    /// How many of [`Control::announcements`] the reads have accounted for: one per command
    /// read, all of them once a read finds the queue empty.
    accounted: u64,
    /// Read again after each command until the queue is empty, announced or not: set when the
    /// session starts and when announcements may have been lost (a reconnect, a presence
    /// resync, a recheck, the backstop).
    drain: bool,
    /// The command forwarded and waiting for the agent's receipt.
    in_flight: Option<InFlight>,
    /// Inventory requests for the agent; `None` for an agent without an instance id (built
    /// from the Appendix: it would not know the command).
    inventory_requests: Option<watch::Receiver<Option<String>>>,
    finished: bool,
}

/// A forwarded command waiting for its receipt.
struct InFlight {
    /// Its sequence in the dispatch stream (deleted once the receipt is stored).
    sequence: u64,
    /// The dispatch it is about.
    dispatch_id: String,
    /// Whether it is a `StopWorkflow`.
    stop: bool,
    /// The dispatch's events subject, subscribed before forwarding.
    receipts: async_nats::Subscriber,
    /// When the command is handed back without a receipt.
    deadline: Instant,
}

impl InFlight {
    /// Whether a stored event is this command's receipt: about its dispatch, from `agent` (the
    /// agent it was forwarded to; another agent's event about it is no receipt).
    fn is_receipt(&self, event: &tink_bus::proto::Event, agent: &str) -> bool {
        use tink_bus::proto::event::Event as E;
        use tink_bus::proto::event::workflow_received::Command;
        if event.workflow_id != self.dispatch_id || event.agent_id != agent {
            return false;
        }
        match (&event.event, self.stop) {
            (Some(E::WorkflowReceived(r)), stop) => {
                r.command() == if stop { Command::Stop } else { Command::Start }
            }
            (Some(E::WorkflowCanceled(_)), true) => true,
            (Some(_), false) => true,
            _ => false,
        }
    }
}

enum Wake {
    Shutdown,
    Superseded,
    Reconnected,
    Resync,
    Timer,
    Announced,
    Receipt(Option<async_nats::Message>),
    InventoryRequest,
}

/// Waits for an inventory request; pending forever without a receiver (or once its sender is
/// gone, which happens only with the session).
async fn next_inventory_request(requests: &mut Option<watch::Receiver<Option<String>>>) {
    let Some(r) = requests else {
        return std::future::pending().await;
    };
    if r.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The next message on the in-flight command's receipt subscription; pending when none.
async fn next_receipt(in_flight: &mut Option<InFlight>) -> Option<async_nats::Message> {
    match in_flight {
        Some(f) => f.receipts.next().await,
        None => std::future::pending().await,
    }
}

impl Session {
    async fn next_item(&mut self) -> Option<Result<GetWorkflowsResponse, Status>> {
        if self.finished {
            return None;
        }
        loop {
            // The rare paths (queue reads, forwarding, presence reads) run boxed: inline, their
            // futures would make every idle session's state several KiB (BENCHMARKS.md, issue
            // 33).
            if self.in_flight.is_none() && matches!(self.read, Read::Needed) {
                if let Some(command) = Box::pin(self.read_queue()).await {
                    return Some(Ok(command));
                }
                continue;
            }
            let mut wake_at = match self.read {
                Read::Needed => Instant::now() + IDLE_WAKE,
                Read::Idle { recheck_at: at } | Read::RetryAt(at) => at,
            };
            if let Some(f) = &self.in_flight {
                wake_at = wake_at.min(f.deadline);
            }
            let in_flight = &mut self.in_flight;
            let wake = tokio::select! {
                biased;
                _ = self.shared.shutdown.cancelled() => Wake::Shutdown,
                _ = self.control.superseded.cancelled() => Wake::Superseded,
                receipt = next_receipt(in_flight) => Wake::Receipt(receipt),
                () = next_inventory_request(&mut self.inventory_requests) => Wake::InventoryRequest,
                () = self.control.announced.notified() => Wake::Announced,
                changed = self.reconnects.changed() => match changed {
                    Ok(()) => Wake::Reconnected,
                    // The replica is going away; shutdown follows.
                    Err(_) => Wake::Shutdown,
                },
                changed = self.recheck.changed() => match changed {
                    Ok(()) => Wake::Reconnected,
                    Err(_) => Wake::Shutdown,
                },
                changed = self.resync.changed() => match changed {
                    Ok(()) => Wake::Resync,
                    Err(_) => Wake::Shutdown,
                },
                _ = tokio::time::sleep_until(wake_at) => Wake::Timer,
            };
            match wake {
                Wake::Shutdown => {
                    return self.finish(Status::unavailable(
                        "server shutting down; reconnect to another replica",
                    ));
                }
                Wake::Superseded => return self.superseded(),
                Wake::Resync => {
                    if let Err(status) = Box::pin(self.verify_presence()).await {
                        return self.finish(status);
                    }
                    // Announcements may have been lost while the watch was down too.
                    self.drain_queue();
                }
                // Announcements may have been lost; a command in flight is read past once its
                // receipt comes (or read again by the agent's next stream).
                Wake::Reconnected => self.drain_queue(),
                Wake::Announced => self.read_again(),
                Wake::Receipt(Some(message)) => Box::pin(self.on_receipt(&message)).await,
                Wake::Receipt(None) => {
                    // The subscription ended with the NATS client: the deadline decides.
                    debug!(agent_id = %self.agent_id, "receipt subscription ended");
                }
                Wake::Timer => {
                    let now = Instant::now();
                    if let Some(f) = &self.in_flight
                        && now >= f.deadline
                    {
                        return Box::pin(self.unconfirmed()).await;
                    }
                    match self.read {
                        // The backstop: an announcement may have been lost.
                        Read::Idle { recheck_at: at } if now >= at => self.drain_queue(),
                        Read::RetryAt(at) if now >= at => self.read = Read::Needed,
                        _ => {}
                    }
                }
                Wake::InventoryRequest => {
                    let id = self
                        .inventory_requests
                        .as_mut()
                        .and_then(|r| r.borrow_and_update().clone());
                    if let Some(request_id) = id {
                        self.shared.metrics.inventory_requests.inc();
                        debug!(agent_id = %self.agent_id, request_id, "forwarding an inventory request");
                        return Some(Ok(GetWorkflowsResponse {
                            cmd: Some(get_workflows_response::Cmd::RequestInventory(
                                get_workflows_response::RequestInventory { request_id },
                            )),
                            trace_context: HashMap::new(),
                        }));
                    }
                }
            }
        }
    }

    /// Reads the queue at the next chance: now when idle; after the receipt when a command is
    /// in flight (its receipt leads to a read anyway); a failed read keeps its pause.
    fn read_again(&mut self) {
        if matches!(self.read, Read::Idle { .. }) {
            self.read = Read::Needed;
        }
    }

    /// Reads the queue at the next chance and on until it is empty, whatever was announced.
    fn drain_queue(&mut self) {
        self.drain = true;
        self.read_again();
    }

    /// After a command read is done with (deleted, withdrawn): read on only when draining or
    /// when an announcement came that no read has accounted for. Otherwise the queue is known
    /// empty, and the read that would say so is skipped (one JetStream request per command).
    fn after_command(&mut self) {
        let announced = self
            .control
            .announcements
            .load(std::sync::atomic::Ordering::Acquire);
        self.read = if self.drain || announced > self.accounted {
            Read::Needed
        } else {
            Read::Idle {
                recheck_at: Instant::now() + jittered(self.shared.bus.config.dispatch_recheck),
            }
        };
    }

    /// The status a stream ended from outside ends with.
    fn superseded(&mut self) -> Option<Result<GetWorkflowsResponse, Status>> {
        let status = match self.control.ending.get() {
            Some(Ending::NatsLost(message)) => {
                self.shared.metrics.streams_nats_lost.inc();
                warn!(agent_id = %self.agent_id, ttl = ?self.shared.bus.config.presence_ttl, "NATS unreachable for the presence TTL; ending the agent's stream so it reconnects to another replica");
                Status::unavailable(message.clone())
            }
            Some(Ending::Removed) => {
                self.shared.metrics.error("presence_removed");
                info!(agent_id = %self.agent_id, session = %self.presence.session, "the agent's presence entry was deleted (a reset); ending its stream");
                Status::unavailable(
                    "the agent's session was reset (its presence entry was deleted); reconnect",
                )
            }
            Some(Ending::Superseded(reason)) => {
                self.shared.metrics.streams_superseded.inc();
                info!(agent_id = %self.agent_id, %reason, "agent stream superseded");
                Status::aborted(format!("stream superseded: {reason}"))
            }
            None => {
                self.shared.metrics.streams_superseded.inc();
                Status::aborted("stream superseded: a newer stream for this agent opened")
            }
        };
        self.finish(status)
    }

    /// An event on the in-flight command's dispatch subject: when it is the receipt, delete the
    /// command and read the next one.
    async fn on_receipt(&mut self, message: &async_nats::Message) {
        let Some(f) = &self.in_flight else { return };
        let Ok(event) = tink_bus::decode_event(&message.payload) else {
            return;
        };
        if !f.is_receipt(&event, &self.agent_id) {
            return;
        }
        let Some(f) = self.in_flight.take() else {
            return;
        };
        self.shared.metrics.commands_forwarded.inc();
        debug!(agent_id = %self.agent_id, dispatch = %f.dispatch_id, stop = f.stop, "command receipt stored");
        self.done_with(f.sequence).await;
    }

    /// Deletes a command that needs no more delivery (its receipt is stored, or it is refused)
    /// and reads the next one. A failed deletion leaves it for a later stream, which finds it
    /// delivered (a start's events are stored) or forwards it again (a stop, which an agent
    /// answers again harmlessly).
    async fn done_with(&mut self, sequence: u64) {
        if let Err(e) = tink_bus::delete_command(&self.shared.bus.dispatch, sequence).await {
            self.shared.metrics.error("command_delete");
            warn!(agent_id = %self.agent_id, sequence, error = %e, "cannot delete a delivered command; a later stream of the agent meets it again (the agent refuses a dispatch it has)");
        }
        self.from = self.from.max(sequence + 1);
        self.after_command();
    }

    /// No receipt in time: end the stream, so the agent reconnects and gets the command again
    /// (it stays queued; a connection that died silently is the usual cause).
    async fn unconfirmed(&mut self) -> Option<Result<GetWorkflowsResponse, Status>> {
        if let Some(f) = self.in_flight.take() {
            self.shared.metrics.error("receipt_timeout");
            warn!(agent_id = %self.agent_id, dispatch = %f.dispatch_id, stop = f.stop, "the agent did not confirm a command in time; ending its stream, the command stays queued");
            return self.finish(Status::unavailable(format!(
                "the agent did not confirm command for {} within {:?}; reconnect to receive it again",
                f.dispatch_id, self.shared.bus.config.receipt_timeout
            )));
        }
        None
    }

    fn finish(&mut self, status: Status) -> Option<Result<GetWorkflowsResponse, Status>> {
        self.finished = true;
        Some(Err(status))
    }

    /// A read failed: try again after a pause that doubles up to [`RETRY_MAX`].
    fn retry_later(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let pause = RETRY
            .saturating_mul(1 << self.failures.min(6).saturating_sub(1))
            .min(RETRY_MAX);
        self.read = Read::RetryAt(Instant::now() + jittered(pause));
    }

    /// Reads the oldest queued command and returns it to forward; `None` when there is nothing
    /// to forward now (the queue is empty, the read failed, or the command needed no delivery:
    /// then `self.read` says when to read again).
    async fn read_queue(&mut self) -> Option<GetWorkflowsResponse> {
        // Before the read: an announcement counted here has its command stored or on its way.
        let seen = self
            .control
            .announcements
            .load(std::sync::atomic::Ordering::Acquire);
        let message = match tink_bus::next_command(
            &self.shared.bus.dispatch,
            &self.agent_id,
            self.from,
        )
        .await
        {
            Ok(message) => message,
            Err(e) => {
                self.shared.metrics.error("dispatch_read");
                warn!(agent_id = %self.agent_id, error = %e, "cannot read the agent's command queue; retrying");
                self.retry_later();
                return None;
            }
        };
        self.failures = 0;
        let Some(message) = message else {
            if seen > self.accounted && self.rereads > 0 {
                // Announced but not stored yet: look again shortly.
                let doubling = u32::from(ANNOUNCED_REREADS - self.rereads);
                self.rereads -= 1;
                self.read = Read::RetryAt(Instant::now() + ANNOUNCED_REREAD * (1 << doubling));
                return None;
            }
            self.accounted = seen;
            self.drain = false;
            self.rereads = ANNOUNCED_REREADS;
            self.read = Read::Idle {
                recheck_at: Instant::now() + jittered(self.shared.bus.config.dispatch_recheck),
            };
            return None;
        };
        // One announcement is this command's (a command read before its announcement arrived
        // leaves that one unaccounted: one more read finds nothing, harmlessly).
        self.accounted = (self.accounted + 1).min(seen);
        self.rereads = ANNOUNCED_REREADS;
        self.accept(message).await
    }

    /// Handles a command read from the queue: forwards it, or deletes it when it needs no
    /// delivery. A malformed command is deleted and counted; the stream goes on.
    async fn accept(
        &mut self,
        message: async_nats::jetstream::message::StreamMessage,
    ) -> Option<GetWorkflowsResponse> {
        let sequence = message.sequence;
        let parent = tink_telemetry::propagation::extract_nats(&message.headers);
        let span = tracing::info_span!("forward_command", agent_id = %self.agent_id, workflow_id = tracing::field::Empty);
        tink_telemetry::propagation::set_parent(&span, parent);
        async {
            let mut command = match tink_bus::decode_command(&message.payload) {
                Ok(command) => command,
                Err(e) => {
                    self.shared.metrics.error("malformed_command");
                    warn!(subject = %message.subject, error = %e, "refusing a malformed command; it is dropped");
                    self.done_with(sequence).await;
                    return None;
                }
            };
            if let Some(workflow_id) = tink_bus::command_workflow_id(&command) {
                tracing::Span::current().record("workflow_id", workflow_id);
            }
            for key in ["traceparent", "tracestate"] {
                if let Some(value) = message.headers.get(key) {
                    command
                        .trace_context
                        .insert(key.to_string(), value.as_str().to_string());
                }
            }
            let stop = matches!(
                command.cmd,
                Some(tink_bus::proto::get_workflows_response::Cmd::StopWorkflow(_))
            );
            let dispatch_id = tink_bus::command_workflow_id(&command)
                .unwrap_or_default()
                .to_string();
            let receipts = match tink_bus::events_subject(&dispatch_id) {
                Ok(subject) => self.shared.client.subscribe(subject).await,
                Err(e) => {
                    warn!(error = %e, "a command with an unusable workflow id; it is dropped");
                    self.shared.metrics.error("malformed_command");
                    self.done_with(sequence).await;
                    return None;
                }
            };
            let receipts = match receipts {
                Ok(sub) => sub,
                Err(e) => {
                    warn!(agent_id = %self.agent_id, error = %e, "cannot watch for the command's receipt; retrying");
                    self.shared.metrics.error("subscribe");
                    self.retry_later();
                    return None;
                }
            };
            // The subscription is registered on the NATS server before the agent can possibly
            // answer; the flush that proves it runs beside a start's checks.
            let client = self.shared.client.clone();
            let flushed = async move {
                if let Err(e) = client.flush().await {
                    debug!(error = %e, "flush before forwarding");
                }
            };
            if stop {
                flushed.await;
            } else {
                let (forward, ()) =
                    tokio::join!(self.may_forward_start(&dispatch_id, sequence), flushed);
                // Not forwarded: the subscription ends here.
                if !forward {
                    return None;
                }
            }
            debug!("forwarding command");
            self.in_flight = Some(InFlight {
                sequence,
                dispatch_id,
                stop,
                receipts,
                deadline: Instant::now() + self.shared.bus.config.receipt_timeout,
            });
            Some(command)
        }
        .instrument(span)
        .await
    }

    /// Whether the start of `dispatch_id` (at `sequence`) may go to this agent now: no agent
    /// process received it before (a restarted agent would run it again: it is deleted as
    /// delivered), its target is recorded as this agent (one that names another agent drops
    /// it), and it is still queued after that record (the controller may have withdrawn it; see
    /// [`tink_bus::withdraw_command`]). On a failed look-up the queue is read again later.
    ///
    /// The delivery check and the claim of the target record go to NATS together: on a
    /// replicated cluster each waits for a leader, and in turn they doubled a start's wait. A
    /// claim only creates a record that does not exist; one that exists is changed (or the
    /// start refused) only after the delivery check, as before.
    async fn may_forward_start(&mut self, dispatch_id: &str, sequence: u64) -> bool {
        // Recorded before the agent can answer: its events are checked against it on whichever
        // replica they arrive.
        let target = tink_bus::DispatchTarget {
            agent_id: self.agent_id.clone(),
            authenticated: self.authenticated,
        };
        let shared = &self.shared;
        let (received, claimed) = tokio::join!(
            tink_bus::dispatch_received_by(&shared.bus.events, dispatch_id, &self.agent_id),
            shared.targets.claim(dispatch_id, &target),
        );
        match received {
            Ok(true) => {
                info!(agent_id = %self.agent_id, dispatch = %dispatch_id, "not forwarding a start an agent already received");
                self.shared.metrics.error("already_received");
                self.done_with(sequence).await;
                return false;
            }
            Ok(false) => {}
            Err(e) => {
                warn!(agent_id = %self.agent_id, error = %e, "cannot check whether a start was received; retrying");
                self.shared.metrics.error("delivery_lookup");
                self.retry_later();
                return false;
            }
        }
        let recorded = match claimed {
            Ok(crate::targets::Claim::Created) => Ok(()),
            Ok(crate::targets::Claim::Exists(known)) => {
                self.shared.targets.settle(dispatch_id, known, target).await
            }
            Err(e) => Err(e),
        };
        match recorded {
            Ok(()) => {}
            Err(crate::targets::RecordError::OtherAgent(other)) => {
                warn!(agent_id = %self.agent_id, dispatch = %dispatch_id, %other, "a command for a dispatch that went to another agent; it is dropped");
                self.shared.metrics.error("dispatch_target");
                self.done_with(sequence).await;
                return false;
            }
            Err(e) => {
                warn!(agent_id = %self.agent_id, error = %e, "cannot record the dispatch target; retrying");
                self.shared.metrics.error("dispatch_target");
                self.retry_later();
                return false;
            }
        }
        match tink_bus::command_queued(&self.shared.bus.dispatch, sequence).await {
            Ok(true) => true,
            Ok(false) => {
                info!(agent_id = %self.agent_id, dispatch = %dispatch_id, "a start withdrawn (or delivered elsewhere) before it was forwarded");
                self.from = self.from.max(sequence + 1);
                self.after_command();
                false
            }
            Err(e) => {
                warn!(agent_id = %self.agent_id, error = %e, "cannot read a start again before forwarding it; retrying");
                self.shared.metrics.error("delivery_lookup");
                self.retry_later();
                false
            }
        }
    }

    async fn put_presence(&mut self) -> Result<(), kv::PutError> {
        self.presence.heartbeat = jiff::Timestamp::now();
        let revision = self
            .shared
            .bus
            .presence
            .put(&self.token, self.presence.to_bytes())
            .await?;
        self.set_revision(revision);
        Ok(())
    }

    fn set_revision(&mut self, revision: u64) {
        self.revision = Some(revision);
        self.control
            .revision
            .store(revision, std::sync::atomic::Ordering::Release);
    }

    /// Reads the entry again after the replica's presence watch was down (changes may have
    /// been missed): another session's entry ends this stream (superseded), a deleted one
    /// ends it too (a reset), a missing one (a NATS restart lost the memory-stored bucket) is
    /// written again. A read or write failure leaves the stream as it is: the replica's
    /// heartbeat decides whether NATS is lost, and the next resync tries again.
    async fn verify_presence(&mut self) -> Result<(), Status> {
        let entry = match self.shared.bus.presence.entry(&self.token).await {
            Ok(entry) => entry,
            Err(e) => {
                self.shared.metrics.error("presence");
                warn!(agent_id = %self.agent_id, error = %e, "cannot read presence after the watch resumed");
                return Ok(());
            }
        };
        match entry {
            Some(entry) if entry.operation == kv::Operation::Put => {
                match Presence::from_bytes(&entry.value) {
                    Ok(p) if p.session == self.presence.session => {
                        self.set_revision(entry.revision);
                        Ok(())
                    }
                    Ok(other) => {
                        self.shared.metrics.streams_superseded.inc();
                        info!(agent_id = %self.agent_id, server = %other.server, "agent stream superseded (seen on resync)");
                        Err(Status::aborted(format!(
                            "stream superseded: a newer GetWorkflows stream for this agent is held by server replica {}",
                            other.server
                        )))
                    }
                    Err(e) => {
                        debug!(agent_id = %self.agent_id, error = %e, "a malformed presence entry; writing ours");
                        self.rewrite_presence().await;
                        Ok(())
                    }
                }
            }
            Some(entry) if self.revision.is_some_and(|mine| entry.revision > mine) => {
                // Deleted after this session wrote it: a reset.
                self.shared.metrics.error("presence_removed");
                info!(agent_id = %self.agent_id, "the agent's presence entry was deleted while the watch was down; ending its stream");
                Err(Status::unavailable(
                    "the agent's session was reset (its presence entry was deleted); reconnect",
                ))
            }
            // Lost (NATS restarted with an empty bucket; revisions start again): write it again.
            _ => {
                self.rewrite_presence().await;
                Ok(())
            }
        }
    }

    async fn rewrite_presence(&mut self) {
        match self.put_presence().await {
            Ok(()) => info!(agent_id = %self.agent_id, "presence entry written again"),
            Err(e) => {
                self.shared.metrics.error("presence");
                warn!(agent_id = %self.agent_id, error = %e, "cannot rewrite presence");
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.metrics.connected_agents.dec();
        {
            let mut sessions = self.shared.sessions();
            if sessions
                .get(&self.token)
                .is_some_and(|c| Arc::ptr_eq(c, &self.control))
            {
                sessions.remove(&self.token);
            }
        }
        info!(agent_id = %self.agent_id, session = %self.presence.session, "agent stream closed");
        // A command in flight stays queued: the agent's next stream reads it again.
        let revision = self.revision;
        let store = self.shared.bus.presence.clone();
        let token = self.token.clone();
        let ttl = self.shared.bus.config.presence_ttl;
        let metrics = self.shared.metrics.clone();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = async move {
            if let Some(revision) = revision {
                delete_entry(&store, &token, revision, ttl, &metrics).await;
            }
        };
        handle.spawn(self.shared.cleanup.track_future(task));
    }
}

/// Deletes a session's presence entry, only at its revision (a newer session's entry stays),
/// retrying for the presence TTL: nothing else would remove an entry whose replica goes on
/// beating. A longer NATS outage makes the replica lost, and it takes a new instance id when it
/// is back, which leaves the entries it could not delete dead (the controller deletes them).
async fn delete_entry(
    store: &kv::Store,
    token: &str,
    revision: u64,
    ttl: Duration,
    metrics: &Metrics,
) {
    let until = Instant::now() + ttl;
    loop {
        match store.delete_expect_revision(token, Some(revision)).await {
            Ok(()) => return,
            // Another session's entry now (or already gone): not ours to delete.
            Err(e) if e.kind() == kv::DeleteErrorKind::WrongLastRevision => return,
            Err(e) if Instant::now() >= until => {
                metrics.error("presence_delete");
                warn!(key = %token, error = %e, "cannot delete the presence entry of an ended stream; the controller deletes it once this replica's instance is stale");
                return;
            }
            Err(e) => {
                debug!(key = %token, error = %e, "cannot delete the presence entry yet; retrying");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takeover_notices() {
        assert_eq!(parse_takeover(b"s1 server-a"), Some(("s1", "server-a")));
        assert_eq!(parse_takeover(b"nospace"), None);
    }
}
