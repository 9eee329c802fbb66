//! Two replicas: only the leader works; when it is killed mid-run the standby takes over and
//! finishes every Workflow, none lost and none dispatched twice (events wait in JetStream).

mod common;

use std::time::Duration;

use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;
use tink_api::v1alpha2::WorkflowState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_finishes_every_workflow_when_the_leader_is_killed() {
    let stack = Stack::start().await;
    let a = stack.leader("controller-a").await;
    let b = stack.controller(stack.config("controller-b")).await;
    stack.create_template("ubuntu", three_actions()).await;

    const N: usize = 4;
    let mut agents = Vec::new();
    for i in 0..N + 2 {
        let mac = format!("aa:bb:cc:00:01:{i:02x}");
        stack.create_hardware(&format!("m{i}"), &mac).await;
        agents.push(stack.agent(&mac).await);
    }
    assert!(!b.is_leading(), "only one replica leads");
    for i in 0..N {
        stack
            .create_workflow(&format!("wf{i}"), &format!("m{i}"), "ubuntu", json!({}))
            .await;
    }
    // Every agent gets its workflow and finishes the first action under the first leader.
    let mut runs = Vec::new();
    for agent in agents.iter_mut().take(N) {
        let (id, actions) = agent.next_start().await;
        agent.run_all(&id, &actions[..1]).await;
        runs.push((id, actions));
    }
    for i in 0..N {
        stack
            .wait_for(&format!("wf{i}"), "Running", |w| {
                state_of(w) == WorkflowState::Running
            })
            .await;
    }

    a.kill().await;
    // Events published while nobody leads wait in JetStream.
    for (agent, (id, actions)) in agents.iter_mut().zip(&runs) {
        agent.run_all(id, &actions[1..2]).await;
    }
    // Workflows created while nobody leads are dispatched by the new leader.
    for i in N..N + 2 {
        stack
            .create_workflow(&format!("wf{i}"), &format!("m{i}"), "ubuntu", json!({}))
            .await;
    }
    b.wait_leading().await;
    for (agent, (id, actions)) in agents.iter_mut().zip(&runs) {
        agent.run_all(id, &actions[2..]).await;
    }
    for agent in agents.iter_mut().skip(N) {
        let (id, actions) = agent.next_start().await;
        agent.run_all(&id, &actions).await;
    }
    for i in 0..N + 2 {
        let w = stack
            .wait_state(&format!("wf{i}"), WorkflowState::Succeeded)
            .await;
        assert_eq!(
            w.status.map(|s| s.dispatch_attempts),
            Some(1),
            "wf{i} was dispatched once"
        );
    }
    // No agent received its workflow twice.
    for agent in &mut agents {
        assert!(
            agent
                .try_command(Duration::from_millis(300))
                .await
                .is_none(),
            "agent {} got a second command",
            agent.id
        );
    }
    b.stop().await;
    stack.stop().await;
}
