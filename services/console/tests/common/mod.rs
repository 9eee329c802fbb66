//! The console's test stack: kube-lite with the project's CRDs, a token file (alice may work in
//! namespace `a` through a Role, bob may do nothing, the kubeconfig's token is admin), and the
//! console in process on a loopback port; a small HTTP client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Only there so a broken build fails instead of hanging; never an assertion about speed.
pub const DEADLINE: Duration = Duration::from_secs(120);

pub const TOKENS: &str = "\
alice-token,alice,uid-alice
bob-token,bob,uid-bob,\"developers\"
carol-token,carol,uid-carol
dave-token,dave,uid-dave
console-token,system:serviceaccount:tink-system:tink-console,uid-console
";

pub async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(DEADLINE, f).await {
        Ok(o) => o,
        Err(_) => panic!("gave up waiting for {what}"),
    }
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub struct Stack {
    pub kube: kube_lite::RunningServer,
    pub admin: kube::Client,
    pub console: SocketAddr,
    pub metrics: tink_console::Metrics,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), tink_console::Error>>,
    _dir: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// kube-lite + CRDs + namespaces `a` and `b` + alice's Role in `a`, then `before` (objects
/// the console should find when it starts), then the console.
pub async fn stack() -> Stack {
    stack_with(None, None).await
}

/// [`stack`] with the console watching agent presence on `nats_url` and reading action output
/// from the tink-server at `logs`.
pub async fn stack_with(
    nats: Option<(String, tink_bus::NatsAuth)>,
    logs: Option<SocketAddr>,
) -> Stack {
    stack_configured(nats, logs, |_| {}).await
}

/// [`stack_with`], with `configure` changing the console's configuration last.
pub async fn stack_configured(
    nats: Option<(String, tink_bus::NatsAuth)>,
    logs: Option<SocketAddr>,
    configure: impl FnOnce(&mut tink_console::ConsoleConfig),
) -> Stack {
    stack_full(nats, logs, false, None, configure).await
}

/// [`stack`] with the bmc.tinkerbell.org CRDs (Machines, Jobs, Tasks) installed too.
pub async fn stack_bmc() -> Stack {
    stack_full(None, None, true, None, |_| {}).await
}

/// [`stack_bmc`] with the console running as its ServiceAccount (`console-token`), with the
/// RBAC documents of `rbac` (deploy/rbac/console.yaml, as is or edited) applied.
pub async fn stack_as_console(rbac: &str) -> Stack {
    stack_full(None, None, true, Some(rbac), |_| {}).await
}

/// [`stack_configured`], with the bmc.tinkerbell.org CRDs when `bmc`; with `console_rbac`
/// (ServiceAccount, ClusterRole and ClusterRoleBinding documents) applied and the console
/// running as `console-token`, else as kube-lite's admin.
pub async fn stack_full(
    nats: Option<(String, tink_bus::NatsAuth)>,
    logs: Option<SocketAddr>,
    bmc: bool,
    console_rbac: Option<&str>,
    configure: impl FnOnce(&mut tink_console::ConsoleConfig),
) -> Stack {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("token file");
    let kube = kube_lite::Server::start(kube_lite::Config {
        token_file: Some(tokens),
        ..Default::default()
    })
    .await
    .expect("kube-lite");
    let admin = kube.client().expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let mut files = vec!["hardware", "templates", "workflows"];
    if bmc {
        files.extend(["machines.bmc", "jobs.bmc", "tasks.bmc"]);
    }
    for f in files {
        let text =
            std::fs::read_to_string(repo().join(format!("deploy/crds/{f}.tinkerbell.org.yaml")))
                .expect("CRD file");
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD");
    }
    for ns in ["a", "b", "tink-system"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
    }
    if let Some(text) = console_rbac {
        apply_rbac(&admin, text).await;
    }
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "operator", "namespace": "a"},
        "rules": [
            {"apiGroups": ["tinkerbell.org"], "resources": ["hardware", "templates", "workflows"],
             "verbs": ["get", "list", "watch", "create", "delete"]},
            {"apiGroups": ["tinkerbell.org"], "resources": ["workflows/log"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
        ],
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-operates", "namespace": "a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let console = listener.local_addr().expect("addr");
    let uri: http::Uri = kube.url().parse().expect("uri");
    let mut config = tink_console::ConsoleConfig::new(console, kube::Config::new(uri));
    config.secure_cookies = false;
    config.presence = nats.map(|(nats_url, auth)| tink_console::presence::PresenceConfig {
        nats_url,
        auth,
        ttl: Duration::from_secs(3),
    });
    config.logs = logs.map(|addr| tink_console::logs::LogsConfig {
        servers: addr.to_string(),
        tls_ca: None,
        // the browser test's tink-server is plaintext
        insecure: true,
        max_lines: 1000,
        timeout: Duration::from_secs(10),
    });
    if console_rbac.is_some() {
        config.kube.auth_info.token = Some("console-token".to_string().into());
    }
    configure(&mut config);
    let health = tink_runtime::Health::new();
    let metrics = tink_console::Metrics::default();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(tink_console::run_on(
        listener,
        config,
        health.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    within("the console to become ready", async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    Stack {
        kube,
        admin,
        console,
        metrics,
        shutdown,
        task,
        _dir: dir,
    }
}

/// Creates the ServiceAccount, ClusterRole and ClusterRoleBinding documents of `text`.
async fn apply_rbac(admin: &kube::Client, text: &str) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use serde::Deserialize as _;
    let pp = PostParams::default();
    for d in serde_yaml::Deserializer::from_str(text) {
        let v = serde_json::Value::deserialize(d).expect("YAML document");
        let ns = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or("tink-system")
            .to_string();
        match v["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => drop(
                Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
                    .create(&pp, &serde_json::from_value(v).expect("ServiceAccount"))
                    .await
                    .expect("ServiceAccount"),
            ),
            "ClusterRole" => drop(
                Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(v).expect("ClusterRole"))
                    .await
                    .expect("ClusterRole"),
            ),
            "ClusterRoleBinding" => drop(
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(v).expect("ClusterRoleBinding"))
                    .await
                    .expect("ClusterRoleBinding"),
            ),
            other => panic!("unexpected kind {other:?} in the console's RBAC"),
        }
    }
}

impl Stack {
    /// Stops the console and returns how it ended.
    pub async fn stop(mut self) -> Result<(), tink_console::Error> {
        self.shutdown.cancel();
        let task = std::mem::replace(&mut self.task, tokio::spawn(async { Ok(()) }));
        within("the console to stop", task).await.expect("join")
    }
}

pub fn hardware(
    ns: &str,
    name: &str,
    mac: &str,
    ip: &str,
    labels: serde_json::Value,
) -> tink_api::v1alpha2::Hardware {
    tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"networkInterfaces": {mac: {"dhcp": {"ip": ip, "netmask": "255.255.0.0"}}}},
    }))
    .expect("hardware")
}

/// One answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

/// A request to the console: `auth` is a header line value pair added as is.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if method == "POST" {
        req = req.header("content-type", "application/x-www-form-urlencoded");
    }
    let req = req
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .expect("request");
    let res = within("an answer", sender.send_request(req))
        .await
        .expect("send");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = within("the body", res.into_body().collect())
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub async fn get(addr: SocketAddr, path: &str, token: &str) -> Answer {
    let auth = format!("Bearer {token}");
    request(addr, "GET", path, &[("authorization", auth.as_str())], "").await
}

/// A cookie header for `token`, as the login form sets it.
pub fn cookie(token: &str) -> String {
    format!("tink_console={token}")
}
