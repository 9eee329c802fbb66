//! An agent's hardware inventory, end to end against the real parts (kube-lite, nats-server
//! with deploy's users, tink-server and the controller in process): `ReportInventory` from an
//! agent-like gRPC client with the machine's session token ends up in its Hardware's
//! `status.attributes.inBand`; another machine's agent id is refused and that Hardware stays
//! unchanged; an oversized or invalid inventory is refused naming the field path; an identical
//! inventory writes nothing.

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
    let mut request = tonic::Request::new(ReportInventoryRequest {
        agent_id: agent_id.to_string(),
        inventory,
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
