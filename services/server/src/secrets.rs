//! Per-machine pre-shared boot secrets, for sites that want agent identity strict.
//!
//! An operator references a Secret from a Hardware (`tinkerbell.org/agent-secret: <Secret
//! name>`, key `secret`); the controller derives the machine's boot secret from it (one value
//! per generation), publishes its SHA-256 into the [`tink_bus::AGENT_SECRETS_BUCKET`] for each
//! of the machine's agent ids, and Hegel hands the value to the machine in its boot parameters
//! (`tink_agent_secret=`). The value is needed once, to **create** a session (the trust-on-first-
//! use moment): an impostor on the provisioning network that knows the MAC cannot take the
//! first session of a freshly booted machine. Streams that present the live session's token or
//! a certificate, and every event and log batch, need no secret.
//!
//! The secret is single-use: the replica that lets it create a session records its hash in
//! [`tink_bus::AGENT_SECRETS_USED_BUCKET`] (compare-and-set on the agent's entry, before it
//! answers), and a later session created with a recorded value is refused (two replicas racing
//! with one value: one wins the compare-and-set). So a copy of `/proc/cmdline` read later by an
//! action is worth nothing; the controller moves the machine to the next value for its next
//! boot. The one cost: an agent whose session ended (expired, reset) in the same boot is
//! refused until the machine reboots, or an operator runs `tinkctl agent reset`, which also
//! purges the agent's exchanged entry.
//!
//! Each replica keeps the secrets bucket in memory ([`KvMirror`]). The replica turns ready only
//! once it has loaded the bucket, and calls before that are answered UNAVAILABLE (the agent
//! retries): a replica never admits an agent because it has not read its secret yet. The
//! exchanged bucket is read and written directly (once per new session).

use async_nats::jetstream::kv;
use tonic::Status;

use crate::mirror::KvMirror;

/// The metadata key carrying the machine's pre-shared secret.
pub const SECRET_HEADER: &str = "x-tink-agent-secret";

/// A secret a new session is created with, to record as exchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// Its hex SHA-256.
    pub hash: String,
    /// Whether it is the current generation's (listed first in the agent's entry).
    pub current: bool,
}

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
    /// Checks the secret a stream that creates a new session presents for the agent with bus
    /// token `token`: what to record as exchanged ([`Self::exchange`]), or None for agents
    /// without an entry (they need none). An entry lists the hashes accepted: the current
    /// generation's, then, for the agent that exchanged the previous generation's, that one's
    /// (accepted only once an operator reset the agent, see [`Self::exchange`]).
    pub fn check(
        &self,
        token: &str,
        agent_id: &str,
        presented: Option<&str>,
    ) -> Result<Option<Exchange>, Status> {
        let Some(expected) = self.entry(token)? else {
            return Ok(None);
        };
        match presented.filter(|s| !s.is_empty()) {
            Some(secret) => {
                let hash = crate::auth::token_hash(secret);
                // Every listed hash is compared (no early exit on a match).
                let position =
                    expected
                        .split_whitespace()
                        .enumerate()
                        .fold(None, |found, (i, h)| {
                            if crate::auth::same_hash(&hash, h) {
                                found.or(Some(i))
                            } else {
                                found
                            }
                        });
                match position {
                    Some(i) => Ok(Some(Exchange {
                        hash,
                        current: i == 0,
                    })),
                    None => Err(Status::permission_denied(format!(
                        "`{SECRET_HEADER}`: not agent {agent_id}'s boot secret (derived from its Hardware's tinkerbell.org/agent-secret Secret; each boot's iPXE script carries a new one)"
                    ))),
                }
            }
            None => Err(Status::permission_denied(format!(
                "agent {agent_id} requires its boot secret in `{SECRET_HEADER}` to start a session (its Hardware references one with tinkerbell.org/agent-secret; the boot parameter tink_agent_secret carries it)"
            ))),
        }
    }

    /// The agent's entry (the accepted hashes), if it has one.
    pub fn entry(&self, token: &str) -> Result<Option<String>, Status> {
        if !self.mirror.is_loaded() {
            return Err(Status::unavailable(
                "this server replica has not loaded the agent secrets yet; retry",
            ));
        }
        Ok(self.mirror.get(token))
    }

    /// Records that the agent with bus token `token` exchanged the secret `exchange` for a
    /// session, in `used` (the exchanged secrets bucket), or refuses the exchange when that
    /// secret was exchanged before (or another replica records it at the same moment). The
    /// previous generation's secret is accepted only while the agent has no entry (an operator
    /// reset it): it is the value the agent of the same boot holds, and it is refused in the
    /// moment between an exchange of the current one and the controller's rotation.
    pub async fn exchange(
        used: &kv::Store,
        token: &str,
        agent_id: &str,
        exchange: &Exchange,
    ) -> Result<(), Status> {
        let hash = exchange.hash.as_str();
        let already = || {
            Status::permission_denied(format!(
                "agent {agent_id}: this boot secret (`{SECRET_HEADER}`) was already exchanged for a session and is single-use; reboot the machine for a new one (its next iPXE script carries it), or let this boot in again with `tinkctl agent reset {agent_id}`"
            ))
        };
        let unavailable = |e: &dyn std::fmt::Display| {
            Status::unavailable(format!(
                "cannot record the exchange of the agent's boot secret: {e}"
            ))
        };
        let entry = used.entry(token).await.map_err(|e| unavailable(&e))?;
        let written = match entry {
            Some(e)
                if e.operation == kv::Operation::Put
                    && (!exchange.current
                        || crate::auth::same_hash(
                            String::from_utf8_lossy(&e.value).trim(),
                            hash,
                        )) =>
            {
                return Err(already());
            }
            Some(e) => used
                .update(token, hash.to_string().into(), e.revision)
                .await
                .map_err(|err| match err.kind() {
                    kv::UpdateErrorKind::WrongLastRevision => already(),
                    _ => unavailable(&err),
                }),
            None => used
                .create(token, hash.to_string().into())
                .await
                .map_err(|err| match err.kind() {
                    kv::CreateErrorKind::AlreadyExists => already(),
                    _ => unavailable(&err),
                }),
        };
        written.map(|_| ())
    }

    /// The secret a request's metadata presents.
    pub fn presented(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
        metadata
            .get(SECRET_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}
