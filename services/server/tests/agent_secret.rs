//! Per-machine boot secrets against a real server and real NATS: a machine whose entry is in the
//! agent secrets bucket gets a session only with its secret (even its first one); other machines
//! need none; an entry written while the server runs applies at once; a "missing" entry refuses
//! everyone. The secret is single-use: it creates one session, is recorded as exchanged, and is
//! refused afterwards, while the session's token (reconnects) and its events need no secret.

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

    // Events need only the token: the secret was needed to create the session.
    publish(&mut client, STRICT, &token, None)
        .await
        .expect("an event with the token is stored");

    // A machine without an entry needs none.
    let (plain, plain_token) = open(&mut client, PLAIN, None, None)
        .await
        .expect("a machine without a secret");
    publish(&mut client, PLAIN, &plain_token.expect("token"), None)
        .await
        .expect("its events are stored");
    drop(plain);
    end_session(&bus, PLAIN).await;

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
                Err(s) if s.code() == Code::PermissionDenied && s.message().contains("boot secret")
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

/// The used bucket's entry of `agent`, if any.
async fn used(bus: &tink_bus::Bus, agent: &str) -> Option<String> {
    bus.agent_secrets_used
        .get(tink_bus::agent_token(agent).expect("token"))
        .await
        .expect("get")
        .map(|v| String::from_utf8_lossy(&v).to_string())
}

/// Ends the agent's session as expiry or `tinkctl agent reset` does: its presence entry goes.
async fn end_session(bus: &tink_bus::Bus, agent: &str) {
    bus.presence
        .purge(tink_bus::agent_token(agent).expect("token"))
        .await
        .expect("purge presence");
}

#[tokio::test]
async fn a_boot_secret_creates_one_session() {
    const NEXT: &str = "the-next-boots-secret";
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let bus = tink_bus::ensure_streams(&js, &bus_config())
        .await
        .expect("streams");
    let key = tink_bus::agent_token(STRICT).expect("token");
    bus.agent_secrets
        .put(&key, token_hash(SECRET).into())
        .await
        .expect("put");
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    let replica = Replica::start_config(config).await;
    let mut client = replica.client().await;
    eventually("the replica to load the secrets", || {
        let mut client = client.clone();
        async move {
            matches!(open(&mut client, STRICT, None, Some("guess")).await,
                Err(s) if s.code() == Code::PermissionDenied)
        }
    })
    .await;

    // Several streams race with the secret: exactly one session is created with it.
    let attempts = futures::future::join_all((0..4).map(|_| {
        let mut client = client.clone();
        async move { open(&mut client, STRICT, None, Some(SECRET)).await }
    }))
    .await;
    let mut sessions = Vec::new();
    for attempt in attempts {
        match attempt {
            Ok(session) => sessions.push(session),
            Err(s) => assert_eq!(s.code(), Code::PermissionDenied, "{s:?}"),
        }
    }
    assert_eq!(sessions.len(), 1, "one secret, one session");
    let (commands, token) = sessions.pop().expect("a session");
    let token = token.expect("a session token");
    assert_eq!(
        used(&bus, STRICT).await,
        Some(token_hash(SECRET)),
        "the exchange is recorded before the stream is answered"
    );

    // The session's token is enough to reconnect (no secret) and for events.
    drop(commands);
    let (commands, issued) = open(&mut client, STRICT, Some(&token), None)
        .await
        .expect("a reconnect with the token needs no secret");
    assert_eq!(issued, None, "the same session");
    publish(&mut client, STRICT, &token, None)
        .await
        .expect("an event needs no secret");

    // The session ends (expiry, reset): the secret, already exchanged, creates no other.
    drop(commands);
    end_session(&bus, STRICT).await;
    let reused = open(&mut client, STRICT, None, Some(SECRET))
        .await
        .expect_err("a used secret");
    assert_eq!(reused.code(), Code::PermissionDenied);
    assert!(
        reused.message().contains("already exchanged")
            && reused.message().contains("tinkctl agent reset"),
        "{reused:?}"
    );
    assert!(!reused.message().contains(SECRET), "never echoed");
    // Nor does the ended session's token, without the secret.
    let stale = open(&mut client, STRICT, Some(&token), None)
        .await
        .expect_err("an ended session's token");
    assert_eq!(stale.code(), Code::PermissionDenied);
    assert!(stale.message().contains(SECRET_HEADER), "{stale:?}");

    // The operator lets this boot in again (`tinkctl agent reset` purges the exchange).
    bus.agent_secrets_used.purge(&key).await.expect("purge");
    let (commands, again) = open(&mut client, STRICT, None, Some(SECRET))
        .await
        .expect("the same secret once more after a reset");
    assert!(again.is_some());
    drop(commands);
    end_session(&bus, STRICT).await;
    open(&mut client, STRICT, None, Some(SECRET))
        .await
        .expect_err("and then not again");

    // The controller's next generation (its hash first, then the exchanged one's for this
    // agent): the exchanged value stays refused, the new one creates a session, once.
    bus.agent_secrets
        .put(
            &key,
            format!("{} {}", token_hash(NEXT), token_hash(SECRET)).into(),
        )
        .await
        .expect("put");
    eventually("the next generation to apply", || {
        let mut client = client.clone();
        async move { open(&mut client, STRICT, None, Some(NEXT)).await.is_ok() }
    })
    .await;
    assert_eq!(used(&bus, STRICT).await, Some(token_hash(NEXT)));
    end_session(&bus, STRICT).await;
    // Neither the exchanged value nor the previous one (until the controller's next rotation
    // drops it, the previous is still listed, but only an agent reset lets it in).
    for value in [NEXT, SECRET] {
        let e = open(&mut client, STRICT, None, Some(value))
            .await
            .expect_err("used");
        assert_eq!(e.code(), Code::PermissionDenied, "{value}: {e:?}");
        assert!(e.message().contains("already exchanged"), "{value}: {e:?}");
    }
    // A reset lets the same boot's agent (which holds the previous value) in again, once.
    bus.agent_secrets_used.purge(&key).await.expect("purge");
    let (commands, _) = open(&mut client, STRICT, None, Some(SECRET))
        .await
        .expect("the previous value after a reset");
    drop(commands);
    end_session(&bus, STRICT).await;
    open(&mut client, STRICT, None, Some(SECRET))
        .await
        .expect_err("and then not again");
    replica.stop().await.expect("stops");
}
