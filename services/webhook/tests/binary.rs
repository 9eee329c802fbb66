//! The `tink-webhook` binary: flags from the environment, /healthz, /readyz after the index
//! synced, /metrics, and a clean exit on SIGTERM.

mod common;

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use common::{certificates, post};

fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, out))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_reports_ready_and_stops_on_sigterm() {
    let kube = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = kube.client().unwrap();
    for m in common::deploy_manifests()
        .into_iter()
        .filter(|m| m["kind"] == "CustomResourceDefinition")
    {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_json::from_value(m).unwrap();
        kube::Api::all(client.clone())
            .create(&Default::default(), &crd)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    let certs = certificates();
    std::fs::write(dir.path().join("tls.crt"), &certs.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &certs.key_pem).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let admin = format!("127.0.0.1:{admin_port}");

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-webhook"))
        .env("KUBECONFIG", &kubeconfig)
        .env("TINK_WEBHOOK_LISTEN", format!("127.0.0.1:{port}"))
        .env("TINK_WEBHOOK_TLS_CERT", dir.path().join("tls.crt"))
        .env("TINK_WEBHOOK_TLS_KEY", dir.path().join("tls.key"))
        .env("TINK_ADMIN_ADDR", &admin)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("starting tink-webhook");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((200, _)) = http_get(&admin, "/readyz") {
            break;
        }
        assert!(Instant::now() < deadline, "tink-webhook never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(http_get(&admin, "/healthz").map(|r| r.0), Some(200));

    let (status, answer) = post(
        format!("127.0.0.1:{port}").parse().unwrap(),
        &certs.ca_pem,
        "/validate",
        b"[]".to_vec(),
    )
    .await
    .expect("HTTPS answer");
    assert_eq!(status, 400, "{answer}");
    let (_, metrics) = http_get(&admin, "/metrics").unwrap();
    assert!(
        metrics.contains("tink_webhook_admissions_total{kind=\"unknown\",verdict=\"error\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tink_webhook_admission_seconds_bucket"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tink_webhook_indexed{value=\"Hardware\"} 0"),
        "{metrics}"
    );

    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exits within its grace period")
        .unwrap();
    assert!(status.success(), "{status}");
    kube.shutdown().await;
}
