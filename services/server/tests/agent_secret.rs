//! Per-machine pre-shared secrets against a real server and real NATS: a machine whose entry is
//! in the agent secrets bucket is admitted only with its secret, on streams and events alike
//! (even its first session); other machines need none; an entry written while the server runs
//! applies at once; a "missing" entry refuses everyone.

mod common;

use common::*;
use tink_bus::proto::workflow_service_client::WorkflowServiceClient;
use tink_bus::proto::{GetWorkflowsRequest, PublishEventRequest};
use tink_server::ServerConfig;
use tink_server::auth::{TOKEN_HEADER, token_hash};
use tink_server::secrets::SECRET_HEADER;
use tink_testkit::nats::NatsServer;
use tonic::Code;
use tonic::transport::Channel;

const STRICT: &str = "aa:bb:cc:dd:ee:11";
const PLAIN: &str = "aa:bb:cc:dd:ee:12";
const SECRET: &str = "s3cr3t-for-machine-11";

async fn open(
    client: &mut WorkflowServiceClient<Channel>,
    agent: &str,
    token: Option<&str>,
    secret: Option<&str>,
) -> Result<(Commands, Option<String>), tonic::Status> {
    let mut request = tonic::Request::new(GetWorkflowsRequest {
        agent_id: agent.into(),
        instance_id: "i-1".into(),
    });
    if let Some(t) = token {
        request
            .metadata_mut()
            .insert(TOKEN_HEADER, t.parse().expect("ascii"));
    }
    if let Some(s) = secret {
        request
            .metadata_mut()
            .insert(SECRET_HEADER, s.parse().expect("ascii"));
    }
    let response = client.get_workflows(request).await?;
    let issued = response
        .metadata()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((response.into_inner(), issued))
}

async fn publish(
    client: &mut WorkflowServiceClient<Channel>,
    agent: &str,
    token: &str,
    secret: Option<&str>,
) -> Result<(), tonic::Status> {
    let mut event = action_started("ns/wf", "a1", &uuid::Uuid::new_v4().to_string())
        .event
        .expect("event");
    event.agent_id = agent.into();
    let mut request = tonic::Request::new(PublishEventRequest { event: Some(event) });
    request
        .metadata_mut()
        .insert(TOKEN_HEADER, token.parse().expect("ascii"));
    if let Some(s) = secret {
        request
            .metadata_mut()
            .insert(SECRET_HEADER, s.parse().expect("ascii"));
    }
    client.publish_event(request).await.map(|_| ())
}

#[tokio::test]
async fn a_machine_with_a_secret_is_admitted_only_with_it() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let bus = tink_bus::ensure_streams(&js, &bus_config())
        .await
        .expect("streams");
    let bucket = bus.agent_secrets.clone();
    // What the controller publishes: the hash of the machine's secret, under its agent token.
    bucket
        .put(
            tink_bus::agent_token(STRICT).expect("token"),
            token_hash(SECRET).into(),
        )
        .await
        .expect("put");
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    let replica = Replica::start_config(config).await;
    let mut client = replica.client().await;

    // Not even the first session without the secret, or with another one.
    let mut refused = None;
    for _ in 0..50 {
        match open(&mut client, STRICT, None, None).await {
            Err(s) if s.code() == Code::PermissionDenied => {
                refused = Some(s);
                break;
            }
            // The replica may not have loaded the bucket yet: retry as an agent would.
            Err(s) if s.code() == Code::Unavailable => {}
            Ok(_) => panic!("a stream without the secret was admitted"),
            Err(s) => panic!("unexpected {s:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let refused = refused.expect("refused without the secret");
    assert!(refused.message().contains(SECRET_HEADER), "{refused:?}");
    // Nor under another spelling of its id, which once named a machine with no secret.
    for spelled in [STRICT.to_uppercase(), format!(" {STRICT}")] {
        let status = open(&mut client, &spelled, None, None)
            .await
            .expect_err("another spelling");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{spelled:?}: {status:?}"
        );
    }
    let wrong = open(&mut client, STRICT, None, Some("guess"))
        .await
        .expect_err("refused with a wrong secret");
    assert_eq!(wrong.code(), Code::PermissionDenied);
    assert!(
        !wrong.message().contains(SECRET),
        "the secret is never echoed"
    );

    // With it: a session and a token.
    let (_commands, token) = open(&mut client, STRICT, None, Some(SECRET))
        .await
        .expect("admitted with the secret");
    let token = token.expect("a session token");

    // Events need the secret too, on top of the token.
    let e = publish(&mut client, STRICT, &token, None)
        .await
        .expect_err("an event without the secret");
    assert_eq!(e.code(), Code::PermissionDenied);
    publish(&mut client, STRICT, &token, Some(SECRET))
        .await
        .expect("an event with token and secret is stored");

    // A machine without an entry needs none.
    let (_plain, plain_token) = open(&mut client, PLAIN, None, None)
        .await
        .expect("a machine without a secret");
    publish(&mut client, PLAIN, &plain_token.expect("token"), None)
        .await
        .expect("its events are stored");

    // An unusable Secret (the controller writes "missing"): refused whatever is presented.
    bucket
        .put(
            tink_bus::agent_token(PLAIN).expect("token"),
            tink_bus::AGENT_SECRET_MISSING.into(),
        )
        .await
        .expect("put");
    eventually("the missing secret to refuse the machine", || {
        let mut client = client.clone();
        async move {
            matches!(
                open(&mut client, PLAIN, None, Some("missing")).await,
                Err(s) if s.code() == Code::PermissionDenied && s.message().contains("pre-shared secret")
            )
        }
    })
    .await;

    // The entry removed: no secret needed any more.
    bucket
        .delete(tink_bus::agent_token(STRICT).expect("token"))
        .await
        .expect("delete");
    eventually("the removed entry to apply", || {
        let mut client = client.clone();
        let token = token.clone();
        async move { publish(&mut client, STRICT, &token, None).await.is_ok() }
    })
    .await;
    replica.stop().await.expect("stops");
}
