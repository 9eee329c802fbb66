//! Settings of the bus ([`BusConfig`]): stream limits, windows and timeouts every service is
//! given the same way (flags of the binaries, `crate::BusArgs`).

use std::time::Duration;

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
    /// How long a server replica's heartbeat (in [`crate::REPLICAS_BUCKET`]) counts: the agents
    /// whose presence entries name a replica with no heartbeat this fresh are offline, and a
    /// replica that could not store its heartbeat for this long ends its agents' streams.
    pub presence_ttl: Duration,
    /// How often each server replica stores its heartbeat (one write per replica, whatever the
    /// number of agents it holds).
    pub presence_heartbeat: Duration,
    /// How often a server reads an idle agent's queue in the dispatch stream even though no
    /// new command was announced (a backstop: announcements are core NATS messages, and one
    /// lost without a reconnect or a heartbeat loss, e.g. to a route down between two NATS
    /// nodes, delays that agent's command by at most this much).
    pub dispatch_recheck: Duration,
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
    /// The most bytes the inventory stream keeps (one inventory per agent, each at most 1 MiB
    /// and typically 10-100 KiB; the oldest agents' go first when full).
    pub inventory_max_bytes: i64,
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
            dispatch_recheck: Duration::from_secs(300),
            receipt_timeout: Duration::from_secs(30),
            logs_max_bytes: 1 << 30,
            logs_max_age: Duration::from_secs(7 * 24 * 3600),
            dispatch_targets_max_bytes: 64 << 20,
            inventory_max_bytes: 1 << 30,
        }
    }
}
