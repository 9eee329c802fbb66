//! The presence entry of a connected agent.

use serde::{Deserialize, Serialize};

/// The value of a presence KV entry (JSON), keyed by the agent's token.
///
/// Written by the server holding the agent's stream when it opens, refreshed every
/// [`BusConfig::presence_heartbeat`](crate::BusConfig::presence_heartbeat) and deleted when the
/// stream ends; an entry of a server that died expires after
/// [`BusConfig::presence_ttl`](crate::BusConfig::presence_ttl).
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
    /// The last refresh.
    pub heartbeat: jiff::Timestamp,
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
    }
}
