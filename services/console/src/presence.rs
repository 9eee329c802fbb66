//! Agent presence on the machine tiles (optional: only with `--nats-url`): watches of the
//! presence KV bucket the servers write (`tink_presence`, one entry per connected agent,
//! written when its stream opens and deleted when it ends) and of the server replicas'
//! heartbeats (`tink_replicas`), as the controller keeps them. A machine's agent is `connected`
//! when an agent id of its Hardware (a MAC) has an entry that is alive (the replica process it
//! names has a heartbeat younger than the TTL; an entry of a server from before per-replica
//! heartbeats: its own refreshed heartbeat), `offline` otherwise, `unknown` when presence is
//! not configured. The watch returns the changes it sees ([`AgentChanged`]: an agent connected
//! or left, or its replica started or stopped beating) to its caller, which pushes the
//! machine's tile again (the console's `feed::Feed`); a replica that stops beating is noticed
//! within a third of the TTL after its heartbeat went stale.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use jiff::Timestamp;
use tink_api::v1alpha2::Hardware;
use tink_bus::ReplicaHeartbeat;
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
    /// The heartbeat TTL: an entry whose replica has not beaten for this long is stale.
    pub ttl: Duration,
}

/// An agent connected or left: the (normalised) agent id, a MAC of its machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChanged(pub String);

/// An agent's entry as the console keeps it.
#[derive(Debug, Clone)]
struct Entry {
    /// The entry's own time.
    heartbeat: Timestamp,
    /// The replica holding the stream, and its process.
    server: String,
    replica_instance: String,
    /// The entry exists (was not deleted).
    connected: bool,
}

/// A replica's latest heartbeat and whether its agents were last reported alive.
#[derive(Debug, Clone)]
struct Replica {
    beat: ReplicaHeartbeat,
    alive: bool,
}

/// What is known about agents.
#[derive(Debug, Default)]
pub struct Presence {
    enabled: std::sync::atomic::AtomicBool,
    ttl: RwLock<Duration>,
    /// Normalised agent id -> its entry.
    agents: RwLock<HashMap<String, Entry>>,
    /// Replica id -> its latest heartbeat.
    replicas: RwLock<HashMap<String, Replica>>,
}

impl Presence {
    /// Turns presence on with `ttl`.
    pub fn enable(&self, ttl: Duration) {
        *self.ttl.write().unwrap_or_else(|e| e.into_inner()) = ttl;
        self.enabled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn ttl(&self) -> Duration {
        *self.ttl.read().unwrap_or_else(|e| e.into_inner())
    }

    /// `connected`, `offline` or `unknown` for the agent of `hw`.
    pub fn of(&self, hw: &Hardware) -> &'static str {
        if !self.enabled.load(std::sync::atomic::Ordering::Acquire) {
            return "unknown";
        }
        let ttl = self.ttl();
        let now = Timestamp::now();
        let agents = self.agents.read().unwrap_or_else(|e| e.into_inner());
        let replicas = self.replicas.read().unwrap_or_else(|e| e.into_inner());
        let connected = tink_workflow::agent_ids(&hw.spec).iter().any(|id| {
            agents.get(id).is_some_and(|e| {
                let beat = replicas.get(&e.server).map(|r| &r.beat);
                e.connected
                    && tink_bus::fresh(
                        tink_bus::last_alive(e.heartbeat, &e.server, &e.replica_instance, beat),
                        now,
                        ttl,
                    )
            })
        });
        if connected { "connected" } else { "offline" }
    }

    /// Records an agent's entry (`None`: deleted); whether the agent's connected state changed.
    pub fn observe(&self, agent: &str, entry: Option<&tink_bus::Presence>) -> bool {
        let id = tink_workflow::normalize_agent_id(agent);
        let mut agents = self.agents.write().unwrap_or_else(|e| e.into_inner());
        match entry {
            Some(p) => {
                let was = agents.insert(
                    id,
                    Entry {
                        heartbeat: p.heartbeat.min(Timestamp::now()),
                        server: p.server.clone(),
                        replica_instance: p.replica_instance.clone(),
                        connected: true,
                    },
                );
                !was.is_some_and(|e| e.connected)
            }
            None => match agents.get_mut(&id) {
                Some(entry) if entry.connected => {
                    entry.connected = false;
                    true
                }
                _ => false,
            },
        }
    }

    /// Records a replica heartbeat; the agents of that replica process when it was not alive
    /// before (their tiles turn connected).
    pub fn observe_replica(&self, beat: ReplicaHeartbeat) -> Vec<AgentChanged> {
        let now = Timestamp::now();
        let beat = ReplicaHeartbeat {
            heartbeat: beat.heartbeat.min(now),
            ..beat
        };
        let (replica, instance) = (beat.replica.clone(), beat.instance.clone());
        let alive = tink_bus::fresh(beat.heartbeat, now, self.ttl());
        let was_alive = {
            let mut replicas = self.replicas.write().unwrap_or_else(|e| e.into_inner());
            let was = replicas
                .get(&replica)
                .is_some_and(|r| r.alive && r.beat.instance == instance);
            replicas.insert(replica.clone(), Replica { beat, alive });
            was
        };
        if was_alive || !alive {
            return Vec::new();
        }
        self.agents_of(&replica, Some(&instance))
    }

    /// The agents of replicas whose heartbeat went stale since the last call (their tiles turn
    /// offline).
    pub fn expire(&self, now: Timestamp) -> Vec<AgentChanged> {
        let ttl = self.ttl();
        let stale: Vec<String> = {
            let mut replicas = self.replicas.write().unwrap_or_else(|e| e.into_inner());
            replicas
                .iter_mut()
                .filter(|(_, r)| r.alive && !tink_bus::fresh(r.beat.heartbeat, now, ttl))
                .map(|(id, r)| {
                    r.alive = false;
                    id.clone()
                })
                .collect()
        };
        stale
            .iter()
            .flat_map(|replica| self.agents_of(replica, None))
            .collect()
    }

    fn agents_of(&self, replica: &str, instance: Option<&str>) -> Vec<AgentChanged> {
        let agents = self.agents.read().unwrap_or_else(|e| e.into_inner());
        agents
            .iter()
            .filter(|(_, e)| {
                e.connected
                    && e.server == replica
                    && instance.is_none_or(|i| e.replica_instance == i)
            })
            .map(|(id, _)| AgentChanged(id.clone()))
            .collect()
    }
}

/// Watches the buckets until `shutdown`, reconnecting after failures, keeping `presence`
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
    let mut expiry = tokio::time::interval((config.ttl / 3).max(Duration::from_millis(100)));
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
            let buckets = async {
                let replicas = js.get_key_value(tink_bus::REPLICAS_BUCKET).await?;
                let bucket = js.get_key_value(tink_bus::PRESENCE_BUCKET).await?;
                Ok::<_, async_nats::jetstream::context::KeyValueError>((replicas, bucket))
            };
            let (replicas, bucket) = match buckets.await {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!(error = %e, "no presence buckets yet; retrying");
                    tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => continue }
                }
            };
            // Heartbeats first: entries are judged with them.
            let watches = async {
                let beats = replicas.watch_with_history(">").await?;
                let entries = bucket.watch_with_history(">").await?;
                Ok::<_, kv::WatchError>((beats, entries))
            };
            let (mut beats, mut entries) = match watches.await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the presence buckets; retrying");
                    tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => continue }
                }
            };
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = expiry.tick() => {
                        for c in presence.expire(Timestamp::now()) {
                            changed(c);
                        }
                    }
                    beat = beats.next() => match beat {
                        Some(Ok(entry)) => {
                            for c in observe_replica(&presence, entry) {
                                changed(c);
                            }
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "replicas watch failed; watching again");
                            break;
                        }
                        None => break,
                    },
                    entry = entries.next() => match entry {
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
                    },
                }
            }
            tokio::select! { _ = shutdown.cancelled() => return, _ = tokio::time::sleep(RETRY) => {} }
        }
    }
}

/// Records one entry of the presence bucket; the change when the agent connected or left.
fn observe(presence: &Presence, entry: kv::Entry) -> Option<AgentChanged> {
    let agent = tink_bus::decode_token(&entry.key).ok()?;
    let value = match entry.operation {
        kv::Operation::Put => Some(tink_bus::Presence::from_bytes(&entry.value).ok()?),
        kv::Operation::Delete | kv::Operation::Purge => None,
    };
    presence
        .observe(&agent, value.as_ref())
        .then(|| AgentChanged(tink_workflow::normalize_agent_id(&agent)))
}

/// Records one replica heartbeat; the agents it brings back.
fn observe_replica(presence: &Presence, entry: kv::Entry) -> Vec<AgentChanged> {
    if entry.operation != kv::Operation::Put {
        // A replica that shut down deleted its heartbeat: its entries go stale with the last
        // one (`expire`).
        return Vec::new();
    }
    match ReplicaHeartbeat::from_bytes(&entry.value) {
        Ok(beat) => presence.observe_replica(beat),
        Err(e) => {
            tracing::debug!(key = %entry.key, error = %e, "ignoring a malformed replica heartbeat");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(server: &str, instance: &str, heartbeat: Timestamp) -> tink_bus::Presence {
        tink_bus::Presence {
            agent_id: "02:00:00:00:00:02".into(),
            server: server.into(),
            session: "s".into(),
            connected_since: heartbeat,
            heartbeat,
            replica_instance: instance.into(),
            instance: String::new(),
            token_sha256: String::new(),
            certificate: false,
        }
    }

    fn beat(replica: &str, instance: &str, heartbeat: Timestamp) -> ReplicaHeartbeat {
        ReplicaHeartbeat {
            replica: replica.into(),
            instance: instance.into(),
            started: heartbeat,
            heartbeat,
        }
    }

    #[test]
    fn a_machine_is_connected_while_an_agent_id_of_it_has_a_live_entry() {
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
        let now = Timestamp::now();
        let old = now - jiff::SignedDuration::from_secs(60);
        // Written a minute ago, its replica beating now.
        assert!(
            p.observe_replica(beat("server-a", "p1", now)).is_empty(),
            "no agents of it yet"
        );
        assert!(p.observe("02:00:00:00:00:02", Some(&entry("server-a", "p1", old))));
        assert_eq!(p.of(&hw), "connected");
        assert!(
            !p.observe("02:00:00:00:00:02", Some(&entry("server-a", "p1", old))),
            "the same entry again changes nothing"
        );
        assert!(p.expire(now).is_empty(), "server-a is alive");
        // server-a stops beating: the tile turns offline once its heartbeat is stale.
        assert_eq!(
            p.expire(now + jiff::SignedDuration::from_secs(31)),
            [AgentChanged("02:00:00:00:00:02".into())]
        );
        p.observe_replica(beat("server-a", "p1", old));
        assert_eq!(p.of(&hw), "offline", "its replica's heartbeat is stale");
        // It beats again: connected, and the tile is pushed.
        assert_eq!(
            p.observe_replica(beat("server-a", "p1", now)),
            [AgentChanged("02:00:00:00:00:02".into())]
        );
        assert_eq!(p.of(&hw), "connected");
        // Another process of server-a does not hold the old process's streams.
        p.observe_replica(beat("server-a", "p2", now));
        assert_eq!(p.of(&hw), "offline");
        assert!(p.observe("02:00:00:00:00:02", None));
        assert_eq!(p.of(&hw), "offline");
        // An entry of an older server (no replica instance) counts by its own heartbeat.
        p.observe("02:00:00:00:00:01", Some(&entry("server-old", "", now)));
        assert_eq!(p.of(&hw), "connected");
        p.observe("02:00:00:00:00:01", Some(&entry("server-old", "", old)));
        assert_eq!(p.of(&hw), "offline", "a stale entry of an older server");
    }
}
