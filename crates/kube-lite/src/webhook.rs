//! Calls to admission and conversion webhooks: `clientConfig` resolution (URL, or a Service mapped
//! through [`crate::Config::services`]), HTTPS with the `caBundle` as the only trust anchors, a
//! timeout, JSON in and out.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

/// Why a webhook call failed.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The clientConfig is unusable.
    #[error("invalid clientConfig: {0}")]
    Config(String),
    /// Connecting, TLS or HTTP failed.
    #[error("{0}")]
    Transport(String),
    /// No answer in time.
    #[error("context deadline exceeded (timeout {0:?})")]
    Timeout(Duration),
    /// The answer is not usable.
    #[error("{0}")]
    BadResponse(String),
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct Target {
    https: bool,
    host: String,
    port: u16,
    path_and_query: String,
    server_name: String,
    ca_pem: Option<Vec<u8>>,
}

/// Resolves a `clientConfig` (`url` or `service`).
pub fn resolve(
    client_config: &Value,
    services: &BTreeMap<String, String>,
) -> Result<Target, WebhookError> {
    let ca_pem = match client_config.get("caBundle").and_then(Value::as_str) {
        Some(b) if !b.is_empty() => Some(
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| WebhookError::Config(format!("caBundle is not base64: {e}")))?,
        ),
        _ => None,
    };
    let (url, server_name) = if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        (url.to_string(), None)
    } else if let Some(svc) = client_config.get("service") {
        let ns = svc
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = svc.get("name").and_then(Value::as_str).unwrap_or_default();
        let path = svc.get("path").and_then(Value::as_str).unwrap_or("/");
        let base = services.get(&format!("{ns}/{name}")).ok_or_else(|| {
            WebhookError::Config(format!(
                "service {ns}/{name} is not mapped to an address (start kube-lite with --service {ns}/{name}=https://127.0.0.1:PORT)"
            ))
        })?;
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        (
            format!("{}{path}", base.trim_end_matches('/')),
            Some(format!("{name}.{ns}.svc")),
        )
    } else {
        return Err(WebhookError::Config(
            "neither url nor service is set".into(),
        ));
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| WebhookError::Config(format!("bad url {url:?}: {e}")))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => {
            return Err(WebhookError::Config(format!(
                "unsupported scheme {other:?} in {url:?}"
            )));
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| WebhookError::Config(format!("no host in {url:?}")))?
        .to_string();
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let server_name = server_name.unwrap_or_else(|| host.clone());
    Ok(Target {
        https,
        host,
        port,
        path_and_query,
        server_name,
        ca_pem,
    })
}

async fn exchange<S>(io: S, target: &Target, body: Bytes) -> Result<Value, WebhookError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| WebhookError::Transport(format!("HTTP handshake: {e}")))?;
    let conn_task = tokio::spawn(conn);
    let req = http::Request::post(target.path_and_query.as_str())
        .header(
            http::header::HOST,
            format!("{}:{}", target.host, target.port),
        )
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(body))
        .map_err(|e| WebhookError::Config(e.to_string()))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| WebhookError::Transport(format!("sending request: {e}")))?;
    let status = res.status();
    let bytes = Limited::new(res.into_body(), 16 << 20)
        .collect()
        .await
        .map_err(|e| WebhookError::Transport(format!("reading response: {e}")))?
        .to_bytes();
    conn_task.abort();
    if !status.is_success() {
        return Err(WebhookError::BadResponse(format!(
            "the server responded with status {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
        )));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| WebhookError::BadResponse(format!("response is not JSON: {e}")))
}

async fn call_inner(target: &Target, body: Bytes) -> Result<Value, WebhookError> {
    let tcp = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| {
            WebhookError::Transport(format!("dial tcp {}:{}: {e}", target.host, target.port))
        })?;
    if !target.https {
        return exchange(tcp, target, body).await;
    }
    let pem = target.ca_pem.as_ref().ok_or_else(|| {
        WebhookError::Config(
            "https webhook without caBundle (kube-lite has no system trust store)".into(),
        )
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| WebhookError::Config(format!("caBundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| WebhookError::Config(format!("caBundle: {e}")))?;
    }
    if roots.is_empty() {
        return Err(WebhookError::Config("caBundle holds no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| WebhookError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(target.server_name.clone())
        .map_err(|e| WebhookError::Config(format!("server name {:?}: {e}", target.server_name)))?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| WebhookError::Transport(format!("tls: {e}")))?;
    exchange(tls, target, body).await
}

/// POSTs `body` and returns the JSON answer.
pub async fn call(target: &Target, body: &Value, timeout: Duration) -> Result<Value, WebhookError> {
    let bytes =
        Bytes::from(serde_json::to_vec(body).map_err(|e| WebhookError::Config(e.to_string()))?);
    tokio::time::timeout(timeout, call_inner(target, bytes))
        .await
        .map_err(|_| WebhookError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_urls_and_services() {
        let mut services = BTreeMap::new();
        services.insert(
            "tink-system/tink-webhook".to_string(),
            "https://127.0.0.1:8443/".to_string(),
        );
        let t = resolve(
            &json!({"url": "https://127.0.0.1:9443/validate?x=1"}),
            &services,
        )
        .unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.path_and_query.as_str(),
                t.server_name.as_str()
            ),
            ("127.0.0.1", 9443, "/validate?x=1", "127.0.0.1")
        );
        let t = resolve(&json!({"service": {"namespace": "tink-system", "name": "tink-webhook", "path": "/convert"}}), &services).unwrap();
        assert_eq!(
            (t.port, t.path_and_query.as_str(), t.server_name.as_str()),
            (8443, "/convert", "tink-webhook.tink-system.svc")
        );
        assert!(
            resolve(
                &json!({"service": {"namespace": "a", "name": "b"}}),
                &services
            )
            .is_err()
        );
        assert!(resolve(&json!({"url": "ftp://x"}), &services).is_err());
        assert!(resolve(&json!({"url": "https://x", "caBundle": "!!"}), &services).is_err());
        assert!(resolve(&json!({}), &services).is_err());
    }
}
