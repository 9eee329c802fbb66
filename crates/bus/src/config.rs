//! Stream, bucket and consumer configuration; [`ensure_streams`] (the controller, or an admin
//! job: creates or updates every stream and bucket) and [`verify_streams`] (every other
//! service: finds them, never creates or changes one, as its NATS user may not).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};

use crate::subjects::{DISPATCH_ALL, EVENTS_ALL, dispatch_subject};
use crate::token::{TokenError, agent_token};

/// The stream holding commands for agents (`tink.dispatch.*`).
pub const DISPATCH_STREAM: &str = "TINK_DISPATCH";
/// The stream holding events from agents (`tink.events.*`).
pub const EVENTS_STREAM: &str = "TINK_EVENTS";
/// The KV bucket of agent presence (its stream is `KV_tink_presence`).
pub const PRESENCE_BUCKET: &str = "tink_presence";
/// The stream backing [`PRESENCE_BUCKET`].
pub const PRESENCE_STREAM: &str = "KV_tink_presence";
/// The KV bucket of per-machine boot secrets: agent token -> hex SHA-256 of the machine's
/// current boot secret, followed (space-separated) by the previous generation's for the agent
/// that exchanged it (or [`AGENT_SECRET_MISSING`]). Written by the controller from the Secrets
/// Hardware reference; read by the servers, which then require one of them to create that
/// agent's session (see [`AGENT_SECRETS_USED_BUCKET`]).
pub const AGENT_SECRETS_BUCKET: &str = "tink_agent_secrets";
/// The stream backing [`AGENT_SECRETS_BUCKET`].
pub const AGENT_SECRETS_STREAM: &str = "KV_tink_agent_secrets";
/// The value of an [`AGENT_SECRETS_BUCKET`] entry whose Secret cannot be read: no presented
/// secret matches it, so the machine is refused until the Secret exists (fail closed).
pub const AGENT_SECRET_MISSING: &str = "missing";
/// The KV bucket of exchanged agent secrets: agent token -> hex SHA-256 of the boot secret the
/// agent exchanged for a session. A secret is single-use: the server replica that lets a
/// secret create a session records its hash here (compare-and-set, before it answers), and
/// refuses a later session created with a secret whose hash is recorded. The controller then
/// moves the machine to the next generation of its secret (a new value for the next boot) and
/// leaves the entry as it is (it goes on refusing the consumed value); `tinkctl agent reset`
/// purges it.
pub const AGENT_SECRETS_USED_BUCKET: &str = "tink_agent_secrets_used";
/// The stream backing [`AGENT_SECRETS_USED_BUCKET`].
pub const AGENT_SECRETS_USED_STREAM: &str = "KV_tink_agent_secrets_used";
/// The KV bucket of dispatch targets: workflow (dispatch) token -> [`DispatchTarget`] (JSON),
/// created by the controller, written by the server replica that forwards a StartWorkflow before
/// it forwards it (one revision per key, kept as long as events are). Every
/// replica reads it to tie an event to the agent its dispatch went to: an event from another
/// agent is refused, and (with unauthenticated agents allowed) an event that names no agent is
/// recorded for the target of a dispatch that went to a stream without credentials.
pub const DISPATCH_TARGETS_BUCKET: &str = "tink_dispatch_targets";
/// The stream backing [`DISPATCH_TARGETS_BUCKET`].
pub const DISPATCH_TARGETS_STREAM: &str = "KV_tink_dispatch_targets";

/// Settings of the bus; the defaults suit production and tests alike. Every service gets the
/// same value (flags of the binaries), so streams are created identically by whoever comes first.
#[derive(Debug, Clone, PartialEq)]
pub struct BusConfig {
    /// Replicas of each stream and bucket (1 for a single NATS server, 3 for a cluster).
    pub replicas: usize,
    /// How long an undelivered command is kept. Older commands are stale: the controller has
    /// failed the workflow by then (Scheduled too long).
    pub dispatch_max_age: Duration,
    /// The most commands kept per agent (oldest dropped first).
    pub dispatch_max_per_agent: i64,
    /// How long events are kept after they were published (the controller reads them long before).
    pub events_max_age: Duration,
    /// The most bytes the events stream keeps; the oldest events go first (they were applied
    /// long before, unless the controller has been down for that long).
    pub events_max_bytes: i64,
    /// The most bytes the dispatch stream keeps; the oldest commands go first.
    pub dispatch_max_bytes: i64,
    /// The window in which a repeated `Nats-Msg-Id` is dropped as a duplicate.
    pub duplicate_window: Duration,
    /// How long a presence entry lives without a heartbeat (entries of dead servers expire).
    pub presence_ttl: Duration,
    /// How often a server refreshes the presence entry of each agent it holds.
    pub presence_heartbeat: Duration,
    /// How long a command delivered to a server may stay unacknowledged before JetStream
    /// redelivers it (the server died between receiving and forwarding it).
    pub command_ack_wait: Duration,
    /// A per-agent consumer nobody pulled from for this long is deleted by JetStream (agents
    /// gone for long). Nothing is lost: the commands stay in the stream and a new consumer
    /// delivers them from the start.
    pub consumer_inactive_threshold: Duration,
    /// How long a server waits for the agent's receipt of a forwarded command (its
    /// `WorkflowReceived`, or any event of the workflow from an agent that sends none; for a
    /// stop, its `WorkflowCanceled`). Without it the command is handed back and the agent's
    /// stream is ended, so the command is delivered again on the agent's next stream.
    pub receipt_timeout: Duration,
    /// The most bytes the logs stream (action output) keeps; the oldest lines go first.
    pub logs_max_bytes: i64,
    /// How long action output is kept.
    pub logs_max_age: Duration,
    /// The most bytes the dispatch targets bucket keeps (an entry is about 200 bytes; the oldest
    /// go first when full; entries expire with [`BusConfig::events_max_age`]).
    pub dispatch_targets_max_bytes: i64,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            replicas: 1,
            dispatch_max_age: Duration::from_secs(24 * 3600),
            dispatch_max_per_agent: 1000,
            events_max_age: Duration::from_secs(7 * 24 * 3600),
            events_max_bytes: 1 << 30,
            dispatch_max_bytes: 256 << 20,
            duplicate_window: Duration::from_secs(120),
            presence_ttl: Duration::from_secs(30),
            presence_heartbeat: Duration::from_secs(10),
            command_ack_wait: Duration::from_secs(10),
            consumer_inactive_threshold: Duration::from_secs(3600),
            receipt_timeout: Duration::from_secs(30),
            logs_max_bytes: 1 << 30,
            logs_max_age: Duration::from_secs(7 * 24 * 3600),
            dispatch_targets_max_bytes: 64 << 20,
        }
    }
}

/// Errors talking to JetStream.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// A stream could not be created or updated.
    #[error("cannot create or update stream {stream}: {source}")]
    Stream {
        /// The stream.
        stream: &'static str,
        /// Why.
        source: jetstream::context::CreateStreamError,
    },
    /// A stream could not be read back after it was created.
    #[error("cannot get stream {stream}: {source}")]
    GetStream {
        /// The stream.
        stream: &'static str,
        /// Why.
        source: jetstream::context::GetStreamError,
    },
    /// A KV bucket could not be opened.
    #[error("cannot open the KV bucket {bucket}: {source}")]
    Bucket {
        /// The bucket.
        bucket: &'static str,
        /// Why.
        source: jetstream::context::KeyValueError,
    },
    /// A stream or bucket another service must create does not exist (yet).
    #[error(
        "the JetStream {what} {name} does not exist: tink-controller (or an admin job running `ensure_streams`) creates it; start the controller, or check that it uses the same NATS account"
    )]
    Missing {
        /// `stream` or `KV bucket`.
        what: &'static str,
        /// Its name.
        name: &'static str,
    },
    /// A stream or bucket exists with a setting this service cannot work with.
    #[error(
        "the JetStream stream {stream} has {field} {found}, expected {expected}: it was created by another version or configuration; let tink-controller update it"
    )]
    Mismatch {
        /// The stream.
        stream: &'static str,
        /// The setting.
        field: &'static str,
        /// What this service needs.
        expected: String,
        /// What the stream has.
        found: String,
    },
    /// An id cannot be used on the bus.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A message is invalid and was not published.
    #[error("invalid message: {0}")]
    Invalid(#[from] crate::codec::InvalidMessage),
    /// Publishing failed or JetStream did not acknowledge storage.
    #[error("publish to {subject} failed: {source}")]
    Publish {
        /// The subject.
        subject: String,
        /// Why.
        source: jetstream::context::PublishError,
    },
}

/// Handles on the bus's streams and bucket, made by [`ensure_streams`].
#[derive(Debug, Clone)]
pub struct Bus {
    /// The JetStream context they were made with.
    pub jetstream: jetstream::Context,
    /// The dispatch stream.
    pub dispatch: stream::Stream,
    /// The events stream.
    pub events: stream::Stream,
    /// The presence bucket.
    pub presence: kv::Store,
    /// The per-machine agent secrets bucket.
    pub agent_secrets: kv::Store,
    /// The exchanged (used) agent secrets bucket.
    pub agent_secrets_used: kv::Store,
    /// The dispatch targets bucket.
    pub dispatch_targets: kv::Store,
    /// The admitted agents bucket.
    pub admitted_agents: kv::Store,
    /// The configuration they were made with.
    pub config: BusConfig,
    /// The logs stream (action output).
    pub logs: stream::Stream,
}

/// The dispatch stream: a work queue, so a command is removed once acknowledged, and at most
/// one consumer (the agent's) may filter on an agent's subject.
pub fn dispatch_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        name: DISPATCH_STREAM.to_string(),
        description: Some("tinkerbell commands for agents, one subject per agent".to_string()),
        subjects: vec![DISPATCH_ALL.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        max_age: config.dispatch_max_age,
        max_bytes: config.dispatch_max_bytes,
        max_messages_per_subject: config.dispatch_max_per_agent,
        discard: stream::DiscardPolicy::Old,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// The events stream: limits retention, read by the controller's durable consumer.
pub fn events_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        name: EVENTS_STREAM.to_string(),
        description: Some("tinkerbell events from agents, one subject per workflow".to_string()),
        subjects: vec![EVENTS_ALL.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: config.events_max_age,
        max_bytes: config.events_max_bytes,
        discard: stream::DiscardPolicy::Old,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// The stream of a NATS KV bucket as NATS creates one: `KV_<bucket>` on `$KV.<bucket>.>`, one
/// revision per key, rollups, no deletes through the stream API, direct gets, new writes
/// refused when full, `config.replicas` replicas, file storage; the callers change what differs.
pub(crate) fn kv_stream_config(
    bucket: &str,
    description: &str,
    config: &BusConfig,
) -> stream::Config {
    stream::Config {
        name: format!("KV_{bucket}"),
        description: Some(description.to_string()),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// The stream backing the presence bucket (`KV_tink_presence`), configured exactly as a NATS
/// KV bucket (`$KV.tink_presence.>`, rollups, direct get, discard new) with memory storage
/// (presence is rebuilt by the next heartbeats after a NATS restart, and heartbeats of many
/// agents would otherwise be disk writes), one revision per key, and entries expiring after
/// [`BusConfig::presence_ttl`].
///
/// The stream is created directly rather than through async-nats's KV creation, which first
/// queries the account info in a form nats-server 2.9 does not answer.
pub fn presence_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        max_age: config.presence_ttl,
        storage: stream::StorageType::Memory,
        ..kv_stream_config(
            PRESENCE_BUCKET,
            "tinkerbell agent presence: agent token -> server replica",
            config,
        )
    }
}

/// The stream backing the agent secrets bucket (`KV_tink_agent_secrets`), configured as a NATS
/// KV bucket with file storage (the controller writes an entry only when it changes), one
/// revision per key and no expiry.
pub fn agent_secrets_stream_config(config: &BusConfig) -> stream::Config {
    kv_stream_config(
        AGENT_SECRETS_BUCKET,
        "tinkerbell per-machine agent secrets: agent token -> SHA-256 of the secret",
        config,
    )
}

/// The stream backing the exchanged agent secrets bucket (`KV_tink_agent_secrets_used`),
/// configured as a NATS KV bucket with file storage (a replica that restarts must still refuse
/// a consumed secret), one revision per key and no expiry.
pub fn agent_secrets_used_stream_config(config: &BusConfig) -> stream::Config {
    kv_stream_config(
        AGENT_SECRETS_USED_BUCKET,
        "tinkerbell exchanged agent secrets: agent token -> SHA-256 of the consumed secret",
        config,
    )
}

/// The stream backing the dispatch targets bucket (`KV_tink_dispatch_targets`), configured as
/// a NATS KV bucket with file storage, one revision per key, entries kept as long as
/// events are (a workflow's events are checked against it for as long as they can arrive), at
/// most [`BusConfig::dispatch_targets_max_bytes`], the oldest dropped first.
pub fn dispatch_targets_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        max_age: config.events_max_age,
        max_bytes: config.dispatch_targets_max_bytes,
        discard: stream::DiscardPolicy::Old,
        ..kv_stream_config(
            DISPATCH_TARGETS_BUCKET,
            "tinkerbell dispatch targets: dispatch id token -> agent id",
            config,
        )
    }
}

/// Where a dispatch went: the value of a [`DISPATCH_TARGETS_BUCKET`] entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DispatchTarget {
    /// The agent whose stream the StartWorkflow was forwarded to (canonical id).
    pub agent_id: String,
    /// Whether that stream presented credentials (a client certificate or a session token).
    /// `false` only for streams admitted by `--allow-unauthenticated-agents`.
    pub authenticated: bool,
}

impl DispatchTarget {
    /// The bucket value (JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a bucket value.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// The durable consumer name of an agent: `agent_<token>`.
pub fn agent_consumer_name(agent_id: &str) -> Result<String, TokenError> {
    Ok(format!("agent_{}", agent_token(agent_id)?))
}

/// The JetStream API subject to send pull requests for an agent's consumer to (what
/// `consumer.messages()` does internally; the server multiplexes its agents' pulls over one
/// inbox subscription instead of one subscription and task per agent).
pub fn agent_pull_subject(agent_id: &str) -> Result<String, TokenError> {
    Ok(format!(
        "$JS.API.CONSUMER.MSG.NEXT.{DISPATCH_STREAM}.{}",
        agent_consumer_name(agent_id)?
    ))
}

/// The durable pull consumer delivering an agent's commands: explicit acks, one command in
/// flight at a time (so Start and Stop keep their order, also across redeliveries), unlimited
/// redeliveries (a command is only gone once forwarded or too old), removed by JetStream after
/// [`BusConfig::consumer_inactive_threshold`] without pulls.
pub fn agent_consumer_config(
    agent_id: &str,
    config: &BusConfig,
) -> Result<consumer::pull::Config, TokenError> {
    let name = agent_consumer_name(agent_id)?;
    Ok(consumer::pull::Config {
        durable_name: Some(name.clone()),
        name: Some(name),
        description: Some(format!("commands for agent {agent_id}")),
        filter_subject: dispatch_subject(agent_id)?,
        deliver_policy: consumer::DeliverPolicy::All,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: config.command_ack_wait,
        max_deliver: -1,
        max_ack_pending: 1,
        inactive_threshold: config.consumer_inactive_threshold,
        ..Default::default()
    })
}

/// The durable consumer name the controller reads events with.
pub const CONTROLLER_EVENTS_CONSUMER: &str = "tink-controller";

/// The controller's durable pull consumer of all events: explicit acks (an event is acked once
/// its status change is written), redelivered after `ack_wait` until then, from the start of
/// the stream. Controller replicas share it; only the leader pulls.
pub fn events_consumer_config(ack_wait: Duration) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(CONTROLLER_EVENTS_CONSUMER.to_string()),
        name: Some(CONTROLLER_EVENTS_CONSUMER.to_string()),
        description: Some(
            "tinkerbell controller: applies agent events to Workflow status".to_string(),
        ),
        filter_subject: EVENTS_ALL.to_string(),
        deliver_policy: consumer::DeliverPolicy::All,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        ..Default::default()
    }
}

/// Every stream the bus needs, with its configuration, in creation order.
fn all_streams(config: &BusConfig) -> [(&'static str, stream::Config); 8] {
    [
        (DISPATCH_STREAM, dispatch_stream_config(config)),
        (EVENTS_STREAM, events_stream_config(config)),
        (PRESENCE_STREAM, presence_stream_config(config)),
        (
            crate::logs::LOGS_STREAM,
            crate::logs::logs_stream_config(config),
        ),
        (AGENT_SECRETS_STREAM, agent_secrets_stream_config(config)),
        (
            AGENT_SECRETS_USED_STREAM,
            agent_secrets_used_stream_config(config),
        ),
        (
            DISPATCH_TARGETS_STREAM,
            dispatch_targets_stream_config(config),
        ),
        (
            crate::admitted::ADMITTED_AGENTS_STREAM,
            crate::admitted::admitted_agents_stream_config(config),
        ),
    ]
}

/// Creates every stream and bucket, or updates them to `config`. Idempotent. Only the
/// controller (or an admin job) calls it: its NATS user is the one allowed to create and update
/// streams. Every other service calls [`verify_streams`].
pub async fn ensure_streams(
    jetstream: &jetstream::Context,
    config: &BusConfig,
) -> Result<Bus, BusError> {
    for (name, stream_config) in all_streams(config) {
        jetstream
            .create_or_update_stream(stream_config)
            .await
            .map_err(|source| BusError::Stream {
                stream: name,
                source,
            })?;
    }
    open(jetstream, config).await
}

/// Finds every stream and bucket without creating or changing any, and checks the settings
/// this service relies on (subjects, retention, one revision per KV key). A missing one is
/// [`BusError::Missing`], naming it (the controller has not created it yet); a stream with
/// other settings is [`BusError::Mismatch`].
pub async fn verify_streams(
    jetstream: &jetstream::Context,
    config: &BusConfig,
) -> Result<Bus, BusError> {
    for (name, wanted) in all_streams(config) {
        let found = get_stream(jetstream, name).await?;
        let found = &found.cached_info().config;
        check(name, "subjects", &wanted.subjects, &found.subjects)?;
        check(name, "retention", &wanted.retention, &found.retention)?;
        // Unlimited is 0 in a request and -1 in the stream's answer.
        let per_subject = |n: i64| if n <= 0 { -1 } else { n };
        check(
            name,
            "max_messages_per_subject",
            &per_subject(wanted.max_messages_per_subject),
            &per_subject(found.max_messages_per_subject),
        )?;
        check(
            name,
            "allow_direct",
            &wanted.allow_direct,
            &found.allow_direct,
        )?;
    }
    open(jetstream, config).await
}

fn check<T: PartialEq + std::fmt::Debug>(
    stream: &'static str,
    field: &'static str,
    expected: &T,
    found: &T,
) -> Result<(), BusError> {
    if expected == found {
        return Ok(());
    }
    Err(BusError::Mismatch {
        stream,
        field,
        expected: format!("{expected:?}"),
        found: format!("{found:?}"),
    })
}

async fn get_stream(
    jetstream: &jetstream::Context,
    name: &'static str,
) -> Result<stream::Stream, BusError> {
    jetstream.get_stream(name).await.map_err(|source| {
        if let jetstream::context::GetStreamErrorKind::JetStream(e) = source.kind()
            && e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
        {
            let what = if name.starts_with("KV_") {
                "KV bucket"
            } else {
                "stream"
            };
            let name = name.strip_prefix("KV_").unwrap_or(name);
            return BusError::Missing { what, name };
        }
        BusError::GetStream {
            stream: name,
            source,
        }
    })
}

async fn bucket(
    jetstream: &jetstream::Context,
    bucket: &'static str,
) -> Result<kv::Store, BusError> {
    jetstream
        .get_key_value(bucket)
        .await
        .map_err(|source| BusError::Bucket { bucket, source })
}

/// Handles on the existing streams and buckets.
async fn open(jetstream: &jetstream::Context, config: &BusConfig) -> Result<Bus, BusError> {
    Ok(Bus {
        jetstream: jetstream.clone(),
        dispatch: get_stream(jetstream, DISPATCH_STREAM).await?,
        events: get_stream(jetstream, EVENTS_STREAM).await?,
        presence: bucket(jetstream, PRESENCE_BUCKET).await?,
        agent_secrets: bucket(jetstream, AGENT_SECRETS_BUCKET).await?,
        agent_secrets_used: bucket(jetstream, AGENT_SECRETS_USED_BUCKET).await?,
        dispatch_targets: bucket(jetstream, DISPATCH_TARGETS_BUCKET).await?,
        admitted_agents: bucket(jetstream, crate::admitted::ADMITTED_AGENTS_BUCKET).await?,
        config: config.clone(),
        logs: get_stream(jetstream, crate::logs::LOGS_STREAM).await?,
    })
}
