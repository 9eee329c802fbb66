//! Live updates: every change the watches deliver is rendered once into the HTML fragments it
//! affects (a machine's tile, a workflow's row, the live part of its page, an Event row) and
//! broadcast; each browser's server-sent-events stream forwards the fragments its page shows
//! and its user may see.
//!
//! Memory stays bounded whatever the browsers do: the broadcast channel is one ring of
//! `--sse-buffer` updates shared by every stream; a stream that falls that far behind (a slow
//! browser) skips what it missed and gets a `resync` event, on which the page reloads. At most
//! `--sse-max-clients` streams are open at once, and each ends after `--sse-max-age-seconds`
//! (the page reloads and so checks the user's access again).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use k8s_openapi::api::core::v1::Event;
use tink_api::v1alpha2::{Hardware, Workflow};
use tokio::sync::{OwnedSemaphorePermit, broadcast};
use tokio_util::sync::CancellationToken;

use crate::cache::Cache;
use crate::metrics::Metrics;
use crate::pages::{DetailFragment, EventFragment, RowFragment, TileFragment};
use crate::views::{Detail, EventRow, Row, Selector, Tile, row_id, tile_id};

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A machine's tile.
    Machine,
    /// A workflow (its row and page).
    Workflow,
    /// A Kubernetes Event about a workflow.
    Event,
    /// Everything may have changed (a watch relisted): pages reload.
    Resync,
}

/// One rendered change.
#[derive(Debug, Clone)]
pub struct Update {
    /// What changed.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// The machine, or the workflow (also for an Event).
    pub name: String,
    /// The machine's labels (the machines page filters on them).
    pub labels: BTreeMap<String, String>,
    /// The DOM id of the fragment.
    pub id: String,
    /// The fragment, `None` when the object is gone.
    pub html: Option<String>,
    /// For a workflow, the live part of its page.
    pub detail: Option<String>,
    /// When the watch delivered it (the benchmark measures delivery from here).
    pub at: Instant,
    /// Its place in the order of updates (set when sent).
    pub seq: u64,
}

/// The broadcaster. It also keeps the last `buffer` updates, so a page's stream replays what
/// changed between rendering the page (at sequence number `since`) and subscribing.
pub struct Live {
    tx: broadcast::Sender<Arc<Update>>,
    history: Mutex<History>,
    buffer: usize,
    metrics: Metrics,
}

#[derive(Default)]
struct History {
    seq: u64,
    recent: VecDeque<Arc<Update>>,
}

impl Live {
    /// A broadcaster keeping at most `buffer` updates.
    pub fn new(buffer: usize, metrics: Metrics) -> Live {
        let buffer = buffer.max(1);
        let (tx, _) = broadcast::channel(buffer);
        Live {
            tx,
            history: Mutex::default(),
            buffer,
            metrics,
        }
    }

    /// The sequence number of the last update: a page rendered now embeds it, and its stream
    /// replays every later update.
    pub fn seq(&self) -> u64 {
        self.history.lock().unwrap_or_else(|e| e.into_inner()).seq
    }

    /// A receiver of every update from now on, and the kept updates after `since` (`None`
    /// when some of those are no longer kept: the page must reload).
    pub fn subscribe(
        &self,
        since: Option<u64>,
    ) -> (
        broadcast::Receiver<Arc<Update>>,
        Option<VecDeque<Arc<Update>>>,
    ) {
        let h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.tx.subscribe();
        let backlog = match since {
            None => Some(VecDeque::new()),
            Some(since) if since >= h.seq => Some(VecDeque::new()),
            Some(since) => {
                let oldest = h.recent.front().map_or(h.seq + 1, |u| u.seq);
                (since + 1 >= oldest)
                    .then(|| h.recent.iter().filter(|u| u.seq > since).cloned().collect())
            }
        };
        (rx, backlog)
    }

    fn send(&self, mut u: Update) {
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        h.seq += 1;
        u.seq = h.seq;
        let u = Arc::new(u);
        if h.recent.len() >= self.buffer {
            h.recent.pop_front();
        }
        h.recent.push_back(u.clone());
        // Sent under the lock, so the history and the channel agree on the order. No receiver
        // is fine: nobody is looking.
        let _ = self.tx.send(u);
    }

    /// Every page reloads (after a relist).
    pub fn resync(&self) {
        {
            self.send(Update {
                kind: Kind::Resync,
                namespace: String::new(),
                name: String::new(),
                labels: BTreeMap::new(),
                id: String::new(),
                html: None,
                detail: None,
                at: Instant::now(),
                seq: 0,
            });
        }
    }

    /// Machine `hw` changed (or went).
    pub fn machine_changed(&self, cache: &Cache, hw: &Hardware, deleted: bool) {
        let (ns, name) = crate::cache::key_of(hw);
        let html = if deleted {
            None
        } else {
            let latest = cache.latest_workflow(&ns, &name);
            let t = Tile::new(hw, latest.as_deref(), cache.presence.of(hw));
            render(&TileFragment { t: &t })
        };
        self.send(Update {
            kind: Kind::Machine,
            id: tile_id(&ns, &name),
            namespace: ns,
            name,
            labels: hw.metadata.labels.clone().unwrap_or_default(),
            html,
            detail: None,
            at: Instant::now(),
            seq: 0,
        });
    }

    /// Workflow `w` changed (or went): its row, its page and its machine's tile.
    pub fn workflow_changed(&self, cache: &Cache, w: &Workflow, deleted: bool) {
        let now = jiff::Timestamp::now();
        let (ns, name) = crate::cache::key_of(w);
        let row = Row::new(w, now);
        let detail = Detail::new(w, deleted, now);
        self.send(Update {
            kind: Kind::Workflow,
            id: row_id(&ns, &name),
            namespace: ns.clone(),
            name,
            labels: BTreeMap::new(),
            html: if deleted {
                None
            } else {
                render(&RowFragment { w: &row })
            },
            detail: render(&DetailFragment { d: &detail }),
            at: Instant::now(),
            seq: 0,
        });
        if let Some(hw) = cache.machine(&ns, &w.spec.hardware_ref.name) {
            self.machine_changed(cache, &hw, false);
        }
    }

    /// Event `e` changed (only Events about Workflows are watched).
    pub fn event_changed(&self, _cache: &Cache, e: &Event) {
        let row = EventRow::new(e);
        self.send(Update {
            kind: Kind::Event,
            namespace: e.involved_object.namespace.clone().unwrap_or_default(),
            name: e.involved_object.name.clone().unwrap_or_default(),
            labels: BTreeMap::new(),
            id: row.id.clone(),
            html: render(&EventFragment { e: &row }),
            detail: None,
            at: Instant::now(),
            seq: 0,
        });
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

fn render(t: &impl askama::Template) -> Option<String> {
    match t.render() {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot render a live fragment");
            None
        }
    }
}

/// The namespaces a user may see a kind of object in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace.
    All,
    /// These.
    Some(HashSet<String>),
}

impl Namespaces {
    /// Whether `ns` is visible.
    pub fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Some(set) => set.contains(ns),
        }
    }
}

/// What a page's stream forwards.
#[derive(Debug, Clone)]
pub enum Filter {
    /// Machine tiles, in the visible namespaces, matching the page's filters.
    Machines {
        /// Visible namespaces.
        namespaces: Namespaces,
        /// The page's namespace filter.
        namespace: Option<String>,
        /// The page's label filter.
        selector: Selector,
    },
    /// Workflow rows in the visible namespaces (and the page's namespace filter).
    Workflows {
        /// Visible namespaces.
        namespaces: Namespaces,
        /// The page's namespace filter.
        namespace: Option<String>,
    },
    /// One workflow's page.
    Workflow {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Whether the user may list Events there.
        events: bool,
    },
}

/// What a stream writes for `u`, if anything: a JSON message for the page's script.
pub fn message(filter: &Filter, u: &Update) -> Option<String> {
    let replace = |id: &str, html: &str, parent: &str| serde_json::json!({"replace": [{"id": id, "html": html, "parent": parent}]});
    let remove = |id: &str| serde_json::json!({"remove": [id]});
    let v = match (filter, u.kind) {
        (
            Filter::Machines {
                namespaces,
                namespace,
                selector,
            },
            Kind::Machine,
        ) => {
            if !namespaces.contains(&u.namespace)
                || namespace.as_deref().is_some_and(|n| n != u.namespace)
                || !selector.matches(&u.labels)
            {
                return None;
            }
            match &u.html {
                Some(h) => replace(&u.id, h, "tiles"),
                None => remove(&u.id),
            }
        }
        (
            Filter::Workflows {
                namespaces,
                namespace,
            },
            Kind::Workflow,
        ) => {
            if !namespaces.contains(&u.namespace)
                || namespace.as_deref().is_some_and(|n| n != u.namespace)
            {
                return None;
            }
            match &u.html {
                Some(h) => replace(&u.id, h, "rows"),
                None => remove(&u.id),
            }
        }
        (
            Filter::Workflow {
                namespace, name, ..
            },
            Kind::Workflow,
        ) if *namespace == u.namespace && *name == u.name => {
            replace("live", u.detail.as_deref()?, "")
        }
        (
            Filter::Workflow {
                namespace,
                name,
                events: true,
            },
            Kind::Event,
        ) if *namespace == u.namespace && *name == u.name => {
            replace(&u.id, u.html.as_deref()?, "events")
        }
        _ => return None,
    };
    Some(v.to_string())
}

/// The limits of the streams.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// A comment line this often keeps proxies from closing an idle stream.
    pub keepalive: Duration,
    /// The stream ends after this long (the page reloads, checking access again).
    pub max_age: Duration,
}

/// The bytes of one stream: the updates after `since` (the page's sequence number) then every
/// new one, as `update` events for `filter`; `resync` when updates were missed or a watch
/// relisted; keep-alive comments; until `shutdown` or `limits.max_age`.
pub fn stream(
    live: &Live,
    filter: Filter,
    since: Option<u64>,
    limits: StreamLimits,
    permit: OwnedSemaphorePermit,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
    struct State {
        rx: broadcast::Receiver<Arc<Update>>,
        backlog: VecDeque<Arc<Update>>,
        last: u64,
        filter: Filter,
        limits: StreamLimits,
        deadline: tokio::time::Instant,
        shutdown: CancellationToken,
        metrics: Metrics,
        done: bool,
        _permit: OwnedSemaphorePermit,
    }
    impl Drop for State {
        fn drop(&mut self) {
            self.metrics.sse_clients.dec();
        }
    }
    live.metrics().sse_clients.inc();
    let (rx, backlog) = live.subscribe(since);
    let missed = backlog.is_none();
    let state = State {
        rx,
        backlog: backlog.unwrap_or_default(),
        last: since.unwrap_or(0),
        filter,
        limits,
        deadline: tokio::time::Instant::now() + limits.max_age,
        shutdown,
        metrics: live.metrics().clone(),
        done: false,
        _permit: permit,
    };
    let first = futures::stream::once(async move {
        Ok(Bytes::from_static(if missed {
            b"retry: 2000\nevent: resync\ndata: {}\n\n"
        } else {
            b"retry: 2000\n: connected\n\n"
        }))
    });
    let rest = futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            if let Some(u) = s.backlog.pop_front() {
                s.last = s.last.max(u.seq);
                match message(&s.filter, &u) {
                    Some(m) => {
                        return Some((Ok(Bytes::from(format!("event: update\ndata: {m}\n\n"))), s));
                    }
                    None => continue,
                }
            }
            let chunk = tokio::select! {
                _ = s.shutdown.cancelled() => return None,
                _ = tokio::time::sleep_until(s.deadline) => {
                    s.done = true;
                    "event: resync\ndata: {}\n\n".to_string()
                }
                _ = tokio::time::sleep(s.limits.keepalive) => ": keepalive\n\n".to_string(),
                r = s.rx.recv() => match r {
                    Ok(u) if u.seq <= s.last => continue,
                    Ok(u) if u.kind == Kind::Resync => "event: resync\ndata: {}\n\n".to_string(),
                    Ok(u) => match message(&s.filter, &u) {
                        Some(m) => format!("event: update\ndata: {m}\n\n"),
                        None => continue,
                    },
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        s.metrics.sse_resyncs.inc();
                        tracing::debug!(missed = n, "a live stream fell behind; the page resyncs");
                        "event: resync\ndata: {}\n\n".to_string()
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            return Some((Ok(Bytes::from(chunk)), s));
        }
    });
    futures::StreamExt::chain(first, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(kind: Kind, ns: &str, name: &str, labels: &[(&str, &str)]) -> Update {
        Update {
            kind,
            namespace: ns.into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            id: format!("x/{ns}/{name}"),
            html: Some("<div>x</div>".into()),
            detail: Some("<div>d</div>".into()),
            at: Instant::now(),
            seq: 0,
        }
    }

    #[test]
    fn machines_streams_forward_visible_matching_tiles_only() {
        let f = Filter::Machines {
            namespaces: Namespaces::Some(["a".to_string()].into()),
            namespace: None,
            selector: Selector::parse("rack=r1").unwrap(),
        };
        assert!(message(&f, &update(Kind::Machine, "a", "m", &[("rack", "r1")])).is_some());
        assert!(message(&f, &update(Kind::Machine, "b", "m", &[("rack", "r1")])).is_none());
        assert!(message(&f, &update(Kind::Machine, "a", "m", &[("rack", "r2")])).is_none());
        assert!(message(&f, &update(Kind::Workflow, "a", "w", &[])).is_none());
        let mut gone = update(Kind::Machine, "a", "m", &[("rack", "r1")]);
        gone.html = None;
        assert_eq!(
            message(&f, &gone).unwrap(),
            r#"{"remove":["x/a/m"]}"#.to_string()
        );
    }

    #[test]
    fn a_workflow_page_gets_its_own_workflow_and_events_only_when_allowed() {
        let f = Filter::Workflow {
            namespace: "a".into(),
            name: "w".into(),
            events: false,
        };
        let m = message(&f, &update(Kind::Workflow, "a", "w", &[])).unwrap();
        assert!(m.contains(r#""id":"live""#), "{m}");
        assert!(m.contains("<div>d</div>"), "{m}");
        assert!(message(&f, &update(Kind::Workflow, "a", "w2", &[])).is_none());
        assert!(message(&f, &update(Kind::Event, "a", "w", &[])).is_none());
        let f = Filter::Workflow {
            namespace: "a".into(),
            name: "w".into(),
            events: true,
        };
        assert!(message(&f, &update(Kind::Event, "a", "w", &[])).is_some());
    }

    #[tokio::test]
    async fn a_slow_stream_is_told_to_resync_instead_of_growing() {
        use futures::StreamExt as _;
        let live = Live::new(4, Metrics::default());
        let sem = Arc::new(tokio::sync::Semaphore::new(1));
        let permit = sem.clone().try_acquire_owned().unwrap();
        let f = Filter::Workflows {
            namespaces: Namespaces::All,
            namespace: None,
        };
        let limits = StreamLimits {
            keepalive: Duration::from_secs(60),
            max_age: Duration::from_secs(60),
        };
        let mut s = Box::pin(stream(
            &live,
            f,
            None,
            limits,
            permit,
            CancellationToken::new(),
        ));
        assert!(
            sem.clone().try_acquire_owned().is_err(),
            "the permit is held"
        );
        for i in 0..20 {
            live.send(update(Kind::Workflow, "a", &format!("w{i}"), &[]));
        }
        let first = s.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"retry:"));
        let second = s.next().await.unwrap().unwrap();
        assert_eq!(&second[..], b"event: resync\ndata: {}\n\n");
        assert_eq!(live.metrics.sse_resyncs.get(), 1);
        // After the resync it carries on with what is still buffered.
        let third = s.next().await.unwrap().unwrap();
        assert!(third.starts_with(b"event: update\n"), "{third:?}");
        drop(s);
        assert!(sem.try_acquire_owned().is_ok(), "the permit is released");
    }

    async fn next_text(
        s: &mut (impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Unpin),
    ) -> String {
        use futures::StreamExt as _;
        let b = s.next().await.unwrap().unwrap();
        String::from_utf8_lossy(&b).into_owned()
    }

    #[tokio::test]
    async fn a_stream_replays_what_changed_since_its_page_was_rendered() {
        let live = Live::new(3, Metrics::default());
        let sem = Arc::new(tokio::sync::Semaphore::new(10));
        let limits = StreamLimits {
            keepalive: Duration::from_secs(60),
            max_age: Duration::from_secs(60),
        };
        let f = || Filter::Workflows {
            namespaces: Namespaces::All,
            namespace: None,
        };
        live.send(update(Kind::Workflow, "a", "w1", &[]));
        let rendered_at = live.seq();
        assert_eq!(rendered_at, 1);
        // Changes between rendering the page and opening its stream...
        live.send(update(Kind::Workflow, "a", "w2", &[]));
        live.send(update(Kind::Workflow, "a", "w3", &[]));
        let permit = sem.clone().try_acquire_owned().unwrap();
        let mut s = Box::pin(stream(
            &live,
            f(),
            Some(rendered_at),
            limits,
            permit,
            CancellationToken::new(),
        ));
        assert!(next_text(&mut s).await.contains(": connected"));
        // ...are replayed, in order, then live ones follow, none twice.
        assert!(next_text(&mut s).await.contains("x/a/w2"));
        assert!(next_text(&mut s).await.contains("x/a/w3"));
        live.send(update(Kind::Workflow, "a", "w4", &[]));
        assert!(next_text(&mut s).await.contains("x/a/w4"));
        // A page older than the kept history reloads.
        live.send(update(Kind::Workflow, "a", "w5", &[]));
        live.send(update(Kind::Workflow, "a", "w6", &[]));
        let permit = sem.clone().try_acquire_owned().unwrap();
        let mut old = Box::pin(stream(
            &live,
            f(),
            Some(rendered_at),
            limits,
            permit,
            CancellationToken::new(),
        ));
        assert!(next_text(&mut old).await.contains("event: resync"));
    }
}
