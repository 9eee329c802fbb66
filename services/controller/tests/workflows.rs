//! Workflows end to end: kube-lite with the generated CRDs, real NATS, the real tink-server,
//! the controller in process, agents simulated over the server's gRPC API.

mod common;

use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;
use tink_api::v1alpha2::{
    ActionState, ConditionSeverity, ConditionStatus, ConditionType, WorkflowState,
};
use tink_controller::FINALIZER;

const MAC: &str = "aa:bb:cc:00:00:01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_runs_to_success() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;

    let (id, actions) = match agent.next_command().await {
        Command::Start {
            workflow_id,
            actions,
            trace_context,
        } => {
            // Rendered with the Hardware and templateData.
            assert_eq!(actions.len(), 3);
            assert_eq!(actions[0].env["DEST_DISK"], "/dev/nvme0n1");
            assert_eq!(actions[0].env["URL"], "http://10.0.0.1:8080/img");
            assert_eq!(actions[1].args, vec!["/dev/nvme0n1p1"]);
            // The command carries the workflow's trace: the trace id is the uid.
            let w = stack.workflows().get("wf1").await.expect("get");
            let uid = w.metadata.uid.clone().expect("uid").replace('-', "");
            let tp = trace_context.get("traceparent").expect("a traceparent");
            assert!(tp.contains(&uid), "{tp} should carry trace id {uid}");
            (
                workflow_id,
                actions.into_iter().map(|a| a.id).collect::<Vec<_>>(),
            )
        }
        other => panic!("expected a start, got {other:?}"),
    };
    let w = stack.wait_state("wf1", WorkflowState::Scheduled).await;
    assert!(w.finalizers().iter().any(|f| f == FINALIZER));
    let status = w.status.expect("status");
    assert_eq!(status.dispatch_id.as_deref(), Some(id.as_str()));
    assert_eq!(status.agent_id.as_deref(), Some(MAC));

    agent.started(&id, &actions[0]).await;
    let w = stack.wait_state("wf1", WorkflowState::Running).await;
    assert!(
        w.status
            .as_ref()
            .and_then(|s| s.started_at.as_ref())
            .is_some()
    );
    agent.succeeded(&id, &actions[0]).await;
    agent.run_all(&id, &actions[1..]).await;

    let w = stack
        .wait_for("wf1", "Succeeded and released", |w| {
            state_of(w) == WorkflowState::Succeeded
                && !w.finalizers().iter().any(|f| f == FINALIZER)
        })
        .await;
    let status = w.status.expect("status");
    assert!(
        status
            .actions
            .iter()
            .all(|a| a.state == ActionState::Succeeded)
    );
    let succeeded = status
        .condition(ConditionType::Succeeded)
        .expect("Succeeded condition");
    assert_eq!(succeeded.status, ConditionStatus::True);
    assert_eq!(succeeded.severity, ConditionSeverity::Info);
    let started = status
        .condition(ConditionType::Started)
        .expect("Started condition");
    assert_eq!(started.status, ConditionStatus::True);
    // kubectl describe tells the story.
    for reason in ["Prepared", "Scheduled", "Running", "Succeeded"] {
        stack.wait_event("wf1", reason).await;
    }
    assert!(controller.metrics.writes("status") >= 2);
    controller.stop().await;
    stack.stop().await;
}

use kube::ResourceExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_failure_fails_the_workflow_with_its_reason() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.run_all(&id, &actions[..1]).await;
    agent.started(&id, &actions[1]).await;
    agent
        .failed(&id, &actions[1], "DiskNotFound", "no disk at /dev/nvme0n1")
        .await;

    let w = stack
        .wait_for("wf1", "Failed and released", |w| {
            state_of(w) == WorkflowState::Failed && !w.finalizers().iter().any(|f| f == FINALIZER)
        })
        .await;
    let status = w.status.expect("status");
    let states: Vec<ActionState> = status.actions.iter().map(|a| a.state).collect();
    assert_eq!(
        states,
        vec![
            ActionState::Succeeded,
            ActionState::Failed,
            ActionState::Canceled
        ]
    );
    assert_eq!(
        status.actions[1].failure_reason.as_deref(),
        Some("DiskNotFound")
    );
    let c = status
        .condition(ConditionType::Succeeded)
        .expect("Succeeded condition");
    assert_eq!(c.status, ConditionStatus::False);
    assert_eq!(c.severity, ConditionSeverity::Error);
    assert_eq!(c.reason.as_deref(), Some("DiskNotFound"));
    assert_eq!(c.message.as_deref(), Some("no disk at /dev/nvme0n1"));
    stack.wait_event("wf1", "ActionFailed").await;
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pending_workflow_cancels_it() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    // No agent is connected: the Workflow is prepared and stays Pending.
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    stack
        .wait_for("wf1", "prepared with the finalizer", |w| {
            state_of(w) == WorkflowState::Pending
                && w.status.as_ref().is_some_and(|s| s.actions.len() == 3)
                && w.finalizers().iter().any(|f| f == FINALIZER)
        })
        .await;
    stack.delete_workflow("wf1").await;
    stack.wait_gone("wf1").await;
    let e = stack.wait_event("wf1", "Canceled").await;
    assert!(
        e.note
            .unwrap_or_default()
            .contains("before it was dispatched")
    );
    // The agent that connects afterwards gets nothing.
    let mut agent = stack.agent(MAC).await;
    assert!(
        agent
            .try_command(std::time::Duration::from_millis(500))
            .await
            .is_none()
    );
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_workflow_stops_the_agent_then_cancels() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.started(&id, &actions[0]).await;
    stack.wait_state("wf1", WorkflowState::Running).await;

    stack.delete_workflow("wf1").await;
    stack.wait_state("wf1", WorkflowState::Cancelling).await;
    match agent.next_command().await {
        Command::Stop {
            workflow_id,
            reason,
        } => {
            assert_eq!(workflow_id, id);
            assert_eq!(reason.as_deref(), Some("Deleted"));
        }
        other => panic!("expected a stop, got {other:?}"),
    }
    agent.canceled(&id, Some(&actions[0])).await;
    stack.wait_gone("wf1").await;
    let e = stack.wait_event("wf1", "Canceled").await;
    assert!(e.note.unwrap_or_default().contains("stopped the workflow"));
    controller.stop().await;
    stack.stop().await;
}
