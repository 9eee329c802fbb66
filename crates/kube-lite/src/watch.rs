//! Watches: initial state, replay from a resourceVersion, live events, bookmarks, 410 Gone.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::api::{Query, Target, matches, selectors, to_version};
use crate::error::{ApiError, ApiResult};
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::Core;
use crate::store::{Event, EventType};

type Chunk = Result<Bytes, std::io::Error>;

/// One watch event on the wire, serialized from a borrowed object (`json!` would copy it).
#[derive(serde::Serialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    etype: &'a str,
    object: &'a Value,
}

fn line(etype: &str, obj: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&WatchEvent { etype, object: obj }).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn streaming(rx: mpsc::Receiver<Chunk>) -> Response {
    let mut r = Response::new(Body::from_stream(ReceiverStream::new(rx)));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

struct Watcher {
    core: Arc<Core>,
    t: Target,
    ls: LabelSelector,
    fs: FieldSelector,
    tx: mpsc::Sender<Chunk>,
    last_rv: u64,
    /// `Some(includeObject)` when the client asked for Table events.
    table: Option<String>,
}

impl Watcher {
    fn selected(&self, obj: &Value) -> bool {
        matches(&self.ls, &self.fs, obj)
    }

    /// Sends a stored object: serialized in place when the watch wants it as stored (the
    /// usual case), else copied, converted or turned into a Table row first.
    async fn send_stored(&self, etype: &str, obj: &Arc<Value>) -> bool {
        if self.table.is_none()
            && obj.get("apiVersion").and_then(Value::as_str) == Some(self.t.api_version().as_str())
        {
            return self.tx.send(Ok(line(etype, obj))).await.is_ok();
        }
        self.send(etype, (**obj).clone()).await
    }

    async fn send(&self, etype: &str, obj: Value) -> bool {
        let obj = match to_version(&self.core, &self.t.rt, &self.t.version, obj).await {
            Ok(o) => o,
            Err(e) => {
                let _ = self.tx.send(Ok(line("ERROR", &e.to_status()))).await;
                return false;
            }
        };
        let obj = match &self.table {
            Some(include) => {
                crate::table::table(&self.t.rt, &self.t.version, &[obj], json!({}), include)
            }
            None => obj,
        };
        self.tx.send(Ok(line(etype, &obj))).await.is_ok()
    }

    /// Returns false when the watch must end.
    async fn event(&mut self, ev: &Event) -> bool {
        self.last_rv = self.last_rv.max(ev.rv);
        if ev.gr != self.t.gr() {
            return true;
        }
        if let Some(ns) = &self.t.namespace
            && *ns != ev.namespace
        {
            return true;
        }
        let now = self.selected(&ev.object);
        let etype = match ev.etype {
            EventType::Modified => {
                let before = ev.prev.as_ref().is_some_and(|p| self.selected(p));
                match (before, now) {
                    (true, true) => "MODIFIED",
                    (false, true) => "ADDED",
                    (true, false) => "DELETED",
                    (false, false) => return true,
                }
            }
            other if now => other.as_str(),
            _ => return true,
        };
        self.send_stored(etype, &ev.object).await
    }

    async fn bookmark(&self, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": self.last_rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.t.rt.kind, "apiVersion": self.t.api_version(), "metadata": meta});
        self.tx.send(Ok(line("BOOKMARK", &obj))).await.is_ok()
    }
}

/// Serves `?watch=true`.
pub(crate) async fn watch(
    core: Arc<Core>,
    t: Target,
    q: Query,
    table: Option<String>,
) -> ApiResult<Response> {
    let (ls, fs) = selectors(&t, &q)?;
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    let timeout = match q.get("timeoutSeconds") {
        Some(s) => Some(Duration::from_secs(s.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid timeoutSeconds {s:?}"))
        })?)),
        None => None,
    };
    let from: u64 = match q.get("resourceVersion") {
        None | Some("0") => 0,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version {s:?}")))?,
    };
    let gr = t.gr();
    let (tx, rx) = mpsc::channel::<Chunk>(256);
    let (initial, sub, start_rv) = {
        let st = core.lock();
        let initial = if send_initial || from == 0 {
            st.list(&gr, t.namespace.as_deref())
        } else {
            Vec::new()
        };
        let replay_from = if send_initial { 0 } else { from };
        match st.subscribe(&gr, replay_from) {
            Ok(sub) => (initial, sub, st.rv),
            Err(too_old) => {
                let e = ApiError::gone(format!(
                    "too old resource version: {from} ({})",
                    too_old.oldest
                ));
                drop(st);
                // The API server answers 200 and an ERROR event; clients re-list on it.
                let _ = tx.try_send(Ok(line("ERROR", &e.to_status())));
                drop(tx);
                return Ok(streaming(rx));
            }
        }
    };
    let mut w = Watcher {
        core: core.clone(),
        t,
        ls,
        fs,
        tx,
        table,
        last_rv: if from == 0 || send_initial {
            start_rv
        } else {
            from
        },
    };
    let interval = core.config.bookmark_interval;
    let shutdown = core.shutdown.clone();
    tokio::spawn(async move {
        for obj in initial {
            if w.selected(&obj) && !w.send_stored("ADDED", &obj).await {
                return;
            }
        }
        if send_initial {
            w.last_rv = w.last_rv.max(start_rv);
            if !w.bookmark(true).await {
                return;
            }
        }
        for ev in &sub.backlog {
            if !w.event(ev).await {
                return;
            }
        }
        let mut live = sub.live;
        let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tokio::select! {
                ev = live.recv() => match ev {
                    Ok(ev) => if !w.event(&ev).await { return },
                    // A watcher that falls behind is closed; the client re-watches from its last
                    // resourceVersion (or re-lists on 410).
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => if !w.bookmark(false).await { return },
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => return,
                _ = shutdown.cancelled() => return,
                _ = w.tx.closed() => return,
            }
        }
    });
    Ok(streaming(rx))
}
