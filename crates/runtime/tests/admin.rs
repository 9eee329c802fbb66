//! The admin endpoint over real loopback HTTP.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tink_runtime::{Health, serve_admin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn health_readiness_metrics_and_shutdown() {
    let mut registry = Registry::default();
    let requests = Counter::<u64>::default();
    registry.register(
        "test_requests",
        "Requests seen by the test",
        requests.clone(),
    );
    requests.inc_by(3);

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let health = Health::new();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_admin(
        listener,
        health.clone(),
        Arc::new(registry),
        shutdown.clone(),
    ));

    assert_eq!(get(addr, "/healthz").await.0, 200);
    assert_eq!(
        get(addr, "/readyz").await.0,
        503,
        "not ready before set_ready"
    );
    health.set_ready(true);
    assert_eq!(get(addr, "/readyz").await.0, 200);
    health.set_ready(false);
    assert_eq!(
        get(addr, "/readyz").await.0,
        503,
        "readiness can be withdrawn"
    );
    // Notes (e.g. a weakened security mode) follow the verdict.
    health.add_note("--allow-unauthenticated-agents is on");
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        "not ready\nnote: --allow-unauthenticated-agents is on\n"
    );

    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("test_requests_total 3"),
        "metrics body: {body}"
    );
    assert!(
        body.trim_end().ends_with("# EOF"),
        "OpenMetrics terminator: {body}"
    );

    assert_eq!(get(addr, "/nope").await.0, 404);

    shutdown.cancel();
    server
        .await
        .expect("join")
        .expect("serve_admin returns Ok after shutdown");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "listener closed after shutdown"
    );
}
