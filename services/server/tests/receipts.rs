//! Delivery receipts: a command counts as delivered when the agent confirmed it, not when the
//! transport took it.

mod common;

use std::time::Duration;

use common::*;
use tink_bus::proto::{Event, PublishEventRequest, event, get_workflows_response};
use tink_server::ServerConfig;
use tink_testkit::nats::NatsServer;
use tonic::Code;

const AGENT: &str = "aa:bb:cc:dd:ee:ff";

async fn replica(nats_url: &str, receipt_timeout: Duration) -> Replica {
    let mut config = ServerConfig::new(nats_url, "server-a");
    config.bus = tink_bus::BusConfig {
        receipt_timeout,
        ..bus_config()
    };
    config.allow_unauthenticated_agents = true;
    Replica::start_config(config).await
}

fn canceled(workflow_id: &str) -> PublishEventRequest {
    PublishEventRequest {
        event: Some(Event {
            workflow_id: workflow_id.into(),
            event_id: uuid::Uuid::new_v4().to_string(),
            agent_id: AGENT.into(),
            event: Some(event::Event::WorkflowCanceled(event::WorkflowCanceled {
                action_id: None,
                reason: Some("Canceled".into()),
                message: None,
            })),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn an_unconfirmed_command_is_handed_back_and_delivered_again() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica(&nats.url(), Duration::from_secs(1)).await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    dispatch(&js, AGENT, "ns/one").await;
    dispatch(&js, AGENT, "ns/two").await;
    // The transport delivers it, but the agent never confirms (its connection died silently,
    // or it crashed right after reading): the server hands the command back and ends the
    // stream so the agent reconnects.
    assert_eq!(next_workflow(&mut commands).await, "ns/one");
    let status = end_status(&mut commands).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("did not confirm"), "{status:?}");
    assert_eq!(replica.metrics.error_count("receipt_timeout"), 1);
    // On the next stream the same command comes first, and only a confirmed one lets the next
    // one through.
    let mut commands = connect_agent(&mut client, AGENT).await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/one");
    assert_eq!(receive(&mut client, &mut commands).await, "ns/two");
}

#[tokio::test]
async fn a_start_an_agent_already_received_is_not_forwarded_again() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica(&nats.url(), Duration::from_secs(30)).await;
    let mut client = replica.client().await;
    // A previous agent process received `ns/ran` (its events are stored) and died before the
    // command was acknowledged; the command comes around again.
    store_event(&js, action_started("ns/ran", "a1", "e1")).await;
    dispatch(&js, AGENT, "ns/ran").await;
    dispatch(&js, AGENT, "ns/next").await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/next");
    assert_eq!(replica.metrics.error_count("already_received"), 1);
}

#[tokio::test]
async fn a_stop_is_confirmed_by_the_cancellation_of_an_agent_without_receipts() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica(&nats.url(), Duration::from_secs(30)).await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    let stop = tink_bus::proto::GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StopWorkflow(
            get_workflows_response::StopWorkflow {
                workflow_id: "ns/stopped".into(),
                reason: Some("Deleted".into()),
                message: None,
            },
        )),
        ..Default::default()
    };
    tink_bus::publish_command(
        &js,
        AGENT,
        &stop,
        "ns/stopped.stop",
        &opentelemetry::Context::new(),
    )
    .await
    .expect("stored");
    dispatch(&js, AGENT, "ns/after").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/stopped");
    // An old-style progress event about the workflow is not a stop's receipt...
    client
        .publish_event(action_started("ns/stopped", "a1", "late"))
        .await
        .expect("stored");
    let early = tokio::time::timeout(Duration::from_millis(500), commands.message()).await;
    assert!(
        early.is_err(),
        "the next command came before the stop was confirmed"
    );
    // ...its cancellation is.
    client
        .publish_event(canceled("ns/stopped"))
        .await
        .expect("stored");
    assert_eq!(receive(&mut client, &mut commands).await, "ns/after");
}

/// An event of another agent about a dispatch is no sign that the dispatch's agent received
/// it: the start is forwarded all the same (an older replica may have stored such an event
/// before events were checked against their dispatch's target).
#[tokio::test]
async fn another_agents_event_does_not_withhold_a_start() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica(&nats.url(), Duration::from_secs(30)).await;
    let mut client = replica.client().await;
    let mut forged = action_started("ns/mine", "a1", "e1");
    if let Some(event) = forged.event.as_mut() {
        event.agent_id = "aa:bb:cc:dd:ee:99".into();
    }
    store_event(&js, forged).await;
    dispatch(&js, AGENT, "ns/mine").await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/mine");
    assert_eq!(replica.metrics.error_count("already_received"), 0);
}

/// Another agent's receipt for a dispatch is refused and does not count: the command stays in
/// flight until its own agent confirms it.
#[tokio::test]
async fn a_receipt_from_another_agent_is_refused_and_does_not_confirm() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica(&nats.url(), Duration::from_secs(30)).await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    dispatch(&js, AGENT, "ns/one").await;
    dispatch(&js, AGENT, "ns/two").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/one");
    // Another machine (with a stream of its own) confirms AGENT's command as itself. (Without
    // naming an agent it would be taken for AGENT: in this mode whoever knows the dispatch id
    // of a stream without credentials can report for it; see identity.rs for the strict mode.)
    let other = "aa:bb:cc:dd:ee:98";
    let mut intruder = replica.client().await;
    let _own = connect_agent(&mut intruder, other).await;
    let mut forged = receipt("ns/one", false);
    if let Some(event) = forged.event.as_mut() {
        event.agent_id = other.into();
    }
    let status = intruder
        .publish_event(forged)
        .await
        .expect_err("another agent's receipt");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("event.workflow_id"), "{status:?}");
    assert!(
        stored_events(&js, "ns/one").await.is_empty(),
        "nothing was stored"
    );
    // AGENT's own receipt confirms it, and only then the next command comes.
    client
        .publish_event(receipt("ns/one", false))
        .await
        .expect("the agent's own receipt");
    assert_eq!(receive(&mut client, &mut commands).await, "ns/two");
    assert_eq!(replica.metrics.error_count("not_dispatch_target"), 1);
}

/// A start queued for two agents (a controller's bug, or two controllers) reaches one of
/// them, even when two replicas forward it at the same moment: the first target record of a
/// dispatch is a create-if-absent write, so exactly one replica's claim wins and the other
/// drops its copy. Each round's two copies are announced to both streams at once.
#[tokio::test]
async fn a_start_queued_for_two_agents_reaches_one_even_from_two_replicas_at_once() {
    const OTHER: &str = "aa:bb:cc:dd:ee:01";
    const ROUNDS: usize = 12;
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let a = Replica::start(&nats.url(), "server-a").await;
    let b = Replica::start(&nats.url(), "server-b").await;
    let mut client_a = a.client().await;
    let mut client_b = b.client().await;
    let mut commands_a = connect_agent(&mut client_a, AGENT).await;
    let mut commands_b = connect_agent(&mut client_b, OTHER).await;
    let dropped =
        || a.metrics.error_count("dispatch_target") + b.metrics.error_count("dispatch_target");
    let mut won = [0usize; 2];
    for round in 0..ROUNDS {
        let workflow_id = format!("ns/race-{round}");
        let start = start_command(&workflow_id);
        let (id_a, id_b) = (format!("{workflow_id}.a"), format!("{workflow_id}.b"));
        let cx = opentelemetry::Context::new();
        let (first, second) = tokio::join!(
            tink_bus::publish_command(&js, AGENT, &start, &id_a, &cx),
            tink_bus::publish_command(&js, OTHER, &start, &id_b, &cx),
        );
        first.expect("stored for one agent");
        second.expect("stored for the other");
        // Whichever stream gets it confirms it as its agent does.
        let (winner, got) = within("the start on one stream", async {
            tokio::select! {
                m = commands_a.message() => (0, m),
                m = commands_b.message() => (1, m),
            }
        })
        .await;
        let command = got.expect("stream ok").expect("a command");
        assert_eq!(
            tink_bus::command_workflow_id(&command),
            Some(workflow_id.as_str()),
            "round {round}: a start of an earlier round reached the other agent too"
        );
        won[winner] += 1;
        let mut confirm = receipt(&workflow_id, false);
        if winner == 1
            && let Some(event) = confirm.event.as_mut()
        {
            event.agent_id = OTHER.into();
        }
        let client = if winner == 0 {
            &mut client_a
        } else {
            &mut client_b
        };
        client.publish_event(confirm).await.expect("receipt stored");
        // The loser's replica found the record naming the winner and dropped its copy.
        eventually("the other copy dropped", || async {
            dropped() == round as u64 + 1
        })
        .await;
    }
    // Nothing more on either stream: no copy got through late.
    for commands in [&mut commands_a, &mut commands_b] {
        let late = tokio::time::timeout(Duration::from_millis(500), commands.message()).await;
        assert!(late.is_err(), "a late copy: {late:?}");
    }
    assert_eq!(won[0] + won[1], ROUNDS);
}

/// A target record that cannot be parsed names nobody: the start is forwarded and the record
/// replaced with this agent's, not retried for ever.
#[tokio::test]
async fn a_malformed_target_record_is_replaced_and_the_start_forwarded() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica(&nats.url(), Duration::from_secs(30)).await;
    let targets = js
        .get_key_value(tink_bus::DISPATCH_TARGETS_BUCKET)
        .await
        .expect("the targets bucket");
    let key = tink_bus::workflow_token("ns/garbled").expect("a key");
    targets
        .put(&key, "not json".into())
        .await
        .expect("a garbled record");
    dispatch(&js, AGENT, "ns/garbled").await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/garbled");
    let entry = targets.get(&key).await.expect("read").expect("a record");
    let target = tink_bus::DispatchTarget::from_bytes(&entry).expect("a readable record");
    assert_eq!(target.agent_id, AGENT);
    assert_eq!(replica.metrics.error_count("dispatch_target"), 0);
}
