//! Presence across a server replica's death, with per-replica heartbeats, against the real
//! parts: nats-server with deploy's users, kube-lite, the real controller (leader), two real
//! tink-server replicas and the console's presence watch, with agents simulated over gRPC.
//!
//! One replica runs on a runtime of its own, which the test shuts down without letting any of
//! its tasks run again: like a crashed pod, it deletes nothing and simply stops beating. Its
//! agents must then count offline within the presence TTL of its last heartbeat, in the
//! console's view and in the controller's (the Running workflow of one of them fails with
//! AgentLost), while the surviving replica's agent stays online and finishes its workflow; the
//! agent that reconnects to the survivor is online again and gets its next workflow; the entry
//! of the agent that never comes back is deleted by the controller's leader.

#[path = "../../controller/tests/common/mod.rs"]
mod controller_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use controller_common::*;
use serde_json::json;
use tink_api::v1alpha2::{ConditionType, Hardware, WorkflowState};
use tokio_util::sync::CancellationToken;

const MAC_DOOMED: &str = "02:00:00:00:0d:01";
const MAC_QUIET: &str = "02:00:00:00:0d:02";
const MAC_SURVIVOR: &str = "02:00:00:00:05:01";

/// A tink-server replica on a runtime of its own: `kill` drops every task of it unpolled.
struct Doomed {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Doomed {
    async fn start(stack: &Stack, replica: &str) -> Doomed {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the doomed replica");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("addr");
        let mut config = tink_server::ServerConfig::new(stack.nats.url(), replica);
        config.bus = stack.bus.clone();
        config.nats_auth = nats_auth("tink-server");
        let health = tink_runtime::Health::new();
        {
            let health = health.clone();
            runtime.spawn(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let _ = tink_server::serve(
                    config,
                    listener,
                    health,
                    tink_server::Metrics::default(),
                    CancellationToken::new(),
                )
                .await;
            });
        }
        within("the doomed replica to become ready", async {
            while !health.is_ready() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        Doomed {
            addr,
            runtime: Some(runtime),
        }
    }

    /// Like a SIGKILL: no task of the replica runs again (no presence deleted, no heartbeat).
    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Doomed {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn hardware(stack: &Stack, name: &str) -> Hardware {
    kube::Api::<Hardware>::namespaced(stack.client.clone(), NS)
        .get(name)
        .await
        .expect("hardware")
}

/// The presence entry of `agent` (read as the controller), if any.
async fn entry(stack: &Stack, agent: &str) -> Option<tink_bus::Presence> {
    let js = stack.jetstream_as("tink-controller").await;
    let bucket = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("presence bucket");
    bucket
        .get(tink_bus::agent_token(agent).expect("token"))
        .await
        .expect("read presence")
        .map(|v| tink_bus::Presence::from_bytes(&v).expect("a presence entry"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_is_right_across_a_replica_death() {
    let stack = Stack::start().await;
    let ttl = stack.bus.presence_ttl;
    let mut config = stack.config("c0");
    config.workflow.agent_lost_after = Duration::from_secs(2);
    let c = stack.controller(config).await;
    c.wait_leading().await;
    for (name, mac) in [
        ("doomed", MAC_DOOMED),
        ("quiet", MAC_QUIET),
        ("survivor", MAC_SURVIVOR),
    ] {
        stack.create_hardware(name, mac).await;
    }
    stack.create_template("ubuntu", three_actions()).await;

    // The console's view.
    let console = Arc::new(tink_console::presence::Presence::default());
    let console_stop = CancellationToken::new();
    tokio::spawn(tink_console::presence::watch(
        tink_console::presence::PresenceConfig {
            nats_url: stack.nats.url(),
            auth: nats_auth("tink-console"),
            ttl,
        },
        console.clone(),
        Arc::new(tink_console::syslog::SyslogSource::default()),
        |_| {},
        console_stop.clone(),
    ));

    let mut doomed = Doomed::start(&stack, "server-doomed").await;
    let mut agent_doomed = Agent::connect_instance(doomed.addr, MAC_DOOMED, "d-1").await;
    let agent_quiet = Agent::connect_instance(doomed.addr, MAC_QUIET, "q-1").await;
    let mut agent_survivor = stack.agent_instance(MAC_SURVIVOR, "s-1").await;

    // A workflow running on each replica's agent.
    stack
        .create_workflow("wf-doomed", "doomed", "ubuntu", json!({}))
        .await;
    stack
        .create_workflow("wf-survivor", "survivor", "ubuntu", json!({}))
        .await;
    let (id_doomed, actions_doomed) = agent_doomed.next_start().await;
    agent_doomed.received(&id_doomed).await;
    agent_doomed.started(&id_doomed, &actions_doomed[0]).await;
    let (id_survivor, actions_survivor) = agent_survivor.next_start().await;
    agent_survivor.received(&id_survivor).await;
    agent_survivor
        .started(&id_survivor, &actions_survivor[0])
        .await;
    stack.wait_state("wf-doomed", WorkflowState::Running).await;
    stack
        .wait_state("wf-survivor", WorkflowState::Running)
        .await;

    let (hw_doomed, hw_quiet, hw_survivor) = (
        hardware(&stack, "doomed").await,
        hardware(&stack, "quiet").await,
        hardware(&stack, "survivor").await,
    );
    within("the console to show every agent connected", async {
        while [&hw_doomed, &hw_quiet, &hw_survivor]
            .iter()
            .any(|hw| console.of(hw) != "connected")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // The replica dies: nothing is deleted, it just stops beating.
    doomed.kill();
    let killed = tokio::time::Instant::now();
    assert_eq!(
        entry(&stack, MAC_DOOMED).await.map(|p| p.server).as_deref(),
        Some("server-doomed"),
        "the dead replica's entries stay (nobody deleted them)"
    );

    // The console shows its agents offline within the TTL of its last heartbeat (computed from
    // the heartbeat's time, so this bound holds however slow the machine is)...
    within(
        "the console to show the dead replica's agents offline",
        async {
            while console.of(&hw_doomed) != "offline" || console.of(&hw_quiet) != "offline" {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    let offline_after = killed.elapsed();
    assert!(
        offline_after <= ttl + Duration::from_secs(1),
        "offline only after {offline_after:?} (TTL {ttl:?})"
    );
    // ...while their entries are still there, and the survivor's agent stays online.
    assert!(entry(&stack, MAC_QUIET).await.is_some());
    assert_eq!(console.of(&hw_survivor), "connected");

    // The controller supervises the dead replica's workflow as for any lost agent: AgentLost
    // once the agent has been offline for the limit. The survivor's goes on.
    let w = stack
        .wait_for("wf-doomed", "Failed", |w| {
            state_of(w) == WorkflowState::Failed
        })
        .await;
    let reason = w
        .status
        .as_ref()
        .and_then(|s| s.condition(ConditionType::Succeeded))
        .and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("AgentLost"), "{:?}", w.status);
    assert_eq!(console.of(&hw_survivor), "connected");
    agent_survivor
        .succeeded(&id_survivor, &actions_survivor[0])
        .await;
    for a in &actions_survivor[1..] {
        agent_survivor.started(&id_survivor, a).await;
        agent_survivor.succeeded(&id_survivor, a).await;
    }
    stack
        .wait_state("wf-survivor", WorkflowState::Succeeded)
        .await;

    // The doomed replica's agent reconnects to the survivor: online again, in both views (the
    // controller dispatches its next workflow only to a connected agent).
    let mut agent_doomed = Agent::connect_with(
        stack.server_addr,
        MAC_DOOMED,
        "d-1",
        agent_doomed.token.clone(),
    )
    .await;
    within("the console to show the reconnected agent", async {
        while console.of(&hw_doomed) != "connected" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(
        entry(&stack, MAC_DOOMED).await.map(|p| p.server).as_deref(),
        Some("server-0")
    );
    stack
        .create_workflow("wf-again", "doomed", "ubuntu", json!({}))
        .await;
    let (id_again, _) = agent_doomed.next_start().await;
    assert!(id_again.contains("wf-again"), "{id_again}");
    // Confirmed, as an agent does (an unconfirmed command ends the stream after the receipt
    // timeout, and the stream's end deletes its entry).
    agent_doomed.received(&id_again).await;
    assert_eq!(console.of(&hw_quiet), "offline");

    // The agent that never came back: its entry is deleted by the leader once stale for long
    // enough (a few TTLs), and it stays offline.
    within(
        "the leader to delete the dead replica's stale entry",
        async {
            while entry(&stack, MAC_QUIET).await.is_some() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    assert_eq!(console.of(&hw_quiet), "offline");
    assert_eq!(
        entry(&stack, MAC_DOOMED).await.map(|p| p.server).as_deref(),
        Some("server-0"),
        "a live agent's entry is never deleted"
    );
    drop(agent_quiet);
    console_stop.cancel();
    c.stop().await;
    stack.stop().await;
}
