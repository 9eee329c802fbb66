//! Who may connect at all, and how often: only agent ids the controller admitted (from the
//! Hardware) get a stream, a session or a presence entry; a replica holds a bounded
//! number of streams; stream opens per peer address and calls per agent are rate limited.

mod common;

use std::time::Duration;

use common::*;
use tink_bus::proto::{GetWorkflowsRequest, PublishEventRequest};
use tink_server::ServerConfig;
use tink_server::auth::TOKEN_HEADER;
use tink_testkit::nats::NatsServer;
use tonic::Code;

const KNOWN: &str = "aa:bb:cc:dd:ee:31";
const SECOND: &str = "aa:bb:cc:dd:ee:32";
const UNKNOWN: &str = "aa:bb:cc:dd:ee:39";

async fn admit(bucket: &async_nats::jetstream::kv::Store, agent: &str) {
    bucket
        .put(tink_bus::agent_token(agent).expect("token"), "ns/m".into())
        .await
        .expect("put");
}

async fn open(
    client: &mut tink_bus::proto::workflow_service_client::WorkflowServiceClient<
        tonic::transport::Channel,
    >,
    agent: &str,
) -> Result<(Commands, Option<String>), tonic::Status> {
    let response = client
        .get_workflows(GetWorkflowsRequest {
            agent_id: agent.into(),
            instance_id: "i-1".into(),
        })
        .await?;
    let token = response
        .metadata()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((response.into_inner(), token))
}

/// Retries while the replica has not loaded the bucket (UNAVAILABLE), as an agent does.
async fn open_loaded(
    client: &mut tink_bus::proto::workflow_service_client::WorkflowServiceClient<
        tonic::transport::Channel,
    >,
    agent: &str,
) -> Result<(Commands, Option<String>), tonic::Status> {
    within("the replica to answer", async {
        loop {
            match open(client, agent).await {
                Err(s) if s.code() == Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                other => return other,
            }
        }
    })
    .await
}

#[tokio::test]
async fn only_admitted_agents_connect() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let bus = tink_bus::ensure_streams(&js, &bus_config())
        .await
        .expect("streams");
    admit(&bus.admitted_agents, KNOWN).await;
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    let replica = Replica::start_config_strict(config).await;
    let mut client = replica.client().await;

    let (_known, _) = open_loaded(&mut client, KNOWN).await.expect("admitted");
    let refused = open(&mut client, UNKNOWN).await.expect_err("not admitted");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("not admitted") && refused.message().contains("Hardware"),
        "{refused:?}"
    );
    // Nothing exists for the unknown id: no presence entry.
    assert!(presence(&js, UNKNOWN).await.is_none());
    assert!(presence(&js, KNOWN).await.is_some());

    // A Hardware added later admits its machine at once; one removed refuses it.
    admit(&bus.admitted_agents, UNKNOWN).await;
    within("the new id to be admitted", async {
        while open(&mut client, UNKNOWN).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    bus.admitted_agents
        .delete(tink_bus::agent_token(SECOND).expect("token"))
        .await
        .expect("delete");
    let status = open(&mut client, SECOND).await.expect_err("never admitted");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(replica.metrics.error_count("agent_not_admitted") >= 2);
}

#[tokio::test]
async fn streams_and_calls_are_bounded() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let bus = tink_bus::ensure_streams(&js, &bus_config())
        .await
        .expect("streams");
    for agent in [KNOWN, SECOND] {
        admit(&bus.admitted_agents, agent).await;
    }
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    config.max_sessions = 1;
    config.stream_opens_per_peer = 1;
    config.agent_calls_per_second = 1;
    let replica = Replica::start_config_strict(config).await;
    let mut client = replica.client().await;

    // One stream at most on this replica.
    let (_first, token) = open_loaded(&mut client, KNOWN)
        .await
        .expect("the first stream");
    let token = token.expect("a token");
    let full = open(&mut client, SECOND)
        .await
        .expect_err("the replica is full");
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");
    assert!(full.message().contains("another replica"), "{full:?}");

    // One stream open per second from this address, bursts of ten: a burst of 20 is cut.
    let mut limited = 0;
    for _ in 0..20 {
        if let Err(s) = open(&mut client, SECOND).await
            && s.code() == Code::ResourceExhausted
            && s.message().contains("streams per second")
        {
            limited += 1;
        }
    }
    assert!(limited >= 5, "{limited} opens limited");

    // One event per second per agent, bursts of ten: a burst of 20 is cut, and the agent is
    // told to pause.
    let mut limited = 0;
    for i in 0..20 {
        let mut event = action_started("ns/wf", "a1", &format!("e{i}"))
            .event
            .expect("event");
        event.agent_id = KNOWN.into();
        let mut request = tonic::Request::new(PublishEventRequest { event: Some(event) });
        request
            .metadata_mut()
            .insert(TOKEN_HEADER, token.parse().expect("ascii"));
        if let Err(s) = client.publish_event(request).await {
            assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
            assert!(s.message().contains("retry after a pause"), "{s:?}");
            limited += 1;
        }
    }
    assert!(limited >= 5, "{limited} events limited");
    assert!(replica.metrics.error_count("agent_rate_limited") >= 5);
}
