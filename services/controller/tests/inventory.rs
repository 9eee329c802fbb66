//! An agent's hardware inventory, end to end against the real parts (kube-lite, nats-server
//! with deploy's users, tink-server and the controller in process): `ReportInventory` from an
//! agent-like gRPC client with the machine's session token ends up in its Hardware's
//! `status.attributes.inBand`; another machine's agent id is refused and that Hardware stays
//! unchanged; an oversized or invalid inventory is refused naming the field path; an identical
//! inventory writes nothing. On request (`tinkerbell.org/inventory-request`): the controller
//! asks the agent through its stream until the agent's authenticated answer is stored, then
//! removes the annotation; a stale or unauthenticated answer changes nothing, and an agent that
//! connects later is asked then.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{NS, Stack, within};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use tink_api::v1alpha2::Hardware;
use tink_proto::workflow::v2::ReportInventoryRequest;
use tink_proto::workflow::v2::workflow_service_client::WorkflowServiceClient;
use tonic::Code;
use tonic::transport::Channel;

const MAC_A: &str = "aa:bb:cc:00:10:01";
const MAC_B: &str = "aa:bb:cc:00:10:02";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/inventory/tests/fixtures/machine-a")
}

/// The fixture machine's inventory, as the agent collects it.
fn inventory() -> tink_inventory::Inventory {
    tink_inventory::collect(&fixture())
}

fn json_of(inventory: &tink_inventory::Inventory) -> String {
    String::from_utf8(inventory.to_json().expect("valid inventory")).expect("utf-8")
}

async fn client(stack: &Stack) -> WorkflowServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", stack.server_addr))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    WorkflowServiceClient::new(channel)
}

/// `ReportInventory` for `agent_id`, presenting `token` (none: no credentials).
async fn report(
    client: &mut WorkflowServiceClient<Channel>,
    token: Option<&str>,
    agent_id: &str,
    inventory: String,
) -> Result<bool, tonic::Status> {
    answer(client, token, agent_id, inventory, "").await
}

/// `ReportInventory` answering the inventory request `request_id`.
async fn answer(
    client: &mut WorkflowServiceClient<Channel>,
    token: Option<&str>,
    agent_id: &str,
    inventory: String,
    request_id: &str,
) -> Result<bool, tonic::Status> {
    let mut request = tonic::Request::new(ReportInventoryRequest {
        agent_id: agent_id.to_string(),
        inventory,
        request_id: request_id.to_string(),
    });
    if let Some(t) = token {
        request.metadata_mut().insert(
            tink_server::auth::TOKEN_HEADER,
            t.parse().expect("token metadata"),
        );
    }
    client
        .report_inventory(request)
        .await
        .map(|r| r.into_inner().duplicate)
}

fn hardware(stack: &Stack) -> Api<Hardware> {
    Api::namespaced(stack.client.clone(), NS)
}

fn in_band(hw: &Hardware) -> Option<Value> {
    hw.status.as_ref()?.attributes.as_ref()?.in_band.clone()
}

/// Waits until Hardware `name`'s `inBand` is `want`.
async fn wait_in_band(stack: &Stack, name: &str, want: &Value) -> Hardware {
    within(&format!("{name}'s status.attributes.inBand"), async {
        loop {
            let hw = hardware(stack).get(name).await.expect("get hardware");
            if in_band(&hw).as_ref() == Some(want) {
                return hw;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_inventory_reaches_its_hardware_and_nobody_elses() {
    let stack = Stack::start().await;
    let controller = stack.leader("c-0").await;
    stack.create_hardware("m-a", MAC_A).await;
    stack.create_hardware("m-b", MAC_B).await;
    // Machine A's agent holds its stream (and session token); B's never connected.
    let agent = stack.agent(MAC_A).await;
    let token = agent.token.clone().expect("a session token");
    let mut grpc = client(&stack).await;

    // 1. A's inventory, from A, reaches A's Hardware in Tinkerbell's attributes shape.
    let mine = inventory();
    assert!(mine.cpu.threads > 0, "the fixture has processors");
    let duplicate = report(&mut grpc, Some(&token), MAC_A, json_of(&mine))
        .await
        .expect("the server stores A's inventory");
    assert!(!duplicate);
    let want = serde_json::to_value(mine.to_attributes()).expect("attributes");
    let hw_a = wait_in_band(&stack, "m-a", &want).await;
    assert_eq!(
        want["cpu"]["totalThreads"],
        json!(mine.cpu.threads),
        "the -o wide column's path holds the thread count"
    );
    assert_eq!(want["collectionMethod"], "agent");
    let reported_at = hw_a
        .status
        .as_ref()
        .and_then(|s| s.inventory_reported_at.clone())
        .expect("inventoryReportedAt");
    assert!(
        reported_at.parse::<jiff::Timestamp>().is_ok(),
        "{reported_at}"
    );
    // Read through v1alpha1 (the conversion webhook's mapping): the same attributes.
    let v1 = tink_api::conversion::hardware_to_v1alpha1(&hw_a);
    assert_eq!(
        v1.status.expect("v1alpha1 status").extra["attributes"]["inBand"],
        want
    );

    // 2. The spoof: A's session reporting for B, and a caller without credentials, are
    // refused; B's Hardware is unchanged.
    let b_before = hardware(&stack).get("m-b").await.expect("m-b");
    let mut spoofed = mine.clone();
    spoofed.cpu.threads = mine.cpu.threads + 4;
    let refused = report(&mut grpc, Some(&token), MAC_B, json_of(&spoofed))
        .await
        .expect_err("A's token cannot report for B");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("agent_id"),
        "{}",
        refused.message()
    );
    let anonymous = report(&mut grpc, None, MAC_B, json_of(&spoofed))
        .await
        .expect_err("no credentials, no inventory");
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
    // A later report of A's is applied: everything before it was seen (the consumer reads
    // the stream in order), and B's Hardware still has no status.
    let mut changed = mine.clone();
    changed.cpu.threads = mine.cpu.threads + 2;
    report(&mut grpc, Some(&token), MAC_A, json_of(&changed))
        .await
        .expect("A's second inventory");
    let want_changed = serde_json::to_value(changed.to_attributes()).expect("attributes");
    let hw_a = wait_in_band(&stack, "m-a", &want_changed).await;
    let b_after = hardware(&stack).get("m-b").await.expect("m-b");
    assert_eq!(b_after.status, None, "B's Hardware got no inventory");
    assert_eq!(b_after.resource_version(), b_before.resource_version());

    // 3. Oversized and invalid inventories are refused naming the field.
    let mut invalid: Value = serde_json::from_str(&json_of(&changed)).expect("json");
    invalid["disks"] = json!([{"name": "sda", "sizeBytes": 1, "serial": "x".repeat(300)}]);
    let refused = report(&mut grpc, Some(&token), MAC_A, invalid.to_string())
        .await
        .expect_err("a serial above the limit");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("inventory.disks[0].serial"),
        "{}",
        refused.message()
    );
    let mut mistyped: Value = serde_json::from_str(&json_of(&changed)).expect("json");
    mistyped["cpu"]["threads"] = json!("eight");
    let refused = report(&mut grpc, Some(&token), MAC_A, mistyped.to_string())
        .await
        .expect_err("a string for a count");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().contains("inventory.cpu.threads"),
        "{}",
        refused.message()
    );
    let huge = format!(
        "{{\"pad\": \"{}\"}}",
        "x".repeat(tink_inventory::validate::MAX_SERIALIZED_BYTES)
    );
    let refused = report(&mut grpc, Some(&token), MAC_A, huge)
        .await
        .expect_err("above 1 MiB");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(
        refused.message().starts_with("inventory:"),
        "{}",
        refused.message()
    );

    // 4. An identical report writes nothing: the stream de-duplicates it, and an identical
    // inventory that reaches the controller anyway (published without a de-duplication id)
    // costs no status write either.
    let writes = controller.metrics.writes("hardware_status");
    let duplicate = report(&mut grpc, Some(&token), MAC_A, json_of(&changed))
        .await
        .expect("an identical report is answered OK");
    assert!(duplicate, "the stream recognised the identical inventory");
    let js = stack.jetstream_as("tink-server").await;
    js.publish(
        tink_bus::inventory_subject(MAC_A).expect("subject"),
        json_of(&changed).into(),
    )
    .await
    .expect("publish")
    .await
    .expect("stored");
    within("the controller to see the identical inventory", async {
        while controller.metrics.inventory_count("unchanged") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(controller.metrics.writes("hardware_status"), writes);
    let hw_same = hardware(&stack).get("m-a").await.expect("m-a");
    assert_eq!(hw_same.resource_version(), hw_a.resource_version());

    // An inventory for an agent id no Hardware names is dropped and counted.
    js.publish(
        tink_bus::inventory_subject("aa:bb:cc:00:10:99").expect("subject"),
        json_of(&mine).into(),
    )
    .await
    .expect("publish")
    .await
    .expect("stored");
    within("the unknown agent's inventory to be dropped", async {
        while controller.metrics.inventory_count("unknown_agent") == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    drop(agent);
    controller.stop().await;
    stack.stop().await;
}

/// Sets the annotation `tinkerbell.org/inventory-request` of Hardware `name` to `value`.
async fn request_inventory(stack: &Stack, name: &str, value: &str) -> String {
    let patch = json!({"metadata": {"annotations": {
        tink_controller::inventory_request::INVENTORY_REQUEST_ANNOTATION: value}}});
    let hw = hardware(stack)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("annotate");
    tink_controller::inventory_request::request_id(&hw.uid().expect("uid"), value)
}

/// Waits until Hardware `name` says request `id` was answered and its annotation is gone.
async fn wait_answered(stack: &Stack, name: &str, id: &str) -> Hardware {
    within(
        &format!("{name}'s inventory request {id} to be answered"),
        async {
            loop {
                let hw = hardware(stack).get(name).await.expect("get hardware");
                let answered = hw
                    .status
                    .as_ref()
                    .and_then(|s| s.inventory_request.as_deref())
                    == Some(id);
                let annotated = hw
                    .annotations()
                    .contains_key(tink_controller::inventory_request::INVENTORY_REQUEST_ANNOTATION);
                if answered && !annotated {
                    return hw;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_request_reaches_the_agent_and_its_answer_closes_it() {
    let stack = Stack::start().await;
    let mut config = stack.config("c-0");
    config.inventory_request_resend = Duration::from_millis(500);
    let controller = stack.controller(config).await;
    controller.wait_leading().await;
    stack.create_hardware("m-a", MAC_A).await;
    stack.create_hardware("m-b", MAC_B).await;
    let mut agent = stack.agent_instance(MAC_A, "instance-a").await;
    let token = agent.token.clone().expect("a session token");
    let mut grpc = client(&stack).await;

    // The report at start: stored as the authenticated agent's.
    let mine = inventory();
    report(&mut grpc, Some(&token), MAC_A, json_of(&mine))
        .await
        .expect("A's inventory");
    let want = serde_json::to_value(mine.to_attributes()).expect("attributes");
    let before = wait_in_band(&stack, "m-a", &want).await;
    let status = before.status.clone().expect("status");
    assert_eq!(status.inventory_source.as_deref(), Some("Agent"));
    assert!(status.authenticated_inventory().is_some());
    assert_eq!(status.inventory_request, None);

    // 1. The operator asks: the request reaches the agent on its stream, with the id derived
    //    from the Hardware and the annotation's value (the operator's text stays home).
    let id = request_inventory(&stack, "m-a", "ticket 42: after the DIMM swap").await;
    assert_eq!(agent.next_inventory_request().await, id);

    // 2. Answers that must change nothing: without credentials, and naming a request that is
    //    not the Hardware's current one. The controller keeps asking meanwhile.
    let anonymous = answer(&mut grpc, None, MAC_A, json_of(&mine), &id)
        .await
        .expect_err("no credentials");
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
    let bad = answer(&mut grpc, Some(&token), MAC_A, json_of(&mine), "not valid!")
        .await
        .expect_err("a malformed request id");
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("request_id"), "{}", bad.message());
    answer(
        &mut grpc,
        Some(&token),
        MAC_A,
        json_of(&mine),
        "0123456789abcdef",
    )
    .await
    .expect("stored, and ignored as an answer");
    assert_eq!(
        agent.next_inventory_request().await,
        id,
        "asked again: the stale answer closed nothing"
    );
    let still = hardware(&stack).get("m-a").await.expect("m-a");
    assert!(
        still
            .annotations()
            .contains_key(tink_controller::inventory_request::INVENTORY_REQUEST_ANNOTATION)
    );

    // 3. The agent's answer, with an unchanged inventory: recorded, the report time moves, the
    //    annotation goes, an Event says so.
    answer(&mut grpc, Some(&token), MAC_A, json_of(&mine), &id)
        .await
        .expect("the answer");
    let after = wait_answered(&stack, "m-a", &id).await;
    let after_status = after.status.clone().expect("status");
    assert_eq!(in_band(&after), Some(want.clone()));
    assert_ne!(
        after_status.inventory_reported_at, status.inventory_reported_at,
        "a fresh report time"
    );
    let event = stack.wait_event("m-a", "InventoryReported").await;
    assert!(
        event.note.as_deref().unwrap_or_default().contains(&id),
        "{event:?}"
    );

    // 4. A machine whose agent is not connected is asked once it connects.
    let id_b = request_inventory(&stack, "m-b", "first look").await;
    let mut agent_b = stack.agent_instance(MAC_B, "instance-b").await;
    assert_eq!(agent_b.next_inventory_request().await, id_b);
    let token_b = agent_b.token.clone().expect("B's token");
    answer(&mut grpc, Some(&token_b), MAC_B, json_of(&mine), &id_b)
        .await
        .expect("B's answer");
    let hw_b = wait_answered(&stack, "m-b", &id_b).await;
    assert_eq!(in_band(&hw_b), Some(want));

    // 5. A new value is a new request.
    let again = request_inventory(&stack, "m-a", "and once more").await;
    assert_ne!(again, id);
    assert_eq!(agent.next_inventory_request().await, again);

    drop((agent, agent_b));
    controller.stop().await;
    stack.stop().await;
}
