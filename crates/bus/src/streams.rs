//! The names and configurations of every stream, KV bucket and durable consumer on the bus, in
//! one place: what [`crate::ensure_streams`] creates and [`crate::verify_streams`] checks, and
//! what the services' consumers are made with.

use std::time::Duration;

use async_nats::jetstream::{consumer, stream};

use crate::config::BusConfig;
use crate::logs::LOGS_ALL;
use crate::subjects::{DISPATCH_ALL, EVENTS_ALL, INVENTORY_ALL};

/// The stream holding commands for agents (`tink.dispatch.*`).
pub const DISPATCH_STREAM: &str = "TINK_DISPATCH";
/// The stream holding events from agents (`tink.events.*`).
pub const EVENTS_STREAM: &str = "TINK_EVENTS";
/// The KV bucket of agent presence (its stream is `KV_tink_presence`).
pub const PRESENCE_BUCKET: &str = "tink_presence";
/// The stream backing [`PRESENCE_BUCKET`].
pub const PRESENCE_STREAM: &str = "KV_tink_presence";
/// The KV bucket of server replica heartbeats: [`crate::replica_key`] -> [`crate::ReplicaHeartbeat`]
/// (JSON), rewritten by each server replica every [`BusConfig::presence_heartbeat`], expiring
/// after [`BusConfig::presence_ttl`]. Presence entries are alive while the replica they name
/// beats (see `crate::presence`).
pub const REPLICAS_BUCKET: &str = "tink_replicas";
/// The stream backing [`REPLICAS_BUCKET`].
pub const REPLICAS_STREAM: &str = "KV_tink_replicas";
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
/// The KV bucket of dispatch targets: workflow (dispatch) token -> [`crate::DispatchTarget`] (JSON),
/// created by the controller, written by the server replica that forwards a StartWorkflow before
/// it forwards it (one revision per key, kept as long as events are). Every
/// replica reads it to tie an event to the agent its dispatch went to: an event from another
/// agent is refused, and (with unauthenticated agents allowed) an event that names no agent is
/// recorded for the target of a dispatch that went to a stream without credentials.
pub const DISPATCH_TARGETS_BUCKET: &str = "tink_dispatch_targets";
/// The stream backing [`DISPATCH_TARGETS_BUCKET`].
pub const DISPATCH_TARGETS_STREAM: &str = "KV_tink_dispatch_targets";
/// The stream holding action output (`tink.logs.*.*`).
pub const LOGS_STREAM: &str = "TINK_LOGS";
/// The KV bucket of admitted agent ids (agent token -> Hardware `namespace/name`): which agent
/// ids may connect at all.
///
/// The controller writes one entry per agent id a Hardware names (the keys of
/// `spec.networkInterfaces`): agent token -> `<namespace>/<name>` of that Hardware. The servers
/// mirror it and refuse streams and events of any other id, so no stream, session, consumer or
/// presence entry exists for an id that names no machine, and a flood of made-up ids costs
/// nothing but a refusal.
pub const ADMITTED_AGENTS_BUCKET: &str = "tink_admitted_agents";
/// The stream backing [`ADMITTED_AGENTS_BUCKET`].
pub const ADMITTED_AGENTS_STREAM: &str = "KV_tink_admitted_agents";

/// The stream holding the latest hardware inventory of each agent (`tink.inventory.*`).
pub const INVENTORY_STREAM: &str = "TINK_INVENTORY";
/// The durable consumer name the controller reads inventories with.
pub const CONTROLLER_INVENTORY_CONSUMER: &str = "tink-controller-inventory";

/// The inventory stream: limits retention, one message per subject (an agent's latest
/// inventory replaces the previous one), identical reports de-duplicated by their
/// `Nats-Msg-Id` ([`crate::inventory_msg_id`]), at most [`BusConfig::inventory_max_bytes`].
pub fn inventory_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        name: INVENTORY_STREAM.to_string(),
        description: Some(
            "tinkerbell hardware inventories from agents, the latest per agent".to_string(),
        ),
        subjects: vec![INVENTORY_ALL.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_messages_per_subject: 1,
        max_bytes: config.inventory_max_bytes,
        max_message_size: i32::try_from(crate::publish::MAX_INVENTORY_BYTES + 4096)
            .unwrap_or(i32::MAX),
        discard: stream::DiscardPolicy::Old,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// The controller's durable pull consumer of inventories: explicit acks (acked once the
/// Hardware status is written, or the inventory dropped), from the start of the stream (one
/// message per agent). Controller replicas share it; only the leader pulls.
pub fn inventory_consumer_config(ack_wait: Duration) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(CONTROLLER_INVENTORY_CONSUMER.to_string()),
        name: Some(CONTROLLER_INVENTORY_CONSUMER.to_string()),
        description: Some(
            "tinkerbell controller: agent inventories to Hardware status".to_string(),
        ),
        filter_subject: INVENTORY_ALL.to_string(),
        deliver_policy: consumer::DeliverPolicy::All,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        max_ack_pending: 256,
        ..Default::default()
    }
}

/// The dispatch stream: one subject per agent, read without consumers. The server holding an
/// agent's stream reads the oldest command on the agent's subject (`STREAM.MSG.GET`, from the
/// leader) and deletes it once the agent's receipt is stored; see [`crate::next_command`].
/// (Retention stays a work queue, as streams made before had it: NATS cannot change it, and
/// without consumers it keeps every command until deleted, aged out or over the limits.)
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
fn kv_stream_config(bucket: &str, description: &str, config: &BusConfig) -> stream::Config {
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
/// (after a NATS restart that loses it, each server replica writes its agents' entries again),
/// one revision per key, and no expiry: an idle agent's entry is written once, when its stream
/// opens, and stays until the stream ends; its liveness is its replica's heartbeat
/// ([`replicas_stream_config`]), and the entries of a dead replica are deleted by the
/// controller's leader. (Before per-replica heartbeats the stream had `max_age` = the TTL and
/// every entry was rewritten every heartbeat; [`crate::ensure_streams`] updates it in place.)
///
/// The stream is created directly rather than through async-nats's KV creation, which first
/// queries the account info in a form nats-server 2.9 does not answer.
pub fn presence_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        storage: stream::StorageType::Memory,
        ..kv_stream_config(
            PRESENCE_BUCKET,
            "tinkerbell agent presence: agent token -> server replica",
            config,
        )
    }
}

/// The stream backing the replicas bucket (`KV_tink_replicas`): a NATS KV bucket with memory
/// storage (a heartbeat is rewritten within [`BusConfig::presence_heartbeat`] anyway), one
/// revision per key, entries expiring after [`BusConfig::presence_ttl`].
pub fn replicas_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        max_age: config.presence_ttl,
        storage: stream::StorageType::Memory,
        ..kv_stream_config(
            REPLICAS_BUCKET,
            "tinkerbell server replica heartbeats: replica token -> heartbeat",
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

/// The logs stream: limits retention, its own bytes and age limits, oldest dropped first.
pub fn logs_stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        name: LOGS_STREAM.to_string(),
        description: Some(
            "tinkerbell action output, one subject per workflow and action".to_string(),
        ),
        subjects: vec![LOGS_ALL.to_string()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: config.logs_max_age,
        max_bytes: config.logs_max_bytes,
        discard: stream::DiscardPolicy::Old,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// The stream backing the admitted agents bucket: a NATS KV bucket with file storage (written
/// only when a Hardware's agent ids change), one revision per key and no expiry.
pub fn admitted_agents_stream_config(config: &BusConfig) -> stream::Config {
    kv_stream_config(
        ADMITTED_AGENTS_BUCKET,
        "tinkerbell admitted agents: agent token -> the Hardware naming it",
        config,
    )
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
pub(crate) fn all_streams(config: &BusConfig) -> [(&'static str, stream::Config); 10] {
    [
        (DISPATCH_STREAM, dispatch_stream_config(config)),
        (EVENTS_STREAM, events_stream_config(config)),
        (PRESENCE_STREAM, presence_stream_config(config)),
        (REPLICAS_STREAM, replicas_stream_config(config)),
        (LOGS_STREAM, logs_stream_config(config)),
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
            ADMITTED_AGENTS_STREAM,
            admitted_agents_stream_config(config),
        ),
        (INVENTORY_STREAM, inventory_stream_config(config)),
    ]
}
