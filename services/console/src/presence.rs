//! Agent presence on the machine tiles (optional: only with `--nats-url`): a watch on the
//! presence KV bucket the servers write (`tink_presence`, one entry per connected agent,
//! refreshed every heartbeat), as the controller keeps it. A machine's agent is `connected`
//! when an agent id of its Hardware (a MAC) has an entry younger than the bucket's TTL,
//! `offline` otherwise, `unknown` when presence is not configured. The watch returns the
//! changes it sees ([`AgentChanged`]: an agent connected or left) to its caller, which pushes
//! the machine's tile again (the console's `feed::Feed`); an entry that just expires
//! (a dead server) shows at the next page view.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use jiff::Timestamp;
use tink_api::v1alpha2::Hardware;
use tokio_util::sync::CancellationToken;

/// Pause before connecting or watching again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// Where presence comes from.
#[derive(Debug, Clone)]
pub struct PresenceConfig {
    /// NATS URL(s).
    pub nats_url: String,
    /// How to authenticate.
    pub auth: tink_bus::NatsAuth,
    /// The bucket's TTL: an entry older than this is stale.
    pub ttl: Duration,
}

/// An agent connected or left: the (normalised) agent id, a MAC of its machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChanged(pub String);

/// What is known about agents.
#[derive(Debug, Default)]
pub struct Presence {
    enabled: std::sync::atomic::AtomicBool,
    ttl: RwLock<Duration>,
    /// Normalised agent id -> (last heartbeat, connected).
    agents: RwLock<HashMap<String, (Timestamp, bool)>>,
}

impl Presence {
    /// Turns presence on with `ttl`.
    pub fn enable(&self, ttl: Duration) {
        *self.ttl.write().unwrap_or_else(|e| e.into_inner()) = ttl;
        self.enabled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// `connected`, `offline` or `unknown` for the agent of `hw`.
    pub fn of(&self, hw: &Hardware) -> &'static str {
        if !self.enabled.load(std::sync::atomic::Ordering::Acquire) {
            return "unknown";
        }
        let ttl = *self.ttl.read().unwrap_or_else(|e| e.into_inner());
        let now = Timestamp::now();
        let agents = self.agents.read().unwrap_or_else(|e| e.into_inner());
        let connected = tink_workflow::agent_ids(&hw.spec).iter().any(|id| {
            agents.get(id).is_some_and(|(beat, connected)| {
                *connected && now.duration_since(*beat).as_secs_f64() <= ttl.as_secs_f64()
            })
        });
        if connected { "connected" } else { "offline" }
    }

    /// Records an entry; whether the agent's connected state changed.
    pub fn observe(&self, agent: &str, heartbeat: Option<Timestamp>) -> bool {
        let id = tink_workflow::normalize_agent_id(agent);
        let mut agents = self.agents.write().unwrap_or_else(|e| e.into_inner());
        match heartbeat {
            Some(beat) => {
                let was = agents.insert(id, (beat.min(Timestamp::now()), true));
                !was.is_some_and(|(_, c)| c)
            }
            None => match agents.get_mut(&id) {
                Some(entry) if entry.1 => {
                    entry.1 = false;
                    true
                }
                _ => false,
            },
        }
    }
}

/// Watches the bucket until `shutdown`, reconnecting after failures, keeping `presence`
/// current; hands every agent that connected or left to `changed`. The connection is handed to
/// `syslog` too (machines' boot logs on their pages).
pub async fn watch(
    config: PresenceConfig,
    presence: Arc<Presence>,
    syslog: Arc<crate::syslog::SyslogSource>,
    mut changed: impl FnMut(AgentChanged) + Send,
    shutdown: CancellationToken,
) {
    presence.enable(config.ttl);
    syslog.configure();
    while !shutdown.is_cancelled() {
        let client = match tink_bus::connect(&config.nats_url, &config.auth, || {
            async_nats::ConnectOptions::new().ping_interval(tink_bus::PING_INTERVAL)
        })
        .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot connect to NATS for agent presence; retrying");
                tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => continue }
            }
        };
        let js = async_nats::jetstream::new(client);
        // The machine pages read boot logs (syslog) over the same connection.
        syslog.connected(js.clone());
        loop {
            let bucket = match js.get_key_value(tink_bus::PRESENCE_BUCKET).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!(error = %e, "no presence bucket yet; retrying");
                    tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => continue }
                }
            };
            let mut entries = match bucket.watch_with_history(">").await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the presence bucket; retrying");
                    tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => continue }
                }
            };
            loop {
                let entry = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    e = entries.next() => e,
                };
                match entry {
                    Some(Ok(entry)) => {
                        if let Some(c) = observe(&presence, entry) {
                            changed(c);
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "presence watch failed; watching again");
                        break;
                    }
                    None => break,
                }
            }
            tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => {} }
        }
    }
}

/// Records one entry of the bucket; the change when the agent connected or left.
fn observe(presence: &Presence, entry: kv::Entry) -> Option<AgentChanged> {
    let agent = tink_bus::decode_token(&entry.key).ok()?;
    let beat = match entry.operation {
        kv::Operation::Put => Some(tink_bus::Presence::from_bytes(&entry.value).ok()?.heartbeat),
        kv::Operation::Delete | kv::Operation::Purge => None,
    };
    presence
        .observe(&agent, beat)
        .then(|| AgentChanged(tink_workflow::normalize_agent_id(&agent)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_machine_is_connected_while_an_agent_id_of_it_has_a_fresh_entry() {
        let hw: Hardware = tink_api::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m", "namespace": "a"},
            "spec": {"networkInterfaces": {"02:00:00:00:00:01": {}, "02:00:00:00:00:02": {}}},
        }))
        .unwrap();
        let p = Presence::default();
        assert_eq!(p.of(&hw), "unknown");
        p.enable(Duration::from_secs(30));
        assert_eq!(p.of(&hw), "offline");
        assert!(p.observe("02:00:00:00:00:02", Some(Timestamp::now())));
        assert_eq!(p.of(&hw), "connected");
        assert!(
            !p.observe("02:00:00:00:00:02", Some(Timestamp::now())),
            "a heartbeat changes nothing"
        );
        assert!(p.observe("02:00:00:00:00:02", None));
        assert_eq!(p.of(&hw), "offline");
        let old = Timestamp::now() - jiff::SignedDuration::from_secs(60);
        p.observe("02:00:00:00:00:01", Some(old));
        assert_eq!(p.of(&hw), "offline", "a stale entry (its server died)");
    }
}
