//! Which agents are connected: a watch on the presence KV bucket.
//!
//! Entries are written by the server holding an agent's stream and refreshed every heartbeat;
//! an agent counts as connected while its last heartbeat is younger than the bucket's TTL (an
//! entry that expires produces no watch notification). When an agent appears (or comes back
//! after its entry went stale), the Pending Workflows of its machine are woken.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use jiff::Timestamp;
use tink_workflow::{AgentSeen, normalize_agent_id};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::locks::{read, write};
use crate::metrics::Metrics;
use crate::wake::Wake;

/// Pause before watching again after a failure.
const REWATCH_DELAY: Duration = Duration::from_secs(1);

/// An agent as the presence bucket shows it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The id as the agent presented it (the dispatch subject is built from it).
    pub presented: String,
    /// Its last heartbeat (for a disconnected agent: when its stream ended).
    pub heartbeat: Timestamp,
    /// The instance id of the agent process holding the stream, if it sends one.
    pub instance: Option<String>,
    /// Whether a stream is open (the entry was not deleted).
    pub connected: bool,
}

/// What this term has seen of each agent.
pub(crate) struct Presence {
    /// The presence bucket's TTL: an entry older than this is stale.
    ttl: Duration,
    /// How long a silent agent is remembered.
    forget_after: Duration,
    /// When this term began: the last sign of life assumed for an agent not seen since.
    term_started: Timestamp,
    /// Normalised agent id -> presence.
    seen: RwLock<HashMap<String, Seen>>,
}

impl Presence {
    pub fn new(ttl: Duration, forget_after: Duration) -> Self {
        Self {
            ttl,
            forget_after,
            term_started: Timestamp::now(),
            seen: RwLock::new(HashMap::new()),
        }
    }

    /// What presence shows of an agent; one not seen in this term counts as last seen when the
    /// term began.
    pub fn agent_seen(&self, agent: &str) -> AgentSeen {
        let presence = read(&self.seen);
        match presence.get(&normalize_agent_id(agent)) {
            Some(seen) => AgentSeen {
                instance: seen.instance.clone(),
                last_seen: if seen.connected {
                    // Connected: alive as of its latest heartbeat, or now if that is recent.
                    let age = Timestamp::now().duration_since(seen.heartbeat);
                    if age.as_secs_f64() <= self.ttl.as_secs_f64() {
                        Timestamp::now()
                    } else {
                        seen.heartbeat
                    }
                } else {
                    seen.heartbeat
                }
                .max(self.term_started),
            },
            None => AgentSeen {
                instance: None,
                last_seen: self.term_started,
            },
        }
    }

    /// Whether the agent may receive a command now: its presence entry is fresh. Returns the
    /// id as the agent presented it.
    pub fn connected(&self, normalized: &str, now: Timestamp) -> Option<String> {
        let presence = read(&self.seen);
        let seen = presence.get(normalized).filter(|s| s.connected)?;
        let age = now.duration_since(seen.heartbeat);
        (age.as_secs_f64() <= self.ttl.as_secs_f64()).then(|| seen.presented.clone())
    }

    /// Records a heartbeat; returns whether the agent is newly connected and whether another
    /// instance of it holds the stream now.
    fn put(&self, normalized: &str, seen: Seen, now: Timestamp) -> (bool, bool) {
        let ttl = self.ttl.as_secs_f64();
        let mut map = write(&self.seen);
        let old = map.get(normalized);
        let newly = old.is_none_or(|old| {
            !old.connected || now.duration_since(old.heartbeat).as_secs_f64() > ttl
        });
        let restarted = old.is_some_and(|old| old.instance != seen.instance);
        map.insert(normalized.to_string(), seen);
        (newly, restarted)
    }

    /// Records a stream that ended.
    fn gone(&self, normalized: &str) {
        let mut map = write(&self.seen);
        // Kept (disconnected), so the time it left counts towards AgentLost.
        if let Some(seen) = map.get_mut(normalized) {
            seen.connected = false;
            seen.heartbeat = Timestamp::now();
        }
    }

    /// Forgets agents not seen for `forget_after`.
    pub fn prune(&self) {
        let forget = self.forget_after.as_secs_f64();
        let now = Timestamp::now();
        write(&self.seen)
            .retain(|_, seen| now.duration_since(seen.heartbeat).as_secs_f64() <= forget);
    }
}

/// Watches the bucket until `term` is cancelled; `loaded` fires once the watch is established.
pub(crate) async fn run(
    presence: &Presence,
    wake: &Wake,
    metrics: &Metrics,
    bucket: kv::Store,
    loaded: oneshot::Sender<()>,
    term: CancellationToken,
) {
    let mut loaded = Some(loaded);
    while !term.is_cancelled() {
        let mut watch = match bucket.watch_with_history(">").await {
            Ok(w) => w,
            Err(e) => {
                metrics.error("presence");
                warn!(error = %e, "cannot watch the presence bucket; retrying");
                tokio::select! {
                    _ = term.cancelled() => return,
                    _ = tokio::time::sleep(REWATCH_DELAY) => continue,
                }
            }
        };
        if let Some(tx) = loaded.take() {
            let _ = tx.send(());
        }
        loop {
            let entry = tokio::select! {
                _ = term.cancelled() => return,
                e = watch.next() => e,
            };
            match entry {
                Some(Ok(entry)) => observe(presence, wake, entry),
                Some(Err(e)) => {
                    metrics.error("presence");
                    warn!(error = %e, "presence watch failed; watching again");
                    break;
                }
                None => break,
            }
        }
    }
}

fn observe(presence: &Presence, wake: &Wake, entry: kv::Entry) {
    let Ok(agent) = tink_bus::decode_token(&entry.key) else {
        debug!(key = %entry.key, "ignoring a presence key that is not an agent token");
        return;
    };
    let normalized = normalize_agent_id(&agent);
    match entry.operation {
        kv::Operation::Put => {
            let entry = match tink_bus::Presence::from_bytes(&entry.value) {
                Ok(p) => p,
                Err(e) => {
                    debug!(agent = %agent, error = %e, "ignoring a malformed presence entry");
                    return;
                }
            };
            let now = Timestamp::now();
            let instance = Some(entry.instance).filter(|i| !i.is_empty());
            let seen = Seen {
                presented: entry.agent_id,
                heartbeat: entry.heartbeat.min(now),
                instance: instance.clone(),
                connected: true,
            };
            let (newly, restarted) = presence.put(&normalized, seen, now);
            if newly || restarted {
                debug!(agent = %agent, ?instance, newly, restarted, "agent connected");
                // Pending workflows may go; an active one may need a verdict (a new instance).
                wake.trigger_agent(&normalized);
            }
        }
        kv::Operation::Delete | kv::Operation::Purge => {
            presence.gone(&normalized);
            debug!(agent = %agent, "agent disconnected");
        }
    }
}
