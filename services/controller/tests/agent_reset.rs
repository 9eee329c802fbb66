//! The operator's session reset through kubectl: annotating a Hardware with
//! `tinkerbell.org/agent-reset` ends its agent's session, so a re-installed machine (a new agent
//! without the old token) is admitted at once; the annotation is removed and an Event recorded.
//! Real parts: kube-lite, NATS, tink-server, agents over gRPC.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tink_api::v1alpha2::Hardware;
use tink_controller::agent_reset::AGENT_RESET_ANNOTATION;
use tink_proto::workflow::v2::GetWorkflowsRequest;
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;

const MAC: &str = "aa:bb:cc:00:00:07";

/// A GetWorkflows stream without a token, as a freshly installed machine's agent opens it.
async fn open_without_token(stack: &Stack) -> Result<(), tonic::Status> {
    let mut client = WorkflowServiceClient::connect(format!("http://{}", stack.server_addr))
        .await
        .expect("connects");
    client
        .get_workflows(GetWorkflowsRequest {
            agent_id: MAC.to_string(),
            instance_id: "reinstalled".to_string(),
        })
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reset_annotation_lets_a_reinstalled_machine_in() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m7", MAC).await;
    let old = stack.agent_instance(MAC, "before-reinstall").await;
    assert!(old.token.is_some(), "the first stream gets a session token");

    // While the old session lives, a stream without its token is refused.
    let refused = open_without_token(&stack)
        .await
        .expect_err("a second stream without the token is refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    let hardware: Api<Hardware> = Api::namespaced(stack.client.clone(), NS);
    hardware
        .patch(
            "m7",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {AGENT_RESET_ANNOTATION: "ticket-42"}}}),
            ),
        )
        .await
        .expect("annotate");

    // The controller removes the annotation once the session is ended.
    within("the annotation to be removed", async {
        loop {
            let hw = hardware.get("m7").await.expect("hardware");
            if !hw
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(AGENT_RESET_ANNOTATION))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // The re-installed machine's agent is admitted now, with a new token.
    let new = stack.agent_instance(MAC, "after-reinstall").await;
    assert!(new.token.is_some(), "a new session token is issued");
    assert_ne!(new.token, old.token);

    // The reset is recorded on the Hardware.
    let e = stack.wait_event("m7", "AgentSessionReset").await;
    assert_eq!(
        e.regarding.and_then(|r| r.kind).as_deref(),
        Some("Hardware")
    );
    assert!(
        e.note.as_deref().unwrap_or_default().contains(MAC),
        "{:?}",
        e.note
    );
    drop(old);
    c.stop().await;
    stack.stop().await;
}
