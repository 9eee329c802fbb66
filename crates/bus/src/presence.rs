//! Presence: which agent's stream is held by which server replica, and whether that replica is
//! alive.
//!
//! Two buckets, so an idle fleet costs one write per server replica per heartbeat instead of
//! one per agent:
//! - [`crate::PRESENCE_BUCKET`]: one [`Presence`] entry per connected agent, written by the
//!   server replica holding its stream when the stream opens (and again only if it is lost,
//!   e.g. with a NATS restart), deleted when the stream ends. No TTL: the entry of an idle agent
//!   is never rewritten.
//! - [`crate::REPLICAS_BUCKET`]: one [`ReplicaHeartbeat`] per server replica, rewritten every
//!   [`BusConfig::presence_heartbeat`](crate::BusConfig::presence_heartbeat), expiring after
//!   [`BusConfig::presence_ttl`](crate::BusConfig::presence_ttl).
//!
//! An agent is connected iff its entry exists and is alive ([`Presence::last_alive`] within the
//! TTL): the replica the entry names, in the process the entry names (`replicaInstance`), has
//! a fresh heartbeat. A replica that dies leaves its agents' entries behind; readers count them
//! offline once its heartbeat is older than the TTL, and the controller's leader deletes them
//! after [`STALE_PRESENCE_PURGE_AFTER_TTLS`] TTLs.
//!
//! Compatibility: servers from before per-replica heartbeats refreshed each entry's own
//! `heartbeat` and wrote no `replicaInstance`; such an entry counts by its own heartbeat alone,
//! so both kinds of servers can run side by side during a rolling upgrade (the controller, which
//! creates the buckets, goes first: a new server waits, not ready, until the replicas bucket
//! exists).

use serde::{Deserialize, Serialize};

/// The controller's leader deletes a presence entry that has not been alive for this many
/// presence TTLs (its replica died, or was cut off from NATS and ended its streams after one
/// TTL).
pub const STALE_PRESENCE_PURGE_AFTER_TTLS: u32 = 3;

/// The value of a presence KV entry (JSON), keyed by the agent's token.
///
/// Written by the server holding the agent's stream when it opens and deleted when the stream
/// ends; its liveness is the heartbeat of the replica it names (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Presence {
    /// The agent id as the agent presented it.
    pub agent_id: String,
    /// The server replica holding the stream (its `--replica-id`, e.g. the pod name).
    pub server: String,
    /// The id of this stream; a newer stream for the same agent has another one.
    pub session: String,
    /// When the stream opened.
    pub connected_since: jiff::Timestamp,
    /// When the entry was written (servers from before per-replica heartbeats refreshed it
    /// every heartbeat; current servers write it once).
    pub heartbeat: jiff::Timestamp,
    /// The process of the replica holding the stream ([`ReplicaHeartbeat::instance`]): the entry
    /// is alive while that replica's heartbeat carries this instance. Empty in entries of
    /// servers from before per-replica heartbeats (they count by `heartbeat`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replica_instance: String,
    /// The agent process's `instance_id` (a new value after every restart of the agent);
    /// empty when the agent does not send one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance: String,
    /// The hex SHA-256 of the session token the server issued to this agent (the token itself
    /// is never stored); empty for a session authenticated otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_sha256: String,
    /// The session was authenticated with a client certificate naming the agent: only such a
    /// certificate may open another stream for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub certificate: bool,
}

impl Presence {
    /// The JSON bytes stored in the bucket.
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Serializing this plain struct of strings and timestamps cannot fail.
        serde_json::to_vec(self)
            .map(bytes::Bytes::from)
            .unwrap_or_default()
    }

    /// Parses an entry's value.
    pub fn from_bytes(value: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(value)
    }

    /// The last time this entry is known to have been alive, given the latest heartbeat seen of
    /// the replica it names (`None` when there is none): that heartbeat when it is of the
    /// entry's replica process, else (another process of the same replica id, which does not
    /// hold this stream, or an entry of an older server) the entry's own `heartbeat`.
    pub fn last_alive(&self, replica: Option<&ReplicaHeartbeat>) -> jiff::Timestamp {
        last_alive(
            self.heartbeat,
            &self.server,
            &self.replica_instance,
            replica,
        )
    }

    /// Whether the entry is alive at `now`: [`Presence::last_alive`] is at most `ttl` old.
    pub fn is_alive(
        &self,
        replica: Option<&ReplicaHeartbeat>,
        now: jiff::Timestamp,
        ttl: std::time::Duration,
    ) -> bool {
        fresh(self.last_alive(replica), now, ttl)
    }
}

/// [`Presence::last_alive`] from an entry's `heartbeat`, `server` and `replicaInstance` (for
/// readers that keep only those).
pub fn last_alive(
    heartbeat: jiff::Timestamp,
    server: &str,
    replica_instance: &str,
    replica: Option<&ReplicaHeartbeat>,
) -> jiff::Timestamp {
    let beat = replica
        .filter(|r| {
            !replica_instance.is_empty() && r.replica == server && r.instance == replica_instance
        })
        .map(|r| r.heartbeat);
    beat.map_or(heartbeat, |b| b.max(heartbeat))
}

/// Whether `at` is at most `ttl` before `now` (a time in the future, from a clock ahead of
/// ours, is fresh).
pub fn fresh(at: jiff::Timestamp, now: jiff::Timestamp, ttl: std::time::Duration) -> bool {
    now.duration_since(at).as_secs_f64() <= ttl.as_secs_f64()
}

/// The value of a server replica's heartbeat entry (JSON) in [`crate::REPLICAS_BUCKET`], keyed
/// by [`replica_key`]: rewritten every
/// [`BusConfig::presence_heartbeat`](crate::BusConfig::presence_heartbeat) while the replica
/// reaches NATS; expires after [`BusConfig::presence_ttl`](crate::BusConfig::presence_ttl).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaHeartbeat {
    /// The replica id (`--replica-id`, the pod name), as presence entries name it in `server`.
    pub replica: String,
    /// A random id of this process of the replica (a restarted replica has a new one, so the
    /// entries its previous process left behind do not come alive again).
    pub instance: String,
    /// When the process started.
    pub started: jiff::Timestamp,
    /// When this heartbeat was written.
    pub heartbeat: jiff::Timestamp,
}

impl ReplicaHeartbeat {
    /// The JSON bytes stored in the bucket.
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Serializing this plain struct of strings and timestamps cannot fail.
        serde_json::to_vec(self)
            .map(bytes::Bytes::from)
            .unwrap_or_default()
    }

    /// Parses an entry's value.
    pub fn from_bytes(value: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(value)
    }
}

/// The key of a replica's heartbeat in [`crate::REPLICAS_BUCKET`]: its id as a token (any id
/// fits a KV key that way, see [`crate::encode_token`]).
pub fn replica_key(replica_id: &str) -> String {
    crate::token::encode_token(replica_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_as_camel_case_json() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let presence = Presence {
            agent_id: "aa:bb".into(),
            server: "server-0".into(),
            session: "s1".into(),
            connected_since: now,
            heartbeat: now,
            replica_instance: String::new(),
            instance: String::new(),
            token_sha256: String::new(),
            certificate: false,
        };
        let bytes = presence.to_bytes();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains("\"agentId\":\"aa:bb\""), "{text}");
        assert!(
            text.contains("\"connectedSince\":\"2023-11-14T22:13:20Z\""),
            "{text}"
        );
        assert_eq!(Presence::from_bytes(&bytes).unwrap(), presence);
        assert!(Presence::from_bytes(b"{").is_err());
        assert!(
            !text.contains("replicaInstance"),
            "omitted when empty: {text}"
        );
    }

    fn at(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn entry(server: &str, replica_instance: &str, heartbeat: i64) -> Presence {
        Presence {
            agent_id: "aa:bb".into(),
            server: server.into(),
            session: "s1".into(),
            connected_since: at(0),
            heartbeat: at(heartbeat),
            replica_instance: replica_instance.into(),
            instance: String::new(),
            token_sha256: String::new(),
            certificate: false,
        }
    }

    fn beat(replica: &str, instance: &str, heartbeat: i64) -> ReplicaHeartbeat {
        ReplicaHeartbeat {
            replica: replica.into(),
            instance: instance.into(),
            started: at(0),
            heartbeat: at(heartbeat),
        }
    }

    #[test]
    fn an_entry_lives_by_the_heartbeat_of_its_replica_process() {
        let ttl = std::time::Duration::from_secs(30);
        let e = entry("server-a", "p1", 0);
        // Written once at 0, its replica beating at 100: alive at 110, not at 131.
        let b = beat("server-a", "p1", 100);
        assert_eq!(e.last_alive(Some(&b)), at(100));
        assert!(e.is_alive(Some(&b), at(110), ttl));
        assert!(!e.is_alive(Some(&b), at(131), ttl));
        // No heartbeat of its replica at all: only its own time counts.
        assert_eq!(e.last_alive(None), at(0));
        assert!(e.is_alive(None, at(30), ttl));
        assert!(!e.is_alive(None, at(31), ttl));
        // The replica restarted (another process): the old process's entries stay dead.
        let restarted = beat("server-a", "p2", 100);
        assert_eq!(e.last_alive(Some(&restarted)), at(0));
        // Another replica's heartbeat never counts.
        assert_eq!(e.last_alive(Some(&beat("server-b", "p1", 100))), at(0));
        // A heartbeat older than the entry (read before it): the entry's own time.
        assert_eq!(e.last_alive(Some(&beat("server-a", "p1", -5))), at(0));
    }

    #[test]
    fn an_entry_of_an_older_server_lives_by_its_own_refreshed_heartbeat() {
        let ttl = std::time::Duration::from_secs(30);
        // Older servers wrote no replicaInstance and refreshed `heartbeat` themselves.
        let old: Presence = serde_json::from_str(
            r#"{"agentId":"aa:bb","server":"server-a","session":"s","connectedSince":"2023-11-14T22:13:20Z","heartbeat":"2023-11-14T22:15:00Z"}"#,
        )
        .unwrap();
        assert!(old.replica_instance.is_empty());
        let refreshed = old.heartbeat;
        assert_eq!(old.last_alive(Some(&beat("server-a", "", 1000))), refreshed);
        assert!(old.is_alive(None, refreshed + jiff::SignedDuration::from_secs(29), ttl));
        assert!(!old.is_alive(None, refreshed + jiff::SignedDuration::from_secs(31), ttl));
    }

    #[test]
    fn replica_heartbeats_round_trip_and_keys_are_tokens() {
        let b = beat("tink-server-7d9f/0", "p1", 5);
        assert_eq!(ReplicaHeartbeat::from_bytes(&b.to_bytes()).unwrap(), b);
        let key = replica_key("tink-server-7d9f/0");
        assert!(
            key.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{key}"
        );
        assert_eq!(crate::decode_token(&key).unwrap(), "tink-server-7d9f/0");
    }
}
