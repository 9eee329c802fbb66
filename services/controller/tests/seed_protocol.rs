//! Agents built from the seeds/004 protocol alone (no receipts, no session token, no agent id
//! in their events) finish workflows when the servers run with `--allow-unauthenticated-agents`:
//! success, a failure with its reason, first-in first-out order and cancellation, with the
//! agent's stream on one replica and its unary `PublishEvent` calls on another (the replicas
//! share where each dispatch went through NATS). Once, every such event was refused by the
//! controller (`OtherAgent`) and the Workflows stayed Scheduled until they timed out.

mod common;

use common::*;
use serde_json::json;
use tink_api::v1alpha2::{ActionState, WorkflowState};

const MAC: &str = "aa:bb:cc:00:00:51";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_protocol_agents_finish_workflows_across_two_replicas() {
    let stack = Stack::start_with_server(bus_config(), true).await;
    let other_replica = stack.add_server("server-1", true).await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = Agent::seed(stack.server_addr, other_replica, MAC).await;

    // Success.
    stack.create_workflow("ok", "m1", "ubuntu", json!({})).await;
    let (id, actions) = agent.next_start().await;
    agent.run_all(&id, &actions).await;
    let w = stack.wait_state("ok", WorkflowState::Succeeded).await;
    let status = w.status.expect("status");
    assert_eq!(status.agent_id.as_deref(), Some(MAC));
    assert!(
        status
            .actions
            .iter()
            .all(|a| a.state == ActionState::Succeeded)
    );

    // A failure, with its reason.
    stack
        .create_workflow("bad", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.started(&id, &actions[0]).await;
    agent
        .failed(&id, &actions[0], "DiskNotFound", "no disk at /dev/nvme0n1")
        .await;
    let w = stack.wait_state("bad", WorkflowState::Failed).await;
    assert_eq!(
        w.status.expect("status").actions[0]
            .failure_reason
            .as_deref(),
        Some("DiskNotFound")
    );

    // First in, first out: two Workflows created while the machine is busy run in creation
    // order (a second apart: creation timestamps have a resolution of one second).
    stack
        .create_workflow("busy", "m1", "ubuntu", json!({}))
        .await;
    let (busy, busy_actions) = agent.next_start().await;
    agent.started(&busy, &busy_actions[0]).await;
    stack
        .create_workflow("older", "m1", "ubuntu", json!({}))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    stack
        .create_workflow("newer", "m1", "ubuntu", json!({}))
        .await;
    stack.wait_state("newer", WorkflowState::Pending).await;
    agent.succeeded(&busy, &busy_actions[0]).await;
    agent.run_all(&busy, &busy_actions[1..]).await;
    stack.wait_state("busy", WorkflowState::Succeeded).await;
    for name in ["older", "newer"] {
        let (id, actions) = agent.next_start().await;
        assert!(id.contains(&format!("/{name}/")), "{name} next, got {id}");
        agent.run_all(&id, &actions).await;
        stack.wait_state(name, WorkflowState::Succeeded).await;
    }

    // Cancellation: the stop is confirmed by the agent's cancellation event.
    stack
        .create_workflow("stopped", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.started(&id, &actions[0]).await;
    stack.wait_state("stopped", WorkflowState::Running).await;
    stack.delete_workflow("stopped").await;
    match agent.next_command().await {
        Command::Stop { workflow_id, .. } => assert_eq!(workflow_id, id),
        other => panic!("expected a stop, got {other:?}"),
    }
    agent.canceled(&id, Some(&actions[0])).await;
    stack.wait_gone("stopped").await;
    stack.wait_event("stopped", "Canceled").await;

    controller.stop().await;
    stack.stop().await;
}
