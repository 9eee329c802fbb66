//! The controller admits exactly the agent ids its Hardware name: a machine connects once its
//! Hardware exists, an id that no Hardware names is refused by the servers, and a deleted
//! Hardware's machine is refused again.

mod common;

use std::time::Duration;

use common::*;
use kube::api::{Api, DeleteParams};
use tink_api::v1alpha2::Hardware;
use tink_bus::proto::GetWorkflowsRequest;
use tink_bus::proto::workflow_service_client::WorkflowServiceClient;

const MAC: &str = "aa:bb:cc:00:00:61";
const OTHER: &str = "aa:bb:cc:00:00:62";

async fn admitted(stack: &Stack, agent: &str) -> Option<String> {
    let js = stack.jetstream_as("tink-controller").await;
    let bucket = js
        .get_key_value(tink_bus::ADMITTED_AGENTS_BUCKET)
        .await
        .ok()?;
    let entry = bucket
        .entry(tink_bus::agent_token(agent).ok()?)
        .await
        .ok()??;
    (entry.operation == async_nats::jetstream::kv::Operation::Put)
        .then(|| String::from_utf8_lossy(&entry.value).into_owned())
}

async fn refused(stack: &Stack, agent: &str) -> tonic::Status {
    let mut client = WorkflowServiceClient::connect(format!("http://{}", stack.server_addr))
        .await
        .expect("connects");
    client
        .get_workflows(GetWorkflowsRequest {
            agent_id: agent.into(),
            ..Default::default()
        })
        .await
        .expect_err("refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_are_admitted_while_a_hardware_names_them() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    let status = refused(&stack, MAC).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("not admitted"), "{status:?}");

    stack.create_hardware("m1", MAC).await;
    within("the machine to be admitted", async {
        while admitted(&stack, MAC).await.is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(admitted(&stack, MAC).await.as_deref(), Some("tink/m1"));
    let agent = stack.agent(MAC).await;
    assert_eq!(
        refused(&stack, OTHER).await.code(),
        tonic::Code::PermissionDenied,
        "an id no Hardware names"
    );
    drop(agent);

    Api::<Hardware>::namespaced(stack.client.clone(), "tink")
        .delete("m1", &DeleteParams::default())
        .await
        .expect("delete");
    within("the machine's admission to end", async {
        while admitted(&stack, MAC).await.is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    within("the servers to refuse it", async {
        while refused_or_admitted(&stack).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    controller.stop().await;
    stack.stop().await;
}

/// Whether a new stream of MAC is still admitted (true) rather than refused as not admitted.
async fn refused_or_admitted(stack: &Stack) -> bool {
    let mut client =
        match WorkflowServiceClient::connect(format!("http://{}", stack.server_addr)).await {
            Ok(c) => c,
            Err(_) => return true,
        };
    match client
        .get_workflows(GetWorkflowsRequest {
            agent_id: MAC.into(),
            ..Default::default()
        })
        .await
    {
        Err(s) => {
            !(s.code() == tonic::Code::PermissionDenied && s.message().contains("not admitted"))
        }
        Ok(_) => true,
    }
}
