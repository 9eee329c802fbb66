//! The value of a dispatch targets bucket entry ([`crate::DISPATCH_TARGETS_BUCKET`]).

/// Where a dispatch went: the value of a [`crate::DISPATCH_TARGETS_BUCKET`] entry.
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
