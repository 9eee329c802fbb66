//! Per-machine boot secrets from the controller's side, against the real parts (kube-lite,
//! NATS, tink-server, agents over gRPC): a Hardware annotated with `tinkerbell.org/agent-secret`
//! makes the servers require a value derived from its Secret (one per generation) to create the
//! machine's agent's session; once the agent exchanged it, the machine moves to the next
//! generation (also across a controller restart) and the old value is refused; a missing Secret
//! refuses the machine and says why on the Hardware; a rotated Secret and a removed annotation
//! are picked up. Only a Secret of type `tinkerbell.org/agent-secret` is used: the controller
//! copies it into the system namespace, where Hegel (in process here) reads it for the boot
//! script; any other Secret (`db-credentials`) is refused and never reaches Hegel. The
//! controller runs as `tink-controller` behind an auditing proxy, so every call it makes is
//! checked against deploy/rbac.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::agent_secret::{AGENT_SECRET_TYPE, copy_generation, copy_name, derive_value};
use tink_api::v1alpha2::Hardware;
use tink_controller::agent_secrets::{AGENT_SECRET_ANNOTATION, secret_hash};
use tink_proto::workflow::v2::GetWorkflowsRequest;
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;

const MAC: &str = "aa:bb:cc:00:00:09";

/// Opens a stream for the machine, presenting `secret`; the gRPC status code.
async fn open(stack: &Stack, secret: Option<&str>) -> Result<(), tonic::Status> {
    open_as(stack, MAC, secret).await
}

/// Opens a stream for agent `mac`, presenting `secret`; the gRPC status code.
async fn open_as(stack: &Stack, mac: &str, secret: Option<&str>) -> Result<(), tonic::Status> {
    let mut client = WorkflowServiceClient::connect(format!("http://{}", stack.server_addr))
        .await
        .expect("connects");
    let mut request = tonic::Request::new(GetWorkflowsRequest {
        agent_id: mac.to_string(),
        instance_id: "i-1".to_string(),
    });
    if let Some(s) = secret {
        request.metadata_mut().insert(
            tink_server::secrets::SECRET_HEADER,
            s.parse().expect("ascii"),
        );
    }
    // Dropped at once: the session ends with the stream.
    client.get_workflows(request).await.map(|_| ())
}

async fn bucket_value_of(stack: &Stack, mac: &str) -> Option<String> {
    let js = stack.jetstream_as("tink-controller").await;
    let bucket = js
        .get_key_value(tink_bus::AGENT_SECRETS_BUCKET)
        .await
        .expect("bucket");
    bucket
        .get(tink_bus::agent_token(mac).expect("token"))
        .await
        .expect("get")
        .map(|v| String::from_utf8_lossy(&v).to_string())
}

async fn wait_bucket(stack: &Stack, what: &str, want: Option<String>) {
    wait_bucket_of(stack, MAC, what, want).await
}

async fn wait_bucket_of(stack: &Stack, mac: &str, what: &str, want: Option<String>) {
    within(what, async {
        while bucket_value_of(stack, mac).await != want {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A Secret of the agent secret type.
fn secret(name: &str, value: &str) -> Secret {
    secret_of_type(name, AGENT_SECRET_TYPE, value)
}

fn secret_of_type(name: &str, type_: &str, value: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "type": type_,
        "stringData": {"secret": value},
    }))
    .expect("secret")
}

/// The value of the copy of Hardware `hw`'s agent secret in tink-system, and its type.
async fn copy_of(stack: &Stack, hw: &str) -> Option<(String, String)> {
    let copies: Api<Secret> = Api::namespaced(stack.client.clone(), "tink-system");
    copies
        .get_opt(&copy_name(NS, hw))
        .await
        .expect("get copy")
        .map(|c| {
            let value = c
                .data
                .as_ref()
                .and_then(|d| d.get("secret"))
                .map(|v| String::from_utf8_lossy(&v.0).to_string())
                .unwrap_or_default();
            (value, c.type_.unwrap_or_default())
        })
}

/// The generation of the copy of Hardware `hw`'s boot secret.
async fn generation_of(stack: &Stack, hw: &str) -> Option<u64> {
    let copies: Api<Secret> = Api::namespaced(stack.client.clone(), "tink-system");
    copies
        .get_opt(&copy_name(NS, hw))
        .await
        .expect("get copy")
        .as_ref()
        .and_then(copy_generation)
}

/// Waits until Hardware `hw` (agent `mac`) boots with a value derived from the operator's
/// `source` (at a generation other than `after`): the copy holds it and the bucket its hash
/// first. The generation and the value.
async fn wait_derived(
    stack: &Stack,
    hw: &str,
    mac: &str,
    source: &str,
    after: Option<u64>,
    what: &str,
) -> (u64, String) {
    within(what, async {
        loop {
            if let (Some(generation), Some((value, _))) =
                (generation_of(stack, hw).await, copy_of(stack, hw).await)
                && Some(generation) != after
                && value == derive_value(source, generation)
                && bucket_value_of(stack, mac).await.is_some_and(|b| {
                    b.split_whitespace().next() == Some(secret_hash(&value).as_str())
                })
            {
                return (generation, value);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Waits until a new session with `secret` is refused as already exchanged.
async fn wait_refused_as_used(stack: &Stack, mac: &str, secret: &str, what: &str) {
    within(what, async {
        loop {
            match open_as(stack, mac, Some(secret)).await {
                Err(s)
                    if s.code() == tonic::Code::PermissionDenied
                        && s.message().contains("already exchanged") =>
                {
                    return;
                }
                // The previous session may still be live for a moment.
                Err(s) if s.code() == tonic::Code::PermissionDenied => {}
                other => panic!("{what}: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Waits until a new session with `secret` is created (an earlier one may be live a moment).
async fn wait_admitted(stack: &Stack, mac: &str, secret: &str, what: &str) {
    within(what, async {
        while open_as(stack, mac, Some(secret)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Waits until the copy for `hw` holds `want` (None: until there is none).
async fn wait_copy(stack: &Stack, hw: &str, what: &str, want: Option<&str>) {
    within(what, async {
        loop {
            let have = copy_of(stack, hw).await;
            if let Some((_, type_)) = &have {
                assert_eq!(type_, AGENT_SECRET_TYPE, "a copy of another type");
            }
            if have.as_ref().map(|(v, _)| v.as_str()) == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_require_the_secret_a_hardware_names() {
    let stack = Stack::start().await;
    let mut config = stack.config("c0");
    config.agent_secrets_sweep = Duration::from_millis(300);
    let c = stack.controller(config).await;
    c.wait_leading().await;
    let secrets: Api<Secret> = Api::namespaced(stack.client.clone(), NS);
    let hardware: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    stack.create_hardware("m9", MAC).await;
    // No secret is needed before the annotation (once the machine is admitted).
    within("the machine to be admitted without a secret", async {
        while open(&stack, None).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // The annotation names a Secret that does not exist yet: fail closed, and say why.
    let annotate = |name: Option<&str>| {
        Patch::Merge(json!({"metadata": {"annotations": {AGENT_SECRET_ANNOTATION: name}}}))
    };
    hardware
        .patch("m9", &PatchParams::default(), &annotate(Some("m9-agent")))
        .await
        .expect("annotate");
    wait_bucket(
        &stack,
        "the missing marker",
        Some(tink_bus::AGENT_SECRET_MISSING.into()),
    )
    .await;
    let e = stack.wait_event("m9", "AgentSecretUnusable").await;
    assert!(
        e.note
            .as_deref()
            .unwrap_or_default()
            .contains("Secret tink/m9-agent does not exist"),
        "{:?}",
        e.note
    );
    let refused = open(&stack, Some("anything")).await.expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);

    // The Secret appears (picked up by the sweep): only the value derived from it admits the
    // machine, and only once.
    secrets
        .create(&PostParams::default(), &secret("m9-agent", "first-value\n"))
        .await
        .expect("create secret");
    let (g1, v1) = wait_derived(&stack, "m9", MAC, "first-value", None, "the first value").await;
    for wrong in ["wrong", "first-value"] {
        let e = open(&stack, Some(wrong))
            .await
            .expect_err("not the boot secret");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{wrong}");
    }
    wait_admitted(
        &stack,
        MAC,
        &v1,
        "the machine to be admitted with its boot secret",
    )
    .await;

    // Exchanged: the machine moves to the next generation, the old value is refused, the new
    // one (what the next boot's script carries) creates a session.
    let (g2, v2) = wait_derived(&stack, "m9", MAC, "first-value", Some(g1), "the next value").await;
    assert_eq!(g2, g1 + 1);
    assert_ne!(v2, v1);
    assert_eq!(
        bucket_value_of(&stack, MAC).await,
        Some(format!("{} {}", secret_hash(&v2), secret_hash(&v1))),
        "the exchanged value stays listed for its agent (a reset lets it in once)"
    );
    wait_refused_as_used(&stack, MAC, &v1, "the exchanged value to be refused").await;
    wait_admitted(&stack, MAC, &v2, "the next value to be admitted").await;
    let (g3, v3) = wait_derived(
        &stack,
        "m9",
        MAC,
        "first-value",
        Some(g2),
        "the third value",
    )
    .await;
    assert_eq!(g3, g2 + 1);

    // While no controller runs, the agent exchanges the third value; a new controller reads the
    // generation back from the copy and moves on from there.
    c.stop().await;
    wait_admitted(&stack, MAC, &v3, "the third value to be admitted").await;
    assert_eq!(
        generation_of(&stack, "m9").await,
        Some(g3),
        "nobody rotated"
    );
    let mut config = stack.config("c1");
    config.agent_secrets_sweep = Duration::from_millis(300);
    let c = stack.controller(config).await;
    c.wait_leading().await;
    let (g4, v4) = wait_derived(
        &stack,
        "m9",
        MAC,
        "first-value",
        Some(g3),
        "the fourth value",
    )
    .await;
    assert_eq!(g4, g3 + 1, "the generation survives a restart");
    wait_refused_as_used(
        &stack,
        MAC,
        &v3,
        "the value exchanged meanwhile to be refused",
    )
    .await;
    for old in [&v1, &v2] {
        let e = open(&stack, Some(old))
            .await
            .expect_err("an older generation");
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }

    // The operator's Secret rotated: the generation continues under the new key.
    secrets
        .patch(
            "m9-agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"secret": "second-value"}})),
        )
        .await
        .expect("rotate");
    let (g5, v5) = wait_derived(&stack, "m9", MAC, "second-value", None, "the rotated value").await;
    assert_eq!(g5, g4, "a rotated Secret keeps the generation");
    assert_ne!(v5, v4);
    let e = open(&stack, Some(&v4))
        .await
        .expect_err("the old key's value");
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    wait_admitted(&stack, MAC, &v5, "the rotated value to be admitted").await;

    // The annotation removed: the entry goes, no secret needed.
    hardware
        .patch("m9", &PatchParams::default(), &annotate(None))
        .await
        .expect("remove annotation");
    wait_bucket(&stack, "the entry to be removed", None).await;
    wait_copy(&stack, "m9", "the copy to be removed", None).await;
    within("the machine to be admitted without a secret", async {
        while open(&stack, None).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    c.stop().await;
    stack.stop().await;
}

/// The auditing proxy and RBAC evaluator of tinkctl's end-to-end test (shared, not copied).
#[allow(dead_code)]
#[path = "../../../cli/tinkctl/tests/common/mod.rs"]
mod rbac;

/// The controller's RBAC documents in deploy/rbac (its own and the provider's).
fn deploy_rbac() -> Vec<serde_json::Value> {
    use serde::Deserialize as _;
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rbac");
    let mut docs = Vec::new();
    for file in ["controller.yaml", "capi.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).expect("deploy/rbac");
        for d in serde_yaml::Deserializer::from_str(&text) {
            docs.push(serde_json::Value::deserialize(d).expect("yaml"));
        }
    }
    docs
}

/// Hegel in process (Hardware of [`NS`], copies from tink-system), believing X-Forwarded-For
/// from loopback so the test can ask as any machine.
async fn start_hegel(
    client: &kube::Client,
) -> (std::net::SocketAddr, tokio_util::sync::CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut config = hegel::HegelConfig::new(addr, hegel::IpxeConfig::new("127.0.0.1:42113"));
    config.trusted_proxies = vec!["127.0.0.1/32".parse().expect("cidr")];
    config.namespace = Some(NS.into());
    let health = tink_runtime::Health::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(hegel::run_on(
        listener,
        config,
        client.clone(),
        health.clone(),
        hegel::Metrics::default(),
        shutdown.clone(),
    ));
    within("hegel to become ready", async {
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    (addr, shutdown)
}

/// The iPXE script Hegel serves the machine with `ip`: (status code, body).
async fn script(hegel: std::net::SocketAddr, ip: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(hegel)
        .await
        .expect("connect");
    let req = format!(
        "GET /ipxe/script/auto.ipxe HTTP/1.1\r\nHost: hegel\r\nX-Forwarded-For: {ip}\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (code, body.to_string())
}

/// Waits until Hegel's script for `ip` satisfies `ok`.
async fn wait_script(
    hegel: std::net::SocketAddr,
    ip: &str,
    what: &str,
    ok: impl Fn(u16, &str) -> bool,
) -> String {
    within(what, async {
        loop {
            let (code, body) = script(hegel, ip).await;
            if ok(code, &body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// A Hardware editor names an ordinary Secret (`db-credentials`): the controller refuses it
/// (fail closed in the bucket, a Warning Event saying it must have the agent secret type), copies
/// nothing, and Hegel serves no script and never the Secret's value. A Secret of the agent secret
/// type reaches the machine's script through the copy in tink-system; a rotation is picked up,
/// a deleted Secret or Hardware removes the copy. Every call the controller made is one
/// deploy/rbac allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_agent_secret_typed_secrets_reach_hegel_through_the_copy() {
    const MAC10: &str = "aa:bb:cc:00:00:0a";
    const IP10: &str = "10.0.0.10";
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    stack
        .kube
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig");
    let audit = rbac::Audit::default();
    let url = rbac::start_proxy(kubeconfig, audit.clone()).await;
    let mut kc = kube::Config::new(url.parse().expect("proxy url"));
    kc.auth_info.token = Some("tink-controller".to_string().into());
    let proxied = kube::Client::try_from(kc).expect("client");
    let mut config = stack.config("c0");
    config.agent_secrets_sweep = Duration::from_millis(300);
    let c = stack.controller_with_client(config, proxied).await;
    c.wait_leading().await;

    let secrets: Api<Secret> = Api::namespaced(stack.client.clone(), NS);
    let hardware: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    let osie: tink_api::v1alpha2::Osie = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "OSIE",
        "metadata": {"name": "hook", "namespace": NS},
        "spec": {"kernelUrl": "http://10.0.0.1/vmlinuz", "initrdUrl": "http://10.0.0.1/initrd"},
    }))
    .expect("OSIE");
    Api::<tink_api::v1alpha2::Osie>::namespaced(stack.client.clone(), NS)
        .create(&PostParams::default(), &osie)
        .await
        .expect("create OSIE");
    secrets
        .create(
            &PostParams::default(),
            &secret_of_type("db-credentials", "Opaque", "hunter2"),
        )
        .await
        .expect("create db-credentials");
    let hw: Hardware = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
        "metadata": {"name": "m10", "namespace": NS,
                     "annotations": {AGENT_SECRET_ANNOTATION: "db-credentials"}},
        "spec": {
            "networkInterfaces": {MAC10: {"dhcp": {"ip": IP10, "netmask": "255.255.255.0"}}},
            "osie": {"osieRef": {"name": "hook"}},
        },
    }))
    .expect("hardware");
    hardware
        .create(&PostParams::default(), &hw)
        .await
        .expect("create hardware");
    let (hegel, hegel_stop) = start_hegel(&stack.client).await;

    // An ordinary Secret: refused, fail closed, said on the Hardware, never copied or served.
    wait_bucket_of(
        &stack,
        MAC10,
        "the fail-closed marker",
        Some(tink_bus::AGENT_SECRET_MISSING.into()),
    )
    .await;
    let e = stack.wait_event("m10", "AgentSecretUnusable").await;
    let note = e.note.unwrap_or_default();
    assert!(
        note.contains(
            "Secret tink/db-credentials has type Opaque; it must have type tinkerbell.org/agent-secret"
        ),
        "{note}"
    );
    assert!(!note.contains("hunter2"), "{note}");
    let (code, body) = script(hegel, IP10).await;
    assert_eq!(code, 503, "{body}");
    assert!(!body.contains("hunter2"), "{body}");
    assert!(!body.contains("tink_agent_secret="), "{body}");
    // Several sweeps later still nothing copied.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(copy_of(&stack, "m10").await, None);
    let (code, body) = script(hegel, IP10).await;
    assert_eq!(code, 503, "{body}");
    assert!(!body.contains("hunter2"), "{body}");

    // A Secret of the agent secret type: copied, served to the machine, its hash published.
    secrets
        .create(&PostParams::default(), &secret("m10-agent", "first-value"))
        .await
        .expect("create m10-agent");
    hardware
        .patch(
            "m10",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {AGENT_SECRET_ANNOTATION: "m10-agent"}}}),
            ),
        )
        .await
        .expect("annotate");
    let (g1, v1) = wait_derived(&stack, "m10", MAC10, "first-value", None, "the copy").await;
    let body = wait_script(hegel, IP10, "the secret in the script", |code, body| {
        code == 200 && body.contains(&format!(" tink_agent_secret={v1} "))
    })
    .await;
    assert!(
        !body.contains("first-value"),
        "the operator's value never leaves: {body}"
    );

    // The value the script carried creates the agent's session, once; the next script carries
    // the next generation's value, which (as Hegel serves it) creates the next session.
    wait_admitted(&stack, MAC10, &v1, "the served value to be admitted").await;
    let (g2, v2) = wait_derived(
        &stack,
        "m10",
        MAC10,
        "first-value",
        Some(g1),
        "the next value",
    )
    .await;
    assert_eq!(g2, g1 + 1);
    let body = wait_script(hegel, IP10, "the next value in the script", |code, body| {
        code == 200 && body.contains(&format!(" tink_agent_secret={v2} "))
    })
    .await;
    assert!(!body.contains(&v1), "{body}");
    wait_refused_as_used(&stack, MAC10, &v1, "the served value to be refused").await;
    wait_admitted(&stack, MAC10, &v2, "the next served value to be admitted").await;
    let (_, v3) = wait_derived(
        &stack,
        "m10",
        MAC10,
        "first-value",
        Some(g2),
        "the third value",
    )
    .await;

    // Rotated: the new value reaches the copy and the script.
    secrets
        .patch(
            "m10-agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"secret": "second-value"}})),
        )
        .await
        .expect("rotate");
    let (_, rotated) = wait_derived(
        &stack,
        "m10",
        MAC10,
        "second-value",
        None,
        "the rotated copy",
    )
    .await;
    let body = wait_script(
        hegel,
        IP10,
        "the rotated secret in the script",
        |code, body| code == 200 && body.contains(&format!(" tink_agent_secret={rotated} ")),
    )
    .await;
    assert!(!body.contains(&v3), "{body}");

    // The Secret deleted: fail closed, the copy goes, no script.
    secrets
        .delete("m10-agent", &Default::default())
        .await
        .expect("delete secret");
    wait_bucket_of(
        &stack,
        MAC10,
        "the fail-closed marker again",
        Some(tink_bus::AGENT_SECRET_MISSING.into()),
    )
    .await;
    wait_copy(&stack, "m10", "the copy to be removed", None).await;
    let body = wait_script(hegel, IP10, "no script", |code, _| code == 503).await;
    assert!(!body.contains(&rotated), "{body}");

    // Back, then the Hardware deleted: its copy goes too.
    secrets
        .create(&PostParams::default(), &secret("m10-agent", "third-value"))
        .await
        .expect("create m10-agent again");
    wait_derived(&stack, "m10", MAC10, "third-value", None, "the copy again").await;
    hardware
        .delete("m10", &Default::default())
        .await
        .expect("delete hardware");
    wait_copy(&stack, "m10", "the deleted Hardware's copy to go", None).await;

    hegel_stop.cancel();
    c.stop().await;

    // Every call the controller made is allowed by deploy/rbac, including the copies' writes,
    // which all went to tink-system.
    let calls = audit.calls();
    let controller: Vec<_> = calls
        .iter()
        .filter(|c| c.user == "tink-controller")
        .collect();
    for (verb, namespace) in [
        ("get", NS),
        ("get", "tink-system"),
        ("create", "tink-system"),
        ("update", "tink-system"),
        ("delete", "tink-system"),
        ("list", "tink-system"),
    ] {
        assert!(
            controller
                .iter()
                .any(|c| c.verb == verb && c.resource == "secrets" && c.namespace == namespace),
            "the controller was expected to {verb} secrets in {namespace}; recorded: {controller:#?}"
        );
    }
    let writes_elsewhere: Vec<_> = controller
        .iter()
        .filter(|c| {
            c.resource == "secrets"
                && !matches!(c.verb.as_str(), "get")
                && c.namespace != "tink-system"
        })
        .collect();
    assert!(writes_elsewhere.is_empty(), "{writes_elsewhere:#?}");
    let docs = deploy_rbac();
    let denied: Vec<_> = controller
        .iter()
        .filter(|c| !rbac::allowed(&docs, &c.user, "tink-system", c))
        .collect();
    assert!(
        denied.is_empty(),
        "calls deploy/rbac does not allow: {denied:#?}"
    );
    stack.stop().await;
}
