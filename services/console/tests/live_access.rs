//! The live streams through each user's RBAC (issue 24): a user who may list Hardware but not
//! Workflows gets machine tiles without the workflow's name or state; a withdrawn binding ends
//! the stream within the recheck period; per-user and global caps answer 429; the console
//! refuses plaintext gRPC to the servers unless `--insecure`.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use http_body_util::BodyExt as _;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::{Hardware, Workflow};

/// An open server-sent-events stream and the raw bytes read from it so far.
struct Sse {
    body: hyper::body::Incoming,
    seen: String,
    ended: bool,
}

/// Opens `path` as `token`: the stream when 200, else the status and body.
async fn open(addr: SocketAddr, path: &str, token: &str) -> Result<Sse, (u16, String)> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let res = within("the stream's answer", sender.send_request(req))
        .await
        .expect("send");
    let status = res.status().as_u16();
    if status != 200 {
        let body = within("the body", res.into_body().collect())
            .await
            .expect("body")
            .to_bytes();
        return Err((status, String::from_utf8_lossy(&body).into_owned()));
    }
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    Ok(Sse {
        body: res.into_body(),
        seen: String::new(),
        ended: false,
    })
}

impl Sse {
    /// Reads until `done(seen)` holds or the stream ends; false when it ended first.
    async fn read_until(&mut self, what: &str, done: impl Fn(&str) -> bool) -> bool {
        within(what, async {
            while !done(&self.seen) {
                match self.body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            self.seen.push_str(&String::from_utf8_lossy(&data));
                        }
                    }
                    Some(Err(_)) | None => {
                        self.ended = true;
                        return false;
                    }
                }
            }
            true
        })
        .await
    }
}

/// Carol may get, list and watch Hardware in namespace `a`, nothing else.
async fn bind_carol_to_hardware(admin: &kube::Client) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "hardware-reader", "namespace": "a"},
        "rules": [{"apiGroups": ["tinkerbell.org"], "resources": ["hardware"],
                   "verbs": ["get", "list", "watch"]}],
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &role)
        .await
        .expect("Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "carol-reads-hardware", "namespace": "a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hardware-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");
}

async fn create_hardware(admin: &kube::Client, ns: &str, name: &str, mac: &str) {
    Api::<Hardware>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &hardware(ns, name, mac, "10.0.0.1", json!({"rack": "r1"})),
        )
        .await
        .expect("hardware");
}

async fn create_workflow(admin: &kube::Client, ns: &str, name: &str, hw: &str) {
    let wf: Workflow = tink_api::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hardwareRef": {"name": hw}, "templateRef": {"name": "ubuntu"}},
    }))
    .expect("workflow");
    Api::<Workflow>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &wf)
        .await
        .expect("workflow");
}

async fn set_state(admin: &kube::Client, ns: &str, name: &str, state: &str) {
    Api::<Workflow>::namespaced(admin.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"state": state}})),
        )
        .await
        .expect("status");
}

/// A change after every other: a stream that shows it has had every earlier update.
async fn touch(admin: &kube::Client, ns: &str, name: &str, marker: &str) {
    Api::<Hardware>::namespaced(admin.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"marker": marker}}})),
        )
        .await
        .expect("label");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_list_hardware_only_never_sees_workflow_names_or_states_live() {
    let stack = stack().await;
    let (admin, addr) = (stack.admin.clone(), stack.console);
    bind_carol_to_hardware(&admin).await;
    create_hardware(&admin, "a", "m1", "02:00:00:00:00:01").await;
    create_hardware(&admin, "a", "marker", "02:00:00:00:00:02").await;
    create_hardware(&admin, "b", "m-b", "02:00:00:00:00:03").await;
    // Wait until the console has the machines (the page lists them).
    within("the machines in the cache", async {
        loop {
            let page = get(addr, "/", "kube-lite").await;
            if page.body.contains("m/b/m-b") && page.body.contains("m/a/marker") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // Neither Workflows nor anything in b for carol; nothing at all for dave.
    assert_eq!(
        open(addr, "/live/workflows", "carol-token")
            .await
            .err()
            .map(|e| e.0),
        Some(403)
    );
    assert_eq!(
        open(addr, "/live/machines", "dave-token")
            .await
            .err()
            .map(|e| e.0),
        Some(403)
    );
    let mut carol = open(addr, "/live/machines", "carol-token")
        .await
        .expect("carol's stream");
    let mut alice = open(addr, "/live/machines", "alice-token")
        .await
        .expect("alice's stream");
    let mut admin_stream = open(addr, "/live/machines", "kube-lite")
        .await
        .expect("the admin's stream");

    // A workflow on m1 goes Running then Failed; one in b too.
    create_workflow(&admin, "a", "wf-hidden-name", "m1").await;
    set_state(&admin, "a", "wf-hidden-name", "Running").await;
    set_state(&admin, "a", "wf-hidden-name", "Failed").await;
    create_workflow(&admin, "b", "wf-in-b", "m-b").await;
    set_state(&admin, "b", "wf-in-b", "Running").await;
    touch(&admin, "a", "marker", "done").await;

    let marker = |s: &str| s.contains("marker=done") || s.contains("\"m/a/marker\"");
    assert!(
        alice
            .read_until("alice's updates", |s| s.contains("Failed") && marker(s))
            .await,
        "alice's stream ended: {}",
        alice.seen
    );
    // Alice may list workflows in a: her tiles name the workflow (the data was there to leak).
    assert!(alice.seen.contains("wf-hidden-name"), "{}", alice.seen);
    assert!(
        admin_stream
            .read_until("the admin's updates", |s| s.contains("wf-in-b"))
            .await,
        "{}",
        admin_stream.seen
    );
    assert!(
        carol
            .read_until("carol's updates", |s| marker(s)
                && s.matches("\"m/a/m1\"").count() >= 3)
            .await,
        "carol's stream ended: {}",
        carol.seen
    );
    // Carol got m1's tile updates, without the workflow: no name, no state, no link to it.
    let raw = &carol.seen;
    assert!(raw.contains("event: update"), "{raw}");
    assert!(raw.contains("no workflow"), "{raw}");
    for secret in [
        "wf-hidden-name",
        "Running",
        "Failed",
        "tile failed",
        "tile provisioning",
        "/workflows/a/",
        "wf-in-b",
        "m/b/",
    ] {
        assert!(!raw.contains(secret), "carol saw {secret:?}: {raw}");
    }
    drop(stack);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_binding_ends_the_stream_within_the_recheck_period() {
    let stack = stack_configured(None, None, |c| {
        c.review_cache_ttl = Duration::from_secs(1);
        c.limits.recheck = Duration::from_secs(1);
        c.limits.keepalive = Duration::from_millis(200);
    })
    .await;
    let (admin, addr) = (stack.admin.clone(), stack.console);
    bind_carol_to_hardware(&admin).await;
    create_hardware(&admin, "a", "m1", "02:00:00:00:00:01").await;
    // The console knows namespace a only once its watch delivered m1: until then carol may list
    // Hardware in no namespace it has seen (403). Wait for it as a browser would see it.
    within("m1 in the cache", async {
        while !get(addr, "/", "kube-lite").await.body.contains("m/a/m1") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let mut carol = open(addr, "/live/machines", "carol-token")
        .await
        .expect("carol's stream");
    touch(&admin, "a", "m1", "one").await;
    assert!(
        carol
            .read_until("carol's first update", |s| s.contains("\"m/a/m1\""))
            .await,
        "{}",
        carol.seen
    );
    // Past a few rechecks, still allowed: the stream goes on.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    touch(&admin, "a", "m1", "two").await;
    let before = carol.seen.matches("\"m/a/m1\"").count();
    assert!(
        carol
            .read_until("carol's second update", |s| s.matches("\"m/a/m1\"").count()
                > before)
            .await,
        "{}",
        carol.seen
    );
    assert!(!carol.seen.contains("event: resync"), "{}", carol.seen);

    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .delete("carol-reads-hardware", &DeleteParams::default())
        .await
        .expect("delete the binding");
    let revoked = tokio::time::Instant::now();
    // The stream ends with a resync (the page reloads and is refused) ...
    let ended = tokio::time::timeout(
        Duration::from_secs(15),
        carol.read_until("the end of carol's stream", |_| false),
    )
    .await;
    assert!(
        ended.is_ok(),
        "the stream went on after the binding was deleted: {}",
        carol.seen
    );
    assert!(carol.ended);
    assert!(
        carol.seen.trim_end().ends_with("event: resync\ndata: {}"),
        "{}",
        carol.seen
    );
    // ... within the recheck period plus the review cache (and some slack for a busy machine).
    assert!(revoked.elapsed() < Duration::from_secs(10));
    assert_eq!(stack.metrics.sse_revoked.get(), 1);
    assert_eq!(
        open(addr, "/live/machines", "carol-token")
            .await
            .err()
            .map(|e| e.0),
        Some(403)
    );
    drop(stack);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_gets_429_beyond_their_stream_cap_while_others_still_connect() {
    let stack = stack_configured(None, None, |c| {
        c.sse_max_clients = 3;
        c.sse_max_clients_per_user = 2;
        c.limits.keepalive = Duration::from_millis(200);
    })
    .await;
    let addr = stack.console;
    let mut alice = Vec::new();
    for _ in 0..2 {
        alice.push(
            open(addr, "/live/workflows?ns=a", "alice-token")
                .await
                .expect("alice's stream"),
        );
    }
    let (status, body) = open(addr, "/live/workflows?ns=a", "alice-token")
        .await
        .err()
        .expect("the third stream is refused");
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--sse-max-clients-per-user"), "{body}");
    assert!(body.contains("alice"), "{body}");
    assert_eq!(stack.metrics.sse_refused_of("user"), 1);
    // Another user still connects.
    let admin1 = open(addr, "/live/workflows", "kube-lite")
        .await
        .expect("another user's stream");
    // The console's own cap (3) is reached now: the admin's second, within the admin's own
    // cap, gets 429 naming the console's flag.
    let (status, body) = open(addr, "/live/workflows", "kube-lite")
        .await
        .err()
        .expect("over the total");
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("(--sse-max-clients)"), "{body}");
    assert_eq!(stack.metrics.sse_refused_of("total"), 1);
    assert_eq!(stack.metrics.sse_refused_of("user"), 1);
    drop(admin1);
    // A closed stream frees its slot (noticed at the next keep-alive).
    drop(alice.pop());
    within("alice's slot to be freed", async {
        loop {
            match open(addr, "/live/workflows?ns=a", "alice-token").await {
                Ok(s) => break s,
                Err((429, _)) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("{e:?}"),
            }
        }
    })
    .await;
    drop(stack);
}

#[test]
fn a_plaintext_server_url_without_insecure_stops_the_console_at_start() {
    let exe = env!("CARGO_BIN_EXE_tink-console");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(exe)
            .args(args)
            .env_remove("TINK_CONSOLE_INSECURE")
            .env_remove("TINK_CONSOLE_SERVER_TLS_CA")
            .env_remove("TINK_CONSOLE_SERVER_URL")
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("TINK_CONSOLE_LISTEN", "127.0.0.1:0")
            .env("TINK_ADMIN_ADDR", "127.0.0.1:0")
            .output()
            .expect("run tink-console");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&["--server-url", "http://127.0.0.1:42113"]);
    assert!(!ok);
    assert!(
        err.contains("plaintext") && err.contains("--insecure"),
        "{err}"
    );
    let (ok, err) = run(&["--server-url", "127.0.0.1:42113"]);
    assert!(!ok);
    assert!(
        err.contains("--server-tls-ca") && err.contains("--insecure"),
        "{err}"
    );
    // With --insecure the check passes: it stops later, at the (missing) kubeconfig.
    let (ok, err) = run(&["--server-url", "http://127.0.0.1:42113", "--insecure"]);
    assert!(!ok);
    assert!(!err.contains("--insecure ("), "{err}");
    assert!(err.contains("Kubernetes"), "{err}");
}
