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
//! Each replica keeps the bucket in memory through a watch (no NATS request per call). The
//! replica turns ready only once the watch has loaded the bucket, and calls before that are
//! answered UNAVAILABLE (the agent retries): a replica never admits an agent because it has
//! not read its secret yet.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{debug, warn};

/// The metadata key carrying the machine's pre-shared secret.
pub const SECRET_HEADER: &str = "x-tink-agent-secret";

/// Pause before watching the bucket again after a failure.
const REWATCH_DELAY: Duration = Duration::from_secs(1);

/// The agent secrets this replica knows: agent token -> hex SHA-256 of the secret.
#[derive(Debug, Default)]
pub struct AgentSecrets {
    hashes: RwLock<HashMap<String, String>>,
    loaded: AtomicBool,
    loaded_notify: tokio::sync::Notify,
}

impl AgentSecrets {
    /// Waits until the bucket has been read once (the replica turns ready only then).
    pub async fn wait_loaded(&self) {
        loop {
            let notified = self.loaded_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.loaded.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
        self.loaded_notify.notify_waiters();
    }

    /// Checks the secret a request presents for the agent with bus token `token`. Agents
    /// without an entry need none.
    pub fn check(
        &self,
        token: &str,
        agent_id: &str,
        presented: Option<&str>,
    ) -> Result<(), Status> {
        if !self.loaded.load(Ordering::Acquire) {
            return Err(Status::unavailable(
                "this server replica has not loaded the agent secrets yet; retry",
            ));
        }
        let expected = {
            let hashes = self.hashes.read().unwrap_or_else(|e| e.into_inner());
            match hashes.get(token) {
                None => return Ok(()),
                Some(h) => h.clone(),
            }
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

    fn apply(&self, entry: kv::Entry) {
        let mut hashes = self.hashes.write().unwrap_or_else(|e| e.into_inner());
        match entry.operation {
            kv::Operation::Put => {
                let value = String::from_utf8_lossy(&entry.value).trim().to_string();
                hashes.insert(entry.key, value);
            }
            kv::Operation::Delete | kv::Operation::Purge => {
                hashes.remove(&entry.key);
            }
        }
    }

    /// Mirrors the bucket until `shutdown`; marks the secrets loaded once the watch delivered
    /// every stored entry.
    pub async fn watch(&self, bucket: kv::Store, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let mut watch = match bucket.watch_with_history(">").await {
                Ok(w) => w,
                Err(e) => {
                    warn!(error = %e, "cannot watch the agent secrets bucket; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(REWATCH_DELAY) => continue,
                    }
                }
            };
            // An empty bucket delivers nothing: loaded once the stream says nothing is pending.
            let pending = match bucket.status().await {
                Ok(s) => s.values(),
                Err(_) => 1,
            };
            if pending == 0 {
                self.set_loaded();
            }
            loop {
                let entry = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    e = watch.next() => e,
                };
                match entry {
                    Some(Ok(entry)) => {
                        let caught_up = entry.delta == 0;
                        self.apply(entry);
                        if caught_up {
                            self.set_loaded();
                        }
                    }
                    Some(Err(e)) => {
                        warn!(error = %e, "agent secrets watch failed; watching again");
                        break;
                    }
                    None => break,
                }
            }
            debug!("agent secrets watch ended; watching again");
        }
    }
}
