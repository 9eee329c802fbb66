//! NATS JetStream subjects, stream and bucket configuration, message codecs and trace
//! propagation shared by every service.
//!
//! This crate is the one place that names things on the bus; the server, the controller and the
//! tests all use it, so a subject or a stream setting cannot drift between producer and consumer.
//!
//! | what | name | content |
//! |---|---|---|
//! | dispatch subject | `tink.dispatch.<agent token>` | a `GetWorkflowsResponse` (StartWorkflow / StopWorkflow), protobuf |
//! | events subject | `tink.events.<workflow token>` | an `Event`, protobuf |
//! | dispatch stream | [`DISPATCH_STREAM`] | one subject per agent, no consumers: the server holding the agent's stream reads the oldest command and deletes it once the agent's receipt is stored |
//! | events stream | [`EVENTS_STREAM`] | limits retention, read durably by the controller |
//! | presence bucket | [`PRESENCE_BUCKET`] | KV: agent token -> [`Presence`] (JSON), written when an agent's stream opens and deleted when it ends (no TTL); alive while the server replica it names beats |
//! | replicas bucket | [`REPLICAS_BUCKET`] | KV: [`replica_key`] -> [`ReplicaHeartbeat`] (JSON), each server replica's heartbeat every [`BusConfig::presence_heartbeat`]; entries expire after [`BusConfig::presence_ttl`] |
//! | agent secrets bucket | [`AGENT_SECRETS_BUCKET`] | KV: agent token -> hex SHA-256 of the machine's current boot secret, then, for the agent that exchanged the previous one, that one's (controller writes, servers read) |
//! | exchanged agent secrets bucket | [`AGENT_SECRETS_USED_BUCKET`] | KV: agent token -> hex SHA-256 of the boot secret it exchanged for a session (servers write before answering and refuse it afterwards; the controller rotates the machine's secret) |
//! | admitted agents bucket | [`ADMITTED_AGENTS_BUCKET`] | KV: agent token -> the `namespace/name` of the Hardware naming that agent id (controller writes, servers refuse every other id) |
//! | dispatch targets bucket | [`DISPATCH_TARGETS_BUCKET`] | KV: workflow token -> [`DispatchTarget`] (JSON): the agent a StartWorkflow was forwarded to (servers write before forwarding, and check events against it) |
//! | inventory subject | `tink.inventory.<agent token>` | the agent's hardware inventory (tink-inventory JSON), see [`INVENTORY_STREAM`]: one per agent, de-duplicated by content |
//! | logs subject | `tink.logs.<workflow token>.<action token>` | a `LogBatch` (protobuf), see [`LOGS_STREAM`] |
//! | takeover subject | `tink.presence.takeover.<agent token>` | core NATS: "a newer stream for this agent exists", session id |
//! | syslog subject | `tink.syslog.<hardware token>` | a [`SyslogLine`] (JSON) a machine sent to tink-netboot's syslog receiver; stream [`SYSLOG_STREAM`], created and bounded by tink-netboot, its only writer ([`ensure_syslog_stream`]) |
//!
//! Tokens: agent ids (MAC addresses) and workflow ids (`namespace/name`) contain characters a
//! subject token, a KV key or a consumer name cannot hold.
//!
//! Who creates what: the controller (or an admin job) creates and updates every stream and
//! bucket ([`ensure_streams`]); every other service only finds them ([`verify_streams`]), as
//! its NATS user (deploy/nats/nats.yaml) may not create, change, delete or purge a stream; the
//! one exception is [`SYSLOG_STREAM`], which tink-netboot creates and updates with its own
//! bounds (module `syslog`). [`encode_token`] maps any id to a
//! reversible token over `[A-Za-z0-9_-]` (see its documentation).
//!
//! Modules, each depending only on those listed before it: `token` and `subjects` (names),
//! `error` (every error type), `config` ([`BusConfig`]), `codec` and `logs` (messages and their
//! checks), `streams` (every stream, bucket and consumer configuration), `setup` (create or
//! find them), `publish` (every publication), then `delivery` and `log_reader` (reading back).
#![forbid(unsafe_code)]

mod args;
mod auth;
mod codec;
mod config;
mod connect;
mod delivery;
mod dispatch_target;
mod error;
mod log_reader;
mod logs;
mod presence;
mod publish;
mod setup;
mod streams;
mod subjects;
mod syslog;
mod token;

pub use args::BusArgs;
pub use auth::{NatsAuth, NatsConnectError, connect, inbox_prefix};
pub use codec::{
    EventKind, command_workflow_id, decode_command, decode_event, encode_command, encode_event,
    event_kind, event_msg_id, validate_command, validate_event,
};
pub use config::BusConfig;
pub use connect::{PING_INTERVAL, ServiceConnection, StreamSetup, wait_for_streams};
pub use delivery::{
    DeliveryError, Withdrawal, command_queued, delete_command, dispatch_forwarded,
    dispatch_received, dispatch_received_by, next_command, queued_command, withdraw_command,
};
pub use dispatch_target::DispatchTarget;
pub use error::{BusError, CodecError, InvalidMessage};
pub use log_reader::{
    LogReadError, LogSelection, NOT_DISPATCHED_HEADER, ReadLine, ReadOptions, ReadSummary,
    SelectionError, read_logs,
};
pub use logs::{
    LOGS_ALL, LOGS_PREFIX, LogDeduplicator, MAX_ACTION_ID_LEN, MAX_BATCH_BYTES, MAX_BATCH_LINES,
    action_token, decode_log_batch, encode_log_batch, ids_from_logs_subject, log_batch_msg_id,
    logs_subject, logs_workflow_filter, validate_log_batch,
};
pub use presence::{
    Presence, ReplicaHeartbeat, STALE_PRESENCE_PURGE_AFTER_TTLS, fresh, last_alive, replica_key,
};
pub use publish::{
    ENROLLMENT_HEADER, INVENTORY_REQUEST_HEADER, MAX_INVENTORY_BYTES, MAX_INVENTORY_REQUEST_ID,
    MSG_ID_HEADER, check_inventory_request_id, headers_with, inventory_msg_id, publish_command,
    publish_enrollment, publish_event, publish_event_with_headers, publish_inventory,
    publish_log_batch,
};
pub use setup::{Bus, ensure_streams, verify_streams};
pub use streams::{
    ADMITTED_AGENTS_BUCKET, ADMITTED_AGENTS_STREAM, AGENT_SECRET_MISSING, AGENT_SECRETS_BUCKET,
    AGENT_SECRETS_STREAM, AGENT_SECRETS_USED_BUCKET, AGENT_SECRETS_USED_STREAM,
    CONTROLLER_EVENTS_CONSUMER, CONTROLLER_INVENTORY_CONSUMER, DISPATCH_STREAM,
    DISPATCH_TARGETS_BUCKET, DISPATCH_TARGETS_STREAM, EVENTS_STREAM, INVENTORY_STREAM, LOGS_STREAM,
    PRESENCE_BUCKET, PRESENCE_STREAM, REPLICAS_BUCKET, REPLICAS_STREAM,
    admitted_agents_stream_config, agent_secrets_stream_config, agent_secrets_used_stream_config,
    dispatch_stream_config, dispatch_targets_stream_config, events_consumer_config,
    events_stream_config, inventory_consumer_config, inventory_stream_config, logs_stream_config,
    presence_stream_config, replicas_stream_config,
};
pub use subjects::{
    DISPATCH_ALL, DISPATCH_PREFIX, EVENTS_ALL, EVENTS_PREFIX, INVENTORY_ALL, INVENTORY_PREFIX,
    INVENTORY_REQUEST_ALL, INVENTORY_REQUEST_PREFIX, TAKEOVER_ALL, TAKEOVER_PREFIX,
    agent_from_dispatch_subject, agent_from_inventory_subject, dispatch_subject, events_subject,
    inventory_request_subject, inventory_subject, takeover_subject, workflow_from_events_subject,
};
pub use syslog::{
    FACILITY_NAMES, MAX_HARDWARE_ID_LEN, SEVERITY_NAMES, SYSLOG_ALL, SYSLOG_PREFIX, SYSLOG_STREAM,
    SyslogLimits, SyslogLine, SyslogRead, SyslogReadError, SyslogSummary, ensure_syslog_stream,
    read_syslog, syslog_stream_config, syslog_subject,
};
pub use token::{
    MAX_AGENT_ID_LEN, MAX_WORKFLOW_ID_LEN, TokenError, agent_token, decode_token, encode_token,
    workflow_token,
};

/// The protocol types, re-exported for convenience.
pub use tink_proto::workflow::v2 as proto;
