//! The `kube-lite` binary: prints the bound address, writes a kubeconfig kubectl accepts, keeps
//! data across restarts with `--data-dir`, and stops on SIGTERM.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

struct Running {
    child: tokio::process::Child,
    addr: String,
}

async fn start(args: &[&str]) -> Running {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-lite"))
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting kube-lite");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let addr = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("kube-lite printed its address in time")
        .expect("reading stdout")
        .expect("an address line");
    Running { child, addr }
}

async fn stop(mut r: Running) {
    let pid = r.child.id().expect("pid").to_string();
    let status = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), r.child.wait())
        .await
        .expect("exits on SIGTERM")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
}

async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .expect("kubectl");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn binary_serves_kubectl_and_persists() {
    let dir = tempfile::tempdir().expect("tmp");
    let kubeconfig = dir.path().join("kubeconfig");
    let data = dir.path().join("data");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--data-dir",
        data.to_str().expect("utf-8"),
    ];
    let server = start(&args).await;
    assert!(
        server.addr.starts_with("127.0.0.1:") && !server.addr.ends_with(":0"),
        "{}",
        server.addr
    );
    let (ok, out) = kubectl(&kubeconfig, &["create", "namespace", "kept"]).await;
    assert!(ok, "{out}");
    stop(server).await;

    let server = start(&args).await;
    let (ok, out) = kubectl(&kubeconfig, &["get", "namespace", "kept", "-o", "name"]).await;
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "namespace/kept");
    stop(server).await;
}

#[tokio::test]
async fn binary_rejects_bad_service_mappings() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-lite"))
        .args(["--service", "no-slash=https://x"])
        .output()
        .await
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected namespace/name=URL"));
}
