//! The `hegel` binary as `tinkctl dev up` and deploy/ start it: flags, kubeconfig, readiness on
//! the admin endpoint after the lists, metrics, and a clean exit on SIGTERM.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Env, eventually, get_from, within};
use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_after_sync_and_stops_on_sigterm() {
    let env = Env::new().await;
    env.create_hardware(
        "m",
        json!({"networkInterfaces": {"02:00:00:00:00:02": {"dhcp": {"ip": "127.0.0.2"}}},
               "instance": {"userdata": "#!/bin/sh\necho hi\n"}}),
    )
    .await;
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hegel"))
        .args([
            "--listen",
            &listen.to_string(),
            "--grpc-authority",
            "127.0.0.1:42113",
            "--admin-addr",
            &admin.to_string(),
        ])
        .env("KUBECONFIG", env.kubeconfig())
        .env("TINK_REPLICA_ID", "hegel-test")
        .env_remove("TINK_HEGEL_LISTEN")
        .kill_on_drop(true)
        .spawn()
        .expect("start hegel");

    eventually("/readyz", Duration::from_secs(20), || async {
        match tokio::net::TcpStream::connect(admin).await {
            Ok(_) => {
                (get_from(admin, "127.0.0.1", "/readyz", &[]).await.status == 200).then_some(())
            }
            Err(_) => None,
        }
    })
    .await;
    let r = get_from(listen, "127.0.0.2", "/latest/user-data", &[]).await;
    assert_eq!((r.status, r.text()), (200, "#!/bin/sh\necho hi\n".into()));
    let metrics = get_from(admin, "127.0.0.1", "/metrics", &[]).await.text();
    assert!(
        metrics.contains("hegel_requests_total{endpoint=\"user-data\",status=\"200\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("hegel_indexed_hardware 1"), "{metrics}");

    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = within("hegel to exit", child.wait()).await.expect("wait");
    assert!(status.success(), "exit status {status}");
    env.stop().await;
}
