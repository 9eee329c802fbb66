//! The HTTP GET the OSIE release fetch uses ([`crate::osie::fetch`]): hyper's HTTP/1.1
//! connection API, one connection per file (a release is a handful of files fetched once, so
//! no pool), `https://` through rustls with ring (the TLS stack already in the workspace)
//! against the system's roots plus an optional CA file. No redirects are followed: give the
//! final URL.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// A failed fetch; every message names the URL.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL cannot be fetched by this client.
    #[error("{0}")]
    BadUrl(String),
    /// Connecting, TLS, sending or reading failed, or timed out.
    #[error("{url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// Not 200.
    #[error("{url}: HTTP status {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// The body is larger than allowed.
    #[error("{url}: larger than {max} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The bound.
        max: u64,
    },
    /// Writing the downloaded bytes failed.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS settings cannot be used.
    #[error("{0}")]
    Tls(String),
}

/// A GET client.
#[derive(Clone)]
pub struct Client {
    tls: Option<TlsConnector>,
    tls_error: Option<String>,
    timeout: Duration,
}

impl Client {
    /// `ca_cert`: extra trusted CA certificates (PEM) for `https://`. `timeout`: for the
    /// connection and the answer, and the longest pause between body chunks.
    pub fn new(ca_cert: Option<&Path>, timeout: Duration) -> Result<Self, FetchError> {
        // TLS is set up lazily in effect: a failure only matters for https:// URLs.
        let (tls, tls_error) = match tls_config(ca_cert) {
            Ok(c) => (Some(TlsConnector::from(Arc::new(c))), None),
            Err(e) if ca_cert.is_some() => return Err(e),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Self {
            tls,
            tls_error,
            timeout,
        })
    }

    async fn get(&self, url: &str) -> Result<hyper::Response<hyper::body::Incoming>, FetchError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| FetchError::BadUrl(format!("{url:?}: not a URL: {e}")))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(FetchError::BadUrl(format!(
                    "{url:?}: only http:// and https:// URLs are fetched"
                )));
            }
        };
        let Some(host) = uri.host().map(str::to_string) else {
            return Err(FetchError::BadUrl(format!("{url:?}: no host")));
        };
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let transport = |message: String| FetchError::Transport {
            url: url.to_string(),
            message,
        };
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let tcp = tokio::time::timeout(self.timeout, TcpStream::connect((bare.as_str(), port)))
            .await
            .map_err(|_| transport(format!("no connection within {:?}", self.timeout)))?
            .map_err(|e| transport(format!("cannot connect: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let path = uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string());
        let authority = uri
            .authority()
            .map_or(host.clone(), |a| a.as_str().to_string());
        let req = hyper::Request::get(path)
            .header(http::header::HOST, authority)
            .header(http::header::USER_AGENT, "tink-netboot")
            .body(Empty::<Bytes>::new())
            .map_err(|e| FetchError::BadUrl(format!("{url:?}: {e}")))?;
        let answer = async {
            if https {
                let Some(tls) = &self.tls else {
                    return Err(FetchError::Tls(format!(
                        "{url}: TLS cannot be set up: {}",
                        self.tls_error
                            .as_deref()
                            .unwrap_or("no trusted certificates")
                    )));
                };
                let name = rustls_pki_types::ServerName::try_from(bare.clone())
                    .map_err(|e| FetchError::BadUrl(format!("{url:?}: {e}")))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| transport(format!("TLS: {e}")))?;
                send(TokioIo::new(stream), req, url).await
            } else {
                send(TokioIo::new(tcp), req, url).await
            }
        };
        let resp = tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| transport(format!("no answer within {:?}", self.timeout)))??;
        if resp.status() != http::StatusCode::OK {
            return Err(FetchError::Status {
                url: url.to_string(),
                status: resp.status().as_u16(),
            });
        }
        Ok(resp)
    }

    /// The body of `url`, at most `max` bytes.
    pub async fn get_bytes(&self, url: &str, max: usize) -> Result<Vec<u8>, FetchError> {
        let mut body = self.get(url).await?.into_body();
        let mut out = Vec::new();
        while let Some(chunk) = self.next_chunk(&mut body, url).await? {
            if out.len() + chunk.len() > max {
                return Err(FetchError::TooLarge {
                    url: url.to_string(),
                    max: max as u64,
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Writes the body of `url` to `path` (created or truncated, synced); the bytes written. A
    /// body longer than `max` bytes stops the download ([`FetchError::TooLarge`]): a server
    /// sending without end must not fill the cache's disk.
    pub async fn download(&self, url: &str, path: &Path, max: u64) -> Result<u64, FetchError> {
        let write = |source| FetchError::Write {
            path: path.display().to_string(),
            source,
        };
        let mut body = self.get(url).await?.into_body();
        let mut f = tokio::fs::File::create(path).await.map_err(write)?;
        let mut n = 0u64;
        while let Some(chunk) = self.next_chunk(&mut body, url).await? {
            if n + chunk.len() as u64 > max {
                return Err(FetchError::TooLarge {
                    url: url.to_string(),
                    max,
                });
            }
            f.write_all(&chunk).await.map_err(write)?;
            n += chunk.len() as u64;
        }
        f.sync_all().await.map_err(write)?;
        Ok(n)
    }

    async fn next_chunk(
        &self,
        body: &mut hyper::body::Incoming,
        url: &str,
    ) -> Result<Option<Bytes>, FetchError> {
        let transport = |message: String| FetchError::Transport {
            url: url.to_string(),
            message,
        };
        loop {
            let frame = tokio::time::timeout(self.timeout, body.frame())
                .await
                .map_err(|_| transport(format!("the body stalled for {:?}", self.timeout)))?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => return Err(transport(format!("reading the body: {e}"))),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

async fn send<S>(
    io: TokioIo<S>,
    req: hyper::Request<Empty<Bytes>>,
    url: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, FetchError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let transport = |message: String| FetchError::Transport {
        url: url.to_string(),
        message,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| transport(format!("HTTP handshake: {e}")))?;
    // The connection is driven by its own task, which ends with the response body.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| transport(format!("request: {e}")))
}

fn tls_config(ca_cert: Option<&Path>) -> Result<ClientConfig, FetchError> {
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FetchError::Tls(format!("TLS: {e}")))?;
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = ca_cert {
        use rustls_pki_types::pem::PemObject as _;
        let bad = |e: String| FetchError::Tls(format!("--osie-ca-cert {}: {e}", path.display()));
        let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let mut n = 0;
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| bad(e.to_string()))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
            n += 1;
        }
        if n == 0 {
            return Err(bad("no PEM certificate in the file".into()));
        }
    }
    if roots.is_empty() {
        return Err(FetchError::Tls(
            "no trusted certificates (/etc/ssl/certs empty and no --osie-ca-cert)".into(),
        ));
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_urls_and_ca_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate").unwrap();
        let e = Client::new(Some(&ca), Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(e.to_string().starts_with("--osie-ca-cert "), "{e}");
        let c = Client::new(None, Duration::from_secs(1)).unwrap();
        for (url, why) in [
            ("ftp://127.0.0.1/x", "only http:// and https://"),
            ("http:///x", "not a URL"),
            ("not a url", "not a URL"),
            ("/relative", "only http:// and https://"),
        ] {
            let e = c.get_bytes(url, 10).await.unwrap_err();
            assert!(e.to_string().contains(why), "{url}: {e}");
        }
        // Nothing listens there: a transport error naming the URL.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x", free.local_addr().unwrap());
        drop(free);
        let e = c.get_bytes(&url, 10).await.unwrap_err();
        assert!(matches!(e, FetchError::Transport { .. }), "{e}");
        assert!(e.to_string().starts_with(&url), "{e}");
    }

    /// A server that answers with a body longer than the bound: the download stops at the
    /// bound with an error naming the URL, having written no more than the bound.
    #[tokio::test]
    async fn a_download_longer_than_its_bound_is_cut() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let body = vec![b'x'; 64 * 1024];
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(&body).await;
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.part");
        let c = Client::new(None, Duration::from_secs(5)).unwrap();
        let url = format!("http://{addr}/f");
        let e = c.download(&url, &path, 1000).await.unwrap_err();
        assert!(matches!(e, FetchError::TooLarge { max: 1000, .. }), "{e}");
        assert!(e.to_string().starts_with(&url), "{e}");
        assert!(std::fs::metadata(&path).unwrap().len() <= 1000);
        server.abort();
    }
}
