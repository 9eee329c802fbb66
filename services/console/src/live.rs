//! Live updates: every change the watches deliver (handed here by `feed::Feed`, the
//! only caller of the `*_changed` methods) is rendered once per permission variant into
//! the HTML fragments it affects (a machine's tile, with and without its latest workflow; a
//! workflow's row, the live part of its page, an Event row) and broadcast; each browser's
//! server-sent-events stream forwards the fragments its page shows, in the variant its user may
//! see: a machine's tile names its latest workflow and its state only to users who may `list
//! workflows` in the machine's namespace.
//!
//! Access is checked when a stream opens and again every `--sse-recheck-seconds` (the same
//! `Access` checks, with their cached positive answers): a token or a binding that no longer
//! grants what the stream forwards ends it with `resync` (the page reloads and is refused).
//!
//! Memory stays bounded whatever the browsers do: the broadcast channel is one ring of
//! `--sse-buffer` updates shared by every stream; a stream that falls that far behind (a slow
//! browser) skips what it missed and gets a `resync` event, on which the page reloads. At most
//! `--sse-max-clients` streams are open at once, at most `--sse-max-clients-per-user` of one
//! user ([`Slots`]), and each ends after `--sse-max-age-seconds`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Event;
use tink_api::v1alpha2::{Hardware, Workflow};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};
use tokio_util::sync::CancellationToken;

use crate::access::Permission;
use crate::cache::key_of;
use crate::metrics::Metrics;
use crate::pages::{BmcFragment, DetailFragment, EventFragment, RowFragment, TileFragment};
use crate::views::{Bmc, Detail, EventRow, Row, Selector, Tile, row_id, tile_id};

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
    /// The fragment, `None` when the object is gone. A machine's tile here names its latest
    /// workflow and that workflow's state: only for users who may list workflows there.
    pub html: Option<String>,
    /// A machine's tile without its latest workflow (no name, no state) and without its BMC
    /// power state: what users who may list the Hardware but neither the Workflows nor the
    /// BMC Machines and Jobs of the namespace see. `None` for other kinds.
    pub bare: Option<String>,
    /// A machine's tile with its latest workflow, without its BMC power state.
    pub no_bmc: Option<String>,
    /// A machine's tile with its BMC power state, without its latest workflow.
    pub no_workflow: Option<String>,
    /// For a workflow, the live part of its page; for a machine, the BMC part of its page
    /// (`None` when it has no `bmcRef`).
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
    pub(crate) fn resync(&self) {
        {
            self.send(Update {
                kind: Kind::Resync,
                namespace: String::new(),
                name: String::new(),
                labels: BTreeMap::new(),
                id: String::new(),
                html: None,
                bare: None,
                no_bmc: None,
                no_workflow: None,
                detail: None,
                at: Instant::now(),
                seq: 0,
            });
        }
    }

    /// Machine `hw` changed: its tile with its `latest` workflow, its `agent` presence
    /// ([`crate::presence::Presence::of`]) and its `bmc`, or went (`tile` is `None`).
    pub(crate) fn machine_changed(
        &self,
        hw: &Hardware,
        tile: Option<(Option<&Workflow>, &'static str, &Bmc)>,
    ) {
        let (ns, name) = key_of(hw);
        // Four variants at most, whatever the number of streams: with and without the latest
        // workflow, with and without the BMC's power state (the same tile where the machine
        // has no workflow, or no BMC to show).
        let (mut html, mut bare, mut no_bmc, mut no_workflow, mut detail) =
            (None, None, None, None, None);
        if let Some((latest, agent, bmc)) = tile {
            let tile = |t: &Tile| render(&TileFragment { t });
            let base = Tile::new(hw, None, agent);
            let with_wf = latest.map(|l| Tile::new(hw, Some(l), agent));
            bare = tile(&base);
            no_bmc = match &with_wf {
                Some(t) => tile(t),
                None => bare.clone(),
            };
            let shown = !base.clone().with_bmc(bmc).power.is_empty();
            (no_workflow, html) = if shown {
                let no_wf = tile(&base.with_bmc(bmc));
                let full = match with_wf {
                    Some(t) => tile(&t.with_bmc(bmc)),
                    None => no_wf.clone(),
                };
                (no_wf, full)
            } else {
                (bare.clone(), no_bmc.clone())
            };
            if *bmc != Bmc::None {
                detail = render(&BmcFragment {
                    b: bmc,
                    namespace: &ns,
                    name: &name,
                });
            }
        }
        self.send(Update {
            kind: Kind::Machine,
            id: tile_id(&ns, &name),
            namespace: ns,
            name,
            labels: hw.metadata.labels.clone().unwrap_or_default(),
            html,
            bare,
            no_bmc,
            no_workflow,
            detail,
            at: Instant::now(),
            seq: 0,
        });
    }

    /// Workflow `w` changed (or went): its row and its page (its machine's tile is the
    /// caller's: `feed::Feed`).
    pub(crate) fn workflow_changed(&self, w: &Workflow, deleted: bool) {
        let now = jiff::Timestamp::now();
        let (ns, name) = key_of(w);
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
            bare: None,
            no_bmc: None,
            no_workflow: None,
            detail: render(&DetailFragment { d: &detail }),
            at: Instant::now(),
            seq: 0,
        });
    }

    /// Event `e` changed (only Events about Workflows are watched).
    pub(crate) fn event_changed(&self, e: &Event) {
        let row = EventRow::new(e);
        self.send(Update {
            kind: Kind::Event,
            namespace: e.involved_object.namespace.clone().unwrap_or_default(),
            name: e.involved_object.name.clone().unwrap_or_default(),
            labels: BTreeMap::new(),
            id: row.id.clone(),
            html: render(&EventFragment { e: &row }),
            bare: None,
            no_bmc: None,
            no_workflow: None,
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
        /// Visible namespaces (the user may list Hardware there).
        namespaces: Namespaces,
        /// Where the user may list Workflows: tiles there name their latest workflow and its
        /// state; elsewhere they come without ([`Update::bare`]).
        workflows: Namespaces,
        /// Where the user may list BMC Machines and Jobs: tiles there show the power state.
        bmc: Namespaces,
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
    /// One machine's page: its tile, and the BMC part where the user may see it.
    Machine {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Whether the user may list Workflows there.
        workflows: bool,
        /// Whether the user may list BMC Machines and Jobs there.
        bmc: bool,
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
                workflows,
                bmc,
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
            if u.html.is_none() {
                return Some(remove(&u.id).to_string());
            }
            // The variant this user may see: never the workflow or the power state where they
            // may not list it.
            let tile = u.tile_for(workflows.contains(&u.namespace), bmc.contains(&u.namespace))?;
            replace(&u.id, tile, "tiles")
        }
        (
            Filter::Machine {
                namespace,
                name,
                workflows,
                bmc,
            },
            Kind::Machine,
        ) if *namespace == u.namespace && *name == u.name => {
            u.html.as_ref()?;
            let tile = u.tile_for(*workflows, *bmc)?;
            let mut replaced = vec![serde_json::json!({"id": u.id, "html": tile, "parent": ""})];
            if *bmc && let Some(d) = &u.detail {
                replaced.push(serde_json::json!({"id": "bmc", "html": d, "parent": ""}));
            }
            serde_json::json!({ "replace": replaced })
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

impl Update {
    /// A machine's tile in the variant for a user who may (or may not) list the Workflows and
    /// the BMC Machines and Jobs of its namespace.
    fn tile_for(&self, workflows: bool, bmc: bool) -> Option<&str> {
        match (workflows, bmc) {
            (true, true) => self.html.as_deref(),
            (true, false) => self.no_bmc.as_deref(),
            (false, true) => self.no_workflow.as_deref(),
            (false, false) => self.bare.as_deref(),
        }
    }
}

/// `verb` on a `bmc.tinkerbell.org` `resource` (`machines`, `jobs`).
pub fn bmc_permission(verb: &'static str, resource: &'static str, namespace: &str) -> Permission {
    Permission {
        verb,
        group: tink_api::bmc::GROUP,
        resource,
        subresource: "",
        namespace: namespace.to_string(),
        name: String::new(),
    }
}

/// What showing a machine's BMC in `namespace` needs: `list` BMC Machines and Jobs there.
pub fn bmc_needs(namespace: &str) -> [Permission; 2] {
    [
        bmc_permission("list", "machines", namespace),
        bmc_permission("list", "jobs", namespace),
    ]
}

impl Filter {
    /// What the user must still be allowed for the stream to go on forwarding what it
    /// forwards: `list` in each namespace (or in every namespace) it shows, `get` of the one
    /// workflow, `list events` when it forwards them.
    pub fn needs(&self) -> Vec<Permission> {
        fn list(resource: &'static str, ns: &Namespaces, out: &mut Vec<Permission>) {
            match ns {
                Namespaces::All => out.push(Permission::tink("list", resource, "", "")),
                Namespaces::Some(set) => {
                    let mut set: Vec<&String> = set.iter().collect();
                    set.sort();
                    out.extend(
                        set.into_iter()
                            .map(|n| Permission::tink("list", resource, n, "")),
                    )
                }
            }
        }
        let mut out = Vec::new();
        match self {
            Filter::Machines {
                namespaces,
                workflows,
                bmc,
                ..
            } => {
                list("hardware", namespaces, &mut out);
                list("workflows", workflows, &mut out);
                match bmc {
                    Namespaces::All => out.extend(bmc_needs("")),
                    Namespaces::Some(set) => {
                        let mut set: Vec<&String> = set.iter().collect();
                        set.sort();
                        out.extend(set.into_iter().flat_map(|n| bmc_needs(n)));
                    }
                }
            }
            Filter::Machine {
                namespace,
                name,
                workflows,
                bmc,
            } => {
                out.push(Permission::tink("get", "hardware", namespace, name));
                if *workflows {
                    out.push(Permission::tink("list", "workflows", namespace, ""));
                }
                if *bmc {
                    out.extend(bmc_needs(namespace));
                }
            }
            Filter::Workflows { namespaces, .. } => list("workflows", namespaces, &mut out),
            Filter::Workflow {
                namespace,
                name,
                events,
            } => {
                out.push(Permission::tink("get", "workflows", namespace, name));
                if *events {
                    out.push(Permission::events("list", namespace));
                }
            }
        }
        out
    }
}

/// The limits of the streams.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// A comment line this often keeps proxies from closing an idle stream.
    pub keepalive: Duration,
    /// The stream ends after this long (the page reloads, checking access again).
    pub max_age: Duration,
    /// The user's access is checked again this often; a stream no longer allowed ends.
    pub recheck: Duration,
}

/// The periodic access check of one stream: `check` answers whether the user may still see
/// what the stream forwards (a failed review counts as no).
pub type Recheck = Box<dyn FnMut() -> BoxFuture<'static, bool> + Send>;

/// Why a stream was not opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The user already has this many streams open.
    User(usize),
    /// The console already has this many streams open.
    Total(usize),
}

/// The stream slots: at most `total` streams, at most `per_user` of one user. Memory is
/// bounded by `total` (one counter per user with an open stream).
#[derive(Debug, Clone)]
pub struct Slots {
    total: Arc<Semaphore>,
    max_total: usize,
    per_user: usize,
    users: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open stream's slot; dropping it frees it.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    user: String,
    users: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = users.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                users.remove(&self.user);
            }
        }
    }
}

impl Slots {
    /// `total` streams at most, `per_user` of one user.
    pub fn new(total: usize, per_user: usize) -> Slots {
        Slots {
            total: Arc::new(Semaphore::new(total)),
            max_total: total,
            per_user,
            users: Arc::default(),
        }
    }

    /// A slot for one more stream of `user`, or why not.
    pub fn acquire(&self, user: &str) -> Result<Slot, Refused> {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let open = users.get(user).copied().unwrap_or(0);
        if open >= self.per_user {
            return Err(Refused::User(self.per_user));
        }
        let permit = self
            .total
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refused::Total(self.max_total))?;
        *users.entry(user.to_string()).or_insert(0) += 1;
        Ok(Slot {
            _permit: permit,
            user: user.to_string(),
            users: self.users.clone(),
        })
    }

    /// Streams of `user` open now.
    pub fn open_of(&self, user: &str) -> usize {
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        users.get(user).copied().unwrap_or(0)
    }
}

/// The bytes of one stream: the updates after `since` (the page's sequence number) then every
/// new one, as `update` events for `filter`; `resync` when updates were missed or a watch
/// relisted; keep-alive comments; until `shutdown` or `limits.max_age`, or until `recheck`
/// (run every `limits.recheck`) says the user may no longer see what it forwards (then a
/// last `resync`: the page reloads and is refused). `permit` (the stream's [`Slot`]) is held
/// while the stream lives.
pub fn stream<P: Send + 'static>(
    live: &Live,
    filter: Filter,
    since: Option<u64>,
    limits: StreamLimits,
    permit: P,
    recheck: Option<Recheck>,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
    struct State<P> {
        rx: broadcast::Receiver<Arc<Update>>,
        backlog: VecDeque<Arc<Update>>,
        last: u64,
        filter: Filter,
        limits: StreamLimits,
        deadline: tokio::time::Instant,
        recheck: Option<Recheck>,
        next_check: tokio::time::Instant,
        shutdown: CancellationToken,
        metrics: Metrics,
        done: bool,
        _permit: P,
    }
    impl<P> Drop for State<P> {
        fn drop(&mut self) {
            self.metrics.sse_clients.dec();
        }
    }
    // A check at most every second, whatever the configuration says.
    let limits = StreamLimits {
        recheck: limits.recheck.max(Duration::from_secs(1)),
        ..limits
    };
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
        next_check: tokio::time::Instant::now() + limits.recheck,
        recheck,
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
            // Biased: an end (shutdown, age, a due access check) goes before any update, so no
            // update is forwarded after a check fell due.
            let chunk = tokio::select! {
                biased;
                _ = s.shutdown.cancelled() => return None,
                _ = tokio::time::sleep_until(s.deadline) => {
                    s.done = true;
                    "event: resync\ndata: {}\n\n".to_string()
                }
                _ = tokio::time::sleep_until(s.next_check), if s.recheck.is_some() => {
                    let allowed = match s.recheck.as_mut() {
                        Some(check) => check().await,
                        None => true,
                    };
                    if allowed {
                        s.next_check = tokio::time::Instant::now() + s.limits.recheck;
                        continue;
                    }
                    s.metrics.sse_revoked.inc();
                    tracing::info!("a live stream's access was withdrawn; the stream ends");
                    s.done = true;
                    "event: resync\ndata: {}\n\n".to_string()
                }
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
                _ = tokio::time::sleep(s.limits.keepalive) => ": keepalive\n\n".to_string(),
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
            bare: Some("<div>bare</div>".into()),
            no_bmc: Some("<div>no-bmc</div>".into()),
            no_workflow: Some("<div>no-workflow</div>".into()),
            detail: Some("<div>d</div>".into()),
            at: Instant::now(),
            seq: 0,
        }
    }

    #[test]
    fn machines_streams_forward_visible_matching_tiles_only() {
        let f = Filter::Machines {
            namespaces: Namespaces::Some(["a".to_string()].into()),
            workflows: Namespaces::All,
            bmc: Namespaces::All,
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
    fn machine_tiles_name_their_workflow_only_where_the_user_may_list_workflows() {
        let f = |workflows: Namespaces| Filter::Machines {
            namespaces: Namespaces::Some(["a".to_string(), "b".to_string()].into()),
            workflows,
            bmc: Namespaces::Some(HashSet::new()),
            namespace: None,
            selector: Selector::default(),
        };
        let mut u = update(Kind::Machine, "a", "m", &[]);
        u.html = Some("<a>wf-secret Running</a>".into());
        u.no_bmc = u.html.clone();
        u.bare = Some("<a>no workflow</a>".into());
        let full = message(&f(Namespaces::Some(["a".to_string()].into())), &u).unwrap();
        assert!(full.contains("wf-secret"), "{full}");
        let bare = message(&f(Namespaces::Some(["b".to_string()].into())), &u).unwrap();
        assert!(
            !bare.contains("wf-secret") && !bare.contains("Running"),
            "{bare}"
        );
        assert!(bare.contains("no workflow"), "{bare}");
        let bare = message(&f(Namespaces::Some(HashSet::new())), &u).unwrap();
        assert!(!bare.contains("wf-secret"), "{bare}");
        // No bare variant (it failed to render): nothing rather than the full tile.
        u.bare = None;
        assert!(message(&f(Namespaces::Some(HashSet::new())), &u).is_none());
    }

    #[test]
    fn tiles_show_the_power_state_only_where_the_user_may_list_bmc_machines_and_jobs() {
        let a = || Namespaces::Some(["a".to_string()].into());
        let none = || Namespaces::Some(HashSet::new());
        let f = |workflows: Namespaces, bmc: Namespaces| Filter::Machines {
            namespaces: a(),
            workflows,
            bmc,
            namespace: None,
            selector: Selector::default(),
        };
        let u = update(Kind::Machine, "a", "m", &[]);
        let shown = |f: &Filter| message(f, &u).unwrap();
        assert!(shown(&f(a(), a())).contains("<div>x</div>"));
        assert!(shown(&f(a(), none())).contains("no-bmc"));
        assert!(shown(&f(none(), a())).contains("no-workflow"));
        assert!(shown(&f(none(), none())).contains("bare"));
        // A machine's page: its tile in the user's variant, and the BMC part only with it.
        let page = |workflows: bool, bmc: bool| Filter::Machine {
            namespace: "a".into(),
            name: "m".into(),
            workflows,
            bmc,
        };
        let m = message(&page(true, true), &u).unwrap();
        assert!(
            m.contains("<div>x</div>") && m.contains(r#""id":"bmc""#),
            "{m}"
        );
        let m = message(&page(true, false), &u).unwrap();
        assert!(m.contains("no-bmc") && !m.contains(r#""id":"bmc""#), "{m}");
        assert!(message(&page(true, true), &update(Kind::Machine, "a", "other", &[])).is_none());
    }

    #[test]
    fn a_stream_needs_what_it_forwards() {
        let f = Filter::Machines {
            namespaces: Namespaces::All,
            workflows: Namespaces::Some(["a".to_string()].into()),
            bmc: Namespaces::Some(["b".to_string()].into()),
            namespace: None,
            selector: Selector::default(),
        };
        assert_eq!(
            f.needs(),
            vec![
                Permission::tink("list", "hardware", "", ""),
                Permission::tink("list", "workflows", "a", ""),
                bmc_permission("list", "machines", "b"),
                bmc_permission("list", "jobs", "b"),
            ]
        );
        let f = Filter::Machine {
            namespace: "a".into(),
            name: "m".into(),
            workflows: false,
            bmc: true,
        };
        assert_eq!(
            f.needs(),
            vec![
                Permission::tink("get", "hardware", "a", "m"),
                bmc_permission("list", "machines", "a"),
                bmc_permission("list", "jobs", "a"),
            ]
        );
        let f = Filter::Workflow {
            namespace: "a".into(),
            name: "w".into(),
            events: true,
        };
        assert_eq!(
            f.needs(),
            vec![
                Permission::tink("get", "workflows", "a", "w"),
                Permission::events("list", "a"),
            ]
        );
    }

    #[test]
    fn slots_cap_streams_per_user_and_in_all() {
        let slots = Slots::new(3, 2);
        let a1 = slots.acquire("alice").unwrap();
        let _a2 = slots.acquire("alice").unwrap();
        assert_eq!(slots.acquire("alice").unwrap_err(), Refused::User(2));
        let _b1 = slots.acquire("bob").unwrap();
        assert_eq!(slots.acquire("carol").unwrap_err(), Refused::Total(3));
        drop(a1);
        assert_eq!(slots.open_of("alice"), 1);
        let _c1 = slots.acquire("carol").unwrap();
        assert_eq!(slots.acquire("alice").unwrap_err(), Refused::Total(3));
        drop(_c1);
        let _a3 = slots.acquire("alice").unwrap();
        assert_eq!(slots.open_of("alice"), 2);
        drop(_a3);
        drop(_a2);
        assert_eq!(slots.open_of("alice"), 0);
        assert!(
            slots.users.lock().unwrap().get("alice").is_none(),
            "no entry left behind"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_ends_when_its_recheck_fails() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let live = Live::new(16, Metrics::default());
        let limits = StreamLimits {
            keepalive: Duration::from_secs(3600),
            max_age: Duration::from_secs(3600),
            recheck: Duration::from_secs(10),
        };
        let allowed = Arc::new(AtomicBool::new(true));
        let checks = Arc::new(AtomicUsize::new(0));
        let (a, c) = (allowed.clone(), checks.clone());
        let recheck: Recheck = Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
            let ok = a.load(Ordering::SeqCst);
            Box::pin(async move { ok })
        });
        let f = Filter::Workflows {
            namespaces: Namespaces::All,
            namespace: None,
        };
        let mut s = Box::pin(stream(
            &live,
            f,
            None,
            limits,
            (),
            Some(recheck),
            CancellationToken::new(),
        ));
        assert!(next_text(&mut s).await.contains(": connected"));
        live.send(update(Kind::Workflow, "a", "w1", &[]));
        assert!(next_text(&mut s).await.contains("x/a/w1"));
        // Still allowed after a recheck: updates keep coming.
        tokio::time::sleep(Duration::from_secs(11)).await;
        live.send(update(Kind::Workflow, "a", "w2", &[]));
        assert!(next_text(&mut s).await.contains("x/a/w2"));
        assert!(checks.load(Ordering::SeqCst) >= 1);
        // Revoked: the next recheck ends the stream with a resync, nothing more is sent.
        allowed.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(11)).await;
        live.send(update(Kind::Workflow, "a", "w3", &[]));
        let last = next_text(&mut s).await;
        assert_eq!(last, "event: resync\ndata: {}\n\n");
        use futures::StreamExt as _;
        assert!(s.next().await.is_none(), "the stream ended");
        assert_eq!(live.metrics.sse_revoked.get(), 1);
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
            recheck: Duration::from_secs(60),
        };
        let mut s = Box::pin(stream(
            &live,
            f,
            None,
            limits,
            permit,
            None,
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
            recheck: Duration::from_secs(60),
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
            None,
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
            None,
            CancellationToken::new(),
        ));
        assert!(next_text(&mut old).await.contains("event: resync"));
    }
}
