//! [`ensure_streams`] (the controller, or an admin job: creates or updates every stream and
//! bucket) and [`verify_streams`] (every other service: finds them, never creates or changes
//! one, as its NATS user may not), and the [`Bus`] handles both return.

use async_nats::jetstream::{self, kv, stream};

use crate::config::BusConfig;
use crate::error::BusError;
use crate::streams::{
    ADMITTED_AGENTS_BUCKET, AGENT_SECRETS_BUCKET, AGENT_SECRETS_USED_BUCKET, DISPATCH_STREAM,
    DISPATCH_TARGETS_BUCKET, EVENTS_STREAM, INVENTORY_STREAM, LOGS_STREAM, PRESENCE_BUCKET,
    REPLICAS_BUCKET, all_streams,
};

/// Handles on the bus's streams and bucket, made by [`ensure_streams`].
#[derive(Debug, Clone)]
pub struct Bus {
    /// The JetStream context they were made with.
    pub jetstream: jetstream::Context,
    /// The dispatch stream.
    pub dispatch: stream::Stream,
    /// The events stream.
    pub events: stream::Stream,
    /// The presence bucket (one entry per connected agent).
    pub presence: kv::Store,
    /// The server replica heartbeats bucket.
    pub replicas: kv::Store,
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
    /// The inventory stream (the latest hardware inventory of each agent).
    pub inventory: stream::Stream,
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
        replicas: bucket(jetstream, REPLICAS_BUCKET).await?,
        agent_secrets: bucket(jetstream, AGENT_SECRETS_BUCKET).await?,
        agent_secrets_used: bucket(jetstream, AGENT_SECRETS_USED_BUCKET).await?,
        dispatch_targets: bucket(jetstream, DISPATCH_TARGETS_BUCKET).await?,
        admitted_agents: bucket(jetstream, ADMITTED_AGENTS_BUCKET).await?,
        config: config.clone(),
        logs: get_stream(jetstream, LOGS_STREAM).await?,
        inventory: get_stream(jetstream, INVENTORY_STREAM).await?,
    })
}
