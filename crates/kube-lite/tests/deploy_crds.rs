//! The issue's "done when": `kubectl apply -f deploy/crds/`, then create, patch, watch and delete
//! a Hardware and a Workflow, against the project's real (generated) CRDs.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

async fn ok(env: &Env, args: &[&str]) -> String {
    let (success, out, err) = env.kubectl(args).await;
    assert!(success, "kubectl {args:?} failed: {err}{out}");
    out
}

fn write(env: &Env, name: &str, v: &Value) -> String {
    let path = env.dir().join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).expect("json")).expect("write manifest");
    path.to_string_lossy().into_owned()
}

/// `kubectl get TYPE -w --output-watch-events`, read line by line.
struct Watch {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: Vec<String>,
}

impl Watch {
    fn start(env: &Env, resource: &str) -> Watch {
        let mut child = env
            .kubectl_cmd(&["get", resource, "-w", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl get -w");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Watch {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    async fn expect(&mut self, want: &[&str]) {
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .expect("read")
                    .expect("kubectl get -w ended");
                self.seen.push(line.clone());
                if want.iter().all(|w| line.contains(w)) {
                    return;
                }
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "no watch line with {want:?} in {:?}",
            self.seen
        );
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

#[tokio::test]
async fn hardware_and_workflow_lifecycle_with_the_project_crds() {
    let dir = crd_dir();
    assert!(
        dir.is_dir(),
        "{} is missing: the CRDs are generated into deploy/crds",
        dir.display()
    );
    let env = Env::new("done").await;
    let dir_arg = dir.to_string_lossy().into_owned();
    ok(&env, &["apply", "-f", &dir_arg]).await;
    for crd in ["hardware", "workflows", "templates", "osies"] {
        ok(
            &env,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                &format!("crd/{crd}.tinkerbell.org"),
            ],
        )
        .await;
    }

    // kubectl watches one resource type per process.
    let mut hw_watch = Watch::start(&env, "hardware");
    let mut wf_watch = Watch::start(&env, "workflows");

    let hw = json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "machine1"},
        "spec": {"networkInterfaces": {"52:54:00:12:34:56": {"dhcp": {"ip": "192.168.1.10", "hostname": "machine1"}}}}
    });
    let out = ok(&env, &["apply", "-f", &write(&env, "hw.json", &hw)]).await;
    assert!(
        out.contains("hardware.tinkerbell.org/machine1 created"),
        "{out}"
    );
    hw_watch.expect(&["ADDED", "machine1"]).await;
    let got: Value =
        serde_json::from_str(&ok(&env, &["get", "hardware", "machine1", "-o", "json"]).await)
            .expect("json");
    assert_eq!(got["apiVersion"], json!("tinkerbell.org/v1alpha2"));
    assert_eq!(
        got["spec"]["networkInterfaces"]["52:54:00:12:34:56"]["dhcp"]["ip"],
        json!("192.168.1.10")
    );

    // `kubectl get` prints the CRD's printer columns.
    let table = ok(&env, &["get", "hardware"]).await;
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("NAME") && header.contains("IP") && header.contains("HOSTNAME"),
        "{table}"
    );
    assert!(table.contains("192.168.1.10"), "{table}");

    // The schema rejects a malformed IP with the field path.
    let (success, _, err) = env
        .kubectl(&[
            "patch",
            "hw",
            "machine1",
            "--type=merge",
            "-p",
            r#"{"spec":{"networkInterfaces":{"52:54:00:12:34:56":{"dhcp":{"ip":"999.1.1.1"}}}}}"#,
        ])
        .await;
    assert!(
        !success && err.contains("is invalid") && err.contains("dhcp.ip"),
        "{err}"
    );
    ok(&env, &["patch", "hw", "machine1", "--type=merge", "-p", r#"{"spec":{"networkInterfaces":{"52:54:00:12:34:56":{"dhcp":{"ip":"192.168.1.11"}}}}}"#]).await;
    hw_watch.expect(&["MODIFIED", "machine1"]).await;

    let wf = json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": "wf1"},
        "spec": {"hardwareRef": {"name": "machine1"}, "templateRef": {"name": "tpl1"}}
    });
    let out = ok(&env, &["create", "-f", &write(&env, "wf.json", &wf)]).await;
    assert!(out.contains("workflow.tinkerbell.org/wf1 created"), "{out}");
    wf_watch.expect(&["ADDED", "wf1"]).await;
    // CEL transition rule: hardwareRef is immutable.
    let (success, _, err) = env
        .kubectl(&[
            "patch",
            "workflow",
            "wf1",
            "--type=merge",
            "-p",
            r#"{"spec":{"hardwareRef":{"name":"other"}}}"#,
        ])
        .await;
    assert!(
        !success && err.contains("hardwareRef is immutable"),
        "{err}"
    );
    ok(
        &env,
        &[
            "patch",
            "workflow",
            "wf1",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"stage":"patched"}}}"#,
        ],
    )
    .await;
    wf_watch.expect(&["MODIFIED", "wf1"]).await;
    let got: Value =
        serde_json::from_str(&ok(&env, &["get", "wf", "wf1", "-o", "json"]).await).expect("json");
    assert_eq!(got["metadata"]["labels"]["stage"], json!("patched"));
    assert_eq!(got["metadata"]["generation"], json!(1));

    ok(&env, &["delete", "workflow", "wf1"]).await;
    wf_watch.expect(&["DELETED", "wf1"]).await;
    ok(&env, &["delete", "hardware", "machine1"]).await;
    hw_watch.expect(&["DELETED", "machine1"]).await;
    hw_watch.stop().await;
    wf_watch.stop().await;
    env.cleanup().await;
}
