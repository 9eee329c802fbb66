//! GET and HEAD of the files in the [`Root`]: iPXE binaries for UEFI HTTP boot and iPXE, and
//! the OSIE kernel, initrd and disk images other tools put there, with their `Content-Length`; a
//! single `Range` (`bytes=a-b`, `bytes=a-`, `bytes=-n`) is answered with 206 (iPXE and curl
//! resume with it), an unsatisfiable one with 416, several ranges with the whole file.
//!
//! Files up to [`HotConfig::max_file_bytes`] are kept in memory ([`crate::hot`]) and sent as
//! slices of that one buffer, no read and no copy per chunk; the rest (and a file being loaded)
//! is streamed from disk in [`CHUNK`] pieces read into fresh buffers without zeroing them
//! (BENCHMARKS.md, "Boot files served fast", has the figures against nginx).
//!
//! `/iso/<mac>/<name>.iso`: the source ISO with that machine's kernel parameters in its
//! placeholder ([`crate::iso`]), streamed the same way (BMCs read virtual media with `Range`).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::files::{FileError, Root};
pub use crate::hot::HotConfig;
use crate::hot::{HotFiles, Lookup as Hot};
use crate::index::{Index, Lookup};
use crate::iso::{IsoSource, overlay};
use crate::metrics::Metrics;

/// The piece read from disk at a time when a file is streamed (each read is one trip through
/// the runtime's blocking pool).
pub const CHUNK: usize = 256 * 1024;

/// What the ISO route needs: the source ISO (none: the route answers 404), the Hardware index
/// and the values of the kernel parameters.
#[derive(Clone)]
pub struct IsoRoute {
    /// The source ISO.
    pub source: Option<Arc<IsoSource>>,
    /// The Hardware index.
    pub index: Arc<Index>,
    /// The values Hegel's flags give the iPXE script.
    pub kernel: Arc<hegel::IpxeConfig>,
}

#[derive(Clone)]
struct FileState {
    root: Arc<Root>,
    hot: Arc<HotFiles>,
    metrics: Metrics,
    iso: Option<IsoRoute>,
}

/// The file routes.
pub fn router(root: Root, metrics: Metrics) -> Router {
    routes(root, metrics, None)
}

/// The file routes, and `/iso/{mac}/{file}` (404 "no ISO configured" when `iso` has no source,
/// or is `None`).
pub fn routes(root: Root, metrics: Metrics, iso: Option<IsoRoute>) -> Router {
    routes_with(root, metrics, iso, HotConfig::default())
}

/// [`routes`] with the in-memory cache bounded by `hot`.
pub fn routes_with(root: Root, metrics: Metrics, iso: Option<IsoRoute>, hot: HotConfig) -> Router {
    Router::new()
        .route("/iso/{mac}/{file}", get(iso_file))
        .route("/{*path}", get(file))
        .fallback(not_found)
        .with_state(FileState {
            root: Arc::new(root),
            hot: HotFiles::new(hot),
            metrics,
            iso,
        })
}

/// Serves [`routes`] on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    root: Root,
    metrics: Metrics,
    iso: Option<IsoRoute>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, root, metrics, iso, HotConfig::default(), shutdown).await
}

/// [`serve`] with the in-memory cache bounded by `hot`.
pub async fn serve_with(
    listener: TcpListener,
    root: Root,
    metrics: Metrics,
    iso: Option<IsoRoute>,
    hot: HotConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, dir = %root.dir().display(), cache_bytes = hot.max_bytes, "HTTP listening");
    }
    axum::serve(listener, routes_with(root, metrics, iso, hot))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn not_found(method: Method, State(state): State<FileState>) -> Response {
    state.metrics.http(method_label(&method), 404);
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        _ => "other",
    }
}

/// A byte range of a file of `len` bytes: `Some(Ok((start, end_inclusive)))`, `Some(Err(()))`
/// when unsatisfiable, `None` to send the whole file.
fn range(headers: &HeaderMap, len: u64) -> Option<Result<(u64, u64), ()>> {
    let v = headers.get(header::RANGE)?.to_str().ok()?;
    let spec = v.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let r = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        if n == 0 || len == 0 {
            return Some(Err(()));
        }
        (len.saturating_sub(n), len - 1)
    } else {
        let start: u64 = a.parse().ok()?;
        let end: u64 = if b.is_empty() {
            len.saturating_sub(1)
        } else {
            b.parse::<u64>().ok()?.min(len.saturating_sub(1))
        };
        if start >= len || end < start {
            return Some(Err(()));
        }
        (start, end)
    };
    Some(Ok(r))
}

async fn file(
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    State(state): State<FileState>,
) -> Response {
    let m = method_label(&method);
    let opened = match state.root.open_meta(&path).await {
        Ok(o) => o,
        Err(FileError::NotFound) => {
            state.metrics.http(m, 404);
            return (StatusCode::NOT_FOUND, "not found\n").into_response();
        }
        Err(FileError::Refused) => {
            tracing::info!(path = %path, "HTTP path refused");
            state.metrics.http(m, 403);
            return (StatusCode::FORBIDDEN, "forbidden\n").into_response();
        }
        Err(FileError::Io(error)) => {
            tracing::warn!(path = %path, %error, "HTTP read error");
            state.metrics.http(m, 500);
            return (StatusCode::INTERNAL_SERVER_ERROR, "read error\n").into_response();
        }
        // An OSIE release file not listed in its SHA256SUMS or not matching it (logged and
        // counted where it was checked).
        Err(FileError::Unverified(why)) => {
            state.metrics.http(m, 403);
            return (StatusCode::FORBIDDEN, format!("{why}\n")).into_response();
        }
    };
    let len = opened.meta.len();
    let mut f = opened.file;
    let (status, start, count) = match range(&headers, len) {
        None => (StatusCode::OK, 0, len),
        Some(Ok((a, b))) => (StatusCode::PARTIAL_CONTENT, a, b - a + 1),
        Some(Err(())) => {
            state.metrics.http(m, 416);
            return unsatisfiable(len);
        }
    };
    if method == Method::HEAD {
        state.metrics.http(m, status.as_u16());
        return ranged(Body::empty(), status, start, count, len);
    }
    let (kept, from) = match state.hot.lookup(&opened.path, &opened.meta) {
        Hot::Hit(bytes) => (Some(bytes), "hit"),
        Hot::Load(loader) => (loader.load(&mut f).await, "loaded"),
        Hot::Miss => (None, "disk"),
    };
    // The kept bytes are those of this open file: a slice of them is the body.
    if let Some(bytes) = kept
        && let (Ok(a), Ok(n)) = (usize::try_from(start), usize::try_from(count))
        && let Some(end) = a.checked_add(n).filter(|e| *e <= bytes.len())
    {
        state.metrics.http(m, status.as_u16());
        state.metrics.http_body_from(from);
        return ranged(Body::from(bytes.slice(a..end)), status, start, count, len);
    }
    state.metrics.http_body_from("disk");
    // From disk (a failed load leaves the position anywhere: always seek).
    if let Err(error) = f.seek(std::io::SeekFrom::Start(start)).await {
        tracing::warn!(path = %path, %error, "HTTP seek error");
        state.metrics.http(m, 500);
        return (StatusCode::INTERNAL_SERVER_ERROR, "read error\n").into_response();
    }
    state.metrics.http(m, status.as_u16());
    ranged(
        stream(f, start, count, None, None),
        status,
        start,
        count,
        len,
    )
}

fn unsatisfiable(len: u64) -> Response {
    (
        StatusCode::RANGE_NOT_SATISFIABLE,
        [(header::CONTENT_RANGE, format!("bytes */{len}"))],
    )
        .into_response()
}

/// Bytes written over the file's as they stream: `(offset, bytes)`.
type Overlay = (u64, Arc<[u8]>);

/// `count` bytes of `f` (positioned at `start`) in chunks of [`CHUNK`], with `overlay` written
/// over them, counting the bytes sent in `sent`.
fn stream(
    f: tokio::fs::File,
    start: u64,
    count: u64,
    overlay_with: Option<Overlay>,
    sent: Option<Counter>,
) -> Body {
    let s = futures::stream::unfold((f, start, count), move |(mut f, at, left)| {
        let (overlay_with, sent) = (overlay_with.clone(), sent.clone());
        async move {
            if left == 0 {
                return None;
            }
            let want = left.min(CHUNK as u64);
            // Read into spare capacity: no zeroing, and the buffer becomes the chunk as is.
            let mut buf = bytes::BytesMut::with_capacity(CHUNK);
            match (&mut f).take(want).read_buf(&mut buf).await {
                // The file shrank under us: end the body (the client sees a short body).
                Ok(0) => None,
                Ok(n) => {
                    if let Some((region, bytes)) = &overlay_with {
                        overlay(&mut buf[..], at, *region, bytes);
                    }
                    if let Some(c) = &sent {
                        c.inc_by(n as u64);
                    }
                    Some((
                        Ok::<_, std::io::Error>(buf.freeze()),
                        (f, at + n as u64, left - n as u64),
                    ))
                }
                Err(e) => Some((Err(e), (f, at, 0))),
            }
        }
    });
    Body::from_stream(s)
}

/// The response for `count` bytes from `start` of a file of `len` bytes.
fn ranged(body: Body, status: StatusCode, start: u64, count: u64, len: u64) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(count));
    h.insert(
        header::ACCEPT_RANGES,
        header::HeaderValue::from_static("bytes"),
    );
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(v) =
            header::HeaderValue::from_str(&format!("bytes {start}-{}/{len}", start + count - 1))
    {
        h.insert(header::CONTENT_RANGE, v);
    }
    resp
}

fn iso_text(state: &FileState, m: &'static str, status: StatusCode, body: String) -> Response {
    state.metrics.iso(m, status.as_u16());
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A MAC in any usual spelling (`-` or `:`, any case) in its one canonical form (lower case,
/// `:`-separated), which is how Hardware keys are spelled.
fn canonical_mac(s: &str) -> Option<String> {
    tink_api::AgentId::normalize(s)
        .ok()
        .filter(tink_api::AgentId::is_mac)
        .map(tink_api::AgentId::into_string)
}

async fn iso_file(
    method: Method,
    Path((mac, name)): Path<(String, String)>,
    headers: HeaderMap,
    State(state): State<FileState>,
) -> Response {
    let m = method_label(&method);
    let Some((route, source)) = state
        .iso
        .as_ref()
        .and_then(|r| r.source.as_ref().map(|s| (r, s)))
    else {
        return iso_text(
            &state,
            m,
            StatusCode::NOT_FOUND,
            "no ISO configured: tink-netboot runs without --iso-source\n".into(),
        );
    };
    if !name.ends_with(".iso") {
        return iso_text(
            &state,
            m,
            StatusCode::NOT_FOUND,
            "only /iso/<mac>/<name>.iso is served\n".into(),
        );
    }
    let Some(mac) = canonical_mac(&mac) else {
        return iso_text(
            &state,
            m,
            StatusCode::BAD_REQUEST,
            format!(
                "{:?} is not a MAC address (expected aa-bb-cc-dd-ee-ff or aa:bb:cc:dd:ee:ff)\n",
                mac.chars().take(64).collect::<String>()
            ),
        );
    };
    if !route.index.synced() {
        return iso_text(
            &state,
            m,
            StatusCode::SERVICE_UNAVAILABLE,
            "the Hardware index is not loaded yet; try again\n".into(),
        );
    }
    let (machine, i) = match route.index.by_mac(&mac) {
        Lookup::Found(machine, i) => (machine, i),
        Lookup::Unknown => {
            tracing::info!(%mac, "ISO: no Hardware has this MAC");
            return iso_text(
                &state,
                m,
                StatusCode::NOT_FOUND,
                format!("no Hardware has the MAC {mac} (spec.networkInterfaces)\n"),
            );
        }
        Lookup::Conflict(keys) => {
            tracing::warn!(%mac, hardware = ?keys, "ISO: several Hardware claim one MAC; serving none");
            return iso_text(
                &state,
                m,
                StatusCode::CONFLICT,
                format!(
                    "the MAC {mac} is claimed by several Hardware ({}); no ISO is served\n",
                    keys.join(", ")
                ),
            );
        }
    };
    let Some(iface) = machine.interface(i) else {
        return iso_text(
            &state,
            m,
            StatusCode::NOT_FOUND,
            format!("no Hardware has the MAC {mac} (spec.networkInterfaces)\n"),
        );
    };
    // The rule the iPXE script and DHCP follow: disableDhcp implies disableNetboot.
    if !iface.netboot_allowed() {
        let field = if iface.disable_dhcp {
            "disableDhcp"
        } else {
            "disableNetboot"
        };
        tracing::info!(hardware = %machine.key, %mac, field, "ISO refused: netboot is disabled");
        return iso_text(
            &state,
            m,
            StatusCode::NOT_FOUND,
            format!(
                "Hardware {}: interface {mac} has {field}: true; it gets no ISO\n",
                machine.key
            ),
        );
    }
    // The secret would be in an ISO anyone who knows the MAC can read (its BMC reads it, not
    // the machine): Hegel serves it only to the machine's own address.
    if machine.boot.agent_secret.is_some() {
        tracing::warn!(hardware = %machine.key, "ISO refused: the Hardware has an agent secret");
        return iso_text(
            &state,
            m,
            StatusCode::FORBIDDEN,
            format!(
                "Hardware {} has an agent secret ({}): its kernel parameters are served only to \
                 the machine's own address (Hegel's iPXE script), never in an ISO its BMC reads\n",
                machine.key,
                tink_api::agent_secret::AGENT_SECRET_ANNOTATION
            ),
        );
    }
    let params = match hegel::ipxe::kernel_params(
        &machine.boot,
        iface,
        &machine.kernel_params,
        &route.kernel,
    ) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(hardware = %machine.key, error = %e, "ISO: cannot make the kernel parameters");
            return iso_text(
                &state,
                m,
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{e}\n"),
            );
        }
    };
    let opened = match source.open().await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(error = %e, "ISO: cannot read the source ISO");
            return iso_text(
                &state,
                m,
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{e}\n"),
            );
        }
    };
    let patch = match crate::iso::patch(&params, opened.placeholder) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(hardware = %machine.key, error = %e, "ISO: the kernel parameters do not fit");
            return iso_text(
                &state,
                m,
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Hardware {}: {e}\n", machine.key),
            );
        }
    };
    let len = opened.len;
    let (status, start, count) = match range(&headers, len) {
        None => (StatusCode::OK, 0, len),
        Some(Ok((a, b))) => (StatusCode::PARTIAL_CONTENT, a, b - a + 1),
        Some(Err(())) => {
            state.metrics.iso(m, 416);
            return unsatisfiable(len);
        }
    };
    let mut f = tokio::fs::File::from_std(opened.file);
    if start > 0
        && let Err(error) = f.seek(std::io::SeekFrom::Start(start)).await
    {
        tracing::warn!(path = %source.path().display(), %error, "ISO seek error");
        return iso_text(
            &state,
            m,
            StatusCode::INTERNAL_SERVER_ERROR,
            "read error\n".into(),
        );
    }
    // BMCs read an ISO in thousands of ranges: one debug line each.
    tracing::debug!(hardware = %machine.key, %mac, start, count, "ISO");
    state.metrics.iso(m, status.as_u16());
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        stream(
            f,
            start,
            count,
            Some((opened.placeholder.offset, Arc::from(patch))),
            Some(state.metrics.iso_bytes.clone()),
        )
    };
    ranged(body, status, start, count, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::RANGE, v.parse().unwrap());
        m
    }

    #[test]
    fn ranges() {
        assert_eq!(range(&HeaderMap::new(), 10), None);
        assert_eq!(range(&h("bytes=0-3"), 10), Some(Ok((0, 3))));
        assert_eq!(range(&h("bytes=5-"), 10), Some(Ok((5, 9))));
        assert_eq!(range(&h("bytes=-4"), 10), Some(Ok((6, 9))));
        assert_eq!(range(&h("bytes=-40"), 10), Some(Ok((0, 9))));
        assert_eq!(range(&h("bytes=2-400"), 10), Some(Ok((2, 9))));
        assert_eq!(range(&h("bytes=10-"), 10), Some(Err(())));
        assert_eq!(range(&h("bytes=5-2"), 10), Some(Err(())));
        assert_eq!(range(&h("bytes=0-1,4-5"), 10), None);
        assert_eq!(range(&h("items=0-1"), 10), None);
        assert_eq!(range(&h("bytes=x-1"), 10), None);
    }
}
