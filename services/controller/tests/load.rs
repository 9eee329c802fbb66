//! Load: a few thousand workflows offered faster than the machine can take them, with the
//! periodic resync turned off, all reach `Succeeded`: no dispatch wake-up is lost (none is left
//! `Pending` with an idle agent).
//!
//! `TINK_LOAD_WORKFLOWS` / `TINK_LOAD_AGENTS` change the size (defaults 2000 and 400).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tink_api::v1alpha2::WorkflowState;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_offered_at_once_all_succeed_without_the_resync() {
    let workflows = env_usize("TINK_LOAD_WORKFLOWS", 2000);
    let agents = env_usize("TINK_LOAD_AGENTS", 400);
    // Production stream timeouts: this test is about lost wake-ups, and the tests' 2-second
    // receipt and 3-second presence bounds would end sessions on a machine this load saturates.
    let stack = Stack::start_with(tink_bus::BusConfig::default()).await;
    let mut config = stack.config("c0");
    // The safety net is off: a lost wake-up would leave a workflow Pending for good.
    config.resync_period = Duration::ZERO;
    config.kube_events = false;
    let c = stack.controller(config).await;
    c.wait_leading().await;
    stack
        .create_template(
            "three",
            json!([
                {"name": "one", "image": "busybox"},
                {"name": "two", "image": "busybox"},
                {"name": "three", "image": "busybox"},
            ]),
        )
        .await;
    let mut tasks = Vec::new();
    // Streams the server ended (e.g. its HTTP/2 keepalive unanswered on a saturated machine).
    // Like the real agent, the simulated one opens a new stream with its session token; one
    // that gave up would leave its machine's later workflows Pending for good, which this
    // test would otherwise report as lost wake-ups.
    let ended = Arc::new(AtomicUsize::new(0));
    for i in 0..agents {
        let mac = format!("aa:bb:cc:01:{:02x}:{:02x}", i / 256, i % 256);
        stack.create_hardware(&format!("m{i}"), &mac).await;
        let mut agent = stack.agent_instance(&mac, &format!("i-{i}")).await;
        let (addr, ended) = (stack.server_addr, ended.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                match agent.next_command_forever().await {
                    Some(Command::Start {
                        workflow_id,
                        actions,
                        ..
                    }) => {
                        let ids: Vec<String> = actions.into_iter().map(|a| a.id).collect();
                        agent.received(&workflow_id).await;
                        agent.run_all(&workflow_id, &ids).await;
                    }
                    Some(Command::Stop { workflow_id, .. }) => {
                        agent.canceled(&workflow_id, None).await;
                    }
                    None => {
                        ended.fetch_add(1, Ordering::Relaxed);
                        eprintln!(
                            "load: the stream of agent {} ended; connecting again",
                            agent.id
                        );
                        let (id, instance, token) = (
                            agent.id.clone(),
                            agent.instance.clone(),
                            agent.token.clone(),
                        );
                        drop(agent);
                        agent = Agent::connect_with(addr, &id, &instance, token).await;
                    }
                }
            }
        }));
    }
    let began = Instant::now();
    // Offered all at once from 16 creators: far faster than the stack completes them.
    let mut creators = Vec::new();
    for k in 0..16 {
        let api = stack.workflows();
        creators.push(tokio::spawn(async move {
            for j in (k..workflows).step_by(16) {
                let wf: tink_api::v1alpha2::Workflow = tink_api::from_value(json!({
                    "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Workflow",
                    "metadata": {"name": format!("wf{j:05}"), "namespace": NS},
                    "spec": {
                        "hardwareRef": {"name": format!("m{}", j % agents)},
                        "templateRef": {"name": "three"},
                    },
                }))
                .expect("workflow");
                api.create(&Default::default(), &wf).await.expect("create");
            }
        }));
    }
    for c in creators {
        c.await.expect("creator");
    }
    let offered = began.elapsed();
    let api = stack.workflows();
    let mut last_done = 0;
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let list = api.list(&Default::default()).await.expect("list");
        let done = list
            .items
            .iter()
            .filter(|w| state_of(w) == WorkflowState::Succeeded)
            .count();
        if done == workflows {
            break;
        }
        if done != last_done {
            last_done = done;
            quiet_since = Instant::now();
        }
        // Progress stopped: what is left is stuck (the resync is off, so nothing will move it).
        if quiet_since.elapsed() > Duration::from_secs(20) {
            let stuck: Vec<String> = list
                .items
                .iter()
                .filter(|w| state_of(w) != WorkflowState::Succeeded)
                .map(|w| {
                    format!(
                        "{}={:?} attempts={}",
                        kube::ResourceExt::name_any(w),
                        state_of(w),
                        w.status.as_ref().map_or(0, |s| s.dispatch_attempts)
                    )
                })
                .collect();
            let errors: Vec<(String, u64)> = ["trigger_dropped", "conflict", "kube", "publish"]
                .iter()
                .map(|k| {
                    (
                        k.to_string(),
                        c.metrics
                            .errors
                            .get_or_create(&tink_controller::Label {
                                value: k.to_string(),
                            })
                            .get(),
                    )
                })
                .collect();
            panic!(
                "{} workflows stuck: {stuck:?}; controller errors: {errors:?}; agent streams ended and opened again: {}",
                stuck.len(),
                ended.load(Ordering::Relaxed)
            );
        }
    }
    eprintln!(
        "load: {workflows} workflows on {agents} agents offered in {:.1} s, all Succeeded after {:.1} s; agent streams ended and opened again: {}",
        offered.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        ended.load(Ordering::Relaxed)
    );
    for t in tasks {
        t.abort();
    }
    c.stop().await;
    stack.stop().await;
}
