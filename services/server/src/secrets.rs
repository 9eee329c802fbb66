//! Per-machine pre-shared secrets, for sites that want agent identity strict.
//!
//! An operator references a Secret from a Hardware (`tinkerbell.org/agent-secret: <Secret
//! name>`, key `secret`); the controller publishes the SHA-256 of its value into the
//! [`tink_bus::AGENT_SECRETS_BUCKET`] for each of the machine's agent ids, and Hegel hands the
//! value to the machine in its boot parameters (`tink_agent_secret=`). Every stream and every
//! event of such an agent must then carry the secret in `x-tink-agent-secret`, on top of its
//! certificate or session token: an impostor on the provisioning network that knows the MAC
//! cannot even take the first session of a freshly booted machine.
//!
//! Each replica keeps the bucket in memory ([`KvMirror`]). The replica turns ready only once
//! it has loaded the bucket, and calls before that are answered UNAVAILABLE (the agent
//! retries): a replica never admits an agent because it has not read its secret yet.

use tonic::Status;

use crate::mirror::KvMirror;

/// The metadata key carrying the machine's pre-shared secret.
pub const SECRET_HEADER: &str = "x-tink-agent-secret";

/// The agent secrets this replica knows: agent token -> hex SHA-256 of the secret.
#[derive(Debug)]
pub struct AgentSecrets {
    /// The mirror of [`tink_bus::AGENT_SECRETS_BUCKET`].
    pub mirror: KvMirror,
}

impl Default for AgentSecrets {
    fn default() -> Self {
        AgentSecrets {
            mirror: KvMirror::new(tink_bus::AGENT_SECRETS_BUCKET),
        }
    }
}

impl AgentSecrets {
    /// Checks the secret a request presents for the agent with bus token `token`. Agents
    /// without an entry need none.
    pub fn check(
        &self,
        token: &str,
        agent_id: &str,
        presented: Option<&str>,
    ) -> Result<(), Status> {
        if !self.mirror.is_loaded() {
            return Err(Status::unavailable(
                "this server replica has not loaded the agent secrets yet; retry",
            ));
        }
        let Some(expected) = self.mirror.get(token) else {
            return Ok(());
        };
        match presented.filter(|s| !s.is_empty()) {
            Some(secret) if crate::auth::same_hash(&crate::auth::token_hash(secret), &expected) => {
                Ok(())
            }
            Some(_) => Err(Status::permission_denied(format!(
                "`{SECRET_HEADER}`: not agent {agent_id}'s pre-shared secret (its Hardware's tinkerbell.org/agent-secret Secret)"
            ))),
            None => Err(Status::permission_denied(format!(
                "agent {agent_id} requires its pre-shared secret in `{SECRET_HEADER}` (its Hardware references one with tinkerbell.org/agent-secret; the boot parameter tink_agent_secret carries it)"
            ))),
        }
    }

    /// The secret a request's metadata presents.
    pub fn presented(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
        metadata
            .get(SECRET_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}
