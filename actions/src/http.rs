//! A streaming HTTP/1.1 GET with resume (`Range`), on hyper's connection API (no connection
//! pool: one image, one connection at a time). `http://` only; TLS is not needed on the
//! provisioning network the OSIE runs in and is documented as not supported.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::TcpStream;

/// A failed request or body read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The URL cannot be fetched by this client.
    #[error("{0}")]
    BadUrl(String),
    /// 404.
    #[error("{0} not found (404)")]
    NotFound(String),
    /// Another non-success status.
    #[error("{url}: HTTP status {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// Connect, send, read or stall: worth a retry.
    #[error("{0}")]
    Transport(String),
    /// A resume was asked for and the server sent the whole file again.
    #[error("the server does not resume downloads (no 206 answer to Range)")]
    NoResume,
}

impl HttpError {
    /// Whether a retry may help.
    pub fn retryable(&self) -> bool {
        matches!(self, Self::Transport(_) | Self::NoResume)
            || matches!(self, Self::Status { status, .. } if *status >= 500 || *status == 429)
    }
}

/// A response being read.
pub struct Download {
    body: Incoming,
    /// The full size of the resource, when the server said.
    pub total: Option<u64>,
    /// Whether the server advertised `Accept-Ranges: bytes` (or answered a Range with 206).
    pub ranges: bool,
    stall: Duration,
}

impl Download {
    /// The next chunk; `None` at the end. A stalled connection is an error after `stall`.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        loop {
            let frame = tokio::time::timeout(self.stall, self.body.frame())
                .await
                .map_err(|_| HttpError::Transport(format!("no data for {:?}", self.stall)))?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(HttpError::Transport(format!("reading the body: {e}"))),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data()
                        && !data.is_empty()
                    {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

/// GETs `url` from byte `offset` on.
pub async fn get(url: &url::Url, offset: u64, stall: Duration) -> Result<Download, HttpError> {
    if url.scheme() != "http" {
        return Err(HttpError::BadUrl(format!(
            "{url}: only http:// URLs are supported"
        )));
    }
    let host = url
        .host_str()
        .ok_or_else(|| HttpError::BadUrl(format!("{url}: no host")))?;
    let port = url.port_or_known_default().unwrap_or(80);
    // host_str() keeps the brackets of an IPv6 address, so this is a valid socket address.
    let addr = format!("{host}:{port}");
    let stream = tokio::time::timeout(stall, TcpStream::connect(&addr))
        .await
        .map_err(|_| HttpError::Transport(format!("connecting to {addr}: timed out")))?
        .map_err(|e| HttpError::Transport(format!("connecting to {addr}: {e}")))?;
    // Large reads: hyper's adaptive buffer starts at 8 KiB, which made the raw download a third
    // slower than curl's on loopback.
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .read_buf_exact_size(Some(1 << 20))
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| HttpError::Transport(format!("HTTP handshake with {addr}: {e}")))?;
    // The connection task ends with the body (or with an error the body read reports).
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let host_header = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let mut req = hyper::Request::get(path)
        .header(hyper::header::HOST, host_header)
        .header(hyper::header::USER_AGENT, "tink-actions/image2disk");
    if offset > 0 {
        req = req.header(hyper::header::RANGE, format!("bytes={offset}-"));
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| HttpError::BadUrl(format!("{url}: {e}")))?;
    let resp = tokio::time::timeout(stall, sender.send_request(req))
        .await
        .map_err(|_| HttpError::Transport(format!("{url}: no response for {stall:?}")))?
        .map_err(|e| HttpError::Transport(format!("{url}: {e}")))?;
    let status = resp.status().as_u16();
    let headers = resp.headers();
    let header = |name: hyper::header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let ranges = header(hyper::header::ACCEPT_RANGES).is_some_and(|v| v.contains("bytes"));
    match status {
        200 if offset > 0 => Err(HttpError::NoResume),
        200 => Ok(Download {
            total: header(hyper::header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
            ranges,
            body: resp.into_body(),
            stall,
        }),
        206 => {
            // Content-Range: bytes <start>-<end>/<total>
            let cr = header(hyper::header::CONTENT_RANGE).unwrap_or_default();
            let start = cr
                .strip_prefix("bytes ")
                .and_then(|r| r.split('-').next())
                .and_then(|s| s.parse::<u64>().ok());
            if start != Some(offset) {
                return Err(HttpError::NoResume);
            }
            Ok(Download {
                total: cr.rsplit('/').next().and_then(|t| t.parse().ok()),
                ranges: true,
                body: resp.into_body(),
                stall,
            })
        }
        404 => Err(HttpError::NotFound(url.to_string())),
        s => Err(HttpError::Status {
            url: url.to_string(),
            status: s,
        }),
    }
}
