//! SIGTERM ends the controller within its grace period even when NATS and the Kubernetes API
//! server are already gone (a node draining), instead of hanging on them.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// The grace given to the binary; the test allows this much more for process start-up noise.
const GRACE: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_controller_in_time_with_its_dependencies_gone() {
    let mut stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    stack
        .kube
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tink-controller"))
        .args([
            "--admin-addr",
            "127.0.0.1:0",
            "--nats-url",
            &stack.nats.url(),
        ])
        .env("NATS_USER", "tink-controller")
        .env(
            "NATS_PASSWORD",
            tink_testkit::nats::deploy_credentials("tink-controller").1,
        )
        .args(["--namespace", NS, "--lease-namespace", "tink-system"])
        .args(["--shutdown-grace-seconds", &GRACE.as_secs().to_string()])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("tink-controller starts");
    // Let it elect itself and bind its consumer.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(child.try_wait().expect("wait").is_none(), "exited early");
    // The node drains: NATS and the API server go first.
    stack.nats.stop().await.expect("nats stops");
    stack.kube_shutdown().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.id().expect("pid").to_string();
    let sent = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exited = tokio::time::timeout(GRACE + SLACK, child.wait()).await;
    let code = exited
        .expect("tink-controller still running long after its grace period")
        .expect("wait");
    eprintln!("exited with {code:?} after {:?}", sent.elapsed());
}
