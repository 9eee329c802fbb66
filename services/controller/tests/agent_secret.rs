//! Per-machine pre-shared secrets from the controller's side, against the real parts (kube-lite,
//! NATS, tink-server, agents over gRPC): a Hardware annotated with `tinkerbell.org/agent-secret`
//! makes the servers require its Secret's value from the machine's agent; a missing Secret
//! refuses the machine and says why on the Hardware; a rotated Secret and a removed annotation
//! are picked up.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tink_api::v1alpha2::Hardware;
use tink_controller::agent_secrets::{AGENT_SECRET_ANNOTATION, secret_hash};
use tink_proto::workflow::v2::GetWorkflowsRequest;
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;

const MAC: &str = "aa:bb:cc:00:00:09";

/// Opens a stream for the machine, presenting `secret`; the gRPC status code.
async fn open(stack: &Stack, secret: Option<&str>) -> Result<(), tonic::Status> {
    let mut client = WorkflowServiceClient::connect(format!("http://{}", stack.server_addr))
        .await
        .expect("connects");
    let mut request = tonic::Request::new(GetWorkflowsRequest {
        agent_id: MAC.to_string(),
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

async fn bucket_value(stack: &Stack) -> Option<String> {
    let js = stack.jetstream_as("tink-controller").await;
    let bucket = js
        .get_key_value(tink_bus::AGENT_SECRETS_BUCKET)
        .await
        .expect("bucket");
    bucket
        .get(tink_bus::agent_token(MAC).expect("token"))
        .await
        .expect("get")
        .map(|v| String::from_utf8_lossy(&v).to_string())
}

async fn wait_bucket(stack: &Stack, what: &str, want: Option<String>) {
    within(what, async {
        while bucket_value(stack).await != want {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

fn secret(name: &str, value: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "stringData": {"secret": value},
    }))
    .expect("secret")
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
    open(&stack, None)
        .await
        .expect("no secret is needed before the annotation");

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

    // The Secret appears (picked up by the sweep): only its value admits the machine.
    secrets
        .create(&PostParams::default(), &secret("m9-agent", "first-value\n"))
        .await
        .expect("create secret");
    wait_bucket(
        &stack,
        "the secret's hash",
        Some(secret_hash("first-value")),
    )
    .await;
    let e = open(&stack, Some("wrong"))
        .await
        .expect_err("a wrong secret");
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    within("the machine to be admitted with its secret", async {
        while open(&stack, Some("first-value")).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // Rotated: the old value no longer works.
    secrets
        .patch(
            "m9-agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"secret": "second-value"}})),
        )
        .await
        .expect("rotate");
    wait_bucket(
        &stack,
        "the rotated hash",
        Some(secret_hash("second-value")),
    )
    .await;

    // The annotation removed: the entry goes, no secret needed.
    hardware
        .patch("m9", &PatchParams::default(), &annotate(None))
        .await
        .expect("remove annotation");
    wait_bucket(&stack, "the entry to be removed", None).await;
    within("the machine to be admitted without a secret", async {
        while open(&stack, None).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    c.stop().await;
    stack.stop().await;
}
