//! Starting and stopping the server, the kubeconfig, and the `--data-dir` persistence thread.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::store::{PersistOp, State};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Keep objects in an embedded store in this directory across restarts; in memory if `None`.
    pub data_dir: Option<PathBuf>,
    /// Webhook Services that do not exist here: `namespace/name` -> base URL
    /// (`https://127.0.0.1:8443`). Used for `clientConfig.service` of admission webhooks and CRD
    /// conversion; the TLS server name checked is `name.namespace.svc`, as a real API server does.
    /// More can be added while running with [`RunningServer::map_service`].
    pub services: BTreeMap<String, String>,
    /// How many past events are kept for watches; a watch from an older resourceVersion gets 410.
    pub watch_history: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Static tokens (kube-apiserver's `--token-auth-file` CSV) that `TokenReview` answers
    /// from, besides the written kubeconfig's own admin token. See [`crate::auth`].
    pub token_file: Option<PathBuf>,
    /// How long an Event lives after its last write before it is deleted, as kube-apiserver's
    /// `--event-ttl` (default one hour); `None` keeps Events forever.
    pub event_ttl: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            services: BTreeMap::new(),
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(10),
            token_file: None,
            event_ttl: Some(DEFAULT_EVENT_TTL),
        }
    }
}

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);
/// How often expired Events are looked for.
const EVENT_SWEEP: Duration = Duration::from_secs(1);
/// The most Events one sweep deletes (one hold of the state's lock).
const EVENT_SWEEP_MAX: usize = 2000;

impl Config {
    /// Sets the data directory.
    pub fn with_data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Maps a Service (`namespace/name`) to a base URL.
    pub fn with_service(
        mut self,
        namespaced_name: impl Into<String>,
        base_url: impl Into<String>,
    ) -> Self {
        self.services
            .insert(namespaced_name.into(), base_url.into());
        self
    }

    /// Parses `ns/name=URL` (the `--service` flag).
    pub fn parse_service(spec: &str) -> Result<(String, String), Error> {
        let (k, v) = spec
            .split_once('=')
            .ok_or_else(|| Error::ServiceMapping(spec.to_string()))?;
        let (ns, name) = k
            .split_once('/')
            .ok_or_else(|| Error::ServiceMapping(spec.to_string()))?;
        if ns.is_empty()
            || name.is_empty()
            || !(v.starts_with("https://") || v.starts_with("http://"))
        {
            return Err(Error::ServiceMapping(spec.to_string()));
        }
        Ok((k.to_string(), v.to_string()))
    }
}

/// Shared server internals.
pub(crate) struct Core {
    state: Mutex<State>,
    /// Service mappings; starts as [`Config::services`], grows with [`RunningServer::map_service`].
    services: Mutex<BTreeMap<String, String>>,
    pub(crate) config: Config,
    pub(crate) addr: SocketAddr,
    pub(crate) shutdown: CancellationToken,
    /// The tokens `TokenReview` answers from.
    pub(crate) tokens: crate::auth::Tokens,
    doorbell: Option<std::sync::mpsc::SyncSender<()>>,
    /// Requests answered on resource paths, served at `/metrics`.
    pub(crate) requests: crate::metrics::Requests,
}

impl Core {
    /// Locks the state; a poisoned lock (a panic elsewhere) still yields the data.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A snapshot of the Service mappings.
    pub(crate) fn services(&self) -> BTreeMap<String, String> {
        self.services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Wakes the persistence thread after a write.
    pub(crate) fn persist_soon(&self) {
        if let Some(d) = &self.doorbell {
            // Full means a wake-up is already pending.
            let _ = d.try_send(());
        }
    }
}

/// Entry point.
pub struct Server;

impl Server {
    /// [`Server::start`] with the default configuration and a token file holding `tokens`
    /// (kube-apiserver's CSV, see [`crate::auth`]) written to `dir/tokens.csv`: for tests of
    /// components that ask about (or are told) the user of a bearer token.
    pub async fn start_with_tokens(dir: &Path, tokens: &str) -> Result<RunningServer, Error> {
        let path = dir.join("tokens.csv");
        std::fs::write(&path, tokens).map_err(|e| crate::auth::TokenFileError {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::start(Config {
            token_file: Some(path),
            ..Default::default()
        })
        .await
    }

    /// Binds, loads the data directory if any, and serves in the background.
    pub async fn start(config: Config) -> Result<RunningServer, Error> {
        let tokens = match &config.token_file {
            Some(path) => crate::auth::Tokens::load(path)?,
            None => crate::auth::Tokens::default(),
        }
        .with_admin();
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
        let (tx, _) = broadcast::channel(4096);
        let mut state = State::new(config.watch_history, tx, config.data_dir.is_some());
        state.event_ttl = config.event_ttl;
        let db = match &config.data_dir {
            Some(dir) => Some(open_store(dir, &mut state)?),
            None => None,
        };
        crate::api::bootstrap(&mut state);
        let (doorbell, persist_thread) = match db {
            Some(db) => {
                let (dtx, drx) = std::sync::mpsc::sync_channel::<()>(1);
                (Some(dtx), Some((db, drx)))
            }
            None => (None, None),
        };
        let shutdown = CancellationToken::new();
        let core = Arc::new(Core {
            state: Mutex::new(state),
            services: Mutex::new(config.services.clone()),
            config,
            addr,
            shutdown: shutdown.clone(),
            tokens,
            doorbell,
            requests: Default::default(),
        });
        let stop_flag = Arc::new(AtomicBool::new(false));
        let persister = match persist_thread {
            Some((db, rx)) => {
                let core2 = core.clone();
                let flag = stop_flag.clone();
                Some(
                    std::thread::Builder::new()
                        .name("kube-lite-persist".into())
                        .spawn(move || persist_loop(db, rx, core2, flag))
                        .map_err(|e| {
                            Error::Store(format!("cannot start the persistence thread: {e}"))
                        })?,
                )
            }
            None => None,
        };
        core.persist_soon();
        let app = crate::api::router(core.clone());
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            // TCP_NODELAY on accepted connections, as kube-apiserver (Go) has by default:
            // without it small watch events waited for the client's delayed ACK (~40 ms).
            use axum::serve::ListenerExt as _;
            let listener = listener.tap_io(|stream| {
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "cannot set TCP_NODELAY");
                }
            });
            let res = axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
            if let Err(e) = res {
                tracing::error!(error = %e, "kube-lite server stopped");
            }
        });
        if core.config.event_ttl.is_some() {
            let (core, token) = (core.clone(), shutdown.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = token.cancelled() => return,
                        _ = tokio::time::sleep(EVENT_SWEEP) => {}
                    }
                    let expired = core
                        .lock()
                        .expire_events(std::time::Instant::now(), EVENT_SWEEP_MAX);
                    if expired > 0 {
                        tracing::debug!(expired, "kube-lite: expired Events deleted");
                        core.persist_soon();
                    }
                }
            });
        }
        tracing::info!(%addr, "kube-lite listening");
        Ok(RunningServer {
            addr,
            core,
            shutdown,
            task: Some(task),
            persister,
            stop_flag,
        })
    }
}

fn open_store(dir: &Path, state: &mut State) -> Result<redb::Database, Error> {
    let err = |message: String| Error::DataDir {
        path: dir.to_path_buf(),
        message,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let db = redb::Database::create(dir.join("kube-lite.redb")).map_err(|e| err(e.to_string()))?;
    let txn = db.begin_write().map_err(|e| err(e.to_string()))?;
    txn.open_table(OBJECTS).map_err(|e| err(e.to_string()))?;
    txn.open_table(META).map_err(|e| err(e.to_string()))?;
    txn.commit().map_err(|e| err(e.to_string()))?;
    let read = db.begin_read().map_err(|e| err(e.to_string()))?;
    let objects = read.open_table(OBJECTS).map_err(|e| err(e.to_string()))?;
    let mut loaded = Vec::new();
    for row in objects.iter().map_err(|e| err(e.to_string()))? {
        let (k, v) = row.map_err(|e| err(e.to_string()))?;
        let key = k.value().to_string();
        let obj: Value = serde_json::from_slice(v.value()).map_err(|source| Error::Corrupt {
            key: key.clone(),
            source,
        })?;
        let parts: Vec<&str> = key.splitn(4, '|').collect();
        if let [g, p, ns, name] = parts.as_slice() {
            loaded.push((
                (g.to_string(), p.to_string()),
                (ns.to_string(), name.to_string()),
                obj,
            ));
        }
    }
    let meta = read.open_table(META).map_err(|e| err(e.to_string()))?;
    let rv = meta
        .get("rv")
        .map_err(|e| err(e.to_string()))?
        .map(|g| g.value())
        .unwrap_or(0);
    // CRDs first so their resources are registered before their objects load.
    loaded.sort_by_key(|(gr, _, _)| gr.1 != "customresourcedefinitions");
    for (gr, key, obj) in loaded {
        if gr.1 == "customresourcedefinitions"
            && let Ok(rt) = crate::crd::parse(&obj)
        {
            state.registry.insert(rt);
        }
        state.load(gr, key, obj);
    }
    state.rv = state.rv.max(rv);
    state.reset_floor();
    drop(meta);
    drop(objects);
    drop(read);
    Ok(db)
}

fn write_batch(db: &redb::Database, ops: Vec<PersistOp>, rv: u64) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut t = txn.open_table(OBJECTS).map_err(|e| e.to_string())?;
        for op in ops {
            match op {
                PersistOp::Put(k, v) => {
                    t.insert(k.as_str(), v.as_slice())
                        .map_err(|e| e.to_string())?;
                }
                PersistOp::Delete(k) => {
                    t.remove(k.as_str()).map_err(|e| e.to_string())?;
                }
            }
        }
        let mut m = txn.open_table(META).map_err(|e| e.to_string())?;
        m.insert("rv", rv).map_err(|e| e.to_string())?;
    }
    txn.commit().map_err(|e| e.to_string())
}

/// The shortest time between two commits of the persistence thread.
const COMMIT_INTERVAL: Duration = Duration::from_millis(25);

fn persist_loop(
    db: redb::Database,
    rx: std::sync::mpsc::Receiver<()>,
    core: Arc<Core>,
    stop: Arc<AtomicBool>,
) {
    let mut last_commit: Option<std::time::Instant> = None;
    loop {
        let woke = rx.recv_timeout(Duration::from_millis(200));
        // Group commit: at most one commit (and its fdatasync) per COMMIT_INTERVAL. Writes are
        // answered before they are persisted either way; under load this was a commit per
        // write or two, and the fsyncs cost more CPU than the requests.
        if let Some(at) = last_commit {
            let since = at.elapsed();
            if since < COMMIT_INTERVAL && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(COMMIT_INTERVAL - since);
            }
        }
        let (ops, rv) = {
            let mut st = core.lock();
            (st.take_persist(), st.rv)
        };
        if !ops.is_empty() {
            last_commit = Some(std::time::Instant::now());
            if let Err(e) = write_batch(&db, ops, rv) {
                tracing::error!(error = %e, "kube-lite: persisting a batch failed");
            }
        }
        let disconnected = matches!(woke, Err(std::sync::mpsc::RecvTimeoutError::Disconnected));
        if stop.load(Ordering::SeqCst) || disconnected {
            let (ops, rv) = {
                let mut st = core.lock();
                (st.take_persist(), st.rv)
            };
            if !ops.is_empty()
                && let Err(e) = write_batch(&db, ops, rv)
            {
                tracing::error!(error = %e, "kube-lite: persisting the last batch failed");
            }
            return;
        }
    }
}

/// A running server; stops when dropped or on [`RunningServer::shutdown`].
pub struct RunningServer {
    addr: SocketAddr,
    core: Arc<Core>,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    persister: Option<std::thread::JoinHandle<()>>,
    stop_flag: Arc<AtomicBool>,
}

impl std::fmt::Debug for RunningServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl RunningServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Maps a webhook Service (`namespace/name`) to a base URL on a running server, for
    /// webhooks that start after the API server (they usually need it first).
    pub fn map_service(&self, namespaced_name: impl Into<String>, base_url: impl Into<String>) {
        self.core
            .services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(namespaced_name.into(), base_url.into());
    }

    /// Requests answered so far on resource paths, by verb, resource and code (what `/metrics`
    /// serves as `kube_lite_requests_total`).
    pub fn request_counts(&self) -> std::collections::BTreeMap<crate::RequestKey, u64> {
        self.core.requests.snapshot()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Client` for this server (no token: the admin).
    pub fn client(&self) -> Result<kube::Client, Error> {
        self.client_with(None)
    }

    /// A `kube::Client` sending `Authorization: Bearer <token>`: the user the token file maps
    /// it to in AdmissionReviews (see [`crate::auth`]).
    pub fn client_as(&self, token: &str) -> Result<kube::Client, Error> {
        self.client_with(Some(token))
    }

    fn client_with(&self, token: Option<&str>) -> Result<kube::Client, Error> {
        let uri: http::Uri = self
            .url()
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Client(e.to_string()))?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config.read_timeout = None;
        config.auth_info.token = token.map(|t| t.to_string().into());
        kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
    }

    /// The kubeconfig YAML for kubectl and `kube::Config::from_custom_kubeconfig`.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(&self.url())
    }

    /// The kubeconfig YAML of a user presenting `token` (for clients of other processes, such
    /// as tinkctl; kubectl sends no token over plain HTTP).
    pub fn kubeconfig_as(&self, token: &str) -> String {
        kubeconfig_yaml_as(&self.url(), token)
    }

    /// Writes the kubeconfig to a file.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig()).map_err(|source| Error::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Stops serving, ends open watches and flushes the data directory.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            // The task only ends; a join error means it panicked, which it logs itself.
            let _ = task.await;
        }
        self.stop_persister();
    }

    fn stop_persister(&mut self) {
        self.stop_flag.store(true, Ordering::SeqCst);
        self.core.persist_soon();
        if let Some(t) = self.persister.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.stop_persister();
    }
}

/// A kubeconfig for an insecure loopback server.
pub fn kubeconfig_yaml(server: &str) -> String {
    kubeconfig_yaml_as(server, crate::auth::ADMIN_TOKEN)
}

/// A kubeconfig for an insecure loopback server whose user presents `token`.
pub fn kubeconfig_yaml_as(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-lite\n  cluster:\n    server: {server}\ncontexts:\n- name: kube-lite\n  context:\n    cluster: kube-lite\n    user: kube-lite\n    namespace: default\ncurrent-context: kube-lite\nusers:\n- name: kube-lite\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}
