//! `tinkctl workflow logs` against kube-lite (the Workflow) and a real NATS (the logs stream):
//! stored lines in order, prefixed by action name; `--action`; a line stored twice shown once;
//! nothing of another workflow; `-f` shows lines added later and ends with the Workflow.
//! Through a server (TLS, the kubeconfig user's token, Kubernetes RBAC) the same lines print
//! for a user bound to `tink-workflow-log-reader`, and a user without the binding is refused;
//! a follower whose server stops goes on through the next one without losing or repeating a line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::Workflow;
use tink_bus::proto::{LogBatch, LogLine, log_line};
use tink_testkit::nats::NatsServer;

async fn apply_crds(client: &kube::Client) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/crds")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read CRD");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        api.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
}

/// Creates a Workflow and gives it a status as the controller would: dispatched, two actions.
async fn workflow(api: &Api<Workflow>, name: &str, state: &str) -> String {
    let wf: Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"hardwareRef": {"name": "hw"}, "templateRef": {"name": "t"}},
    }))
    .expect("workflow");
    let created = api
        .create(&PostParams::default(), &wf)
        .await
        .expect("create workflow");
    let uid = created.metadata.uid.expect("uid");
    let dispatch = format!("default/{name}/{uid}/1");
    set_status(api, name, &dispatch, state).await;
    dispatch
}

async fn set_status(api: &Api<Workflow>, name: &str, dispatch: &str, state: &str) {
    let status = json!({"status": {
        "state": state,
        "dispatchId": dispatch,
        "agentId": "aa:bb:cc:dd:ee:ff",
        "dispatchAttempts": 1,
        "actions": [
            {"id": "0-disk", "rendered": {"name": "disk", "image": "x"}, "state": "Succeeded"},
            {"id": "1-boot", "rendered": {"name": "boot", "image": "x"}, "state": "Running"},
        ],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
}

async fn publish(
    js: &async_nats::jetstream::Context,
    dispatch: &str,
    action: &str,
    seqs: std::ops::RangeInclusive<u64>,
) {
    let batch = LogBatch {
        workflow_id: dispatch.into(),
        action_id: action.into(),
        agent_id: "aa:bb:cc:dd:ee:ff".into(),
        lines: seqs
            .map(|s| LogLine {
                sequence: s,
                stream: if s % 2 == 0 {
                    log_line::Stream::Stderr as i32
                } else {
                    log_line::Stream::Stdout as i32
                },
                text: format!("{action} says {s}"),
                ..Default::default()
            })
            .collect(),
        dropped_lines: 0,
    };
    tink_bus::publish_log_batch(js, &batch)
        .await
        .expect("stored");
}

/// `tinkctl workflow logs` in administrator mode (NATS).
fn tinkctl(kubeconfig: &Path, nats: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"));
    command
        .args(["workflow", "logs"])
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--nats-url", nats])
        .kill_on_drop(true);
    command
}

async fn output(mut command: tokio::process::Command) -> Vec<String> {
    let out = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("tinkctl ends")
        .expect("tinkctl runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn workflow_logs_prints_each_actions_lines_once_in_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let server = kube_lite::Server::start(kube_lite::Config::default())
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    apply_crds(&client).await;
    let api: Api<Workflow> = Api::namespaced(client, "default");
    let nats = NatsServer::start().await.expect("nats");
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("nats"));
    tink_bus::ensure_streams(&js, &tink_bus::BusConfig::default())
        .await
        .expect("streams");

    let one = workflow(&api, "one", "Running").await;
    let two = workflow(&api, "two", "Running").await;
    publish(&js, &one, "0-disk", 1..=3).await;
    // A resend cut differently: lines 2 and 3 stored again.
    publish(&js, &one, "0-disk", 2..=4).await;
    publish(&js, &one, "1-boot", 1..=2).await;
    publish(&js, &two, "0-disk", 1..=5).await;

    let lines = output(tinkctl(&kubeconfig, &nats.url(), &["one"])).await;
    assert_eq!(
        lines,
        [
            "[disk] 0-disk says 1",
            "[disk] (stderr) 0-disk says 2",
            "[disk] 0-disk says 3",
            "[disk] (stderr) 0-disk says 4",
            "[boot] 1-boot says 1",
            "[boot] (stderr) 1-boot says 2",
        ]
    );
    let lines = output(tinkctl(
        &kubeconfig,
        &nats.url(),
        &["one", "--action", "boot"],
    ))
    .await;
    assert_eq!(
        lines,
        ["[boot] 1-boot says 1", "[boot] (stderr) 1-boot says 2"]
    );
    let lines = output(tinkctl(&kubeconfig, &nats.url(), &["two"])).await;
    assert_eq!(lines.len(), 5, "{lines:?}");
    let out = tinkctl(&kubeconfig, &nats.url(), &["one", "--action", "nope"])
        .output()
        .await
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--action \"nope\"") && err.contains("disk, boot"),
        "{err}"
    );

    // -f: past lines, then new ones, until the Workflow ends.
    let mut follow = tinkctl(&kubeconfig, &nats.url(), &["one", "-f"]);
    follow.stdout(std::process::Stdio::piped());
    let child = follow.spawn().expect("tinkctl -f runs");
    tokio::time::sleep(Duration::from_secs(2)).await;
    publish(&js, &one, "1-boot", 3..=4).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_status(&api, "one", &one, "Succeeded").await;
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("tinkctl -f ends once the Workflow ended")
        .expect("output");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    assert_eq!(
        lines[6..],
        ["[boot] 1-boot says 3", "[boot] (stderr) 1-boot says 4"]
    );
}

/// A kubeconfig for kube-lite whose user presents `token`.
fn user_kubeconfig(server: &kube_lite::RunningServer, dir: &Path, token: &str) -> PathBuf {
    let path = dir.join(format!("kubeconfig-{token}"));
    std::fs::write(&path, server.kubeconfig_as(token)).expect("kubeconfig");
    path
}

#[tokio::test]
async fn workflow_logs_through_the_server_follow_kubernetes_rbac() {
    let dir = tempfile::tempdir().expect("tmp");
    let tokens = "alice-token,alice,u1\nbob-token,bob,u2\n";
    let server = kube_lite::Server::start_with_tokens(dir.path(), tokens)
        .await
        .expect("kube-lite");
    let client = server.client().expect("client");
    apply_crds(&client).await;
    let rbac = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac/server.yaml"),
    )
    .expect("deploy/rbac/server.yaml");
    for doc in serde_yaml::Deserializer::from_str(&rbac) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("YAML");
        if v["kind"] == "ClusterRole" && v["metadata"]["name"] == "tink-workflow-log-reader" {
            let role: k8s_openapi::api::rbac::v1::ClusterRole =
                serde_json::from_value(v).expect("ClusterRole");
            Api::all(client.clone())
                .create(&PostParams::default(), &role)
                .await
                .expect("ClusterRole");
        }
    }
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-logs", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tink-workflow-log-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .expect("binding");
    Api::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");
    let api: Api<Workflow> = Api::namespaced(client.clone(), "default");

    let nats = NatsServer::start().await.expect("nats");
    let certs = tink_testkit::certs::dev_certificates(
        &["localhost".into()],
        &["127.0.0.1".parse().expect("ip")],
    )
    .expect("certificates");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &certs.ca_pem).expect("ca");
    let (addr, shutdown, serving) = replica(&nats.url(), "server-0", &client, &certs).await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("nats"));

    let one = workflow(&api, "one", "Running").await;
    publish(&js, &one, "0-disk", 1..=2).await;
    publish(&js, &one, "1-boot", 1..=1).await;

    let through_server = |kubeconfig: &Path, args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"));
        command
            .args(["workflow", "logs"])
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--server", &addr, "--tls-ca"])
            .arg(&ca)
            .env_remove("TINK_TOKEN")
            .env_remove("NATS_URL")
            .kill_on_drop(true);
        command
    };
    let alice = user_kubeconfig(&server, dir.path(), "alice-token");
    let lines = output(through_server(&alice, &["one"])).await;
    assert_eq!(
        lines,
        [
            "[disk] 0-disk says 1",
            "[disk] (stderr) 0-disk says 2",
            "[boot] 1-boot says 1",
        ]
    );
    let lines = output(through_server(&alice, &["one", "--action", "boot"])).await;
    assert_eq!(lines, ["[boot] 1-boot says 1"]);

    // The dev stack's way: kube-lite's own kubeconfig (its admin), TINK_SERVER as a list whose
    // first server is down, the CA from TINK_AGENT_TLS_CA.
    let admin = dir.path().join("kubeconfig-admin");
    server.write_kubeconfig(&admin).expect("kubeconfig");
    let mut dev = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"));
    dev.args(["workflow", "logs", "one", "--action", "disk"])
        .arg("--kubeconfig")
        .arg(&admin)
        .env("TINK_SERVER", format!("127.0.0.1:1,{addr}"))
        .env("TINK_AGENT_TLS_CA", &ca)
        .env_remove("TINK_TLS_CA")
        .env_remove("TINK_TOKEN")
        .kill_on_drop(true);
    let lines = output(dev).await;
    assert_eq!(
        lines,
        ["[disk] 0-disk says 1", "[disk] (stderr) 0-disk says 2"]
    );

    let bob = user_kubeconfig(&server, dir.path(), "bob-token");
    let out = through_server(&bob, &["one"]).output().await.expect("runs");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PermissionDenied")
            && err.contains("workflows/log")
            && err.contains("tink-workflow-log-reader"),
        "{err}"
    );
    let out = through_server(&bob, &["one", "--token", "forged"])
        .output()
        .await
        .expect("runs");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Unauthenticated"), "{err}");

    shutdown.cancel();
    let _ = serving.await;
    server.shutdown().await;
}

/// A TLS replica with Kubernetes access; its address, its shutdown and its task.
async fn replica(
    nats: &str,
    id: &str,
    client: &kube::Client,
    certs: &tink_testkit::certs::DevCertificates,
) -> (
    String,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<Result<(), tink_server::ServerError>>,
) {
    // The controller's part: the streams exist before a server can be ready.
    let js = async_nats::jetstream::new(async_nats::connect(nats).await.expect("nats"));
    tink_bus::ensure_streams(&js, &tink_bus::BusConfig::default())
        .await
        .expect("streams");
    let mut config = tink_server::ServerConfig::new(nats, id);
    config.kube = Some(tink_server::KubeClient(client.clone()));
    config.tls = Some(tink_server::TlsConfig {
        cert_pem: certs.cert_pem.clone().into_bytes(),
        key_pem: certs.key_pem.clone().into_bytes(),
        client_ca_pem: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let health = tink_runtime::Health::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(tink_server::serve(
        config,
        listener,
        health.clone(),
        tink_server::Metrics::default(),
        shutdown.clone(),
    ));
    tokio::time::timeout(Duration::from_secs(30), async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the server gets ready");
    (addr, shutdown, serving)
}

/// kube-lite as admin (CRDs applied), NATS, and TLS certificates for replicas on 127.0.0.1.
struct TlsStack {
    dir: tempfile::TempDir,
    server: kube_lite::RunningServer,
    client: kube::Client,
    api: Api<Workflow>,
    nats: NatsServer,
    certs: tink_testkit::certs::DevCertificates,
    ca: PathBuf,
}

impl TlsStack {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let server = kube_lite::Server::start(kube_lite::Config::default())
            .await
            .expect("kube-lite");
        let client = server.client().expect("client");
        apply_crds(&client).await;
        let api: Api<Workflow> = Api::namespaced(client.clone(), "default");
        let nats = NatsServer::start().await.expect("nats");
        let certs = tink_testkit::certs::dev_certificates(
            &["localhost".into()],
            &["127.0.0.1".parse().expect("ip")],
        )
        .expect("certificates");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, &certs.ca_pem).expect("ca");
        TlsStack {
            dir,
            server,
            client,
            api,
            nats,
            certs,
            ca,
        }
    }
}

#[tokio::test]
async fn a_follower_goes_on_through_the_next_server_when_its_server_stops() {
    let TlsStack {
        dir,
        server,
        client,
        api,
        nats,
        certs,
        ca,
    } = TlsStack::start().await;
    let (first, stop_first, first_task) = replica(&nats.url(), "server-0", &client, &certs).await;
    let (second, stop_second, second_task) =
        replica(&nats.url(), "server-1", &client, &certs).await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("nats"));
    let one = workflow(&api, "one", "Running").await;
    publish(&js, &one, "0-disk", 1..=2).await;

    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let mut follow = tokio::process::Command::new(env!("CARGO_BIN_EXE_tinkctl"));
    follow
        .args(["workflow", "logs", "one", "-f", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--server", &format!("{first},{second}"), "--tls-ca"])
        .arg(&ca)
        .env_remove("TINK_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = follow.spawn().expect("tinkctl -f runs");
    tokio::time::sleep(Duration::from_secs(2)).await;
    publish(&js, &one, "1-boot", 1..=2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The server serving the follower stops (a rolling update); lines go on being stored,
    // some while no server serves the follower.
    stop_first.cancel();
    let _ = first_task.await;
    publish(&js, &one, "1-boot", 3..=4).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    publish(&js, &one, "1-boot", 5..=5).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_status(&api, "one", &one, "Succeeded").await;
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("tinkctl -f ends once the Workflow ended")
        .expect("output");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "[disk] 0-disk says 1",
            "[disk] (stderr) 0-disk says 2",
            "[boot] 1-boot says 1",
            "[boot] (stderr) 1-boot says 2",
            "[boot] 1-boot says 3",
            "[boot] (stderr) 1-boot says 4",
            "[boot] 1-boot says 5",
        ],
        "every line once, in order, across the two servers; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop_second.cancel();
    let _ = second_task.await;
    server.shutdown().await;
}

#[tokio::test]
async fn workflow_watch_shows_the_running_actions_last_line_through_the_server() {
    let TlsStack {
        dir,
        server,
        client,
        api,
        nats,
        certs,
        ca,
    } = TlsStack::start().await;
    let (addr, stop, task) = replica(&nats.url(), "server-0", &client, &certs).await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("nats"));
    let one = workflow(&api, "one", "Running").await;
    publish(&js, &one, "1-boot", 1..=2).await;
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    // `watch` draws the last line only on a terminal: `script` gives it one.
    let command = format!(
        "{} workflow watch one --timeout-seconds 30 --kubeconfig {} --server {addr} --tls-ca {}",
        env!("CARGO_BIN_EXE_tinkctl"),
        kubeconfig.display(),
        ca.display()
    );
    let mut watch = tokio::process::Command::new("script");
    watch
        .args(["-qfec", &command, "/dev/null"])
        .env_remove("NATS_URL")
        .env_remove("TINK_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = watch.spawn().expect("script runs");
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_status(&api, "one", &one, "Succeeded").await;
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("watch ends with the Workflow")
        .expect("output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("> 1-boot says 2"),
        "the running action's last line, read through the server: {text}"
    );
    stop.cancel();
    let _ = task.await;
    server.shutdown().await;
}
