//! Which agents are connected: watches of the presence and replicas KV buckets.
//!
//! A server replica writes an agent's entry when its stream opens and deletes it when it ends
//! (nothing while the agent is idle), and stores its own heartbeat in the replicas bucket every
//! heartbeat period (see `tink_bus`'s presence module). An agent counts as connected while its
//! entry exists and is alive: the replica process it names (`replicaInstance`) has a heartbeat
//! that reached this controller less than the TTL ago (an entry of a server from before
//! per-replica heartbeats: its own refreshed entry did). So the agents of a replica that died
//! count offline within the TTL of its last heartbeat, and their active workflows are supervised
//! from that time (AgentLost after the limit), though their entries are still there.
//!
//! Those entries are deleted by the leader ([`Presence::stale_entries`], every TTL, the first time
//! one TTL after the watches started, and only while the view is sound): an entry not alive for
//! [`tink_bus::STALE_PRESENCE_PURGE_AFTER_TTLS`] TTLs, with a compare-and-delete on the revision
//! the watch saw (a newer stream's entry is never deleted). A replica cut off from NATS ends its
//! streams after one TTL, so such an entry holds no stream.
//!
//! Freshness is measured on this process's monotonic clock from the moment an entry or a
//! heartbeat arrived, never by comparing a timestamp written by another host with our wall
//! clock: a wall clock stepped ahead by NTP, here or on a server, would otherwise make every
//! connected agent look stale and its workflow fail as `AgentLost` (the fault schedule's
//! `clock-jump` found it).
//!
//! Silence only counts while this controller's own view is sound. A probe compares each
//! bucket's stream with what its watch delivered: while a stream cannot be read, or a watch
//! lags behind what its stream held at the previous probe, the view is *blind*: nobody is
//! judged (`last_seen` is now) and no entry is deleted; once it is sound again, silence counts
//! from then. Watches that stay behind are started again. (The fault schedule found a
//! controller, healed after a cut from NATS, whose watch stayed silent for 20 s and which
//! declared a connected agent lost.)
//!
//! When an agent appears (or comes back after its entry, or its replica's heartbeat, went
//! stale), the Pending Workflows of its machine are woken.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures::StreamExt as _;
use jiff::Timestamp;
use tink_bus::ReplicaHeartbeat;
use tink_workflow::{AgentSeen, normalize_agent_id};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

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
    /// When its latest entry arrived (for a disconnected agent: when its stream ended), on
    /// this process's monotonic clock.
    pub received: Instant,
    /// The server replica holding the stream, and its process (empty for servers from before
    /// per-replica heartbeats).
    pub server: String,
    pub replica_instance: String,
    /// The instance id of the agent process holding the stream, if it sends one.
    pub instance: Option<String>,
    /// Whether a stream is open (the entry was not deleted).
    pub connected: bool,
    /// The entry's key and revision (the leader deletes it by them when it is stale).
    pub key: String,
    pub revision: u64,
}

/// A server replica's latest heartbeat as this controller received it.
#[derive(Clone, Debug)]
struct Replica {
    /// The replica's process ([`ReplicaHeartbeat::instance`]).
    instance: String,
    /// When the heartbeat arrived (monotonic).
    received: Instant,
}

/// What the watches of one bucket delivered, for the probe.
#[derive(Default)]
struct Delivered(AtomicU64);

impl Delivered {
    fn saw(&self, revision: u64) {
        self.0.fetch_max(revision, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What this term has seen of each agent and each server replica.
pub(crate) struct Presence {
    /// The heartbeat TTL: an entry not alive for this long is stale.
    ttl: Duration,
    /// How long a silent agent is remembered.
    forget_after: Duration,
    /// When this term began (monotonic): the last sign of life assumed for an agent not seen
    /// since.
    term_started: Instant,
    /// Normalised agent id -> presence.
    seen: RwLock<HashMap<String, Seen>>,
    /// Replica id -> its latest heartbeat.
    replicas: RwLock<HashMap<String, Replica>>,
    /// The highest stream sequence each watch delivered: agents' entries, replicas' heartbeats.
    entries_delivered: Delivered,
    beats_delivered: Delivered,
    /// Since when the view has been sound; `None` while it is blind.
    sound_since: RwLock<Option<Instant>>,
}

impl Presence {
    pub fn new(ttl: Duration, forget_after: Duration) -> Self {
        Self {
            ttl,
            forget_after,
            term_started: Instant::now(),
            seen: RwLock::new(HashMap::new()),
            replicas: RwLock::new(HashMap::new()),
            entries_delivered: Delivered::default(),
            beats_delivered: Delivered::default(),
            sound_since: RwLock::new(Some(Instant::now())),
        }
    }

    /// Records what a probe found: whether the view is sound now.
    fn probed(&self, sound: bool) {
        let mut since = write(&self.sound_since);
        match (sound, *since) {
            (true, None) => *since = Some(Instant::now()),
            (false, Some(_)) => *since = None,
            _ => {}
        }
    }

    /// When a connected agent's entry was last alive: the arrival of its replica process's
    /// latest heartbeat, or of the entry itself if later (or if the entry names no replica
    /// process this controller has heard, or one from before per-replica heartbeats).
    fn last_alive(&self, seen: &Seen) -> Instant {
        if seen.replica_instance.is_empty() {
            return seen.received;
        }
        read(&self.replicas)
            .get(&seen.server)
            .filter(|r| r.instance == seen.replica_instance)
            .map_or(seen.received, |r| r.received.max(seen.received))
    }

    fn alive(&self, seen: &Seen) -> bool {
        seen.connected && self.last_alive(seen).elapsed() <= self.ttl
    }

    /// What presence shows of an agent; one not seen in this term counts as last seen when the
    /// term began.
    pub fn agent_seen(&self, agent: &str) -> AgentSeen {
        let presence = read(&self.seen);
        // Monotonic instants told as wall-clock times now: a step of the wall clock moves
        // "now" and "last seen" together, so it neither ages nor rejuvenates anyone.
        let now = Timestamp::now();
        let wall = |at: Instant| now.checked_sub(at.elapsed()).unwrap_or(now);
        // Blind: nobody is judged. Sound: silence counts from when it became so at the earliest.
        let floor = (*read(&self.sound_since)).map(|since| since.max(self.term_started));
        match presence.get(&normalize_agent_id(agent)) {
            Some(seen) => AgentSeen {
                instance: seen.instance.clone(),
                // Connected and alive: alive now. Connected to a replica gone silent: as of its
                // latest heartbeat. Disconnected: as of when its stream ended.
                last_seen: match floor {
                    None => now,
                    Some(_) if self.alive(seen) => now,
                    Some(floor) if seen.connected => wall(self.last_alive(seen).max(floor)),
                    Some(floor) => wall(seen.received.max(floor)),
                },
            },
            None => AgentSeen {
                instance: None,
                last_seen: floor.map_or(now, wall),
            },
        }
    }

    /// Whether the agent may receive a command now: its entry exists and is alive. Returns the
    /// id as the agent presented it.
    pub fn connected(&self, normalized: &str) -> Option<String> {
        let presence = read(&self.seen);
        let seen = presence.get(normalized)?;
        self.alive(seen).then(|| seen.presented.clone())
    }

    /// Records an entry; returns whether the agent is newly connected and whether another
    /// instance of it holds the stream now.
    fn put(&self, normalized: &str, seen: Seen) -> (bool, bool) {
        let mut map = write(&self.seen);
        let old = map.get(normalized);
        let newly = old.is_none_or(|old| !self.alive(old));
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
            seen.received = Instant::now();
        }
    }

    /// Records a replica heartbeat that arrived now; returns the agents whose entries it brings
    /// back to life (the replica was unknown or silent, or this is another process of it).
    fn beat(&self, replica: &str, instance: &str) -> Vec<String> {
        let was_alive = {
            let mut replicas = write(&self.replicas);
            let was_alive = replicas
                .get(replica)
                .is_some_and(|old| old.instance == instance && old.received.elapsed() <= self.ttl);
            replicas.insert(
                replica.to_string(),
                Replica {
                    instance: instance.to_string(),
                    received: Instant::now(),
                },
            );
            was_alive
        };
        if was_alive {
            return Vec::new();
        }
        read(&self.seen)
            .iter()
            .filter(|(_, s)| s.connected && s.server == replica && s.replica_instance == instance)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The entries (key, revision) of connected agents not alive for
    /// [`tink_bus::STALE_PRESENCE_PURGE_AFTER_TTLS`] TTLs: their replica died or lost NATS.
    /// None while the view is blind (a heartbeat not delivered is not a replica's death), nor
    /// until it has been sound for that long.
    pub fn stale_entries(&self) -> Vec<(String, u64)> {
        let bound = self.ttl * tink_bus::STALE_PRESENCE_PURGE_AFTER_TTLS;
        let Some(since) = *read(&self.sound_since) else {
            return Vec::new();
        };
        if since.max(self.term_started).elapsed() <= bound {
            return Vec::new();
        }
        read(&self.seen)
            .values()
            .filter(|s| s.connected && self.last_alive(s).elapsed() > bound)
            .map(|s| (s.key.clone(), s.revision))
            .collect()
    }

    /// Forgets disconnected agents not seen for `forget_after`, and replicas silent that long.
    /// An agent whose entry exists is kept however stale (the sweep deletes the entry, and the
    /// deletion makes it disconnected): forgetting it would leave its entry in the bucket.
    pub fn prune(&self) {
        let forget = self.forget_after;
        write(&self.seen).retain(|_, s| s.connected || s.received.elapsed() <= forget);
        write(&self.replicas).retain(|_, r| r.received.elapsed() <= forget);
    }
}

/// Watches both buckets until `term` is cancelled; `loaded` fires once both watches are
/// established. Probes the view a few times per TTL, and every TTL deletes the entries that
/// stayed stale ([`Presence::stale_entries`]).
pub(crate) async fn run(
    presence: &Presence,
    wake: &Wake,
    metrics: &Metrics,
    bucket: kv::Store,
    replicas: kv::Store,
    loaded: oneshot::Sender<()>,
    term: CancellationToken,
) {
    let mut loaded = Some(loaded);
    let period = presence.ttl.max(Duration::from_secs(1));
    while !term.is_cancelled() {
        // The replicas first, so entries are judged with the current heartbeats.
        let watches = async {
            let beats = replicas.watch_with_history(">").await?;
            let entries = bucket.watch_with_history(">").await?;
            Ok::<_, kv::WatchError>((beats, entries))
        };
        let (mut beats, mut entries) = match watches.await {
            Ok(w) => w,
            Err(e) => {
                metrics.error("presence");
                warn!(error = %e, "cannot watch the presence and replicas buckets; retrying");
                tokio::select! {
                    _ = term.cancelled() => return,
                    _ = tokio::time::sleep(REWATCH_DELAY) => continue,
                }
            }
        };
        if let Some(tx) = loaded.take() {
            let _ = tx.send(());
        }
        // The first sweep a TTL after the watches started: by then they have delivered every
        // live replica's heartbeat (each beats within the TTL).
        let mut sweep = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut probe = tokio::time::interval(probe_period(presence.ttl));
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // What each stream held at the previous probe: the watches must have delivered it by now.
        let mut targets = Targets::default();
        let mut behind = 0u32;
        loop {
            tokio::select! {
                _ = term.cancelled() => return,
                _ = sweep.tick() => delete_stale(presence, metrics, &bucket).await,
                _ = probe.tick() => {
                    let (sound, next) = check_view(presence, &bucket, &replicas, &targets).await;
                    presence.probed(sound);
                    behind = if sound { 0 } else { behind + 1 };
                    let answered = next.answered();
                    targets = next;
                    if behind >= 2 && answered {
                        // The streams answer, but a watch stays behind: watch again (new watches
                        // deliver every current entry).
                        metrics.error("presence_watch_behind");
                        warn!("a presence watch is behind its bucket; watching again");
                        break;
                    }
                }
                beat = beats.next() => match beat {
                    Some(Ok(beat)) => observe_replica(presence, wake, beat),
                    Some(Err(e)) => {
                        metrics.error("presence");
                        warn!(error = %e, "replicas watch failed; watching again");
                        break;
                    }
                    None => break,
                },
                entry = entries.next() => match entry {
                    Some(Ok(entry)) => observe(presence, wake, entry),
                    Some(Err(e)) => {
                        metrics.error("presence");
                        warn!(error = %e, "presence watch failed; watching again");
                        break;
                    }
                    None => break,
                },
            }
        }
        presence.probed(false);
    }
}

/// How often the view is probed: a few times per TTL.
fn probe_period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(200))
}

/// The last sequence each bucket's stream held at a probe (`None`: it did not answer).
#[derive(Default)]
struct Targets {
    entries: Option<u64>,
    beats: Option<u64>,
}

impl Targets {
    fn answered(&self) -> bool {
        self.entries.is_some() && self.beats.is_some()
    }
}

/// Whether the view is sound: both streams answer within the probe period and each watch
/// delivered what its stream held at the previous probe (`targets`). Returns that and what
/// the streams hold now, the next probe's targets.
async fn check_view(
    presence: &Presence,
    bucket: &kv::Store,
    replicas: &kv::Store,
    targets: &Targets,
) -> (bool, Targets) {
    // Bounded by the probe period: the watches are not read while a probe waits.
    let limit = probe_period(presence.ttl);
    let (entries, beats) =
        tokio::join!(last_sequence(bucket, limit), last_sequence(replicas, limit));
    let caught_up =
        |target: Option<u64>, delivered: &Delivered| target.is_none_or(|t| delivered.get() >= t);
    let sound = entries.is_some()
        && beats.is_some()
        && caught_up(targets.entries, &presence.entries_delivered)
        && caught_up(targets.beats, &presence.beats_delivered);
    (sound, Targets { entries, beats })
}

/// The last sequence a bucket's stream holds (0 when it holds nothing, whatever it held
/// before); `None` when it does not answer within `limit`.
async fn last_sequence(bucket: &kv::Store, limit: Duration) -> Option<u64> {
    let info = tokio::time::timeout(limit, bucket.stream.get_info()).await;
    let Ok(Ok(info)) = info else {
        return None;
    };
    Some(if info.state.messages > 0 {
        info.state.last_sequence
    } else {
        0
    })
}

/// Deletes the entries that stayed stale (each only at the revision seen: a newer stream's
/// entry stays).
async fn delete_stale(presence: &Presence, metrics: &Metrics, bucket: &kv::Store) {
    let stale = presence.stale_entries();
    if stale.is_empty() {
        return;
    }
    let mut deleted = 0usize;
    for (key, revision) in &stale {
        match bucket.delete_expect_revision(key, Some(*revision)).await {
            Ok(()) => deleted += 1,
            Err(e) if e.kind() == kv::DeleteErrorKind::WrongLastRevision => {
                debug!(%key, "a stale presence entry changed meanwhile; kept");
            }
            Err(e) => {
                metrics.error("presence_stale");
                warn!(%key, error = %e, "cannot delete a stale presence entry; retried at the next sweep");
            }
        }
    }
    info!(
        deleted,
        stale = stale.len(),
        "deleted the presence entries of agents whose server replica stopped beating"
    );
}

fn observe_replica(presence: &Presence, wake: &Wake, entry: kv::Entry) {
    presence.beats_delivered.saw(entry.revision);
    if entry.operation != kv::Operation::Put {
        // A replica that shut down deleted its heartbeat; its entries go stale with the last one.
        return;
    }
    let beat = match ReplicaHeartbeat::from_bytes(&entry.value) {
        Ok(b) => b,
        Err(e) => {
            debug!(key = %entry.key, error = %e, "ignoring a malformed replica heartbeat");
            return;
        }
    };
    // Its arrival is the heartbeat as this controller knows it; the value's own timestamp is
    // another host's clock.
    let revived = presence.beat(&beat.replica, &beat.instance);
    if !revived.is_empty() {
        debug!(replica = %beat.replica, agents = revived.len(), "a replica beats again: its agents are connected");
    }
    for agent in revived {
        wake.trigger_agent(&agent);
    }
}

fn observe(presence: &Presence, wake: &Wake, entry: kv::Entry) {
    presence.entries_delivered.saw(entry.revision);
    let Ok(agent) = tink_bus::decode_token(&entry.key) else {
        debug!(key = %entry.key, "ignoring a presence key that is not an agent token");
        return;
    };
    let normalized = normalize_agent_id(&agent);
    match entry.operation {
        kv::Operation::Put => {
            let value = match tink_bus::Presence::from_bytes(&entry.value) {
                Ok(p) => p,
                Err(e) => {
                    debug!(agent = %agent, error = %e, "ignoring a malformed presence entry");
                    return;
                }
            };
            let instance = Some(value.instance).filter(|i| !i.is_empty());
            let seen = Seen {
                presented: value.agent_id,
                received: Instant::now(),
                server: value.server,
                replica_instance: value.replica_instance,
                instance: instance.clone(),
                connected: true,
                key: entry.key.clone(),
                revision: entry.revision,
            };
            let (newly, restarted) = presence.put(&normalized, seen);
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

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "aa:bb:cc:dd:ee:ff";

    fn ago(d: Duration) -> Instant {
        Instant::now().checked_sub(d).unwrap_or_else(Instant::now)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn seen(received: Duration, server: &str, replica_instance: &str, connected: bool) -> Seen {
        Seen {
            presented: AGENT.into(),
            received: ago(received),
            server: server.into(),
            replica_instance: replica_instance.into(),
            instance: None,
            connected,
            key: "k".into(),
            revision: 7,
        }
    }

    /// A presence whose term (and sound view) began `started` ago.
    fn presence(ttl: Duration, started: Duration) -> Presence {
        let p = Presence::new(ttl, secs(3600));
        Presence {
            term_started: ago(started),
            sound_since: RwLock::new(Some(ago(started))),
            ..p
        }
    }

    /// Backdates a replica's latest heartbeat.
    fn heard(p: &Presence, replica: &str, instance: &str, ago_: Duration) {
        write(&p.replicas).insert(
            replica.into(),
            Replica {
                instance: instance.into(),
                received: ago(ago_),
            },
        );
    }

    fn age(p: &Presence) -> f64 {
        Timestamp::now()
            .duration_since(p.agent_seen(AGENT).last_seen)
            .as_secs_f64()
    }

    #[test]
    fn silence_counts_only_while_the_view_is_sound_and_from_when_it_became_so() {
        let p = presence(secs(3), secs(120));
        let key = AGENT.to_string();
        write(&p.seen).insert(key.clone(), seen(secs(1), "", "", true));
        assert!(age(&p) < 0.5, "fresh: alive now");
        write(&p.seen).insert(key.clone(), seen(secs(60), "", "", true));
        assert!((59.0..61.5).contains(&age(&p)), "stale: as of its entry");
        assert_eq!(p.connected(&key), None);

        // Blind: nobody is judged, stale or gone, and nothing is deleted.
        p.probed(false);
        assert!(age(&p) < 0.5);
        assert!(p.stale_entries().is_empty());
        write(&p.seen).insert(key.clone(), seen(secs(60), "", "", false));
        assert!(age(&p) < 0.5);
        // Sound again: silence counts from then, not from the entry a minute ago.
        p.probed(true);
        assert!(age(&p) < 0.5);
        std::thread::sleep(Duration::from_millis(300));
        assert!((0.2..1.5).contains(&age(&p)), "{}", age(&p));
        // A second sound probe keeps the start.
        p.probed(true);
        assert!((0.2..1.5).contains(&age(&p)));
    }

    #[test]
    fn an_agent_is_connected_while_the_arrivals_of_its_replicas_heartbeats_are_fresh() {
        let p = presence(secs(30), secs(600));
        let key = AGENT.to_string();
        // Connected five minutes ago, never rewritten: alive through its replica's heartbeat.
        let (newly, _) = p.put(&key, seen(secs(300), "server-a", "p1", true));
        assert!(newly);
        assert_eq!(p.connected(&key), None, "no heartbeat of server-a yet");
        assert_eq!(p.beat("server-a", "p1"), vec![key.clone()], "revived");
        assert_eq!(p.connected(&key).as_deref(), Some(AGENT));
        assert!(age(&p) < 0.5);
        assert!(
            p.beat("server-a", "p1").is_empty(),
            "a heartbeat of a live replica revives nobody"
        );
        // server-a's last heartbeat arrived 40 s ago: offline, last seen then.
        heard(&p, "server-a", "p1", secs(40));
        assert_eq!(p.connected(&key), None);
        assert!((39.0..41.5).contains(&age(&p)), "{}", age(&p));
        assert!(p.stale_entries().is_empty(), "not yet three TTLs");
        heard(&p, "server-a", "p1", secs(100));
        assert_eq!(p.stale_entries(), [("k".to_string(), 7)]);
        // Another process of server-a (restarted) does not revive the old process's entries.
        assert!(p.beat("server-a", "p2").is_empty());
        assert_eq!(p.connected(&key), None);
        // Another replica's heartbeat never counts.
        heard(&p, "server-b", "p1", secs(0));
        assert_eq!(p.connected(&key), None);
    }

    #[test]
    fn nothing_is_deleted_until_the_view_has_been_sound_for_three_ttls() {
        // A term that began just now: a dead replica's entry is not deleted yet, however old.
        let p = presence(secs(1), secs(0));
        write(&p.seen).insert(AGENT.into(), seen(secs(60), "server-a", "p1", true));
        assert!(p.stale_entries().is_empty());
        let p = presence(secs(1), secs(10));
        write(&p.seen).insert(AGENT.into(), seen(secs(60), "server-a", "p1", true));
        assert_eq!(p.stale_entries().len(), 1);
        p.probed(false);
        assert!(p.stale_entries().is_empty(), "blind");
        p.probed(true);
        assert!(p.stale_entries().is_empty(), "sound again only now");
    }

    #[test]
    fn an_entry_of_an_older_server_counts_by_its_own_arrival() {
        let p = presence(secs(30), secs(600));
        let key = AGENT.to_string();
        write(&p.seen).insert(key.clone(), seen(secs(10), "server-old", "", true));
        heard(&p, "server-old", "", secs(0));
        assert!(p.connected(&key).is_some());
        write(&p.seen).insert(key.clone(), seen(secs(31), "server-old", "", true));
        assert!(
            p.connected(&key).is_none(),
            "its own heartbeats count, not the replica's"
        );
    }
}
