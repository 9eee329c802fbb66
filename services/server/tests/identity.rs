//! Agent identity against a real server and real NATS: the session token, client certificates,
//! and the refusals an impostor meets.

mod common;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use tink_bus::proto::workflow_service_client::WorkflowServiceClient;
use tink_bus::proto::{Event, GetWorkflowsRequest, PublishEventRequest, event};
use tink_server::ServerConfig;
use tink_server::auth::TOKEN_HEADER;
use tink_testkit::nats::NatsServer;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const AGENT: &str = "aa:bb:cc:dd:ee:01";
const OTHER: &str = "aa:bb:cc:dd:ee:02";

async fn strict(nats_url: &str, tls: Option<tink_server::TlsConfig>) -> Replica {
    let mut config = ServerConfig::new(nats_url, "server-a");
    config.bus = bus_config();
    config.tls = tls;
    Replica::start_config(config).await
}

/// Opens a stream; the token the server issued, if any.
async fn open(
    client: &mut WorkflowServiceClient<Channel>,
    agent: &str,
    token: Option<&str>,
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
    let response = client.get_workflows(request).await?;
    let issued = response
        .metadata()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((response.into_inner(), issued))
}

fn started(workflow_id: &str, claimed_agent: &str) -> Event {
    Event {
        workflow_id: workflow_id.into(),
        agent_id: claimed_agent.into(),
        event_id: uuid::Uuid::new_v4().to_string(),
        event: Some(event::Event::ActionStarted(event::ActionStarted {
            action_id: "a1".into(),
        })),
        ..Default::default()
    }
}

async fn publish(
    client: &mut WorkflowServiceClient<Channel>,
    event: Event,
    token: Option<&str>,
) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(PublishEventRequest { event: Some(event) });
    if let Some(t) = token {
        request
            .metadata_mut()
            .insert(TOKEN_HEADER, t.parse().expect("ascii"));
    }
    client.publish_event(request).await.map(|_| ())
}

#[tokio::test]
async fn an_impostor_gets_no_command_and_leaves_the_real_agent_alone() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = strict(&nats.url(), None).await;
    let mut real = replica.client().await;
    let (mut commands, token) = open(&mut real, AGENT, None).await.expect("first stream");
    let token = token.expect("the first stream of an agent gets a token");

    // Someone else on the network claims the same MAC, without the token or with a wrong one.
    let mut impostor = replica.client().await;
    for wrong in [None, Some("not-the-token")] {
        let status = open(&mut impostor, AGENT, wrong)
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert!(
            status.message().contains("tinkctl agent reset"),
            "{status:?}"
        );
    }
    // The real agent's stream is untouched and still gets its commands.
    dispatch(&js, AGENT, "ns/wf").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/wf");
    // A reconnect of the real agent with its token is admitted, and keeps the same token.
    let (_again, reissued) = open(&mut real, AGENT, Some(&token))
        .await
        .expect("reconnect");
    assert_eq!(reissued, None);
    assert_eq!(replica.metrics.error_count("impostor_stream"), 2);
}

/// One spelling of an agent id: any other (upper case, spaces, other MAC separators) is refused
/// before anything is looked up, on streams and events alike, so it can neither take the
/// machine's commands (with their secrets) nor disturb its session.
#[tokio::test]
async fn other_spellings_of_an_agent_id_are_refused() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = strict(&nats.url(), None).await;
    let mut real = replica.client().await;
    let (mut commands, token) = open(&mut real, AGENT, None).await.expect("first stream");
    let token = token.expect("token");
    let spellings = [
        "AA:BB:CC:DD:EE:01",
        " aa:bb:cc:dd:ee:01",
        "aa:bb:cc:dd:ee:01 ",
        "aa-bb-cc-dd-ee-01",
        "aabbccddee01",
        "aabb.ccdd.ee01",
    ];
    let mut impostor = replica.client().await;
    for spelled in spellings {
        for presented in [None, Some(token.as_str())] {
            let status = open(&mut impostor, spelled, presented)
                .await
                .expect_err("another spelling");
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{spelled:?}: {status:?}"
            );
            assert!(
                status.message().contains("agent_id") && status.message().contains(AGENT),
                "names the field and the canonical form: {status:?}"
            );
        }
        let status = publish(&mut impostor, started("ns/x", spelled), Some(&token))
            .await
            .expect_err("another spelling");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{spelled:?}: {status:?}"
        );
        assert!(status.message().contains("event.agent_id"), "{status:?}");
    }
    // Nothing of the impostor reached the bus: one presence entry, the real agent's.
    let presence = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("bucket");
    let mut keys: Vec<String> =
        futures::TryStreamExt::try_collect(presence.keys().await.expect("keys"))
            .await
            .expect("keys");
    keys.sort();
    assert_eq!(keys, [tink_bus::agent_token(AGENT).expect("token")]);
    // The real agent still gets its command.
    dispatch(&js, AGENT, "ns/wf").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/wf");
    assert_eq!(
        replica.metrics.error_count("invalid_agent_id"),
        3 * spellings.len() as u64
    );
}

/// An agent with its own session cannot confirm, report or fail another machine's dispatch.
#[tokio::test]
async fn an_agent_cannot_report_for_another_agents_dispatch() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = strict(&nats.url(), None).await;
    let mut a = replica.client().await;
    let (mut a_stream, a_token) = open(&mut a, AGENT, None).await.expect("stream");
    let a_token = a_token.expect("token");
    let mut b = replica.client().await;
    let (_b_stream, b_token) = open(&mut b, OTHER, None).await.expect("stream");
    let b_token = b_token.expect("token");
    dispatch(&js, AGENT, "ns/a/1").await;
    dispatch(&js, AGENT, "ns/a/2").await;
    assert_eq!(next_workflow(&mut a_stream).await, "ns/a/1");
    // B, as itself and with its own token, confirms and fails A's dispatch: refused.
    let mut forged_receipt = receipt("ns/a/1", false).event.expect("event");
    forged_receipt.agent_id = OTHER.into();
    for event in [forged_receipt, started("ns/a/1", OTHER)] {
        let status = publish(&mut b, event, Some(&b_token))
            .await
            .expect_err("not B's dispatch");
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert!(
            status.message().contains("dispatched to agent"),
            "{status:?}"
        );
    }
    assert!(stored_events(&js, "ns/a/1").await.is_empty());
    // A's own receipt confirms it; the next command follows.
    let mut own = receipt("ns/a/1", false).event.expect("event");
    own.agent_id = AGENT.into();
    publish(&mut a, own, Some(&a_token))
        .await
        .expect("A's receipt");
    assert_eq!(next_workflow(&mut a_stream).await, "ns/a/2");
    assert_eq!(replica.metrics.error_count("not_dispatch_target"), 2);
}

#[tokio::test]
async fn events_need_the_token_and_are_stamped_with_the_authenticated_agent() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = strict(&nats.url(), None).await;
    let mut a = replica.client().await;
    let (_a_stream, a_token) = open(&mut a, AGENT, None).await.expect("stream");
    let a_token = a_token.expect("token");
    let mut b = replica.client().await;
    let (_b_stream, b_token) = open(&mut b, OTHER, None).await.expect("stream");
    let b_token = b_token.expect("token");

    // Without a token: refused.
    let status = publish(&mut a, started("ns/a", AGENT), None)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    // B forges an event for A's workflow, claiming to be A: refused.
    let status = publish(&mut b, started("ns/a", AGENT), Some(&b_token))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // A's own event is stored, stamped with A whatever the body said.
    publish(&mut a, started("ns/a", AGENT), Some(&a_token))
        .await
        .expect("stored");
    let stored = stored_events(&js, "ns/a").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].0.agent_id, AGENT);
    assert_eq!(replica.metrics.error_count("forged_event"), 1);
    assert_eq!(replica.metrics.error_count("unauthenticated_event"), 1);
}

#[tokio::test]
async fn a_reset_session_lets_a_reinstalled_machine_in() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = strict(&nats.url(), None).await;
    let mut old = replica.client().await;
    let (_old_stream, _token) = open(&mut old, AGENT, None).await.expect("stream");
    // The machine is re-installed: its new agent has no token and is refused...
    let mut new = replica.client().await;
    assert_eq!(
        open(&mut new, AGENT, None)
            .await
            .expect_err("refused")
            .code(),
        Code::PermissionDenied
    );
    // ...until the operator resets the session (what `tinkctl agent reset` does).
    let bucket = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("bucket");
    bucket
        .delete(tink_bus::agent_token(AGENT).expect("token"))
        .await
        .expect("reset");
    let (_stream, token) = open(&mut new, AGENT, None)
        .await
        .expect("admitted after the reset");
    assert!(token.is_some(), "a new session token");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate naming `agent`.
fn pki(agent: &str) -> (String, String, String, String, String) {
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_params(&ca, &ca_key);

    let mut server = CertificateParams::default();
    server
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().unwrap();
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();

    let mut client = CertificateParams::default();
    client.subject_alt_names.push(SanType::URI(
        format!("spiffe://tinkerbell/agent/{agent}")
            .as_str()
            .try_into()
            .unwrap(),
    ));
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().unwrap();
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();
    (
        ca_cert.pem(),
        server_cert.pem(),
        server_key.serialize_pem(),
        client_cert.pem(),
        client_key.serialize_pem(),
    )
}

async fn mtls_client(
    addr: std::net::SocketAddr,
    ca: &str,
    cert: &str,
    key: &str,
) -> WorkflowServiceClient<Channel> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(cert, key))
        .domain_name("127.0.0.1");
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("TLS connects");
    WorkflowServiceClient::new(channel)
}

#[tokio::test]
async fn a_client_certificate_names_the_agent() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let (ca, server_cert, server_key, client_cert, client_key) = pki(AGENT);
    let replica = strict(
        &nats.url(),
        Some(tink_server::TlsConfig {
            cert_pem: server_cert.into_bytes(),
            key_pem: server_key.into_bytes(),
            client_ca_pem: Some(ca.clone().into_bytes()),
        }),
    )
    .await;
    let mut client = mtls_client(replica.addr, &ca, &client_cert, &client_key).await;
    // A stream for another agent id than the certificate's is refused, and so is the
    // certificate's own id spelled otherwise.
    let status = open(&mut client, OTHER, None).await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let status = open(&mut client, &AGENT.to_uppercase(), None)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // Its own id is admitted without any token, and events need none.
    let (mut commands, token) = open(&mut client, AGENT, None).await.expect("admitted");
    assert_eq!(token, None, "certificate sessions need no token");
    publish(&mut client, started("ns/c", ""), None)
        .await
        .expect("stored");
    let stored = stored_events(&js, "ns/c").await;
    assert_eq!(stored[0].0.agent_id, AGENT, "stamped from the certificate");
    // An event claiming another agent is refused.
    let status = publish(&mut client, started("ns/c", OTHER), None)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    // The certificate's stream receives the agent's commands.
    dispatch(&js, AGENT, "ns/d").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/d");
}

/// A certificate names its agent in whatever spelling the CA wrote; the stream must use the
/// canonical one, and matches it.
#[tokio::test]
async fn a_certificate_naming_its_agent_in_capitals_admits_the_canonical_id() {
    let nats = NatsServer::start().await.expect("nats");
    let (ca, server_cert, server_key, client_cert, client_key) = pki(&AGENT.to_uppercase());
    let replica = strict(
        &nats.url(),
        Some(tink_server::TlsConfig {
            cert_pem: server_cert.into_bytes(),
            key_pem: server_key.into_bytes(),
            client_ca_pem: Some(ca.clone().into_bytes()),
        }),
    )
    .await;
    let mut client = mtls_client(replica.addr, &ca, &client_cert, &client_key).await;
    let status = open(&mut client, &AGENT.to_uppercase(), None)
        .await
        .expect_err("the request's spelling must be canonical");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    open(&mut client, AGENT, None).await.expect("admitted");
}
