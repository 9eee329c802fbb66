//! Rejection and back-off, every supervision timeout, and a Workflow created before its
//! Template. Timeouts are configured short; the tests wait for states, never for times.

mod common;

use std::time::Duration;

use common::*;
use kube::ResourceExt as _;
use pretty_assertions::assert_eq;
use serde_json::json;
use tink_api::v1alpha2::{ActionState, ConditionStatus, ConditionType, WorkflowState};
use tink_controller::FINALIZER;

const MAC: &str = "aa:bb:cc:00:00:02";

fn released(w: &tink_api::v1alpha2::Workflow) -> bool {
    !w.finalizers().iter().any(|f| f == FINALIZER)
}

fn failure_reason(w: &tink_api::v1alpha2::Workflow) -> Option<String> {
    w.status
        .as_ref()?
        .condition(ConditionType::Succeeded)?
        .reason
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_workflow_goes_back_to_pending_and_is_dispatched_again() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;

    let (first, _) = agent.next_start().await;
    agent.rejected(&first).await;
    stack.wait_event("wf1", "Rejected").await;
    // Dispatched again after the back-off, under a new dispatch id.
    let (second, actions) = agent.next_start().await;
    assert_ne!(first, second);
    assert!(second.ends_with("/2"), "{second}");
    // A late event of the first attempt is stale and changes nothing.
    agent.started(&first, &actions[0]).await;
    agent.run_all(&second, &actions).await;
    let w = stack
        .wait_for("wf1", "Succeeded", |w| {
            state_of(w) == WorkflowState::Succeeded && released(w)
        })
        .await;
    let status = w.status.expect("status");
    assert_eq!(status.dispatch_attempts, 2);
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_not_started_in_time_fails() {
    let stack = Stack::start().await;
    let mut config = stack.config("c0");
    config.workflow.scheduled_timeout = Duration::from_secs(1);
    let controller = stack.controller(config).await;
    controller.wait_leading().await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, _) = agent.next_start().await;
    // The agent read the command but never confirmed it (its connection died right then).
    let w = stack
        .wait_for("wf1", "Failed", |w| {
            state_of(w) == WorkflowState::Failed && released(w)
        })
        .await;
    assert_eq!(failure_reason(&w).as_deref(), Some("ScheduledTimeout"));
    // The server hands the unconfirmed start back and ends the stream; the controller
    // withdrew that start when it gave up, so the agent's next stream carries only the stop:
    // a failed workflow's actions never run.
    let mut agent = stack.agent_restarted(agent, "").await;
    match agent.next_command().await {
        Command::Stop {
            workflow_id,
            reason,
        } => {
            assert_eq!(workflow_id, id);
            assert_eq!(reason.as_deref(), Some("ScheduledTimeout"));
        }
        other => panic!("expected a stop, got {other:?}"),
    }
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_over_its_timeout_fails() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent(MAC).await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({"timeout": "2s"}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.started(&id, &actions[0]).await;
    let w = stack
        .wait_for("wf1", "Failed", |w| {
            state_of(w) == WorkflowState::Failed && released(w)
        })
        .await;
    assert_eq!(failure_reason(&w).as_deref(), Some("WorkflowTimeout"));
    let status = w.status.expect("status");
    assert_eq!(status.actions[0].state, ActionState::Canceled);
    match agent.next_command().await {
        Command::Stop { reason, .. } => assert_eq!(reason.as_deref(), Some("WorkflowTimeout")),
        other => panic!("expected a stop, got {other:?}"),
    }
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_over_its_timeout_fails_the_workflow() {
    let stack = Stack::start().await;
    let mut config = stack.config("c0");
    config.workflow.action_timeout_grace = Duration::from_secs(1);
    let controller = stack.controller(config).await;
    controller.wait_leading().await;
    stack.create_hardware("m1", MAC).await;
    stack
        .create_template(
            "slow",
            json!([
                {"name": "quick", "image": "busybox"},
                {"name": "hangs", "image": "busybox", "timeout": "1s"},
            ]),
        )
        .await;
    let mut agent = stack.agent(MAC).await;
    stack.create_workflow("wf1", "m1", "slow", json!({})).await;
    let (id, actions) = agent.next_start().await;
    agent.run_all(&id, &actions[..1]).await;
    agent.started(&id, &actions[1]).await;
    // The agent never reports the end of the second action.
    let w = stack
        .wait_for("wf1", "Failed", |w| {
            state_of(w) == WorkflowState::Failed && released(w)
        })
        .await;
    assert_eq!(failure_reason(&w).as_deref(), Some("ActionTimeout"));
    let status = w.status.expect("status");
    assert_eq!(status.actions[1].state, ActionState::Failed);
    assert_eq!(
        status.actions[1].failure_reason.as_deref(),
        Some("ActionTimeout")
    );
    match agent.next_command().await {
        Command::Stop { reason, .. } => assert_eq!(reason.as_deref(), Some("ActionTimeout")),
        other => panic!("expected a stop, got {other:?}"),
    }
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_cancellation_is_forced_after_its_timeout() {
    let stack = Stack::start().await;
    let mut config = stack.config("c0");
    config.workflow.cancelling_timeout = Duration::from_secs(1);
    let controller = stack.controller(config).await;
    controller.wait_leading().await;
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
    match agent.next_command().await {
        Command::Stop { workflow_id, .. } => assert_eq!(workflow_id, id),
        other => panic!("expected a stop, got {other:?}"),
    }
    // The agent never confirms.
    stack.wait_gone("wf1").await;
    let e = stack.wait_event("wf1", "CancelTimeout").await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_created_before_its_template_proceeds_when_it_appears() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_workflow("wf1", "m1", "late", json!({})).await;
    let w = stack
        .wait_for("wf1", "waiting for the Template", |w| {
            w.status
                .as_ref()
                .and_then(|s| s.condition(ConditionType::TemplateRendered))
                .is_some_and(|c| c.reason.as_deref() == Some("TemplateNotFound"))
        })
        .await;
    assert_eq!(state_of(&w), WorkflowState::Pending);
    stack.create_template("late", three_actions()).await;
    stack
        .wait_for("wf1", "waiting for the Hardware", |w| {
            w.status
                .as_ref()
                .and_then(|s| s.condition(ConditionType::TemplateRendered))
                .is_some_and(|c| c.reason.as_deref() == Some("HardwareNotFound"))
        })
        .await;
    stack.create_hardware("m1", MAC).await;
    // The machine connects once its Hardware admits it.
    let mut agent = stack.agent(MAC).await;
    let (id, actions) = agent.next_start().await;
    agent.run_all(&id, &actions).await;
    let w = stack.wait_state("wf1", WorkflowState::Succeeded).await;
    let rendered = w
        .status
        .as_ref()
        .and_then(|s| s.condition(ConditionType::TemplateRendered))
        .map(|c| c.status);
    assert_eq!(rendered, Some(ConditionStatus::True));
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_does_not_render_fails_the_workflow() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack
        .create_template(
            "broken",
            json!([{"name": "a", "image": "{{ .no_such_key }}"}]),
        )
        .await;
    stack
        .create_workflow("wf1", "m1", "broken", json!({}))
        .await;
    let w = stack.wait_state("wf1", WorkflowState::Failed).await;
    let c = w
        .status
        .as_ref()
        .and_then(|s| s.condition(ConditionType::TemplateRendered))
        .cloned()
        .expect("TemplateRendered condition");
    assert_eq!(c.status, ConditionStatus::False);
    let message = c.message.unwrap_or_default();
    assert!(message.contains("spec.actions[0].image"), "{message}");
    assert!(message.contains("no_such_key"), "{message}");
    controller.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_machine_runs_its_workflows_one_at_a_time_oldest_first() {
    let stack = Stack::start().await;
    let controller = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    stack
        .create_workflow("first", "m1", "ubuntu", json!({}))
        .await;
    stack
        .wait_for("first", "prepared", |w| {
            w.status.as_ref().is_some_and(|s| !s.actions.is_empty())
        })
        .await;
    // Creation timestamps have whole-second resolution: make the order unambiguous.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    stack
        .create_workflow("second", "m1", "ubuntu", json!({}))
        .await;
    stack
        .wait_for("second", "prepared", |w| {
            w.status.as_ref().is_some_and(|s| !s.actions.is_empty())
        })
        .await;
    let mut agent = stack.agent(MAC).await;
    let (id, actions) = agent.next_start().await;
    assert!(id.starts_with("tink/first/"), "{id}");
    // Nothing else while the first runs.
    assert!(
        agent
            .try_command(Duration::from_millis(500))
            .await
            .is_none()
    );
    agent.run_all(&id, &actions).await;
    let (id2, actions2) = agent.next_start().await;
    assert!(id2.starts_with("tink/second/"), "{id2}");
    agent.run_all(&id2, &actions2).await;
    stack.wait_state("second", WorkflowState::Succeeded).await;
    controller.stop().await;
    stack.stop().await;
}
