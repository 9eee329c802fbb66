//! `LogService.ReadLogs` against real parts: kube-lite with a token file and the RBAC objects of
//! deploy/rbac, a real nats-server, an in-process replica. Kubernetes RBAC decides who reads a
//! workflow's logs: the log-reader binding reads them in order, everyone else is refused with
//! the right code, a binding in one namespace does not reach another, and `follow` delivers
//! lines published after the call started; `since`, an unknown action and a missing workflow.

mod common;

use std::path::PathBuf;

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::Workflow;
use tink_bus::proto::log_service_client::LogServiceClient;
use tink_bus::proto::{LogBatch, LogLine, ReadLogsRequest, ReadLogsResponse, log_line};
use tink_server::ServerConfig;
use tink_testkit::nats::NatsServer;
use tonic::Code;
use tonic::transport::Channel;

const TOKENS: &str = "\
alice-token,alice,uid-alice
bob-token,bob,uid-bob,\"developers\"
";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Stack {
    kube: kube_lite::RunningServer,
    admin: kube::Client,
    _nats: NatsServer,
    js: async_nats::jetstream::Context,
    replica: Replica,
    _dir: tempfile::TempDir,
}

/// kube-lite (CRDs, namespaces `a` and `b`, the shipped ClusterRole, alice bound in `a`), NATS,
/// and a replica whose Kubernetes client is kube-lite's.
async fn stack() -> Stack {
    stack_with(|_| {}).await
}

/// [`stack`] with the replica's configuration adjusted by `adjust`.
async fn stack_with(adjust: impl FnOnce(&mut ServerConfig)) -> Stack {
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
    let text = std::fs::read_to_string(repo().join("deploy/crds/workflows.tinkerbell.org.yaml"))
        .expect("the Workflow CRD");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("CRD YAML");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("CRD");
    for ns in ["a", "b"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
    }
    // The ClusterRole operators bind, as shipped.
    let rbac = std::fs::read_to_string(repo().join("deploy/rbac/server.yaml")).expect("rbac");
    let reader = serde_yaml::Deserializer::from_str(&rbac)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .find(|v: &serde_json::Value| {
            v["kind"] == "ClusterRole" && v["metadata"]["name"] == "tink-workflow-log-reader"
        })
        .expect("deploy/rbac/server.yaml has the ClusterRole tink-workflow-log-reader");
    let reader: ClusterRole = serde_json::from_value(reader).expect("ClusterRole");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &reader)
        .await
        .expect("ClusterRole");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-reads-logs", "namespace": "a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tink-workflow-log-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "a")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");

    let nats = NatsServer::start().await.expect("nats");
    let mut config = ServerConfig::new(nats.url(), "server-logs");
    config.bus = bus_config();
    config.kube = Some(tink_server::KubeClient(admin.clone()));
    adjust(&mut config);
    let replica = Replica::start_config(config).await;
    let js = jetstream(&nats.url()).await;
    Stack {
        kube,
        admin,
        _nats: nats,
        js,
        replica,
        _dir: dir,
    }
}

/// Creates workflow `ns/name`, dispatched as `ns/name/1` with actions `wipe` and `image`.
async fn workflow(admin: &kube::Client, ns: &str, name: &str) -> String {
    let api: Api<Workflow> = Api::namespaced(admin.clone(), ns);
    let wf: Workflow = serde_json::from_value(json!({
        "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {"hardwareRef": {"name": "m1"}, "templateRef": {"name": "t1"}},
    }))
    .expect("workflow");
    api.create(&PostParams::default(), &wf)
        .await
        .expect("workflow created");
    let dispatch = format!("{ns}/{name}/1");
    set_state(admin, ns, name, &dispatch, "Running").await;
    dispatch
}

async fn set_state(admin: &kube::Client, ns: &str, name: &str, dispatch: &str, state: &str) {
    let api: Api<Workflow> = Api::namespaced(admin.clone(), ns);
    let status = json!({"status": {
        "state": state,
        "dispatchId": dispatch,
        "agentId": "aa:bb:cc:dd:ee:ff",
        "actions": [
            {"id": "0-wipe", "state": "Succeeded", "rendered": {"name": "wipe", "image": "busybox"}},
            {"id": "1-image", "state": "Running", "rendered": {"name": "image", "image": "busybox"}},
        ],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status written");
}

async fn publish(js: &async_nats::jetstream::Context, dispatch: &str, action: &str, seqs: &[u64]) {
    let batch = LogBatch {
        workflow_id: dispatch.into(),
        action_id: action.into(),
        agent_id: "aa:bb:cc:dd:ee:ff".into(),
        lines: seqs
            .iter()
            .map(|s| LogLine {
                sequence: *s,
                stream: log_line::Stream::Stdout as i32,
                text: format!("{action} line {s}"),
                ..Default::default()
            })
            .collect(),
        dropped_lines: 0,
    };
    tink_bus::publish_log_batch(js, &batch)
        .await
        .expect("batch stored");
}

async fn log_client(stack: &Stack) -> LogServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", stack.replica.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    LogServiceClient::new(channel)
}

fn request(
    token: Option<&str>,
    ns: &str,
    name: &str,
    follow: bool,
) -> tonic::Request<ReadLogsRequest> {
    let mut request = tonic::Request::new(ReadLogsRequest {
        namespace: ns.into(),
        name: name.into(),
        follow,
        ..Default::default()
    });
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii"),
        );
    }
    request
}

/// Every line of a non-following read, or its error.
async fn read_all(
    client: &mut LogServiceClient<Channel>,
    request: tonic::Request<ReadLogsRequest>,
) -> Result<Vec<ReadLogsResponse>, tonic::Status> {
    let mut stream = within("ReadLogs to answer", client.read_logs(request))
        .await?
        .into_inner();
    let mut lines = Vec::new();
    while let Some(line) = within("the next line", stream.message()).await? {
        lines.push(line);
    }
    Ok(lines)
}

fn texts(lines: &[ReadLogsResponse]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            format!(
                "[{}] {}",
                l.action_name,
                l.line.as_ref().map(|l| l.text.as_str()).unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test]
async fn kubernetes_rbac_decides_who_reads_a_workflows_logs() {
    let stack = stack().await;
    let a = workflow(&stack.admin, "a", "wf").await;
    let b = workflow(&stack.admin, "b", "wf").await;
    publish(&stack.js, &a, "0-wipe", &[1, 2]).await;
    publish(&stack.js, &a, "1-image", &[1]).await;
    // Resent after the duplicate window, re-cut: shown once.
    publish(&stack.js, &a, "1-image", &[1, 2]).await;
    publish(&stack.js, &b, "0-wipe", &[1]).await;
    let mut client = log_client(&stack).await;

    // Alice, bound to the log-reader ClusterRole in `a`, reads the lines in order.
    let lines = read_all(&mut client, request(Some("alice-token"), "a", "wf", false))
        .await
        .expect("alice reads a/wf");
    assert_eq!(
        texts(&lines),
        [
            "[wipe] 0-wipe line 1",
            "[wipe] 0-wipe line 2",
            "[image] 1-image line 1",
            "[image] 1-image line 2",
        ]
    );
    // One action by name.
    let mut only = request(Some("alice-token"), "a", "wf", false);
    only.get_mut().action = "image".into();
    let lines = read_all(&mut client, only).await.expect("one action");
    assert_eq!(
        texts(&lines),
        ["[image] 1-image line 1", "[image] 1-image line 2"]
    );

    // Bound in `a` only: `b` is refused, naming the permission.
    let status = read_all(&mut client, request(Some("alice-token"), "b", "wf", false))
        .await
        .expect_err("alice may not read b/wf");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("`get` on `workflows/log`")
            && status.message().contains("tinkerbell.org"),
        "{}",
        status.message()
    );

    // Bob is authenticated but has no binding.
    let status = read_all(&mut client, request(Some("bob-token"), "a", "wf", false))
        .await
        .expect_err("bob may not read");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("\"bob\""), "{}", status.message());

    // A token the API server does not know, and no token at all.
    let status = read_all(&mut client, request(Some("forged"), "a", "wf", false))
        .await
        .expect_err("a bad token is refused");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let status = read_all(&mut client, request(None, "a", "wf", false))
        .await
        .expect_err("no token is refused");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");

    // Once bound in `b` too (the cache keeps only positive answers), alice reads it.
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-reads-logs", "namespace": "b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tink-workflow-log-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(stack.admin.clone(), "b")
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding");
    let lines = read_all(&mut client, request(Some("alice-token"), "b", "wf", false))
        .await
        .expect("alice reads b/wf once bound");
    assert_eq!(texts(&lines), ["[wipe] 0-wipe line 1"]);

    let metrics = &stack.replica.metrics;
    assert_eq!(metrics.log_read_count("allowed"), 3);
    assert_eq!(metrics.log_read_count("denied"), 2);
    assert_eq!(metrics.log_read_count("unauthenticated"), 2);
    assert_eq!(metrics.log_lines_served.get(), 7);
    stack.replica.stop().await.expect("clean stop");
    stack.kube.shutdown().await;
}

#[tokio::test]
async fn follow_delivers_lines_published_after_the_call_until_the_workflow_ends() {
    let stack = stack().await;
    let a = workflow(&stack.admin, "a", "wf").await;
    publish(&stack.js, &a, "0-wipe", &[1]).await;
    let mut client = log_client(&stack).await;
    let mut stream = within(
        "ReadLogs to answer",
        client.read_logs(request(Some("alice-token"), "a", "wf", true)),
    )
    .await
    .expect("alice follows a/wf")
    .into_inner();
    let first = within("the stored line", stream.message())
        .await
        .expect("ok")
        .expect("a line");
    assert_eq!(texts(&[first]), ["[wipe] 0-wipe line 1"]);

    publish(&stack.js, &a, "1-image", &[1]).await;
    let live = within("the live line", stream.message())
        .await
        .expect("ok")
        .expect("a line");
    assert_eq!(texts(&[live]), ["[image] 1-image line 1"]);

    // The workflow ends: the stream ends too.
    set_state(&stack.admin, "a", "wf", &a, "Succeeded").await;
    let end = within("the stream to end", stream.message())
        .await
        .expect("ends cleanly");
    assert!(end.is_none(), "{end:?}");
    stack.replica.stop().await.expect("clean stop");
    stack.kube.shutdown().await;
}

#[tokio::test]
async fn readers_beyond_the_bound_are_refused_until_one_ends() {
    let stack = stack_with(|c| c.log_readers_max = 1).await;
    let a = workflow(&stack.admin, "a", "wf").await;
    publish(&stack.js, &a, "0-wipe", &[1]).await;
    let mut client = log_client(&stack).await;
    let mut follower = within(
        "ReadLogs to answer",
        client.read_logs(request(Some("alice-token"), "a", "wf", true)),
    )
    .await
    .expect("the first reader is served")
    .into_inner();
    within("the stored line", follower.message())
        .await
        .expect("ok")
        .expect("a line");
    // The one slot is taken: a second reader is refused at once, naming the flag.
    let refused = read_all(&mut client, request(Some("alice-token"), "a", "wf", false))
        .await
        .expect_err("a second reader is refused");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("--log-readers-max"),
        "{refused:?}"
    );
    // A caller without a valid token is refused as such: slots are taken after the checks.
    let bad = read_all(
        &mut client,
        request(Some("no-such-token"), "a", "wf", false),
    )
    .await
    .expect_err("a bad token");
    assert_eq!(bad.code(), tonic::Code::Unauthenticated, "{bad:?}");
    // The follower ends with its workflow, and its slot is free again.
    set_state(&stack.admin, "a", "wf", &a, "Succeeded").await;
    let end = within("the stream to end", follower.message())
        .await
        .expect("ends cleanly");
    assert!(end.is_none(), "{end:?}");
    within("a slot to free up", async {
        loop {
            match read_all(&mut client, request(Some("alice-token"), "a", "wf", false)).await {
                Ok(lines) => break lines,
                Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await
                }
                Err(e) => panic!("unexpected: {e:?}"),
            }
        }
    })
    .await;
    stack.replica.stop().await.expect("clean stop");
    stack.kube.shutdown().await;
}

#[tokio::test]
async fn without_kubernetes_access_log_reading_is_not_configured() {
    let nats = NatsServer::start().await.expect("nats");
    let replica = Replica::start_config(ServerConfig::new(nats.url(), "server-plain")).await;
    let channel = Channel::from_shared(format!("http://{}", replica.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    let mut client = LogServiceClient::new(channel);
    let status = read_all(&mut client, request(Some("alice-token"), "a", "wf", false))
        .await
        .expect_err("not configured");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("not configured"),
        "{}",
        status.message()
    );
    assert_eq!(replica.metrics.log_read_count("not_configured"), 1);
    replica.stop().await.expect("clean stop");
}

#[tokio::test]
async fn since_keeps_recent_lines_and_an_unknown_action_is_named() {
    let stack = stack().await;
    let a = workflow(&stack.admin, "a", "wf").await;
    publish(&stack.js, &a, "0-wipe", &[1]).await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    publish(&stack.js, &a, "1-image", &[1]).await;
    let mut client = log_client(&stack).await;

    let mut recent = request(Some("alice-token"), "a", "wf", false);
    recent.get_mut().since_seconds = 1;
    let lines = read_all(&mut client, recent).await.expect("recent lines");
    assert_eq!(texts(&lines), ["[image] 1-image line 1"]);

    let mut unknown = request(Some("alice-token"), "a", "wf", false);
    unknown.get_mut().action = "boot".into();
    let status = read_all(&mut client, unknown)
        .await
        .expect_err("no such action");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("\"boot\"") && status.message().contains("wipe, image"),
        "{}",
        status.message()
    );

    // A workflow that does not exist, for a reader allowed in the namespace.
    let status = read_all(
        &mut client,
        request(Some("alice-token"), "a", "gone", false),
    )
    .await
    .expect_err("no such workflow");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    stack.replica.stop().await.expect("clean stop");
    stack.kube.shutdown().await;
}

#[tokio::test]
async fn a_follower_whose_binding_is_removed_is_cut_off_at_the_next_check() {
    let stack = stack_with(|c| {
        c.log_reauthorize = std::time::Duration::from_millis(500);
        c.log_access_cache = std::time::Duration::from_millis(100);
    })
    .await;
    let a = workflow(&stack.admin, "a", "wf").await;
    publish(&stack.js, &a, "0-wipe", &[1]).await;
    let mut client = log_client(&stack).await;
    let mut stream = within(
        "ReadLogs to answer",
        client.read_logs(request(Some("alice-token"), "a", "wf", true)),
    )
    .await
    .expect("alice follows a/wf")
    .into_inner();
    let first = within("the stored line", stream.message())
        .await
        .expect("ok")
        .expect("a line");
    assert_eq!(texts(&[first]), ["[wipe] 0-wipe line 1"]);
    // Still bound after several checks: lines keep coming.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    publish(&stack.js, &a, "1-image", &[1]).await;
    let live = within("the live line", stream.message())
        .await
        .expect("ok")
        .expect("a line");
    assert_eq!(texts(&[live]), ["[image] 1-image line 1"]);

    // The binding goes: the stream ends with PERMISSION_DENIED, and a line published
    // afterwards never reaches alice.
    Api::<RoleBinding>::namespaced(stack.admin.clone(), "a")
        .delete("alice-reads-logs", &Default::default())
        .await
        .expect("binding removed");
    let status = match within("the stream to be cut off", stream.message()).await {
        Ok(Some(line)) => panic!("a line after the binding went: {line:?}"),
        Ok(None) => panic!("the stream ended without the refusal"),
        Err(status) => status,
    };
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    publish(&stack.js, &a, "1-image", &[2]).await;
    assert_eq!(stack.replica.metrics.log_read_count("revoked"), 1);
    stack.replica.stop().await.expect("clean stop");
    stack.kube.shutdown().await;
}

/// A refused token is refused again without asking the API server each time: a caller
/// repeating one bad token costs one TokenReview, not one per call.
#[tokio::test]
async fn a_refused_token_costs_one_token_review() {
    let stack = stack().await;
    workflow(&stack.admin, "a", "wf").await;
    let mut client = log_client(&stack).await;
    let reviews = |kube: &kube_lite::RunningServer| -> u64 {
        kube.request_counts()
            .iter()
            .filter(|(k, _)| k.resource == "tokenreviews")
            .map(|(_, n)| *n)
            .sum()
    };
    let before = reviews(&stack.kube);
    for _ in 0..20 {
        let status = read_all(
            &mut client,
            request(Some("stolen-or-expired"), "a", "wf", false),
        )
        .await
        .expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    }
    assert_eq!(reviews(&stack.kube) - before, 1);
    stack.replica.stop().await.expect("clean stop");
    stack.kube.shutdown().await;
}
