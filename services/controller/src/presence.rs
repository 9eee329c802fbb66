//! Which agents are connected: a watch on the presence KV bucket.
//!
//! Entries are written by the server holding an agent's stream and refreshed every heartbeat;
//! an agent counts as connected while its last heartbeat reached this controller less than the
//! bucket's TTL ago (an entry that expires produces no watch notification). When an agent
//! appears (or comes back after its entry went stale), the Pending Workflows of its machine are
//! woken.
//!
//! Freshness is measured on this process's monotonic clock from the moment an entry arrived,
//! never by comparing the heartbeat's wall-clock time (another host's clock) with ours: a wall
//! clock stepped ahead by NTP, here or on a server, would otherwise make every connected agent
//! look stale and its workflow fail as `AgentLost` (the fault schedule's `clock-jump` found it).
//!
//! Silence only counts while this controller's own view is sound. A probe compares the
//! bucket's stream with what the watch delivered: while the stream cannot be read, or the watch
//! lags behind what the stream held at the previous probe, the view is *blind* and nobody is
//! judged (`last_seen` is now); once it is sound again, silence counts from then. A watch that
//! stays behind is started again. (The fault schedule found a controller, healed after a cut
//! from NATS, whose watch stayed silent for 20 s and which declared a connected agent lost.)

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// When its latest entry arrived (for a disconnected agent: when its stream ended), on
    /// this process's monotonic clock. Freshness is measured from it, and the AgentLost
    /// deadline's "last seen" is it expressed on the wall clock of the moment it is asked for.
    pub received: Instant,
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
    /// When this term began (monotonic): the last sign of life assumed for an agent not seen
    /// since.
    term_started: Instant,
    /// Normalised agent id -> presence.
    seen: RwLock<HashMap<String, Seen>>,
    /// The highest stream sequence (entry revision) the watch delivered.
    delivered: AtomicU64,
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
            delivered: AtomicU64::new(0),
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
                // Connected and fresh: alive now. Otherwise as of its latest entry (or of when
                // its stream ended).
                last_seen: match floor {
                    Some(_) if seen.connected && seen.received.elapsed() <= self.ttl => now,
                    Some(floor) => wall(seen.received.max(floor)),
                    None => now,
                },
            },
            None => AgentSeen {
                instance: None,
                last_seen: floor.map_or(now, wall),
            },
        }
    }

    /// Whether the agent may receive a command now: its presence entry is fresh. Returns the
    /// id as the agent presented it.
    pub fn connected(&self, normalized: &str) -> Option<String> {
        let presence = read(&self.seen);
        let seen = presence.get(normalized).filter(|s| s.connected)?;
        (seen.received.elapsed() <= self.ttl).then(|| seen.presented.clone())
    }

    /// Records a heartbeat; returns whether the agent is newly connected and whether another
    /// instance of it holds the stream now.
    fn put(&self, normalized: &str, seen: Seen) -> (bool, bool) {
        let mut map = write(&self.seen);
        let old = map.get(normalized);
        let newly = old.is_none_or(|old| {
            !old.connected || seen.received.saturating_duration_since(old.received) > self.ttl
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
            seen.received = Instant::now();
        }
    }

    /// Forgets agents not seen for `forget_after`.
    pub fn prune(&self) {
        let forget = self.forget_after;
        write(&self.seen).retain(|_, seen| seen.received.elapsed() <= forget);
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
        let mut probe = tokio::time::interval(probe_period(presence.ttl));
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // What the stream held at the previous probe: the watch must have delivered it by now.
        let mut target: Option<u64> = None;
        let mut behind = 0u32;
        loop {
            let entry = tokio::select! {
                _ = term.cancelled() => return,
                e = watch.next() => e,
                _ = probe.tick() => {
                    let (sound, last) = check_view(presence, &bucket, target).await;
                    presence.probed(sound);
                    target = last;
                    behind = if sound { 0 } else { behind + 1 };
                    if behind >= 2 && last.is_some() {
                        // The stream answers, but the watch stays behind it: watch again (the
                        // new watch delivers every current entry).
                        metrics.error("presence_watch_behind");
                        warn!("the presence watch is behind the bucket; watching again");
                        break;
                    }
                    continue;
                }
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
        presence.probed(false);
    }
}

/// How often the view is probed: a few times per TTL.
fn probe_period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(200))
}

/// Whether the view is sound: the stream answers within the probe period and the watch delivered what
/// it held at the previous probe (`target`). Returns that and what it holds now (`None` when
/// it did not answer), the next probe's target.
async fn check_view(
    presence: &Presence,
    bucket: &kv::Store,
    target: Option<u64>,
) -> (bool, Option<u64>) {
    // Bounded by the probe period: the watch is not read while a probe waits.
    let info = tokio::time::timeout(probe_period(presence.ttl), bucket.stream.get_info()).await;
    let Ok(Ok(info)) = info else {
        return (false, None);
    };
    // An empty stream holds nothing to deliver, whatever its last sequence was.
    let now = (info.state.messages > 0).then_some(info.state.last_sequence);
    let delivered = presence.delivered.load(Ordering::Relaxed);
    let sound = target.is_none_or(|t| delivered >= t);
    (sound, Some(now.unwrap_or(0)))
}

fn observe(presence: &Presence, wake: &Wake, entry: kv::Entry) {
    presence
        .delivered
        .fetch_max(entry.revision, Ordering::Relaxed);
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
            let instance = Some(entry.instance).filter(|i| !i.is_empty());
            // Its arrival is the heartbeat as this controller knows it; the entry's own
            // timestamp is another host's clock.
            let seen = Seen {
                presented: entry.agent_id,
                instance: instance.clone(),
                connected: true,
                received: Instant::now(),
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

    fn seen(ago: Duration, connected: bool) -> Seen {
        Seen {
            presented: "aa:bb:cc:dd:ee:ff".into(),
            received: Instant::now().checked_sub(ago).unwrap_or_else(Instant::now),
            instance: None,
            connected,
        }
    }

    fn age(p: &Presence) -> f64 {
        Timestamp::now()
            .duration_since(p.agent_seen("aa:bb:cc:dd:ee:ff").last_seen)
            .as_secs_f64()
    }

    #[test]
    fn silence_counts_only_while_the_view_is_sound_and_from_when_it_became_so() {
        let p = Presence::new(Duration::from_secs(3), Duration::from_secs(3600));
        // (The term began just now: floor it to an earlier start for the test.)
        let p = Presence {
            term_started: Instant::now()
                .checked_sub(Duration::from_secs(120))
                .unwrap_or_else(Instant::now),
            sound_since: RwLock::new(Instant::now().checked_sub(Duration::from_secs(120))),
            ..p
        };
        let key = "aa:bb:cc:dd:ee:ff".to_string();
        write(&p.seen).insert(key.clone(), seen(Duration::from_secs(1), true));
        assert!(age(&p) < 0.5, "fresh: alive now");
        write(&p.seen).insert(key.clone(), seen(Duration::from_secs(60), true));
        assert!((59.0..61.5).contains(&age(&p)), "stale: as of its entry");
        assert_eq!(p.connected(&key), None);

        // Blind: nobody is judged, stale or gone.
        p.probed(false);
        assert!(age(&p) < 0.5);
        write(&p.seen).insert(key.clone(), seen(Duration::from_secs(60), false));
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
}
