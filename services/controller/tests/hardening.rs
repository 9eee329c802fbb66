//! Execution hardening against the real parts (kube-lite, NATS, tink-server, simulated agents
//! over gRPC): a controller outage longer than every de-duplication window never re-runs a
//! dispatch, a start never forwarded is withdrawn on deletion and one forwarded unconfirmed is
//! stopped, a restarted agent and a lost agent are states with a reason.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tink_api::v1alpha2::{Workflow, WorkflowState};

const MAC: &str = "aa:bb:cc:00:00:01";

fn failure_reason(w: &Workflow) -> Option<String> {
    w.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == tink_api::v1alpha2::ConditionType::Succeeded)?
        .reason
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_duplicate_window_never_runs_a_dispatch_twice() {
    let stack = Stack::start().await;
    let c0 = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    // The leader dies right after Scheduled was written and the start published.
    c0.kill().await;
    // The machine runs the whole workflow while no controller runs.
    agent.received(&id).await;
    agent.run_all(&id, &actions).await;
    // The outage outlasts the bus's duplicate window (3 s here) and the scheduled timeout of
    // the next controller.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut config = stack.config("c1");
    config.workflow.scheduled_timeout = Duration::from_secs(1);
    let c1 = stack.controller(config).await;
    c1.wait_leading().await;
    let w = stack.wait_state("wf1", WorkflowState::Succeeded).await;
    assert!(
        w.status.as_ref().is_some_and(|s| s.dispatch_attempts == 1),
        "{:?}",
        w.status
    );
    // The agent saw the dispatch exactly once.
    assert!(
        agent.try_command(Duration::from_secs(3)).await.is_none(),
        "a second command reached the agent"
    );
    assert_eq!(
        c1.metrics
            .resumed_starts
            .get_or_create(&tink_controller::Label {
                value: "republished".into()
            })
            .get(),
        0
    );
    c1.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_lost_before_its_publish_is_published_after_a_restart() {
    // The leader wrote Scheduled and died before the start reached the bus: that start is
    // provably gone (not queued, never received), so the next leader publishes it.
    let stack = Stack::start().await;
    let c0 = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, _) = agent.next_start().await;
    c0.kill().await;
    // Simulate "never published": the agent drops the stream without confirming and the
    // command is removed from the queue, as if it had never been stored.
    let token = agent.token.clone();
    drop(agent);
    let js = stack.jetstream_as("tink-controller").await;
    let dispatch = js.get_stream(tink_bus::DISPATCH_STREAM).await.unwrap();
    let msg_id = format!("{id}/start");
    within("the start to be back in the queue", async {
        loop {
            if let Ok(Some(seq)) = tink_bus::queued_command(&dispatch, MAC, &msg_id).await {
                dispatch.delete_message(seq).await.unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // After the duplicate window, so JetStream would not silently drop the republish.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let c1 = stack.leader("c1").await;
    // The same agent process again, with its session token (as the real agent keeps it).
    let mut agent = Agent::connect_with(stack.server_addr, MAC, "i-1", token).await;
    let (again, actions) = agent.next_start().await;
    assert_eq!(again, id, "the same dispatch, published once more");
    agent.received(&id).await;
    agent.run_all(&id, &actions).await;
    stack.wait_state("wf1", WorkflowState::Succeeded).await;
    c1.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_workflow_whose_start_was_never_forwarded_withdraws_it() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    // An earlier command the agent never confirms holds its queue (one command in flight at a
    // time), so wf1's start waits behind it, never forwarded; then the agent goes away.
    let controller_js = stack.jetstream_as("tink-controller").await;
    let earlier = tink_bus::proto::GetWorkflowsResponse {
        cmd: Some(tink_bus::proto::get_workflows_response::Cmd::StopWorkflow(
            tink_bus::proto::get_workflows_response::StopWorkflow {
                workflow_id: "other/earlier-1".into(),
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    tink_bus::publish_command(
        &controller_js,
        MAC,
        &earlier,
        "other/earlier-1/stop",
        &opentelemetry::Context::new(),
    )
    .await
    .expect("published");
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    match agent.try_command(Duration::from_secs(10)).await {
        Some(Command::Stop { workflow_id, .. }) => assert_eq!(workflow_id, "other/earlier-1"),
        other => panic!("expected the earlier command, got {other:?}"),
    }
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    stack
        .wait_for("wf1", "Scheduled", |w| {
            state_of(w) == WorkflowState::Scheduled
        })
        .await;
    drop(agent);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.delete_workflow("wf1").await;
    stack.wait_gone("wf1").await;
    let event = stack.wait_event("wf1", "Canceled").await;
    assert!(
        event.note.as_deref().unwrap_or("").contains("withdrawn"),
        "{:?}",
        event.note
    );
    // The agent comes back: the unconfirmed earlier command again, then nothing: neither
    // wf1's start nor a stop.
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    match agent.try_command(Duration::from_secs(10)).await {
        Some(Command::Stop { workflow_id, .. }) => assert_eq!(workflow_id, "other/earlier-1"),
        other => panic!("expected the earlier command again, got {other:?}"),
    }
    agent.canceled("other/earlier-1", None).await;
    let cmd = agent.try_command(Duration::from_secs(3)).await;
    assert!(cmd.is_none(), "a command reached the agent: {cmd:?}");
    c.stop().await;
    stack.stop().await;
}

/// A start forwarded into an agent's stream but never confirmed may have reached the agent
/// (the connection died after the bytes left): deleting its Workflow stops it like a delivered
/// one instead of withdrawing it, and the agent, back, gets the stop and never the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_workflow_whose_start_was_forwarded_unconfirmed_stops_it() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    // The start reaches the agent, which goes away before confirming it.
    let (id, _) = agent.next_start().await;
    drop(agent);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.delete_workflow("wf1").await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    match agent.try_command(Duration::from_secs(10)).await {
        Some(Command::Stop { workflow_id, .. }) => assert_eq!(workflow_id, id),
        other => panic!("expected the stop of {id}, got {other:?}"),
    }
    agent.canceled(&id, None).await;
    stack.wait_gone("wf1").await;
    let event = stack.wait_event("wf1", "Canceled").await;
    assert!(
        !event.note.as_deref().unwrap_or("").contains("withdrawn"),
        "{:?}",
        event.note
    );
    let cmd = agent.try_command(Duration::from_secs(3)).await;
    assert!(cmd.is_none(), "another command reached the agent: {cmd:?}");
    c.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restarted_mid_action_fails_the_workflow() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.received(&id).await;
    agent.started(&id, &actions[0]).await;
    stack.wait_state("wf1", WorkflowState::Running).await;
    // The machine reboots mid-action: a new agent process connects (with the session token
    // the old one kept on disk, as the real agent does).
    let mut agent = stack.agent_restarted(agent, "i-2").await;
    let w = stack
        .wait_for("wf1", "Failed", |w| state_of(w) == WorkflowState::Failed)
        .await;
    assert_eq!(failure_reason(&w).as_deref(), Some("AgentRestarted"));
    let status = w.status.expect("status");
    assert_eq!(
        status.actions[0].failure_reason.as_deref(),
        Some("AgentRestarted")
    );
    // The new process is never handed the old dispatch.
    if let Some(cmd) = agent.try_command(Duration::from_secs(2)).await {
        assert!(matches!(cmd, Command::Stop { .. }), "{cmd:?}");
    }
    c.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_gone_too_long_is_lost() {
    let stack = Stack::start().await;
    let mut config = stack.config("c0");
    config.workflow.agent_lost_after = Duration::from_secs(2);
    let c = stack.controller(config).await;
    c.wait_leading().await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.received(&id).await;
    agent.started(&id, &actions[0]).await;
    stack.wait_state("wf1", WorkflowState::Running).await;
    drop(agent);
    let w = stack
        .wait_for("wf1", "Failed", |w| state_of(w) == WorkflowState::Failed)
        .await;
    assert_eq!(failure_reason(&w).as_deref(), Some("AgentLost"));
    c.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_of_the_same_agent_process_changes_nothing() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.received(&id).await;
    agent.started(&id, &actions[0]).await;
    stack.wait_state("wf1", WorkflowState::Running).await;
    // A network blip: the same process opens a new stream.
    let mut agent = stack.agent_restarted(agent, "i-1").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    agent.succeeded(&id, &actions[0]).await;
    for a in &actions[1..] {
        agent.started(&id, a).await;
        agent.succeeded(&id, a).await;
    }
    stack.wait_state("wf1", WorkflowState::Succeeded).await;
    c.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_render_that_cannot_be_stored_or_sent_fails_once_with_the_field() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    let _agent = stack.agent_instance(MAC, "i-1").await;
    // An image that renders empty.
    stack
        .create_template(
            "empty-image",
            json!([{"name": "stream", "image": "{{ if false }}busybox{{ end }}"}]),
        )
        .await;
    // Rendered env values that together exceed what a Workflow status may hold.
    let blob = r#"{{ repeat 200000 "x" }}"#;
    stack
        .create_template(
            "huge",
            json!([{"name": "stream", "image": "busybox", "env": {"A": blob, "B": blob, "C": blob}}]),
        )
        .await;
    stack
        .create_workflow("wf-empty", "m1", "empty-image", json!({}))
        .await;
    stack
        .create_workflow("wf-huge", "m1", "huge", json!({}))
        .await;
    for (name, field) in [
        ("wf-empty", "spec.actions[0].image"),
        ("wf-huge", "status.actions"),
    ] {
        let w = stack
            .wait_for(name, "Failed", |w| state_of(w) == WorkflowState::Failed)
            .await;
        assert_eq!(failure_reason(&w).as_deref(), Some("RenderFailed"));
        let message = w
            .status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == tink_api::v1alpha2::ConditionType::Succeeded)
            })
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        assert!(message.starts_with(field), "{name}: {message}");
    }
    // No requeue loop: a few writes, then quiet.
    let writes = c.metrics.writes("status");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.metrics.writes("status"), writes, "status writes went on");
    c.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_from_another_agent_is_refused_and_reported() {
    let stack = Stack::start().await;
    let c = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    stack
        .create_workflow("wf1", "m1", "ubuntu", json!({}))
        .await;
    let (id, actions) = agent.next_start().await;
    agent.received(&id).await;
    agent.started(&id, &actions[0]).await;
    stack.wait_state("wf1", WorkflowState::Running).await;
    // Someone with access to the bus forges the end of the workflow, as another agent and as
    // none at all (only the servers' user may publish events).
    let js = stack.jetstream_as("tink-server").await;
    for claimed in ["aa:bb:cc:00:00:99", ""] {
        for a in &actions {
            let forged = tink_bus::proto::Event {
                workflow_id: id.clone(),
                agent_id: claimed.into(),
                event_id: uuid::Uuid::new_v4().to_string(),
                event: Some(tink_bus::proto::event::Event::ActionSucceeded(
                    tink_bus::proto::event::ActionSucceeded {
                        action_id: a.clone(),
                    },
                )),
                ..Default::default()
            };
            tink_bus::publish_event(&js, &forged, &opentelemetry::Context::new())
                .await
                .unwrap();
        }
    }
    let event = stack.wait_event("wf1", "ForeignEvent").await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or("")
            .contains("aa:bb:cc:00:00:99"),
        "{:?}",
        event.note
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = stack.wait_state("wf1", WorkflowState::Running).await;
    assert!(
        w.status
            .as_ref()
            .is_some_and(|s| s.actions.iter().skip(1).all(|a| a.started_at.is_none())),
        "the forged events changed the workflow: {:?}",
        w.status
    );
    c.stop().await;
    stack.stop().await;
}
