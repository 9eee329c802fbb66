//! The agent's inventory on request, end to end with a real NATS, a server replica and the agent:
//! the agent reports at start; an inventory request published on the agent's core-NATS request
//! subject (what the controller does) reaches it through its stream, and it collects and
//! reports again naming the request, even when nothing changed; a request for another agent is
//! not answered by this one; a malformed request is dropped by the server.
#![forbid(unsafe_code)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use tink_testkit::nats::NatsServer;

const ID: &str = "02:00:00:00:09:01";
const OTHER: &str = "02:00:00:00:09:02";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/inventory/tests/fixtures/machine-a")
}

/// The stored inventory of `agent_id` (the stream keeps the latest per agent): its stream
/// sequence and the request id it answers (empty for a report at start).
async fn latest(
    js: &async_nats::jetstream::Context,
    agent_id: &str,
) -> Result<Option<(u64, String)>, BoxError> {
    let stream = js.get_stream(tink_bus::INVENTORY_STREAM).await?;
    let subject = tink_bus::inventory_subject(agent_id)?;
    match stream.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => {
            let request = message
                .headers
                .get(tink_bus::INVENTORY_REQUEST_HEADER)
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            tink_inventory::Inventory::from_json(&message.payload)?;
            Ok(Some((message.sequence, request)))
        }
        Err(_) => Ok(None),
    }
}

/// Waits until the stored inventory of `agent_id` answers `request` ("" = a report at start).
async fn wait_answer(
    js: &async_nats::jetstream::Context,
    agent_id: &str,
    request: &str,
) -> Result<u64, BoxError> {
    within(
        &format!("agent {agent_id}'s inventory answering {request:?}"),
        async {
            loop {
                if let Ok(Some((sequence, r))) = latest(js, agent_id).await
                    && r == request
                {
                    return sequence;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await
}

#[tokio::test]
async fn an_inventory_request_is_answered_through_the_stream() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start_with(ID, &[server.addr], Some(fixture())).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, ID, "server-a").await?;
    let client = async_nats::connect(nats.url()).await?;

    // 1. The report at start.
    let first = wait_answer(&js, ID, "").await?;

    // 2. A malformed request (spaces are not allowed) is dropped by the server: the agent gets
    //    nothing, and the next good request is the one answered.
    client
        .publish(
            tink_bus::inventory_request_subject(ID)?,
            "not valid!".into(),
        )
        .await?;
    // 3. A request for another agent id: this agent does not answer it.
    client
        .publish(
            tink_bus::inventory_request_subject(OTHER)?,
            "r-other".into(),
        )
        .await?;
    // 4. A request for this agent: answered with the same (unchanged) inventory, stored anew
    //    because it names the request.
    client
        .publish(tink_bus::inventory_request_subject(ID)?, "r-1".into())
        .await?;
    let answered = wait_answer(&js, ID, "r-1").await?;
    assert!(answered > first, "the answer is a new message");
    assert_eq!(
        latest(&js, OTHER).await?,
        None,
        "nobody answered for the other agent"
    );

    // 5. A second request: answered too.
    client
        .publish(tink_bus::inventory_request_subject(ID)?, "r-2".into())
        .await?;
    wait_answer(&js, ID, "r-2").await?;

    agent.stop().await?;
    server.stop().await?;
    Ok(())
}
