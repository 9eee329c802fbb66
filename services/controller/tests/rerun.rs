//! One machine, its workflows one after the other: the agent acknowledges each start with its
//! receipt (as the real agent does) and the next workflow runs like the first.

mod common;

use common::*;
use serde_json::json;
use tink_api::v1alpha2::WorkflowState;

const MAC: &str = "aa:bb:cc:00:00:07";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_workflow_on_the_same_machine_runs_after_its_receipt() {
    let stack = Stack::start().await;
    let _c0 = stack.leader("c0").await;
    stack.create_hardware("m1", MAC).await;
    stack.create_template("ubuntu", three_actions()).await;
    let mut agent = stack.agent_instance(MAC, "i-1").await;
    for name in ["install", "reinstall", "third"] {
        stack.create_workflow(name, "m1", "ubuntu", json!({})).await;
        let (id, actions) = agent.next_start().await;
        agent.received(&id).await;
        agent.started(&id, &actions[0]).await;
        stack.wait_state(name, WorkflowState::Running).await;
        agent.succeeded(&id, &actions[0]).await;
        for a in &actions[1..] {
            agent.started(&id, a).await;
            agent.succeeded(&id, a).await;
        }
        stack.wait_state(name, WorkflowState::Succeeded).await;
    }
}
