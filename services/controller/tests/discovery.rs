//! Discovery and enrollment, end to end against the real parts (kube-lite, nats-server with
//! deploy's users, tink-server replicas and the controller in process), with an agent-like gRPC
//! client:
//!
//! - an unknown machine's stream is refused, saying enrollment is open (only by a server that
//!   takes enrollments); its inventory without credentials makes a Hardware `discovery-<mac>`
//!   (label, not approved, its address, the discovery OSIE, the inventory on its status);
//! - the spoof: an inventory without credentials for a MAC a Hardware owns is refused and
//!   changes nothing, even when it reaches the bus marked as an enrollment; once the
//!   discovered Hardware exists, a second enrollment for it is refused too;
//! - a Workflow for the unapproved machine waits (`HardwareNotApproved`) and nothing reaches its
//!   agent; after approval it is dispatched;
//! - at most `max` discovered Hardware wait for approval: later enrollments are dropped.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{NS, Stack, state_of, within};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::v1alpha2::{ConditionType, Hardware, WorkflowState};
use tink_controller::inventory::{DISCOVERED_LABEL, DiscoveryConfig, discovered_name};
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;
use tink_proto::workflow::v2::{GetWorkflowsRequest, ReportInventoryRequest};
use tonic::Code;
use tonic::transport::Channel;

const KNOWN: &str = "aa:bb:cc:00:20:01";
const NEW: &str = "aa:bb:cc:00:20:02";

fn inventory() -> tink_inventory::Inventory {
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/inventory/tests/fixtures/machine-a");
    tink_inventory::collect(&fixture)
}

fn json_of(inventory: &tink_inventory::Inventory) -> String {
    String::from_utf8(inventory.to_json().expect("valid inventory")).expect("utf-8")
}

async fn client(addr: SocketAddr) -> WorkflowServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    WorkflowServiceClient::new(channel)
}

/// `ReportInventory` without credentials: (duplicate, enrolled).
async fn enroll(
    client: &mut WorkflowServiceClient<Channel>,
    agent_id: &str,
    inventory: String,
) -> Result<(bool, bool), tonic::Status> {
    client
        .report_inventory(ReportInventoryRequest {
            agent_id: agent_id.to_string(),
            inventory,
            request_id: String::new(),
        })
        .await
        .map(|r| {
            let r = r.into_inner();
            (r.duplicate, r.enrolled)
        })
}

/// The refusal of `agent_id`'s stream.
async fn stream_refusal(
    client: &mut WorkflowServiceClient<Channel>,
    agent_id: &str,
) -> tonic::Status {
    client
        .get_workflows(GetWorkflowsRequest {
            agent_id: agent_id.to_string(),
            instance_id: String::new(),
        })
        .await
        .expect_err("an unknown machine gets no stream")
}

fn hardware(stack: &Stack) -> Api<Hardware> {
    Api::namespaced(stack.client.clone(), NS)
}

fn in_band(hw: &Hardware) -> Option<Value> {
    hw.status.as_ref()?.attributes.as_ref()?.in_band.clone()
}

async fn wait_hardware(
    stack: &Stack,
    name: &str,
    what: &str,
    done: impl Fn(&Hardware) -> bool,
) -> Hardware {
    within(&format!("{name}: {what}"), async {
        loop {
            if let Ok(Some(hw)) = hardware(stack).get_opt(name).await
                && done(&hw)
            {
                return hw;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn wait_count(controller: &common::Controller, outcome: &str, at_least: u64) {
    within(
        &format!("{at_least} inventories counted {outcome}"),
        async {
            while controller.metrics.inventory_count(outcome) < at_least {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_machine_enrolls_and_gets_work_only_once_approved() {
    let stack = Stack::start().await;
    let mut config = stack.config("c-0");
    config.discovery = DiscoveryConfig {
        enabled: true,
        namespace: NS.into(),
        max: 2,
        osie: Some("discovery-osie".into()),
    };
    let controller = stack.controller(config).await;
    controller.wait_leading().await;
    let enrolling = stack
        .add_server_with("server-enroll", |c| c.enrollment = true)
        .await;
    stack.create_hardware("known", KNOWN).await;
    let mut grpc = client(enrolling).await;
    let mut plain = client(stack.server_addr).await;

    // 1. The unknown machine's stream is refused; a server that takes enrollments says so.
    let refused = stream_refusal(&mut grpc, NEW).await;
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(
        refused
            .metadata()
            .get("x-tink-enrollment")
            .and_then(|v| v.to_str().ok()),
        Some("open"),
        "{refused:?}"
    );
    let refused = stream_refusal(&mut plain, NEW).await;
    assert!(refused.metadata().get("x-tink-enrollment").is_none());
    // Without enrollment, an inventory without credentials is refused as before.
    let mine = inventory();
    let anonymous = enroll(&mut plain, NEW, json_of(&mine))
        .await
        .expect_err("no enrollment on this server");
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");

    // 2. It enrolls: a discovered Hardware with its inventory, not approved.
    let (_, enrolled) = enroll(&mut grpc, NEW, json_of(&mine))
        .await
        .expect("the enrollment is stored");
    assert!(enrolled);
    let want = serde_json::to_value(mine.to_attributes()).expect("attributes");
    let name = discovered_name(NEW);
    assert_eq!(name, "discovery-aa-bb-cc-00-20-02");
    let hw = wait_hardware(&stack, &name, "inventory written", |hw| {
        in_band(hw).as_ref() == Some(&want)
    })
    .await;
    assert_eq!(
        hw.labels().get(DISCOVERED_LABEL).map(String::as_str),
        Some("true")
    );
    let discovery = hw.spec.discovery.clone().expect("spec.discovery");
    assert!(!discovery.approved);
    assert!(!hw.spec.approved());
    assert_eq!(discovery.address.as_deref(), Some("127.0.0.1"));
    assert!(discovery.discovered_at.is_some());
    assert!(hw.spec.interface(NEW).is_some(), "its MAC is its interface");
    // Taken without credentials: shown, but not trusted for decisions (rules).
    let status = hw.status.clone().expect("status");
    assert_eq!(status.inventory_source.as_deref(), Some("Enrollment"));
    assert_eq!(status.authenticated_inventory(), None);
    assert_eq!(
        hw.spec
            .osie
            .as_ref()
            .and_then(|o| o.osie_ref.as_ref())
            .map(|r| r.name.as_str()),
        Some("discovery-osie")
    );

    // 3. The spoof: no credentials for a MAC a Hardware owns changes nothing.
    let known_before = hardware(&stack).get("known").await.expect("known");
    let mut spoofed = mine.clone();
    spoofed.cpu.threads = mine.cpu.threads + 8;
    let refused = enroll(&mut grpc, KNOWN, json_of(&spoofed))
        .await
        .expect_err("a known MAC needs its credentials");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().contains("is known"),
        "{}",
        refused.message()
    );
    // Even marked as an enrollment on the bus (a server that had not seen the Hardware yet),
    // the controller changes no Hardware that names the machine.
    let js = stack.jetstream_as("tink-server").await;
    tink_bus::publish_enrollment(&js, KNOWN, "10.0.0.66", json_of(&spoofed).into_bytes())
        .await
        .expect("stored");
    wait_count(&controller, "enrollment_known", 1).await;
    let known_after = hardware(&stack).get("known").await.expect("known");
    assert_eq!(
        known_after.resource_version(),
        known_before.resource_version()
    );
    assert_eq!(known_after.status, None);
    // The discovered machine is known now: a second enrollment for it is refused (once the
    // servers mirror its admission), and one that reaches the bus changes nothing.
    within(
        "the discovered machine's admission to reach the server",
        async {
            loop {
                match enroll(&mut grpc, NEW, json_of(&spoofed)).await {
                    Err(s) if s.code() == Code::Unauthenticated => break,
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        },
    )
    .await;
    let enrolled_rv = hardware(&stack)
        .get(&name)
        .await
        .expect("discovered")
        .resource_version();
    tink_bus::publish_enrollment(&js, NEW, "10.0.0.66", json_of(&spoofed).into_bytes())
        .await
        .expect("stored");
    wait_count(&controller, "enrollment_known", 2).await;
    let hw = hardware(&stack).get(&name).await.expect("discovered");
    assert_eq!(hw.resource_version(), enrolled_rv);
    assert_eq!(in_band(&hw).as_ref(), Some(&want));

    // 4. Its agent connects (admitted), but a Workflow for it waits for approval.
    let mut agent = stack.agent(NEW).await;
    // Its authenticated report of the same inventory makes it trusted (the real agent sends
    // it once its stream opens).
    let mut request = tonic::Request::new(ReportInventoryRequest {
        agent_id: NEW.to_string(),
        inventory: json_of(&mine),
        request_id: String::new(),
    });
    request.metadata_mut().insert(
        tink_server::auth::TOKEN_HEADER,
        agent
            .token
            .clone()
            .expect("a session token")
            .parse()
            .expect("metadata"),
    );
    grpc.report_inventory(request)
        .await
        .expect("the authenticated report");
    let hw = wait_hardware(&stack, &name, "the agent's own inventory", |hw| {
        hw.status
            .as_ref()
            .is_some_and(|s| s.authenticated_inventory().is_some())
    })
    .await;
    assert_eq!(in_band(&hw).as_ref(), Some(&want));
    stack
        .create_template("t", json!([{"name": "a", "image": "alpine"}]))
        .await;
    stack.create_workflow("wf", &name, "t", json!({})).await;
    let w = stack
        .wait_for("wf", "waiting for approval", |w| {
            w.status
                .as_ref()
                .and_then(|s| s.condition(ConditionType::TemplateRendered))
                .is_some_and(|c| c.reason.as_deref() == Some("HardwareNotApproved"))
        })
        .await;
    assert_eq!(state_of(&w), WorkflowState::Pending);
    let nothing = tokio::time::timeout(Duration::from_secs(2), agent.next_command_forever()).await;
    assert!(nothing.is_err(), "no command before approval: {nothing:?}");

    // 5. Approved: the Workflow is dispatched to the machine's agent.
    hardware(&stack)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"discovery": {"approved": true}}})),
        )
        .await
        .expect("approve");
    let (id, actions) = agent.next_start().await;
    agent.run_all(&id, &actions).await;
    stack.wait_state("wf", WorkflowState::Succeeded).await;

    // 6. The bound counts machines waiting for approval: two more enroll, the third is dropped.
    let macs = [
        "aa:bb:cc:00:20:03",
        "aa:bb:cc:00:20:04",
        "aa:bb:cc:00:20:05",
    ];
    for mac in &macs[..2] {
        enroll(&mut grpc, mac, json_of(&mine))
            .await
            .expect("enrollment stored");
        wait_hardware(&stack, &discovered_name(mac), "created", |_| true).await;
    }
    enroll(&mut grpc, macs[2], json_of(&mine))
        .await
        .expect("the server stores it; the controller bounds the Hardware");
    wait_count(&controller, "discovery_limit", 1).await;
    assert!(
        hardware(&stack)
            .get_opt(&discovered_name(macs[2]))
            .await
            .expect("get")
            .is_none(),
        "no Hardware beyond the bound"
    );
    drop(agent);
    controller.stop().await;
    stack.stop().await;
}
