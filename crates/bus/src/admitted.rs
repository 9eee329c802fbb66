//! The admitted agents bucket: which agent ids may connect at all.
//!
//! The controller writes one entry per agent id a Hardware names (the keys of
//! `spec.networkInterfaces`): agent token -> `<namespace>/<name>` of that Hardware. The servers
//! mirror it and refuse streams and events of any other id, so no stream, session, consumer or
//! presence entry exists for an id that names no machine, and a flood of made-up ids costs
//! nothing but a refusal.

use async_nats::jetstream::stream;

use crate::config::BusConfig;

/// The KV bucket of admitted agent ids (agent token -> Hardware `namespace/name`).
pub const ADMITTED_AGENTS_BUCKET: &str = "tink_admitted_agents";
/// The stream backing [`ADMITTED_AGENTS_BUCKET`].
pub const ADMITTED_AGENTS_STREAM: &str = "KV_tink_admitted_agents";

/// The stream backing the admitted agents bucket: a NATS KV bucket with file storage (written
/// only when a Hardware's agent ids change), one revision per key and no expiry.
pub fn admitted_agents_stream_config(config: &BusConfig) -> stream::Config {
    crate::config::kv_stream_config(
        ADMITTED_AGENTS_BUCKET,
        "tinkerbell admitted agents: agent token -> the Hardware naming it",
        config,
    )
}
