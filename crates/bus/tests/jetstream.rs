//! The bus's names and configuration against a real nats-server.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt as _;
use tink_bus::proto::{Event, GetWorkflowsResponse, event, get_workflows_response};
use tink_bus::{BusConfig, MSG_ID_HEADER};
use tink_testkit::nats::NatsServer;

async fn connect(nats: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(nats.url()).await.expect("connects");
    jetstream::new(client)
}

fn stop(workflow_id: &str) -> GetWorkflowsResponse {
    GetWorkflowsResponse {
        cmd: Some(get_workflows_response::Cmd::StopWorkflow(
            get_workflows_response::StopWorkflow {
                workflow_id: workflow_id.into(),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

#[tokio::test]
async fn ensure_streams_is_idempotent_and_configures_everything() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let config = BusConfig::default();
    let mut bus = tink_bus::ensure_streams(&js, &config).await.expect("first");
    let again = tink_bus::ensure_streams(&js, &config)
        .await
        .expect("second");
    assert_eq!(again.config, config);

    let info = bus.dispatch.info().await.expect("info");
    assert_eq!(info.config.subjects, vec!["tink.dispatch.*".to_string()]);
    assert_eq!(
        info.config.retention,
        jetstream::stream::RetentionPolicy::WorkQueue
    );
    let info = bus.events.info().await.expect("info");
    assert_eq!(info.config.subjects, vec!["tink.events.*".to_string()]);
    // Agent entries never expire (written once per stream); replica heartbeats do.
    let status = bus.presence.status().await.expect("kv status");
    assert_eq!(status.max_age(), Duration::ZERO);
    let status = bus.replicas.status().await.expect("kv status");
    assert_eq!(status.max_age(), config.presence_ttl);
}

/// A bus created before per-replica heartbeats (the presence bucket with the TTL as its
/// max age) is updated in place: its entries stop expiring, and the replicas bucket appears.
#[tokio::test]
async fn ensure_streams_updates_a_presence_bucket_from_before_replica_heartbeats() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let config = BusConfig::default();
    let old = jetstream::stream::Config {
        max_age: config.presence_ttl,
        ..tink_bus::presence_stream_config(&config)
    };
    js.create_stream(old)
        .await
        .expect("the old presence bucket");
    let bus = tink_bus::ensure_streams(&js, &config)
        .await
        .expect("updated");
    let status = bus.presence.status().await.expect("kv status");
    assert_eq!(status.max_age(), Duration::ZERO);
    assert_eq!(
        bus.replicas.status().await.expect("kv status").max_age(),
        config.presence_ttl
    );
}

#[tokio::test]
async fn events_are_stored_once_with_trace_and_dedup_headers() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let bus = tink_bus::ensure_streams(&js, &BusConfig::default())
        .await
        .expect("streams");
    let event = Event {
        workflow_id: "default/wf-1".into(),
        event_id: "e-1".into(),
        event: Some(event::Event::ActionStarted(event::ActionStarted {
            action_id: "a1".into(),
        })),
        ..Default::default()
    };
    let cx = opentelemetry::Context::new();
    let first = tink_bus::publish_event(&js, &event, &cx)
        .await
        .expect("stored");
    assert!(!first.duplicate);
    let retry = tink_bus::publish_event(&js, &event, &cx)
        .await
        .expect("retry");
    assert!(
        retry.duplicate,
        "a retry with the same event id is de-duplicated"
    );
    assert_eq!(retry.sequence, first.sequence);

    let message = bus
        .events
        .get_last_raw_message_by_subject("tink.events.default_2fwf-1")
        .await
        .expect("stored message");
    assert_eq!(
        tink_bus::decode_event(&message.payload).expect("decodes"),
        event
    );
    let msg_id = message
        .headers
        .get(MSG_ID_HEADER)
        .map(|v| v.as_str().to_string());
    assert_eq!(msg_id.as_deref(), Some("default_2fwf-1.e-1"));

    // An invalid event is refused before it reaches NATS.
    let invalid = Event {
        workflow_id: "default/wf-1".into(),
        ..Default::default()
    };
    assert!(matches!(
        tink_bus::publish_event(&js, &invalid, &cx).await,
        Err(tink_bus::BusError::Invalid(_))
    ));
}

#[tokio::test]
async fn an_agents_queue_yields_its_commands_in_order_only() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let config = BusConfig::default();
    let bus = tink_bus::ensure_streams(&js, &config)
        .await
        .expect("streams");
    let cx = opentelemetry::Context::new();
    let agent = "aa:bb:cc:dd:ee:01";
    for (i, wf) in ["ns/one", "ns/two"].into_iter().enumerate() {
        tink_bus::publish_command(&js, agent, &stop(wf), &format!("m{i}"), &cx)
            .await
            .expect("published");
    }
    tink_bus::publish_command(&js, "another", &stop("ns/other"), "m9", &cx)
        .await
        .expect("published");

    // Read, delete, read the next: the agent's commands in order, never another agent's.
    let mut from = 1;
    for expected in ["ns/one", "ns/two"] {
        let message = tink_bus::next_command(&bus.dispatch, agent, from)
            .await
            .expect("read")
            .expect("a command");
        let command = tink_bus::decode_command(&message.payload).expect("decodes");
        assert_eq!(tink_bus::command_workflow_id(&command), Some(expected));
        // Reading does not take it: it is there until deleted.
        assert!(
            tink_bus::command_queued(&bus.dispatch, message.sequence)
                .await
                .expect("read")
        );
        assert!(
            tink_bus::delete_command(&bus.dispatch, message.sequence)
                .await
                .expect("deleted")
        );
        assert!(
            !tink_bus::command_queued(&bus.dispatch, message.sequence)
                .await
                .expect("read")
        );
        // Deleting it twice (two replicas saw the receipt) is no error.
        assert!(
            !tink_bus::delete_command(&bus.dispatch, message.sequence)
                .await
                .expect("already gone")
        );
        from = message.sequence + 1;
    }
    assert!(
        tink_bus::next_command(&bus.dispatch, agent, 1)
            .await
            .expect("read")
            .is_none(),
        "the queue is empty"
    );
    let other = tink_bus::next_command(&bus.dispatch, "another", 1)
        .await
        .expect("read")
        .expect("the other agent's command is still there");
    assert_eq!(
        tink_bus::command_workflow_id(&tink_bus::decode_command(&other.payload).expect("decodes")),
        Some("ns/other")
    );
}

#[tokio::test]
async fn a_start_is_withdrawn_only_while_no_server_took_it() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let bus = tink_bus::ensure_streams(&js, &BusConfig::default())
        .await
        .expect("streams");
    let cx = opentelemetry::Context::new();
    let agent = "aa:bb:cc:dd:ee:02";
    for dispatch in ["ns/a-1", "ns/b-1"] {
        tink_bus::publish_command(
            &js,
            agent,
            &stop(dispatch),
            &format!("{dispatch}/start"),
            &cx,
        )
        .await
        .expect("published");
    }
    let targets = &bus.dispatch_targets;
    // Nobody took ns/a-1: withdrawn, and gone from the queue.
    assert_eq!(
        tink_bus::withdraw_command(&bus.dispatch, &bus.events, targets, agent, "ns/a-1")
            .await
            .expect("withdrawn"),
        tink_bus::Withdrawal::Withdrawn
    );
    assert_eq!(
        tink_bus::queued_command(&bus.dispatch, agent, "ns/a-1/start")
            .await
            .expect("read"),
        None
    );
    // A server recorded a target for ns/b-1 (it is about to forward it): the agent may have it.
    let target = tink_bus::DispatchTarget {
        agent_id: agent.to_string(),
        authenticated: true,
    };
    bus.dispatch_targets
        .put(
            tink_bus::workflow_token("ns/b-1").expect("token"),
            target.to_bytes().into(),
        )
        .await
        .expect("recorded");
    assert!(
        tink_bus::dispatch_forwarded(targets, "ns/b-1")
            .await
            .expect("read")
    );
    assert_eq!(
        tink_bus::withdraw_command(&bus.dispatch, &bus.events, targets, agent, "ns/b-1")
            .await
            .expect("withdrawal"),
        tink_bus::Withdrawal::MaybeDelivered
    );
    // Nothing queued any more: nothing to withdraw.
    assert_eq!(
        tink_bus::withdraw_command(&bus.dispatch, &bus.events, targets, agent, "ns/b-1")
            .await
            .expect("withdrawal"),
        tink_bus::Withdrawal::NotQueued
    );
}

#[tokio::test]
async fn the_controller_consumer_reads_every_workflows_events() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let bus = tink_bus::ensure_streams(&js, &BusConfig::default())
        .await
        .expect("streams");
    let cx = opentelemetry::Context::new();
    for wf in ["ns/a", "other/b"] {
        let event = Event {
            workflow_id: wf.into(),
            event: Some(event::Event::WorkflowRejected(event::WorkflowRejected {
                failure_reason: Some("AgentBusy".into()),
                failure_message: "busy".into(),
            })),
            ..Default::default()
        };
        tink_bus::publish_event(&js, &event, &cx)
            .await
            .expect("stored");
    }
    let consumer = bus
        .events
        .create_consumer(tink_bus::events_consumer_config(Duration::from_secs(30)))
        .await
        .expect("consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("in time")
            .expect("a message")
            .expect("no error");
        seen.push(
            tink_bus::workflow_from_events_subject(&message.subject).expect("events subject"),
        );
        message.ack().await.expect("acked");
    }
    assert_eq!(seen, ["ns/a", "other/b"]);
}

#[tokio::test]
async fn verify_finds_what_ensure_made_and_names_what_is_missing_or_different() {
    let nats = NatsServer::start().await.expect("nats");
    let js = connect(&nats).await;
    let config = BusConfig::default();
    // Nothing created yet: verify creates nothing and names the first missing stream.
    let e = tink_bus::verify_streams(&js, &config)
        .await
        .expect_err("nothing exists yet");
    assert!(
        matches!(
            e,
            tink_bus::BusError::Missing {
                what: "stream",
                name: "TINK_DISPATCH"
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("tink-controller"), "{e}");
    assert!(
        js.get_stream(tink_bus::DISPATCH_STREAM).await.is_err(),
        "verify created a stream"
    );

    let bus = tink_bus::ensure_streams(&js, &config)
        .await
        .expect("ensure");
    let verified = tink_bus::verify_streams(&js, &config)
        .await
        .expect("verify finds everything");
    assert_eq!(verified.config, config);

    // The dispatch targets bucket: one revision per key, kept as long as events, bounded with
    // the oldest dropped first (a full bucket never refuses a new dispatch's record).
    let info = js
        .get_stream(tink_bus::DISPATCH_TARGETS_STREAM)
        .await
        .expect("targets stream")
        .info()
        .await
        .expect("info")
        .clone();
    assert_eq!(info.config.max_messages_per_subject, 1);
    assert_eq!(info.config.max_age, config.events_max_age);
    assert_eq!(
        info.config.discard,
        async_nats::jetstream::stream::DiscardPolicy::Old
    );
    assert_eq!(info.config.max_bytes, config.dispatch_targets_max_bytes);
    assert!(info.config.max_bytes > 0);
    assert_eq!(info.config.num_replicas, config.replicas);
    bus.dispatch_targets
        .put("wf", "agent-1".into())
        .await
        .expect("put");
    bus.dispatch_targets
        .put("wf", "agent-2".into())
        .await
        .expect("put again");
    let state = js
        .get_stream(tink_bus::DISPATCH_TARGETS_STREAM)
        .await
        .expect("targets stream")
        .info()
        .await
        .expect("info")
        .state
        .clone();
    assert_eq!(state.messages, 1, "one revision kept per key");
    let entry = bus.dispatch_targets.entry("wf").await.expect("entry");
    assert_eq!(entry.expect("stored").value, "agent-2");

    // A bucket that disappeared is named as a bucket.
    js.delete_stream(tink_bus::DISPATCH_TARGETS_STREAM)
        .await
        .expect("delete");
    let e = tink_bus::verify_streams(&js, &config)
        .await
        .expect_err("the targets bucket is gone");
    assert!(
        matches!(
            e,
            tink_bus::BusError::Missing {
                what: "KV bucket",
                name: "tink_dispatch_targets"
            }
        ),
        "{e:?}"
    );

    // A stream with other subjects (another version made it) is refused, naming the field.
    tink_bus::ensure_streams(&js, &config)
        .await
        .expect("ensure");
    let mut other = tink_bus::events_stream_config(&config);
    other.subjects = vec!["tink.events.*.*".into()];
    js.update_stream(other).await.expect("update");
    let e = tink_bus::verify_streams(&js, &config)
        .await
        .expect_err("different subjects");
    assert!(
        matches!(
            e,
            tink_bus::BusError::Mismatch {
                stream: "TINK_EVENTS",
                field: "subjects",
                ..
            }
        ),
        "{e:?}"
    );
}
