//! The serving certificate: loaded from PEM files and reloaded when they change (a Kubernetes
//! Secret volume is updated in place, cert-manager renews before expiry), so rotation needs no
//! restart. New TLS handshakes use the new certificate; open connections keep theirs.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("the certificate file holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    /// The certificate PEM is malformed.
    #[error("the certificate file is not valid PEM: {0}")]
    CertificatePem(rustls_pki_types::pem::Error),
    /// The key file holds no usable private key.
    #[error(
        "the key file holds no PEM private key (expected PKCS#8, PKCS#1 or SEC1 -----BEGIN ... PRIVATE KEY-----): {0}"
    )]
    KeyPem(rustls_pki_types::pem::Error),
    /// The key is of an unsupported type, or does not match the certificate.
    #[error("the private key cannot be used with the certificate: {0}")]
    Key(rustls::Error),
}

/// Parses a PEM certificate chain and private key into a rustls serving key, checking that
/// the key belongs to the first certificate.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::CertificatePem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::KeyPem)?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(TlsError::Key)
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// How often the files are checked for changes.
    pub reload_interval: Duration,
}

impl TlsFiles {
    async fn read(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        let read = |path: PathBuf| async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { path, source })
        };
        Ok((
            read(self.cert.clone()).await?,
            read(self.key.clone()).await?,
        ))
    }
}

/// The current serving key, shared by every handshake.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertStore {
    /// A store serving `key`.
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(key)),
        })
    }

    /// Replaces the serving key for new handshakes.
    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A rustls server configuration (TLS 1.2 and 1.3, HTTP/1.1 by ALPN) resolving to this
    /// store's key at every handshake.
    pub fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Key)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.get())
    }
}

/// Loads the files once; an error here stops the service (it cannot serve without a key).
pub async fn load(files: &TlsFiles) -> Result<(Arc<CertStore>, Vec<u8>), TlsError> {
    let (cert, key) = files.read().await?;
    let store = CertStore::new(certified_key(&cert, &key)?);
    Ok((store, [cert, key].concat()))
}

/// Checks the files every `reload_interval` until `shutdown`, and swaps in a changed pair
/// once it loads. A pair that does not load (a half-written rotation, a mismatched key) is
/// logged once and the previous certificate keeps serving.
pub async fn watch(
    files: TlsFiles,
    store: Arc<CertStore>,
    mut loaded: Vec<u8>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut rejected: Option<Vec<u8>> = None;
    let mut tick = tokio::time::interval(files.reload_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (cert, key) = match files.read().await {
            Ok(pair) => pair,
            Err(error) => {
                if rejected.is_none() {
                    tracing::warn!(%error, "cannot read the TLS files; serving the previous certificate");
                    metrics.tls_reload("error");
                    rejected = Some(Vec::new());
                }
                continue;
            }
        };
        let both = [cert.as_slice(), key.as_slice()].concat();
        if both == loaded || rejected.as_ref() == Some(&both) {
            continue;
        }
        match certified_key(&cert, &key) {
            Ok(k) => {
                store.set(k);
                loaded = both;
                rejected = None;
                metrics.tls_reload("ok");
                tracing::info!(cert = %files.cert.display(), "serving certificate reloaded");
            }
            Err(error) => {
                tracing::warn!(%error, "the changed TLS files do not load; serving the previous certificate");
                metrics.tls_reload("error");
                rejected = Some(both);
            }
        }
    }
}
