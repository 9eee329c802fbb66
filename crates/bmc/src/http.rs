//! A small HTTP/1.1 client over hyper and rustls: one connection per request, a deadline over
//! the whole exchange (connect, TLS, request, response body), a bounded response body.
//!
//! The host is resolved for each connection and only its addresses inside the allowed
//! networks are connected to (see [`crate::net`]); TLS still verifies the certificate against
//! the host name.
//!
//! One connection per request keeps the failure modes simple (no pooled connection half-closed
//! by a BMC that rebooted); BMC calls are rare next to what a pool would save, and many BMCs
//! (sushy-tools' werkzeug server among them) answer `Connection: close` anyway. What makes a
//! new connection cheap is TLS session resumption: the configuration is shared per TLS
//! settings, so a BMC's next handshake resumes its last session.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{ErrorKind, shorten};
use crate::net::resolve_allowed;

/// The largest response body read (bmclib's RPC limit; Redfish documents are far smaller).
pub(crate) const MAX_BODY: usize = 512 * 1024;

/// Where requests go: scheme, host, port, and TLS when `https`.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub host: String,
    pub port: u16,
    pub tls: Option<Arc<ClientConfig>>,
    /// `Host` header value.
    pub authority: String,
    /// The networks `host` may resolve into (any when empty).
    pub allowed: Arc<[IpNet]>,
}

/// An answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// The body as text, shortened, for error messages.
    pub fn message(&self) -> String {
        shorten(&String::from_utf8_lossy(&self.body), 300)
    }
}

impl Endpoint {
    /// Sends one request and reads the whole answer within `timeout`.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Response, ErrorKind> {
        match tokio::time::timeout(timeout, self.exchange(method, path, headers, body)).await {
            Ok(r) => r,
            Err(_) => Err(ErrorKind::Timeout(timeout)),
        }
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<Response, ErrorKind> {
        let tcp = self.connect().await?;
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.authority)
            .header(http::header::ACCEPT, "application/json");
        for (k, v) in headers {
            builder = builder.header(*k, v);
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ErrorKind::Config(format!("request: {e}")))?;
        match &self.tls {
            Some(config) => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|e| ErrorKind::Config(format!("host {:?}: {e}", self.host)))?;
                let tls = TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| ErrorKind::Tls(e.to_string()))?;
                round_trip(TokioIo::new(tls), request).await
            }
            None => round_trip(TokioIo::new(tcp), request).await,
        }
    }
}

impl Endpoint {
    /// A connection to one of the host's allowed addresses, tried in the resolver's order.
    async fn connect(&self) -> Result<TcpStream, ErrorKind> {
        let addrs = resolve_allowed(&self.host, self.port, &self.allowed).await?;
        let mut last = None;
        for addr in &addrs {
            match TcpStream::connect(addr).await {
                Ok(tcp) => {
                    let _ = tcp.set_nodelay(true);
                    return Ok(tcp);
                }
                Err(e) => last = Some(format!("{addr}: {e}")),
            }
        }
        Err(ErrorKind::Connect(format!(
            "{}:{}: {}",
            self.host,
            self.port,
            last.unwrap_or_else(|| "no address".into())
        )))
    }
}

async fn round_trip<T>(io: T, request: Request<Full<Bytes>>) -> Result<Response, ErrorKind>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| ErrorKind::Protocol(format!("HTTP handshake: {e}")))?;
    // The connection is driven here, beside the request, not in a detached task.
    let exchange = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ErrorKind::Protocol(format!("request: {e}")))?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| ErrorKind::Protocol(format!("response body: {e}")))?
            .to_bytes();
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::pin!(conn);
    tokio::pin!(exchange);
    tokio::select! {
        r = &mut exchange => r,
        c = &mut conn => match c {
            // The connection ended first: the exchange has its answer or never will.
            Ok(()) => exchange.await,
            Err(e) => Err(ErrorKind::Protocol(format!("connection: {e}"))),
        },
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// A TLS client configuration: `insecure` accepts any certificate; else the PEM `ca` when
/// given, else the system's roots.
pub(crate) fn tls_config(insecure: bool, ca: Option<&[u8]>) -> Result<ClientConfig, ErrorKind> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ErrorKind::Tls(e.to_string()))?;
    if insecure {
        let mut config = builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
            .with_no_client_auth();
        config.resumption = resumption();
        return Ok(config);
    }
    let mut roots = RootCertStore::empty();
    match ca {
        Some(pem) => {
            use rustls_pki_types::pem::PemObject;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| ErrorKind::Config(format!("CA bundle: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| ErrorKind::Config(format!("CA bundle: {e}")))?;
            }
            if roots.is_empty() {
                return Err(ErrorKind::Config("CA bundle holds no certificate".into()));
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    let mut config = builder.with_root_certificates(roots).with_no_client_auth();
    config.resumption = resumption();
    Ok(config)
}

/// TLS sessions kept for resumption, by server name: one per BMC of a large site (rustls keeps
/// 256 by default). A configuration is shared by every provider with the same TLS settings
/// (see `Known::tls`), so a BMC's next connection resumes its last session.
fn resumption() -> tokio_rustls::rustls::client::Resumption {
    tokio_rustls::rustls::client::Resumption::in_memory_sessions(4096)
}

/// `insecureTLS`: any certificate is accepted (the handshake's signatures are still checked,
/// so the session is encrypted to whoever holds the key, just not a verified one).
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
