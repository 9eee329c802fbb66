//! Publishing Kubernetes Events (`events.k8s.io/v1`), the controller's own recorder.
//!
//! kube-runtime's `Recorder` scans its whole cache of recent Events on every publish (six
//! minutes of them: hundreds of thousands while hundreds of machines provision at once) and
//! publishes one Event at a time, so under load its queue overflowed and Events were lost. This
//! one keeps what an operator sees the same (one Event object per occurrence, an identical
//! repeat within six minutes counted in the first one's `series`, as client-go does), with a
//! cache that expires in time order and is bounded in size, and several Events in flight.
//!
//! The term's parts never wait for the API server to record an Event: they put it on a bounded
//! queue ([`KubeEvents`]) that one task ([`publish_queued`]) empties through the recorder.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tink_workflow::{EventReason, EventType};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// How long an Event may be counted again instead of created anew (client-go's figure).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Events remembered for counting repeats; the oldest is forgotten first beyond this.
pub const SERIES_CAPACITY: usize = 16_384;
/// The longest `note` the API server accepts (1 kB); longer ones are cut.
const NOTE_LIMIT: usize = 1024;

/// Whether an Event is routine or calls for attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

/// One Event to publish.
#[derive(Debug, Clone)]
pub struct Occurrence {
    pub regarding: ObjectReference,
    pub kind: Kind,
    /// Machine-readable, CamelCase (also used as the Event's `action`).
    pub reason: String,
    pub note: String,
}

/// Publishes Events as one reporting controller instance; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    seen: Arc<Mutex<Series>>,
}

impl Recorder {
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            seen: Arc::new(Mutex::new(Series::new(SERIES_WINDOW, SERIES_CAPACITY))),
        }
    }

    /// Creates the Event, or counts it in the Event of the same occurrence published within
    /// [`SERIES_WINDOW`].
    pub async fn publish(&self, o: &Occurrence) -> Result<(), kube::Error> {
        let namespace = o.regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let key = key(o);
        let now = Timestamp::now();
        let repeat =
            self.seen
                .lock()
                .map_err(|_| poisoned())?
                .observe(key.clone(), Instant::now(), || name_for(o, now));
        if let Seen::Again { name, count } = &repeat {
            let patch = json!({"series": EventSeries { count: *count, last_observed_time: MicroTime(now) }});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone (deleted, or its create has not landed yet): a new Event instead.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = match repeat {
            Seen::First { name } => name,
            Seen::Again { .. } => {
                let name = name_for(o, now);
                if let Ok(mut s) = self.seen.lock() {
                    s.restart(key, Instant::now(), name.clone());
                }
                name
            }
        };
        api.create(&PostParams::default(), &self.event(o, name, now))
            .await
            .map(|_| ())
    }

    fn event(&self, o: &Occurrence, name: String, now: Timestamp) -> Event {
        Event {
            action: Some(o.reason.clone()),
            reason: Some(o.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(o.regarding.clone()),
            note: Some(cut(&o.note, NOTE_LIMIT).to_string()),
            metadata: ObjectMeta {
                namespace: o.regarding.namespace.clone(),
                name: Some(name),
                ..Default::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match o.kind {
                    Kind::Normal => "Normal",
                    Kind::Warning => "Warning",
                }
                .to_string(),
            ),
            ..Default::default()
        }
    }
}

fn poisoned() -> kube::Error {
    kube::Error::Service("the Event series cache is poisoned".into())
}

/// What makes two Events the same occurrence: the object, type, reason and note.
fn key(o: &Occurrence) -> String {
    let r = &o.regarding;
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    format!(
        "{}\0{}\0{}\0{}\0{}\0{:?}\0{}\0{}",
        s(&r.api_version),
        s(&r.kind),
        s(&r.namespace),
        s(&r.name),
        s(&r.uid),
        o.kind,
        o.reason,
        o.note
    )
}

/// `<object name>.<nanoseconds, hex>`, as client-go names Events.
fn name_for(o: &Occurrence, now: Timestamp) -> String {
    let base = o.regarding.name.as_deref().unwrap_or("object");
    // A name is at most 253 characters; the suffix takes at most 17 of them.
    format!("{}.{:x}", cut(base, 230), now.as_nanosecond())
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A Kubernetes Event waiting to be published.
pub(crate) struct KubeEvent {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: EventReason,
    pub message: String,
}

/// The bounded queue of Events the term's parts record; cheap to clone.
#[derive(Clone)]
pub(crate) struct KubeEvents {
    /// Whether Events are published at all (`--kube-events`).
    enabled: bool,
    metrics: Metrics,
    tx: mpsc::Sender<KubeEvent>,
}

impl KubeEvents {
    /// A queue of `capacity` Events, and its receiving end for [`publish_queued`].
    pub fn new(
        enabled: bool,
        metrics: Metrics,
        capacity: usize,
    ) -> (Self, mpsc::Receiver<KubeEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            Self {
                enabled,
                metrics,
                tx,
            },
            rx,
        )
    }

    /// Queues an Event about an object.
    pub fn about<K>(&self, object: &K, type_: EventType, reason: EventReason, message: &str)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.record(KubeEvent {
            regarding: object.object_ref(&()),
            type_,
            reason,
            message: message.to_string(),
        });
    }

    /// Queues an Event (dropped, and counted, when the queue is full).
    pub fn record(&self, event: KubeEvent) {
        if !self.enabled {
            return;
        }
        if self.tx.try_send(event).is_err() {
            self.metrics.error("kube_event_dropped");
            debug!("the Kubernetes Event queue is full; an Event is dropped");
        }
    }
}

/// Events published at once: a slow API server delays Events, it does not drop them until the
/// queue (4,096) is full.
const KUBE_EVENTS_IN_FLIGHT: usize = 16;

/// Publishes the queued Events until `term` is cancelled.
pub(crate) async fn publish_queued(
    recorder: Recorder,
    rx: mpsc::Receiver<KubeEvent>,
    metrics: Metrics,
    term: CancellationToken,
) {
    use futures::StreamExt as _;
    let publish = tokio_stream::wrappers::ReceiverStream::new(rx)
        .map(|e| {
            let (recorder, metrics) = (recorder.clone(), metrics.clone());
            async move {
                let occurrence = Occurrence {
                    regarding: e.regarding,
                    kind: match e.type_ {
                        EventType::Normal => Kind::Normal,
                        EventType::Warning => Kind::Warning,
                    },
                    reason: e.reason.as_str().to_string(),
                    note: e.message,
                };
                metrics.write("event");
                if let Err(err) = recorder.publish(&occurrence).await {
                    metrics.error("kube_event");
                    warn!(error = %err, "cannot publish a Kubernetes Event");
                }
            }
        })
        .buffer_unordered(KUBE_EVENTS_IN_FLIGHT)
        .for_each(|()| async {});
    tokio::select! {
        _ = term.cancelled() => {}
        _ = publish => {}
    }
}

/// What [`Series::observe`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not seen within the window: create an Event of this name.
    First { name: String },
    /// Seen: this is occurrence `count` of the Event `name`.
    Again { name: String, count: i32 },
}

struct Entry {
    name: String,
    count: i32,
    last: Instant,
}

/// Recent Events by occurrence key, forgotten in the order they were last seen: after
/// `window`, or the oldest first beyond `capacity`. Every operation is O(1) amortized.
pub struct Series {
    window: Duration,
    capacity: usize,
    entries: HashMap<String, Entry>,
    /// (last seen, key) in time order; a key seen again has a newer item and its older ones are
    /// skipped when they come up.
    order: VecDeque<(Instant, String)>,
}

impl Series {
    pub fn new(window: Duration, capacity: usize) -> Self {
        Self {
            window,
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Records an occurrence of `key` at `now`.
    pub fn observe(&mut self, key: String, now: Instant, name: impl FnOnce() -> String) -> Seen {
        self.expire(now);
        if let Some(e) = self.entries.get_mut(&key) {
            e.count = e.count.saturating_add(1);
            e.last = now;
            let seen = Seen::Again {
                name: e.name.clone(),
                count: e.count,
            };
            self.order.push_back((now, key));
            self.expire(now);
            return seen;
        }
        let name = name();
        self.restart(key, now, name.clone());
        Seen::First { name }
    }

    /// Starts counting `key` again from one, under a new Event `name`.
    pub fn restart(&mut self, key: String, now: Instant, name: String) {
        self.entries.insert(
            key.clone(),
            Entry {
                name,
                count: 1,
                last: now,
            },
        );
        self.order.push_back((now, key));
        self.expire(now);
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            let old = now.saturating_duration_since(*at) > self.window;
            let full = self.entries.len() > self.capacity || self.order.len() > 2 * self.capacity;
            if !old && !full {
                break;
            }
            let Some((at, key)) = self.order.pop_front() else {
                break;
            };
            // Only the newest item of a key forgets it.
            if self.entries.get(&key).is_some_and(|e| e.last == at) {
                self.entries.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> impl FnOnce() -> String + '_ {
        move || n.to_string()
    }

    #[test]
    fn repeats_within_the_window_are_counted_in_the_first_event() {
        let mut s = Series::new(Duration::from_secs(10), 100);
        let t = Instant::now();
        assert_eq!(
            s.observe("a".into(), t, name("a.1")),
            Seen::First { name: "a.1".into() }
        );
        assert_eq!(
            s.observe("a".into(), t + Duration::from_secs(5), name("a.2")),
            Seen::Again {
                name: "a.1".into(),
                count: 2
            }
        );
        // Seen again at 5 s: the window runs from then.
        assert_eq!(
            s.observe("a".into(), t + Duration::from_secs(14), name("a.3")),
            Seen::Again {
                name: "a.1".into(),
                count: 3
            }
        );
        assert_eq!(
            s.observe("a".into(), t + Duration::from_secs(25), name("a.4")),
            Seen::First { name: "a.4".into() }
        );
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_the_oldest_first() {
        let mut s = Series::new(Duration::from_secs(3600), 3);
        let t = Instant::now();
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            s.observe(k.to_string(), t + Duration::from_millis(i as u64), name(k));
        }
        assert_eq!(s.len(), 3);
        // "a" was forgotten; "b" is still counted.
        assert_eq!(
            s.observe("a".into(), t + Duration::from_millis(10), name("a2")),
            Seen::First { name: "a2".into() }
        );
        // One key seen very often keeps the time-order queue bounded too.
        for i in 0..1000 {
            s.observe("z".into(), t + Duration::from_millis(20 + i), name("z"));
        }
        assert!(s.order.len() <= 6, "{}", s.order.len());
        assert!(s.len() <= 3);
    }

    #[test]
    fn notes_and_names_are_cut_on_character_boundaries() {
        let long = "é".repeat(1000);
        let c = cut(&long, NOTE_LIMIT);
        assert!(c.len() <= NOTE_LIMIT && c.len() >= NOTE_LIMIT - 1);
        assert_eq!(cut("short", 10), "short");
    }
}
