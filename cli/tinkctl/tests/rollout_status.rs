//! `tinkctl rollout status` against kube-lite with the generated CRDs: the status the
//! controller would write is written here through the status subresource, step by step, and
//! the command (the real binary) prints it once, or follows it with -w through a watch until
//! the rollout completes (exit 0) or halts (exit 1 with the reason).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::WorkflowSet;
use tokio::io::{AsyncBufReadExt, BufReader};

const NS: &str = "tink";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

async fn tinkctl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .arg("rollout")
        .args(args)
        .args(["-n", NS, "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .await
        .expect("tinkctl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn set_status(api: &Api<WorkflowSet>, name: &str, status: serde_json::Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .expect("status");
}

fn status(
    state: &str,
    pending: i32,
    running: i32,
    succeeded: i32,
    failed: i32,
) -> serde_json::Value {
    json!({"state": state, "total": 10, "pending": pending, "running": running,
        "succeeded": succeeded, "failed": failed, "observedGeneration": 1})
}

async fn create_set(api: &Api<WorkflowSet>, name: &str) {
    let set: WorkflowSet = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "WorkflowSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"hardwareSelector": {"matchLabels": {"rack": "r1"}},
            "templateRef": {"name": "install"}, "maxConcurrent": 5},
    }))
    .expect("set");
    api.create(&PostParams::default(), &set)
        .await
        .expect("create set");
}

/// Starts `tinkctl rollout status NAME -w`; returns the child and its stdout lines.
fn follow(
    kubeconfig: &Path,
    name: &str,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"))
        .args(["rollout", "status", name, "-w", "-n", NS, "--kubeconfig"])
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("tinkctl starts");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("a line within the deadline")
        .expect("read")
        .expect("a line, not the end")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_prints_and_follows_until_done_or_halted() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let path = repo().join("deploy/crds/workflowsets.tinkerbell.org.yaml");
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&std::fs::read_to_string(&path).expect("read CRD")).expect("CRD");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let api: Api<WorkflowSet> = Api::namespaced(client.clone(), NS);

    // Missing: an error naming it.
    let (ok, _, err) = tinkctl(&kubeconfig, &["status", "nope"]).await;
    assert!(!ok);
    assert!(err.contains("WorkflowSet tink/nope not found"), "{err}");

    // Once, before and after the controller wrote a status.
    create_set(&api, "rack1").await;
    let (ok, out, _) = tinkctl(&kubeconfig, &["status", "rack1"]).await;
    assert!(ok);
    assert_eq!(out.trim(), "rollout rack1: waiting for the controller");
    set_status(&api, "rack1", status("Progressing", 5, 5, 0, 0)).await;
    let (ok, out, _) = tinkctl(&kubeconfig, &["status", "rack1"]).await;
    assert!(ok);
    assert_eq!(
        out.trim(),
        "rollout rack1: Progressing total 10 pending 5 running 5 succeeded 0 failed 0"
    );

    // Followed: a line per change, exit 0 once Completed.
    let (mut child, mut lines) = follow(&kubeconfig, "rack1");
    assert_eq!(
        next_line(&mut lines).await,
        "rollout rack1: Progressing total 10 pending 5 running 5 succeeded 0 failed 0"
    );
    set_status(&api, "rack1", status("Progressing", 0, 5, 5, 0)).await;
    assert_eq!(
        next_line(&mut lines).await,
        "rollout rack1: Progressing total 10 pending 0 running 5 succeeded 5 failed 0"
    );
    set_status(&api, "rack1", status("Completed", 0, 0, 10, 0)).await;
    assert_eq!(
        next_line(&mut lines).await,
        "rollout rack1: Completed total 10 pending 0 running 0 succeeded 10 failed 0"
    );
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("tinkctl ends once Completed")
        .expect("exit status");
    assert!(exit.success());

    // Halted: exit 1 with the condition's message.
    create_set(&api, "rack2").await;
    set_status(&api, "rack2", status("Progressing", 5, 5, 0, 0)).await;
    let (mut child, mut lines) = follow(&kubeconfig, "rack2");
    next_line(&mut lines).await;
    let mut halted = status("Halted", 5, 2, 0, 3);
    halted["conditions"] = json!([{"type": "Halted", "status": "True",
        "reason": "FailureBudgetSpent", "message": "3 of the set's Workflows failed; the rollout halts at 3 (spec.maxFailures)"}]);
    set_status(&api, "rack2", halted).await;
    assert_eq!(
        next_line(&mut lines).await,
        "rollout rack2: Halted total 10 pending 5 running 2 succeeded 0 failed 3"
    );
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("tinkctl ends once Halted")
        .expect("exit status");
    assert!(!exit.success());
    let mut stderr = String::new();
    use tokio::io::AsyncReadExt as _;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .await
        .expect("stderr");
    assert!(
        stderr.contains("rollout rack2 halted: 3 of the set's Workflows failed"),
        "{stderr}"
    );
    server.shutdown().await;
}
