//! Which agents are connected: a watch on the presence KV bucket.
//!
//! Entries are written by the server holding an agent's stream and refreshed every heartbeat;
//! an agent counts as connected while its last heartbeat is younger than the bucket's TTL (an
//! entry that expires produces no watch notification). When an agent appears (or comes back
//! after its entry went stale), the Pending Workflows of its machine are woken.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use jiff::Timestamp;
use tink_bus::Presence;
use tink_workflow::normalize_agent_id;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::shared::{Seen, Shared};

/// Pause before watching again after a failure.
const REWATCH_DELAY: Duration = Duration::from_secs(1);

/// Watches the bucket until `term` is cancelled; `loaded` fires once the watch is established.
pub(crate) async fn run(
    shared: Arc<Shared>,
    bucket: kv::Store,
    loaded: oneshot::Sender<()>,
    term: CancellationToken,
) {
    let mut loaded = Some(loaded);
    while !term.is_cancelled() {
        let mut watch = match bucket.watch_with_history(">").await {
            Ok(w) => w,
            Err(e) => {
                shared.metrics.error("presence");
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
                Some(Ok(entry)) => observe(&shared, entry),
                Some(Err(e)) => {
                    shared.metrics.error("presence");
                    warn!(error = %e, "presence watch failed; watching again");
                    break;
                }
                None => break,
            }
        }
    }
}

fn observe(shared: &Shared, entry: kv::Entry) {
    let Ok(agent) = tink_bus::decode_token(&entry.key) else {
        debug!(key = %entry.key, "ignoring a presence key that is not an agent token");
        return;
    };
    let normalized = normalize_agent_id(&agent);
    match entry.operation {
        kv::Operation::Put => {
            let presence = match Presence::from_bytes(&entry.value) {
                Ok(p) => p,
                Err(e) => {
                    debug!(agent = %agent, error = %e, "ignoring a malformed presence entry");
                    return;
                }
            };
            let now = Timestamp::now();
            let ttl = shared.config.bus.presence_ttl.as_secs_f64();
            let instance = Some(presence.instance).filter(|i| !i.is_empty());
            let seen = Seen {
                presented: presence.agent_id,
                heartbeat: presence.heartbeat.min(now),
                instance: instance.clone(),
                connected: true,
            };
            let (newly, restarted) = {
                let mut map = shared.presence.write().unwrap_or_else(|e| e.into_inner());
                let old = map.get(&normalized);
                let newly = old.is_none_or(|old| {
                    !old.connected || now.duration_since(old.heartbeat).as_secs_f64() > ttl
                });
                let restarted = old.is_some_and(|old| old.instance != instance);
                map.insert(normalized.clone(), seen);
                (newly, restarted)
            };
            if newly || restarted {
                debug!(agent = %agent, ?instance, newly, restarted, "agent connected");
                // Pending workflows may go; an active one may need a verdict (a new instance).
                shared.trigger_agent(&normalized);
            }
        }
        kv::Operation::Delete | kv::Operation::Purge => {
            let mut map = shared.presence.write().unwrap_or_else(|e| e.into_inner());
            // Kept (disconnected), so the time it left counts towards AgentLost.
            if let Some(seen) = map.get_mut(&normalized) {
                seen.connected = false;
                seen.heartbeat = Timestamp::now();
            }
            debug!(agent = %agent, "agent disconnected");
        }
    }
}
