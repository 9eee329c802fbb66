//! The replica's own presence work: its heartbeat in the replicas bucket, and its watch of the
//! presence bucket.
//!
//! **Heartbeat.** Every [`tink_bus::BusConfig::presence_heartbeat`] the replica stores one
//! [`tink_bus::ReplicaHeartbeat`] under its id ([`tink_bus::replica_key`]): the liveness of
//! every agent entry it wrote (see `tink_bus`'s presence module). One write per replica per
//! period, whatever the number of agents: an idle agent costs no message at all. The replica
//! is ready only once a first heartbeat is stored. If it cannot store one for longer than
//! [`tink_bus::BusConfig::presence_ttl`] (NATS unreachable, or this replica cut off from the
//! cluster), readers count its agents offline by then; a stream held here only keeps the agent
//! from a replica that reaches NATS, so every stream ends with `Unavailable`
//! (`tink_server_streams_nats_lost`) and new streams are refused until a heartbeat is stored
//! again. The replica then beats under a new instance id: the entries of the streams it ended
//! could not be deleted without NATS, and must not come alive again with its heartbeat (the
//! controller deletes them once stale). On graceful shutdown the heartbeat is deleted after the
//! agents' entries.
//!
//! **Presence watch.** One watch of the presence bucket per replica (new changes only): a newer
//! entry of another session for an agent whose stream is here ends that stream (a takeover
//! whose core-NATS notice was missed, e.g. during a partition), a deleted entry ends it (a
//! reset). Each time the watch is (re)established (start, NATS reconnect, watch failure) every
//! session reads its entry again ([`crate::session::Shared::presence_resync`]), which covers the
//! changes made while no watch was running. Its messages are agents' connects and disconnects
//! only.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::session::Shared;

/// Pause before watching again after a failure.
const REWATCH: Duration = Duration::from_secs(1);
/// How long the heartbeat is given on shutdown.
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);

/// The heartbeat's state, shared with the sessions.
#[derive(Debug)]
pub(crate) struct BeatState {
    /// When this process started.
    pub started: Timestamp,
    /// When the last heartbeat was stored (monotonic).
    last: std::sync::Mutex<Option<Instant>>,
    /// No heartbeat stored for the TTL: streams were ended and new ones are refused.
    lost: AtomicBool,
    /// True once a first heartbeat is stored.
    stored: watch::Sender<bool>,
    /// Held while coming back from a NATS loss (one new instance id, before any new stream).
    recovery: tokio::sync::Mutex<()>,
}

impl Default for BeatState {
    fn default() -> Self {
        BeatState {
            started: Timestamp::now(),
            last: std::sync::Mutex::new(None),
            lost: AtomicBool::new(false),
            stored: watch::Sender::new(false),
            recovery: tokio::sync::Mutex::new(()),
        }
    }
}

impl BeatState {
    /// Whether no heartbeat was stored in the last `ttl` (or none at all), by this process's
    /// monotonic clock.
    pub fn stored_over(&self, ttl: Duration) -> bool {
        self.lock().is_none_or(|at| at.elapsed() > ttl)
    }

    /// Whether the replica has given up its streams for lack of NATS.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Waits until a first heartbeat is stored.
    pub async fn wait_stored(&self) {
        let mut stored = self.stored.subscribe();
        let _ = stored.wait_for(|s| *s).await;
    }

    fn lock(&self) -> Option<Instant> {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self) {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        self.stored.send_replace(true);
    }
}

impl Shared {
    /// Stores this replica's heartbeat now (bounded by a third of the TTL). On success a
    /// replica that had lost NATS accepts streams again, under a new instance id: the entries
    /// of the streams it ended (whose deletion failed without NATS) stay dead.
    pub(crate) async fn store_heartbeat(&self) -> Result<(), String> {
        let _recovering = if self.beat.is_lost() {
            let guard = self.beat.recovery.lock().await;
            if self.beat.is_lost() {
                let instance = self.new_replica_instance();
                info!(replica = %self.replica_id, %instance, "coming back from a NATS loss with a new instance id");
            }
            Some(guard)
        } else {
            None
        };
        let config = &self.bus.config;
        let now = Timestamp::now();
        let beat = tink_bus::ReplicaHeartbeat {
            replica: self.replica_id.clone(),
            instance: self.replica_instance(),
            started: self.beat.started,
            heartbeat: now,
        };
        let key = tink_bus::replica_key(&self.replica_id);
        // A third of the TTL (at least a period): a busy NATS that answers late still counts,
        // and a dead one is known well within the TTL.
        let limit = (config.presence_ttl / 3)
            .max(config.presence_heartbeat)
            .max(Duration::from_millis(100));
        match tokio::time::timeout(limit, self.bus.replicas.put(&key, beat.to_bytes())).await {
            Ok(Ok(_)) => {
                self.beat.record();
                if self.beat.lost.swap(false, Ordering::AcqRel) {
                    info!(replica = %self.replica_id, "heartbeat stored again; accepting agent streams");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        }
    }

    /// Whether the last stored heartbeat (or, before any, the start) is older than the TTL.
    fn heartbeat_overdue(&self, since_start: Instant) -> bool {
        let last = self.beat.lock().unwrap_or(since_start);
        last.elapsed() > self.bus.config.presence_ttl
    }
}

/// Stores the replica's heartbeat every period until `shutdown`; ends every stream once none
/// could be stored for the TTL. Never fails (a failure is the state it reports).
pub(crate) async fn heartbeat(shared: Arc<Shared>, shutdown: CancellationToken) {
    let period = shared
        .bus
        .config
        .presence_heartbeat
        .max(Duration::from_millis(10));
    let started = Instant::now();
    let mut reconnects = shared.reconnects.subscribe();
    let mut failures = 0u32;
    loop {
        match shared.store_heartbeat().await {
            Ok(()) => {
                if failures > 0 {
                    info!(
                        failures,
                        "replica heartbeat stored again; reading every agent's command queue"
                    );
                    // NATS was out of reach, maybe without a reconnect (a partition between
                    // NATS nodes): command announcements may have been lost.
                    shared
                        .commands_recheck
                        .send_modify(|n| *n = n.wrapping_add(1));
                }
                failures = 0;
            }
            Err(e) => {
                shared.metrics.error("replica_heartbeat");
                failures = failures.saturating_add(1);
                warn!(replica = %shared.replica_id, error = %e, failures, "cannot store the replica heartbeat");
            }
        }
        if shared.heartbeat_overdue(started) && !shared.beat.lost.swap(true, Ordering::AcqRel) {
            warn!(replica = %shared.replica_id, ttl = ?shared.bus.config.presence_ttl, sessions = shared.session_count(), "no replica heartbeat stored for the presence TTL: ending every agent stream, refusing new ones until NATS is back");
            shared.end_all_nats_lost();
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
            // Back from a NATS outage: beat at once (readers see the agents again sooner).
            changed = reconnects.changed() => if changed.is_err() { return },
        }
    }
}

/// Deletes the replica's heartbeat (graceful shutdown, after its agents' entries are gone).
pub(crate) async fn delete_heartbeat(shared: &Shared) {
    let key = tink_bus::replica_key(&shared.replica_id);
    match tokio::time::timeout(DELETE_TIMEOUT, shared.bus.replicas.delete(&key)).await {
        Ok(Ok(())) => debug!("replica heartbeat deleted"),
        Ok(Err(e)) => {
            warn!(error = %e, "cannot delete the replica heartbeat; it expires by itself")
        }
        Err(_) => warn!("deleting the replica heartbeat timed out; it expires by itself"),
    }
}

/// Watches the presence bucket until `shutdown`, handing each change to
/// [`Shared::on_presence_change`] and asking every session to read its entry again each time
/// the watch is (re)established. Watched again after a failure or a NATS reconnect.
pub(crate) async fn watch_presence(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut reconnects = shared.reconnects.subscribe();
    while !shutdown.is_cancelled() {
        reconnects.borrow_and_update();
        let mut watch = match shared.bus.presence.watch_all().await {
            Ok(w) => w,
            Err(e) => {
                shared.metrics.error("presence_watch");
                warn!(error = %e, "cannot watch the presence bucket; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(REWATCH) => continue,
                }
            }
        };
        // Changes made while no watch ran are read by the sessions themselves.
        shared
            .presence_resync
            .send_modify(|n| *n = n.wrapping_add(1));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = reconnects.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    debug!("NATS reconnected: watching presence again");
                    break;
                }
                entry = watch.next() => match entry {
                    Some(Ok(entry)) => shared.on_presence_change(&entry),
                    Some(Err(e)) => {
                        shared.metrics.error("presence_watch");
                        warn!(error = %e, "presence watch failed; watching again");
                        break;
                    }
                    None => {
                        shared.metrics.error("presence_watch");
                        warn!("presence watch ended; watching again");
                        break;
                    }
                },
            }
        }
    }
}
