//! GET and HEAD of the files in the [`Root`]: iPXE binaries for UEFI HTTP boot and iPXE, and
//! the OSIE kernel, initrd and disk images other tools put there. Files are streamed in 64 KiB
//! chunks with their `Content-Length`; a single `Range` (`bytes=a-b`, `bytes=a-`, `bytes=-n`) is
//! answered with 206 (iPXE and curl resume with it), several ranges with the whole file.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::files::{FileError, Root};
use crate::metrics::Metrics;

const CHUNK: usize = 64 * 1024;

#[derive(Clone)]
struct FileState {
    root: Arc<Root>,
    metrics: Metrics,
}

/// The file routes.
pub fn router(root: Root, metrics: Metrics) -> Router {
    Router::new()
        .route("/{*path}", get(file))
        .fallback(not_found)
        .with_state(FileState {
            root: Arc::new(root),
            metrics,
        })
}

/// Serves [`router`] on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    root: Root,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, dir = %root.dir().display(), "HTTP listening");
    }
    axum::serve(listener, router(root, metrics))
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
    let (mut f, len) = match state.root.open(&path).await {
        Ok(f) => f,
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
    };
    let (status, start, count) = match range(&headers, len) {
        None => (StatusCode::OK, 0, len),
        Some(Ok((a, b))) => (StatusCode::PARTIAL_CONTENT, a, b - a + 1),
        Some(Err(())) => {
            state.metrics.http(m, 416);
            return (
                StatusCode::RANGE_NOT_SATISFIABLE,
                [(header::CONTENT_RANGE, format!("bytes */{len}"))],
            )
                .into_response();
        }
    };
    if start > 0
        && let Err(error) = f.seek(std::io::SeekFrom::Start(start)).await
    {
        tracing::warn!(path = %path, %error, "HTTP seek error");
        state.metrics.http(m, 500);
        return (StatusCode::INTERNAL_SERVER_ERROR, "read error\n").into_response();
    }
    state.metrics.http(m, status.as_u16());
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        let stream = futures::stream::unfold((f, count), |(mut f, left)| async move {
            if left == 0 {
                return None;
            }
            let want = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
            let mut buf = vec![0u8; want];
            match f.read(&mut buf).await {
                // The file shrank under us: end the body (the client sees a short body).
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((
                        Ok::<_, std::io::Error>(Bytes::from(buf)),
                        (f, left - n as u64),
                    ))
                }
                Err(e) => Some((Err(e), (f, 0))),
            }
        });
        Body::from_stream(stream)
    };
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
