//! One agent's `GetWorkflows` stream: presence, command delivery from the agent's durable
//! JetStream consumer, and the "newest stream wins" rule.
//!
//! Delivery: the agent's consumer (see [`tink_bus::agent_consumer_config`]) allows one
//! unacknowledged command at a time. A command pulled from it is handed to the gRPC transport
//! and acknowledged only when the transport asks for the next item, i.e. after it took the
//! command. If the stream ends first (the agent left, the replica shuts down or is superseded),
//! the command is negatively acknowledged and JetStream delivers it on the agent's next stream,
//! on any replica; if the replica dies, JetStream redelivers it after the ack wait. A command
//! the transport took but the agent never read (the connection broke right then) is the one
//! case this cannot see; the controller's Scheduled timeout covers it.
//!
//! The work runs inside the response stream itself (no task per agent): when tonic drops the
//! stream because the connection ended, everything is released and the presence entry removed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull, kv};
use futures::{Stream, StreamExt as _};
use tink_bus::proto::GetWorkflowsResponse;
use tink_bus::{Bus, Presence};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Status;
use tracing::{Instrument as _, debug, info, warn};

use crate::metrics::Metrics;

/// The response stream type of `GetWorkflows`.
pub type CommandStream = Pin<Box<dyn Stream<Item = Result<GetWorkflowsResponse, Status>> + Send>>;

/// How long a pull request waits on the server before it is renewed, and the idle heartbeat.
const PULL_EXPIRES: Duration = Duration::from_secs(30);
const PULL_HEARTBEAT: Duration = Duration::from_secs(15);
/// Pause before reopening the consumer after an error.
const REOPEN_BACKOFF: Duration = Duration::from_secs(1);

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
    /// The open session of each agent token on this replica.
    sessions: Mutex<HashMap<String, Arc<Control>>>,
}

/// How a session is told it was superseded.
#[derive(Debug)]
struct Control {
    session_id: String,
    superseded: CancellationToken,
    reason: OnceLock<String>,
}

impl Control {
    fn supersede(&self, reason: String) {
        let _ = self.reason.set(reason);
        self.superseded.cancel();
    }
}

impl Shared {
    pub(crate) fn new(
        bus: Bus,
        client: async_nats::Client,
        replica_id: String,
        metrics: Metrics,
        shutdown: CancellationToken,
    ) -> Self {
        Shared {
            bus,
            client,
            replica_id,
            metrics,
            shutdown,
            cleanup: TaskTracker::new(),
            sessions: Mutex::new(HashMap::new()),
        }
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
}

/// Payload of a takeover notice: `<session id> <server replica>`.
pub(crate) fn parse_takeover(payload: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    text.split_once(' ')
}

/// Opens a session for `agent_id`; errors are gRPC statuses for the agent.
pub(crate) async fn open(shared: Arc<Shared>, agent_id: String) -> Result<CommandStream, Status> {
    let token = tink_bus::agent_token(&agent_id).map_err(|e| {
        shared.metrics.error("invalid_agent_id");
        Status::invalid_argument(format!("agent_id: {e}"))
    })?;
    if shared.shutdown.is_cancelled() {
        return Err(Status::unavailable(
            "server shutting down; connect to another replica",
        ));
    }
    let session_id = uuid::Uuid::new_v4().simple().to_string();
    let control = Arc::new(Control {
        session_id: session_id.clone(),
        superseded: CancellationToken::new(),
        reason: OnceLock::new(),
    });
    if let Some(previous) = shared.sessions().insert(token.clone(), control.clone()) {
        previous.supersede(format!(
            "a newer GetWorkflows stream for this agent opened on this server replica ({})",
            shared.replica_id
        ));
    }
    // From here on the session owns the registry entry and the gauge; Drop releases both.
    let now = jiff::Timestamp::now();
    let mut session = Session {
        shared: shared.clone(),
        agent_id,
        token,
        control,
        presence: Presence {
            agent_id: String::new(),
            server: shared.replica_id.clone(),
            session: session_id.clone(),
            connected_since: now,
            heartbeat: now,
        },
        revision: None,
        consumer: None,
        messages: None,
        in_flight: None,
        heartbeat: heartbeat_interval(&shared.bus.config, &session_id),
        finished: false,
    };
    session.presence.agent_id = session.agent_id.clone();
    shared.metrics.connected_agents.inc();

    let takeover = tink_bus::takeover_subject(&session.agent_id)
        .map_err(|e| Status::invalid_argument(format!("agent_id: {e}")))?;
    let notice = format!("{session_id} {}", shared.replica_id);
    if let Err(e) = shared.client.publish(takeover, notice.into()).await {
        warn!(agent_id = %session.agent_id, error = %e, "cannot announce the new stream to other replicas");
    }
    session.put_presence().await.map_err(|e| {
        shared.metrics.error("presence");
        Status::unavailable(format!("cannot record the agent's presence: {e}"))
    })?;
    session.open_messages().await.map_err(|e| {
        shared.metrics.error("consumer");
        Status::unavailable(format!("cannot open the agent's command consumer: {e}"))
    })?;
    info!(agent_id = %session.agent_id, session = %session_id, "agent stream opened");

    let span = tracing::info_span!("agent_stream", agent_id = %session.agent_id);
    let stream = Box::pin(futures::stream::unfold(session, |mut session| async move {
        let item = session.next_item().await?;
        Some((item, session))
    }));
    Ok(Box::pin(stream.instrument_stream(span)))
}

/// Spreads heartbeats of many sessions over the interval (the first tick comes after a delay
/// derived from the session id) instead of all at once.
fn heartbeat_interval(config: &tink_bus::BusConfig, session_id: &str) -> tokio::time::Interval {
    let period = config.presence_heartbeat.max(Duration::from_millis(10));
    let seed = session_id.bytes().fold(0u64, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    let nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
    let first = Duration::from_nanos(seed % nanos) + period / 2;
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + first, period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

struct Session {
    shared: Arc<Shared>,
    agent_id: String,
    token: String,
    control: Arc<Control>,
    presence: Presence,
    revision: Option<u64>,
    consumer: Option<jetstream::consumer::Consumer<pull::Config>>,
    messages: Option<pull::Stream>,
    /// The command handed to the transport, acknowledged when the next item is asked for.
    in_flight: Option<jetstream::Message>,
    heartbeat: tokio::time::Interval,
    finished: bool,
}

enum Wake {
    Shutdown,
    Superseded,
    Heartbeat,
    Message(Box<Option<Result<jetstream::Message, pull::MessagesError>>>),
}

impl Session {
    async fn next_item(&mut self) -> Option<Result<GetWorkflowsResponse, Status>> {
        if let Some(message) = self.in_flight.take() {
            // The transport took the previous command: it is delivered.
            if let Err(e) = message.ack().await {
                self.shared.metrics.error("ack");
                warn!(agent_id = %self.agent_id, error = %e, "cannot acknowledge a forwarded command; it may be delivered again");
            }
            self.shared.metrics.commands_forwarded.inc();
        }
        if self.finished {
            return None;
        }
        loop {
            if self.messages.is_none()
                && let Err(e) = self.open_messages().await
            {
                self.shared.metrics.error("consumer");
                warn!(agent_id = %self.agent_id, error = %e, "cannot open the command consumer; retrying");
                tokio::select! {
                    _ = self.shared.shutdown.cancelled() => {}
                    _ = self.control.superseded.cancelled() => {}
                    _ = tokio::time::sleep(REOPEN_BACKOFF) => {}
                }
            }
            let wake = {
                let messages = self.messages.as_mut();
                tokio::select! {
                    biased;
                    _ = self.shared.shutdown.cancelled() => Wake::Shutdown,
                    _ = self.control.superseded.cancelled() => Wake::Superseded,
                    _ = self.heartbeat.tick() => Wake::Heartbeat,
                    next = async {
                        match messages {
                            Some(messages) => messages.next().await,
                            None => std::future::pending().await,
                        }
                    } => Wake::Message(Box::new(next)),
                }
            };
            match wake {
                Wake::Message(next) => match *next {
                    Some(Ok(message)) => {
                        if let Some(command) = self.accept(message).await {
                            return Some(Ok(command));
                        }
                    }
                    Some(Err(e)) => {
                        self.shared.metrics.error("consumer");
                        warn!(agent_id = %self.agent_id, error = %e, "command consumer failed; reopening");
                        self.messages = None;
                        self.consumer = None;
                    }
                    None => {
                        self.messages = None;
                    }
                },
                Wake::Shutdown => {
                    return self.finish(Status::unavailable(
                        "server shutting down; reconnect to another replica",
                    ));
                }
                Wake::Superseded => {
                    self.shared.metrics.streams_superseded.inc();
                    let reason = self
                        .control
                        .reason
                        .get()
                        .cloned()
                        .unwrap_or_else(|| "a newer stream for this agent opened".to_string());
                    info!(agent_id = %self.agent_id, %reason, "agent stream superseded");
                    return self.finish(Status::aborted(format!("stream superseded: {reason}")));
                }
                Wake::Heartbeat => {
                    if let Err(status) = self.refresh_presence().await {
                        return self.finish(status);
                    }
                }
            }
        }
    }

    fn finish(&mut self, status: Status) -> Option<Result<GetWorkflowsResponse, Status>> {
        self.finished = true;
        Some(Err(status))
    }

    /// Decodes a pulled command. A malformed one is terminated (never redelivered) and
    /// counted; the stream goes on.
    async fn accept(&mut self, message: jetstream::Message) -> Option<GetWorkflowsResponse> {
        let parent = message
            .headers
            .as_ref()
            .map(tink_telemetry::propagation::extract_nats)
            .unwrap_or_default();
        let span = tracing::info_span!("forward_command", agent_id = %self.agent_id, workflow_id = tracing::field::Empty);
        tink_telemetry::propagation::set_parent(&span, parent);
        async {
            match tink_bus::decode_command(&message.payload) {
                Ok(mut command) => {
                    if let Some(workflow_id) = tink_bus::command_workflow_id(&command) {
                        tracing::Span::current().record("workflow_id", workflow_id);
                    }
                    if let Some(headers) = &message.headers {
                        for key in ["traceparent", "tracestate"] {
                            if let Some(value) = headers.get(key) {
                                command
                                    .trace_context
                                    .insert(key.to_string(), value.as_str().to_string());
                            }
                        }
                    }
                    debug!("forwarding command");
                    self.in_flight = Some(message);
                    Some(command)
                }
                Err(e) => {
                    self.shared.metrics.error("malformed_command");
                    warn!(subject = %message.subject, error = %e, "refusing a malformed command; it is dropped");
                    if let Err(e) = message.ack_with(AckKind::Term).await {
                        warn!(error = %e, "cannot terminate a malformed command");
                    }
                    None
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn open_messages(&mut self) -> Result<(), String> {
        let consumer = match self.consumer.clone() {
            Some(consumer) => consumer,
            None => {
                let config =
                    tink_bus::agent_consumer_config(&self.agent_id, &self.shared.bus.config)
                        .map_err(|e| e.to_string())?;
                let consumer = self
                    .shared
                    .bus
                    .dispatch
                    .create_consumer(config)
                    .await
                    .map_err(|e| e.to_string())?;
                self.consumer = Some(consumer.clone());
                consumer
            }
        };
        let messages = consumer
            .stream()
            .max_messages_per_batch(1)
            .expires(PULL_EXPIRES)
            .heartbeat(PULL_HEARTBEAT)
            .messages()
            .await
            .map_err(|e| {
                // The consumer may be gone (deleted, NATS lost its store): create it next time.
                self.consumer = None;
                e.to_string()
            })?;
        self.messages = Some(messages);
        Ok(())
    }

    async fn put_presence(&mut self) -> Result<(), kv::PutError> {
        self.presence.heartbeat = jiff::Timestamp::now();
        let revision = self
            .shared
            .bus
            .presence
            .put(&self.token, self.presence.to_bytes())
            .await?;
        self.revision = Some(revision);
        Ok(())
    }

    /// Refreshes the presence entry with a compare-and-set on its revision. If another session
    /// wrote it meanwhile, this session is superseded (the notice may have been missed).
    async fn refresh_presence(&mut self) -> Result<(), Status> {
        self.presence.heartbeat = jiff::Timestamp::now();
        let store = &self.shared.bus.presence;
        let result = match self.revision {
            Some(revision) => store
                .update(&self.token, self.presence.to_bytes(), revision)
                .await
                .map_err(|e| e.kind() == kv::UpdateErrorKind::WrongLastRevision),
            None => Err(true),
        };
        match result {
            Ok(revision) => self.revision = Some(revision),
            Err(false) => {
                // NATS unreachable: keep the stream; the entry expires if this goes on, and the
                // next heartbeat tries again.
                self.shared.metrics.error("presence");
                warn!(agent_id = %self.agent_id, "cannot refresh presence");
            }
            Err(true) => match store.entry(&self.token).await {
                Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                    match Presence::from_bytes(&entry.value) {
                        Ok(other) if other.session != self.presence.session => {
                            self.shared.metrics.streams_superseded.inc();
                            return Err(Status::aborted(format!(
                                "stream superseded: a newer GetWorkflows stream for this agent is held by server replica {}",
                                other.server
                            )));
                        }
                        _ => {
                            if let Err(e) = self.put_presence().await {
                                self.shared.metrics.error("presence");
                                warn!(agent_id = %self.agent_id, error = %e, "cannot rewrite presence");
                            }
                        }
                    }
                }
                // Expired or lost (e.g. NATS restarted): write it again.
                Ok(_) => {
                    if let Err(e) = self.put_presence().await {
                        self.shared.metrics.error("presence");
                        warn!(agent_id = %self.agent_id, error = %e, "cannot rewrite presence");
                    }
                }
                Err(e) => {
                    self.shared.metrics.error("presence");
                    warn!(agent_id = %self.agent_id, error = %e, "cannot read presence");
                }
            },
        }
        Ok(())
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
        let in_flight = self.in_flight.take();
        let revision = self.revision;
        let store = self.shared.bus.presence.clone();
        let token = self.token.clone();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = async move {
            if let Some(message) = in_flight {
                // Not taken by the transport: deliver it on the agent's next stream now rather
                // than after the ack wait.
                let _ = message.ack_with(AckKind::Nak(None)).await;
            }
            if let Some(revision) = revision {
                // Only if this session still owns the entry (a newer one wrote another revision).
                let _ = store.delete_expect_revision(&token, Some(revision)).await;
            }
        };
        handle.spawn(self.shared.cleanup.track_future(task));
    }
}

/// `Stream::instrument` without pulling in tracing-futures: polls the stream inside the span.
trait InstrumentStream: Stream + Sized {
    fn instrument_stream(self, span: tracing::Span) -> Instrumented<Self> {
        Instrumented { inner: self, span }
    }
}

impl<S: Stream> InstrumentStream for S {}

struct Instrumented<S> {
    inner: S,
    span: tracing::Span,
}

impl<S: Stream + Unpin> Stream for Instrumented<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = &mut *self;
        let _enter = this.span.enter();
        this.inner.poll_next_unpin(cx)
    }
}
