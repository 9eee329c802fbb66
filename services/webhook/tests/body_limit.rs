//! Request bodies are bounded: a body over `--max-body-bytes` (8 MiB by default) gets a 413
//! with a `Status` naming the flag, before the rest of it is read, while other connections are
//! answered; reviews under the limit, small or large, still get their answer.
#![forbid(unsafe_code)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{SERVICE_DNS, certificates, client_config, post, within};
use rustls_pki_types::ServerName;
use serde_json::{Value, json};
use tink_webhook::{AppState, Index, Metrics, ServeLimits, router, serve};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// A valid Template CREATE, its object padded with an annotation of `padding` bytes.
fn template_review(uid: &str, padding: usize) -> Vec<u8> {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "tinkerbell.org", "version": "v1alpha2", "kind": "Template"},
        "resource": {"group": "tinkerbell.org", "version": "v1alpha2", "resource": "templates"},
        "namespace": "ns", "name": "t", "operation": "CREATE",
        "object": {"apiVersion": "tinkerbell.org/v1alpha2", "kind": "Template",
            "metadata": {"name": "t", "namespace": "ns",
                "annotations": {"example.com/padding": "x".repeat(padding)}},
            "spec": {"actions": [{"name": "a", "image": "alpine"}]}},
    }})
    .to_string()
    .into_bytes()
}

/// Reads one HTTP/1.1 response (status line, headers, a `Content-Length` body) from `io`.
async fn read_response(io: &mut (impl tokio::io::AsyncRead + Unpin)) -> (u16, Value) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = io.read(&mut chunk).await.expect("read the response");
        assert!(n > 0, "connection closed before a response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    while buf.len() < head_end + length {
        let n = io.read(&mut chunk).await.expect("read the response body");
        assert!(n > 0, "connection closed in the response body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).expect("JSON body");
    (status, body)
}

/// A TLS connection to the webhook.
async fn connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let connector = tokio_rustls::TlsConnector::from(client_config(ca_pem));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from(SERVICE_DNS).expect("name");
    connector.connect(name, tcp).await.expect("TLS")
}

fn assert_too_large(status: u16, answer: &Value) {
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["kind"], "Status", "{answer}");
    assert_eq!(answer["code"], 413, "{answer}");
    assert_eq!(answer["reason"], "RequestEntityTooLarge", "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("larger than the webhook's limit of 8388608 bytes")
            && message.contains("--max-body-bytes, TINK_WEBHOOK_MAX_BODY_BYTES"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_gets_413_while_other_requests_are_answered() {
    let certs = certificates();
    let shutdown = CancellationToken::new();
    let index = Arc::new(Index::default());
    index.mark_synced();
    let limits = ServeLimits::default();
    assert_eq!(limits.max_body_bytes, 8 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let key = tink_webhook::tls::certified_key(certs.cert_pem.as_bytes(), certs.key_pem.as_bytes())
        .unwrap();
    let tls = Arc::new(
        tink_webhook::tls::CertStore::new(key)
            .server_config()
            .unwrap(),
    );
    let metrics = Metrics::default();
    let app = router(AppState::new(index, metrics.clone(), &limits), &limits);
    let server = tokio::spawn(serve(listener, tls, app, limits.clone(), shutdown.clone()));

    // Declares 8 MiB + 1 and sends only the first 64 KiB: refused at once, without waiting
    // for (or buffering) the rest.
    let mut big = connect(addr, &certs.ca_pem).await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        limits.max_body_bytes + 1
    );
    big.write_all(head.as_bytes()).await.unwrap();
    big.write_all(&vec![b' '; 64 << 10]).await.unwrap();
    big.flush().await.unwrap();
    let (status, answer) = tokio::time::timeout(Duration::from_secs(10), read_response(&mut big))
        .await
        .expect("a 413 before the body was sent in full");
    assert_too_large(status, &answer);
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("request body of 8388609 bytes"))
    );

    // A large body is on its way (the head and half of it sent, then the client stalls): a
    // normal review on another connection is answered meanwhile.
    let mut stalled = connect(addr, &certs.ca_pem).await;
    let head = format!(
        "POST /convert HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
        1 << 20
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&vec![b' '; 1 << 19]).await.unwrap();
    stalled.flush().await.unwrap();
    let (status, answer) = within(
        "a small review while a large body is pending",
        post(
            addr,
            &certs.ca_pem,
            "/validate",
            template_review("small", 10),
        ),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["uid"], "small");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    drop(stalled);

    // A body without a length passing the limit: 413 as soon as it does.
    let mut chunked = connect(addr, &certs.ca_pem).await;
    let size = limits.max_body_bytes + 1;
    let head = format!(
        "POST /convert HTTP/1.1\r\nhost: {SERVICE_DNS}\r\ntransfer-encoding: chunked\r\n\r\n{size:x}\r\n"
    );
    chunked.write_all(head.as_bytes()).await.unwrap();
    // The server reads all of it (the limit is passed at the last byte), then answers.
    within("the chunked body to be sent", async {
        chunked.write_all(&vec![b' '; size]).await?;
        // TLS may keep the last record buffered until flushed: without it the server can wait
        // for the byte that passes the limit as long as the client does for the answer.
        chunked.flush().await
    })
    .await
    .unwrap();
    let (status, answer) = within("a 413 for a chunked body", read_response(&mut chunked)).await;
    assert_too_large(status, &answer);

    // Reviews under the limit are answered, also a large one (validated off the runtime).
    for (uid, padding) in [("inline", 100), ("large", 4 << 20)] {
        let body = template_review(uid, padding);
        assert!(body.len() < limits.max_body_bytes);
        let (status, answer) = within(
            "an answer to a review under the limit",
            post(addr, &certs.ca_pem, "/validate", body),
        )
        .await
        .unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["response"]["uid"], uid);
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
    }
    assert_eq!(metrics.admissions_of("Template", "allowed"), 3);
    assert_eq!(metrics.admissions_of("unknown", "error"), 1);

    shutdown.cancel();
    within("the server to stop", server).await.unwrap().unwrap();
}
