//! A streaming HTTP/1.1 GET with resume (`Range`), redirects and TLS, on hyper's connection API
//! (no connection pool: one image, one connection at a time).
//!
//! `https://` URLs are verified with rustls (ring, no OpenSSL, so the static musl build keeps
//! working) against the system's roots (`/etc/ssl/certs`, found the way OpenSSL finds them;
//! `SSL_CERT_FILE`/`SSL_CERT_DIR` override) plus the PEM file named by `CA_CERT`, when set.
//! `skip_verify` (oci2disk's `SKIP_VERIFY`) accepts any certificate.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

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
    /// The TCP connection could not be made (refused, unreachable, timed out, name unknown).
    #[error("{0}")]
    Connect(String),
    /// The TLS handshake failed (certificate not trusted, wrong name, not a TLS server).
    #[error("{message}")]
    Tls {
        /// What happened.
        message: String,
        /// The server answered in plain text (a plain HTTP server on that port).
        plain_http: bool,
    },
    /// The TLS settings cannot be used (`CA_CERT` unreadable or empty).
    #[error("{0}")]
    TlsConfig(String),
    /// Send, read or stall after connecting: worth a retry.
    #[error("{0}")]
    Transport(String),
    /// A resume was asked for and the server sent the whole file again.
    #[error("the server does not resume downloads (no 206 answer to Range)")]
    NoResume,
}

impl HttpError {
    /// Whether a retry may help.
    pub fn retryable(&self) -> bool {
        matches!(self, Self::Transport(_) | Self::NoResume | Self::Connect(_))
            || matches!(self, Self::Status { status, .. } if *status >= 500 || *status == 429)
    }
}

/// How `https://` servers are trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// `CA_CERT`: a PEM file of extra trusted certificates (the stack's CA).
    pub ca_cert: Option<PathBuf>,
    /// Accept any certificate (oci2disk's `SKIP_VERIFY`).
    pub skip_verify: bool,
}

impl Tls {
    /// `CA_CERT` from the environment (`skip_verify` off).
    pub fn from_env(env: &crate::common::Env) -> Self {
        Self {
            ca_cert: env.get("CA_CERT").map(PathBuf::from),
            skip_verify: false,
        }
    }

    /// The rustls configuration, built once per process and settings (the system's roots are
    /// read from disk).
    fn client_config(&self) -> Result<Arc<ClientConfig>, HttpError> {
        static CACHE: Mutex<Option<(Tls, Arc<ClientConfig>)>> = Mutex::new(None);
        if let Ok(c) = CACHE.lock()
            && let Some((k, cfg)) = c.as_ref()
            && k == self
        {
            return Ok(cfg.clone());
        }
        let cfg = Arc::new(self.build()?);
        if let Ok(mut c) = CACHE.lock() {
            *c = Some((self.clone(), cfg.clone()));
        }
        Ok(cfg)
    }

    fn build(&self) -> Result<ClientConfig, HttpError> {
        let provider = Arc::new(ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| HttpError::TlsConfig(format!("TLS: {e}")))?;
        if self.skip_verify {
            return Ok(builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
                .with_no_client_auth());
        }
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(path) = &self.ca_cert {
            use rustls_pki_types::pem::PemObject;
            let bad = |e: String| HttpError::TlsConfig(format!("CA_CERT={}: {e}", path.display()));
            let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
            let mut n = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(e.to_string()))?;
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
                n += 1;
            }
            if n == 0 {
                return Err(bad("no PEM certificate in the file".into()));
            }
        }
        if roots.is_empty() {
            return Err(HttpError::TlsConfig(
                "no trusted certificates: /etc/ssl/certs is empty or missing and CA_CERT is unset"
                    .into(),
            ));
        }
        Ok(builder.with_root_certificates(roots).with_no_client_auth())
    }
}

/// `SKIP_VERIFY`: any certificate is accepted (the handshake's signatures are still checked).
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A GET: the URL, extra headers (`Authorization`, `Accept`) and the TLS settings.
#[derive(Debug, Clone)]
pub struct Get {
    /// The URL (`http://` or `https://`).
    pub url: url::Url,
    /// Extra request headers. `Authorization` is dropped on a redirect to another host.
    pub headers: Vec<(String, String)>,
    /// Trust for `https://`.
    pub tls: Tls,
}

impl Get {
    /// A plain GET of `url`.
    pub fn new(url: url::Url, tls: Tls) -> Self {
        Self {
            url,
            headers: Vec::new(),
            tls,
        }
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
        next_chunk(&mut self.body, self.stall).await
    }
}

async fn next_chunk(body: &mut Incoming, stall: Duration) -> Result<Option<Bytes>, HttpError> {
    loop {
        let frame = tokio::time::timeout(stall, body.frame())
            .await
            .map_err(|_| HttpError::Transport(format!("no data for {stall:?}")))?;
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

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Connects (TCP, then TLS for `https`) and sends one GET; no redirect handling.
async fn send_once(
    url: &url::Url,
    headers: &[(String, String)],
    tls: &Tls,
    offset: u64,
    stall: Duration,
) -> Result<hyper::Response<Incoming>, HttpError> {
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        s => {
            return Err(HttpError::BadUrl(format!(
                "{url}: the scheme {s}:// is not supported (http:// or https://)"
            )));
        }
    };
    let host = url
        .host_str()
        .ok_or_else(|| HttpError::BadUrl(format!("{url}: no host")))?;
    let port = url
        .port_or_known_default()
        .unwrap_or(if https { 443 } else { 80 });
    // host_str() keeps the brackets of an IPv6 address, so this is a valid socket address.
    let addr = format!("{host}:{port}");
    let tcp = tokio::time::timeout(stall, TcpStream::connect(&addr))
        .await
        .map_err(|_| HttpError::Connect(format!("connecting to {addr}: timed out")))?
        .map_err(|e| HttpError::Connect(format!("connecting to {addr}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if https {
        let config = tls.client_config()?;
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|e| HttpError::BadUrl(format!("{url}: host name for TLS: {e}")))?
            .to_owned();
        let tls_stream = tokio::time::timeout(stall, TlsConnector::from(config).connect(name, tcp))
            .await
            .map_err(|_| HttpError::Tls {
                message: format!("TLS handshake with {addr}: timed out"),
                plain_http: false,
            })?
            .map_err(|e| {
                let text = e.to_string();
                // rustls reads a plain-HTTP answer ("HTTP/1.1 400 ...") as a record of an
                // unknown content type ('H').
                let plain_http = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>())
                    .is_some_and(|r| {
                        matches!(
                            r,
                            tokio_rustls::rustls::Error::InvalidMessage(
                                tokio_rustls::rustls::InvalidMessage::InvalidContentType
                            )
                        )
                    });
                HttpError::Tls {
                    message: format!("TLS handshake with {addr}: {text}"),
                    plain_http,
                }
            })?;
        Box::new(tls_stream)
    } else {
        Box::new(tcp)
    };
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
        .header(hyper::header::USER_AGENT, "tink-actions");
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| HttpError::BadUrl(format!("header {k}: {e}")))?;
        let value =
            HeaderValue::from_str(v).map_err(|e| HttpError::BadUrl(format!("header {k}: {e}")))?;
        req = req.header(name, value);
    }
    if offset > 0 {
        req = req.header(hyper::header::RANGE, format!("bytes={offset}-"));
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| HttpError::BadUrl(format!("{url}: {e}")))?;
    tokio::time::timeout(stall, sender.send_request(req))
        .await
        .map_err(|_| HttpError::Transport(format!("{url}: no response for {stall:?}")))?
        .map_err(|e| HttpError::Transport(format!("{url}: {e}")))
}

/// Sends the GET, following redirects (`Authorization` is kept only on the same origin).
/// Returns the final URL and the response, whatever its status.
pub async fn send(
    req: &Get,
    offset: u64,
    stall: Duration,
) -> Result<(url::Url, hyper::Response<Incoming>), HttpError> {
    let mut url = req.url.clone();
    let mut headers = req.headers.clone();
    for _ in 0..=MAX_REDIRECTS {
        let resp = send_once(&url, &headers, &req.tls, offset, stall).await?;
        let status = resp.status().as_u16();
        if !matches!(status, 301 | 302 | 303 | 307 | 308) {
            return Ok((url, resp));
        }
        let location = resp
            .headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| HttpError::Status {
                url: url.to_string(),
                status,
            })?;
        let next = url
            .join(location)
            .map_err(|e| HttpError::BadUrl(format!("{url}: redirect to {location:?}: {e}")))?;
        if next.origin() != url.origin() {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("authorization"));
        }
        url = next;
    }
    Err(HttpError::BadUrl(format!(
        "{}: more than {MAX_REDIRECTS} redirects",
        req.url
    )))
}

/// A small response read whole (manifests, tokens): status, headers and at most `limit` bytes.
pub async fn get_small(
    req: &Get,
    stall: Duration,
    limit: usize,
) -> Result<(u16, HeaderMap, Bytes), HttpError> {
    let (url, resp) = send(req, 0, stall).await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(chunk) = next_chunk(&mut body, stall).await? {
        if out.len() + chunk.len() > limit {
            return Err(HttpError::Transport(format!(
                "{url}: the answer is larger than {limit} bytes"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((status, headers, Bytes::from(out)))
}

/// GETs the resource from byte `offset` on.
pub async fn get(req: &Get, offset: u64, stall: Duration) -> Result<Download, HttpError> {
    let (url, resp) = send(req, offset, stall).await?;
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
