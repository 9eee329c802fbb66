//! Conformance through kubectl (`/usr/bin/kubectl`): apply, get -o json, patch, wait, get -w,
//! delete, and the error messages users see.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

async fn ok(env: &Env, args: &[&str]) -> String {
    let (success, out, err) = env.kubectl(args).await;
    assert!(success, "kubectl {args:?} failed: {err}{out}");
    out
}

async fn json_of(env: &Env, args: &[&str]) -> Value {
    let out = ok(env, args).await;
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("kubectl {args:?} printed no JSON ({e}): {out}"))
}

fn write(env: &Env, name: &str, v: &Value) -> String {
    let path = env.dir().join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).expect("json")).expect("write manifest");
    path.to_string_lossy().into_owned()
}

/// Reads `kubectl get -w --output-watch-events` lines until one contains all of `want`.
async fn expect_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    want: &[&str],
) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("reading kubectl output")
                .expect("kubectl get -w ended");
            if want.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no line with {want:?}"))
}

#[tokio::test]
async fn kubectl_drives_a_custom_resource_through_its_life() {
    let env = Env::new("kubectl").await;
    let crd = write(&env, "crd.json", &widget_crd());
    ok(&env, &["apply", "-f", &crd]).await;
    ok(
        &env,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/widgets.lite.example.com",
        ],
    )
    .await;
    // Applying again is a no-op.
    let again = ok(&env, &["apply", "-f", &crd]).await;
    assert!(again.contains("unchanged"), "{again}");

    let manifest = json!({"apiVersion": "lite.example.com/v1", "kind": "Widget", "metadata": {"name": "k1"}, "spec": {"size": 2, "color": "green"}});
    let file = write(&env, "w.json", &manifest);
    let out = ok(&env, &["apply", "-f", &file]).await;
    assert!(out.contains("widget.lite.example.com/k1 created"), "{out}");

    let mut watch = env
        .kubectl_cmd(&[
            "get",
            "widgets.lite.example.com",
            "-w",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    expect_line(&mut lines, &["ADDED", "k1"]).await;

    let got = json_of(
        &env,
        &["get", "widgets.lite.example.com", "k1", "-o", "json"],
    )
    .await;
    assert_eq!(got["spec"]["size"], json!(2));
    assert_eq!(got["spec"]["mode"], json!("auto"));
    assert_eq!(got["metadata"]["generation"], json!(1));

    ok(
        &env,
        &[
            "patch",
            "widget",
            "k1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":3}}"#,
        ],
    )
    .await;
    expect_line(&mut lines, &["MODIFIED", "k1"]).await;
    ok(
        &env,
        &[
            "patch",
            "wdg",
            "k1",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/color","value":"blue"}]"#,
        ],
    )
    .await;
    let got = json_of(&env, &["get", "wdg", "k1", "-o", "json"]).await;
    assert_eq!(
        (got["spec"]["size"].clone(), got["spec"]["color"].clone()),
        (json!(3), json!("blue"))
    );
    assert_eq!(got["metadata"]["generation"], json!(3));

    let mut wait = env
        .kubectl_cmd(&[
            "wait",
            "--for=jsonpath={.status.phase}=Ready",
            "--timeout=30s",
            "widget/k1",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl wait");
    ok(
        &env,
        &[
            "patch",
            "widget",
            "k1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Ready"}}"#,
        ],
    )
    .await;
    let status = wait.wait().await.expect("kubectl wait");
    assert!(status.success(), "kubectl wait failed");

    // Re-applying the original manifest changes the spec back (client-side apply, merge patch).
    let out = ok(&env, &["apply", "-f", &file]).await;
    assert!(out.contains("configured"), "{out}");
    let got = json_of(&env, &["get", "widget", "k1", "-o", "json"]).await;
    assert_eq!(
        (got["spec"]["size"].clone(), got["spec"]["color"].clone()),
        (json!(2), json!("green"))
    );
    assert_eq!(got["status"]["phase"], json!("Ready"));

    // Server-side apply through kubectl.
    let out = ok(&env, &["apply", "--server-side", "-f", &file]).await;
    assert!(out.contains("serverside-applied"), "{out}");
    let got = json_of(
        &env,
        &["get", "widget", "k1", "-o", "json", "--show-managed-fields"],
    )
    .await;
    let managers: Vec<&str> = got["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["manager"].as_str()).collect())
        .unwrap_or_default();
    assert!(managers.contains(&"kubectl"), "{managers:?}");

    let out = ok(&env, &["delete", "widget", "k1"]).await;
    assert!(out.contains("deleted"), "{out}");
    expect_line(&mut lines, &["DELETED", "k1"]).await;
    let _ = watch.kill().await;
    let (found, _, err) = env.kubectl(&["get", "widget", "k1"]).await;
    assert!(!found && err.contains("NotFound"), "{err}");
    env.cleanup().await;
}

#[tokio::test]
async fn kubectl_reports_validation_errors_with_field_paths() {
    let env = Env::new("kvalid").await;
    ensure_widget_crd(&env.client).await;
    let bad = json!({"apiVersion": "lite.example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {"size": 0, "color": "pink"}});
    let file = write(&env, "bad.json", &bad);
    let (success, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(!success);
    assert!(err.contains("is invalid"), "{err}");
    assert!(
        err.contains("spec.size") && err.contains("spec.color"),
        "{err}"
    );
    let cel = json!({"apiVersion": "lite.example.com/v1", "kind": "Widget", "metadata": {"name": "cel"}, "spec": {"size": 200, "color": "blue"}});
    let file = write(&env, "cel.json", &cel);
    let (success, _, err) = env.kubectl(&["create", "-f", &file]).await;
    assert!(!success);
    assert!(
        err.contains("only red widgets may be larger than 100"),
        "{err}"
    );
    // A kind the server does not serve.
    let stray =
        json!({"apiVersion": "nothere.example.com/v1", "kind": "Stray", "metadata": {"name": "s"}});
    let file = write(&env, "stray.json", &stray);
    let (success, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(
        !success && err.contains("no matches for kind \"Stray\""),
        "{err}"
    );
    // kubectl validates strictly by default: unknown fields are refused.
    let unknown = json!({"apiVersion": "lite.example.com/v1", "kind": "Widget", "metadata": {"name": "unk"}, "spec": {"size": 1, "sise": 2}});
    let file = write(&env, "unknown.json", &unknown);
    let (success, _, err) = env.kubectl(&["apply", "-f", &file]).await;
    assert!(!success);
    assert!(
        err.contains("unknown field") && err.contains("spec.sise"),
        "{err}"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn kubectl_manages_built_in_objects() {
    let env = Env::new("kbuiltin").await;
    // kubectl's imperative generators send protobuf bodies.
    ok(
        &env,
        &["create", "configmap", "settings", "--from-literal=a=1"],
    )
    .await;
    let other_ns = unique("kcreate");
    ok(&env, &["create", "namespace", &other_ns]).await;
    ok(
        &env,
        &["create", "serviceaccount", "robot", "-n", &other_ns],
    )
    .await;
    let sa = json_of(
        &env,
        &[
            "get",
            "serviceaccount",
            "robot",
            "-n",
            &other_ns,
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(sa["metadata"]["namespace"], json!(other_ns));
    ok(&env, &["delete", "namespace", &other_ns]).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "labels": {"app": "x"}}, "data": {"k": "v"}});
    let file = write(&env, "cm.json", &cm);
    ok(&env, &["apply", "-f", &file]).await;
    let mut cm2 = cm.clone();
    cm2["data"] = json!({"k": "v2", "n": "new"});
    let file2 = write(&env, "cm2.json", &cm2);
    // Built-in kinds get a strategic merge patch from kubectl.
    let out = ok(&env, &["apply", "-f", &file2]).await;
    assert!(out.contains("configured"), "{out}");
    let got = json_of(&env, &["get", "configmap", "applied", "-o", "json"]).await;
    assert_eq!(got["data"], json!({"k": "v2", "n": "new"}));
    ok(&env, &["label", "configmap", "settings", "tier=backend"]).await;
    let names = ok(
        &env,
        &["get", "configmaps", "-l", "tier=backend", "-o", "name"],
    )
    .await;
    assert_eq!(names.trim(), "configmap/settings");
    let names = ok(
        &env,
        &["get", "configmaps", "-l", "app in (x,y)", "-o", "name"],
    )
    .await;
    assert_eq!(names.trim(), "configmap/applied");
    ok(
        &env,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=hunter2",
        ],
    )
    .await;
    let secret = json_of(&env, &["get", "secret", "creds", "-o", "json"]).await;
    assert_eq!(secret["data"]["password"], json!("aHVudGVyMg=="));
    assert_eq!(secret["type"], json!("Opaque"));
    // kubectl apply of a Deployment sends a strategic merge patch naming only what changed:
    // containers merge by name and keep their other fields.
    let mut deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [
                {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}], "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "side:1"}]}}}});
    ok(&env, &["apply", "-f", &write(&env, "deploy.json", &deploy)]).await;
    deploy["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
    deploy["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
    ok(
        &env,
        &["apply", "-f", &write(&env, "deploy2.json", &deploy)],
    )
    .await;
    let got = json_of(&env, &["get", "deployment", "web", "-o", "json"]).await;
    assert_eq!(
        got["spec"]["template"]["spec"]["containers"],
        deploy["spec"]["template"]["spec"]["containers"]
    );
    assert_eq!(got["metadata"]["generation"], json!(2));

    // Server-side printing: kubectl's usual columns.
    let table = ok(&env, &["get", "configmaps", "settings"]).await;
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.split_whitespace().eq(["NAME", "DATA", "AGE"])),
        "{table}"
    );
    let table = ok(&env, &["get", "namespace", &env.ns]).await;
    assert!(table.contains("Active"), "{table}");
    let out = ok(&env, &["delete", "configmap", "settings", "applied"]).await;
    assert_eq!(out.matches("deleted").count(), 2, "{out}");
    let list = json_of(&env, &["get", "configmaps", "-o", "json"]).await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !names.contains(&"settings") && !names.contains(&"applied"),
        "{names:?}"
    );
    env.cleanup().await;
}
