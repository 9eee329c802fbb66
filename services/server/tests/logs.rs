//! `PublishLogs` against real NATS and an in-process replica: lines are stored per workflow and
//! action, a resent batch is stored once, malformed batches are refused naming the field, and
//! an agent cannot write the output of a workflow it did not receive (nor without credentials).

mod common;

use common::*;
use tink_bus::proto::{Event, LogBatch, LogLine, PublishEventRequest, event, log_line};
use tink_server::ServerConfig;
use tink_testkit::nats::NatsServer;
use tonic::Code;

fn batch(
    agent: &str,
    workflow: &str,
    action: &str,
    seqs: std::ops::RangeInclusive<u64>,
) -> LogBatch {
    LogBatch {
        workflow_id: workflow.into(),
        action_id: action.into(),
        agent_id: agent.into(),
        lines: seqs
            .map(|s| LogLine {
                sequence: s,
                stream: log_line::Stream::Stdout as i32,
                text: format!("{workflow} {action} line {s}"),
                ..Default::default()
            })
            .collect(),
        dropped_lines: 0,
    }
}

fn receipt_of(agent: &str, workflow: &str) -> PublishEventRequest {
    let mut received = event::WorkflowReceived::default();
    received.set_command(event::workflow_received::Command::Start);
    PublishEventRequest {
        event: Some(Event {
            workflow_id: workflow.into(),
            event_id: uuid::Uuid::new_v4().to_string(),
            agent_id: agent.into(),
            event: Some(event::Event::WorkflowReceived(received)),
            ..Default::default()
        }),
    }
}

/// Every batch stored under `filter`, in order.
async fn stored(js: &async_nats::jetstream::Context, filter: String) -> Vec<LogBatch> {
    use futures::StreamExt as _;
    let stream = js
        .get_stream(tink_bus::LOGS_STREAM)
        .await
        .expect("logs stream");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: filter,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let pending = consumer.cached_info().num_pending;
    let mut messages = consumer.messages().await.expect("messages");
    let mut out = Vec::new();
    for _ in 0..pending {
        let message = within("a stored batch", messages.next())
            .await
            .expect("a message")
            .expect("no error");
        out.push(tink_bus::decode_log_batch(&message.payload).expect("valid batch"));
    }
    out
}

#[tokio::test]
async fn logs_are_stored_per_workflow_and_action_once_and_only_from_the_owner() {
    let nats = NatsServer::start().await.expect("nats");
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let js = jetstream(&nats.url()).await;
    let (a, b) = ("aa:bb:cc:dd:ee:01", "aa:bb:cc:dd:ee:02");
    let (wf_a, wf_b) = ("ns/one/uid-1/1", "ns/two/uid-2/1");
    let _stream_a = receive_dispatch(&js, &mut client, a, wf_a).await;
    let _stream_b = receive_dispatch(&js, &mut client, b, wf_b).await;
    client
        .publish_event(receipt_of(a, wf_a))
        .await
        .expect("receipt a");
    client
        .publish_event(receipt_of(b, wf_b))
        .await
        .expect("receipt b");

    // Two batches of one action, one of another; the first sent twice (a resend).
    let first = batch(a, wf_a, "0-disk", 1..=3);
    let ack = client
        .publish_logs(first.clone())
        .await
        .expect("stored")
        .into_inner();
    assert_eq!(ack.stored_lines, 3);
    let ack = client
        .publish_logs(first)
        .await
        .expect("a resend is OK")
        .into_inner();
    assert_eq!(ack.stored_lines, 0, "the resend is a duplicate");
    client
        .publish_logs(batch(a, wf_a, "0-disk", 4..=5))
        .await
        .expect("stored");
    client
        .publish_logs(batch(a, wf_a, "1-boot", 1..=2))
        .await
        .expect("stored");
    client
        .publish_logs(batch(b, wf_b, "0-disk", 1..=2))
        .await
        .expect("stored");

    let disk = stored(&js, tink_bus::logs_subject(wf_a, "0-disk").unwrap()).await;
    let seqs: Vec<u64> = disk
        .iter()
        .flat_map(|b| b.lines.iter().map(|l| l.sequence))
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5], "in order, once");
    assert!(disk.iter().all(|b| b.agent_id == a));
    let all_a = stored(&js, tink_bus::logs_workflow_filter(wf_a).unwrap()).await;
    assert_eq!(all_a.len(), 3);
    assert!(
        all_a
            .iter()
            .flat_map(|b| &b.lines)
            .all(|l| l.text.starts_with(wf_a)),
        "workflow two's lines never show under workflow one"
    );
    let all_b = stored(&js, tink_bus::logs_workflow_filter(wf_b).unwrap()).await;
    assert_eq!(all_b.len(), 1);
    assert_eq!(replica.metrics.log_lines_received.get(), 9);
    assert_eq!(replica.metrics.log_batches_duplicate.get(), 1);
    assert!(replica.metrics.log_bytes_stored.get() > 0);

    // Agent b writing workflow one's output, and anybody writing an unknown workflow's.
    let status = client
        .publish_logs(batch(b, wf_a, "0-disk", 6..=6))
        .await
        .expect_err("not b's workflow");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("batch.workflow_id"), "{status:?}");
    let status = client
        .publish_logs(batch(a, "ns/none/uid-3/1", "0-disk", 1..=1))
        .await
        .expect_err("no such workflow");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");

    // Malformed: the field is named.
    let mut empty = batch(a, wf_a, "0-disk", 7..=7);
    empty.lines.clear();
    let status = client.publish_logs(empty).await.expect_err("empty");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("batch.lines"), "{status:?}");
    let mut backwards = batch(a, wf_a, "0-disk", 8..=9);
    backwards.lines.reverse();
    let status = client
        .publish_logs(backwards)
        .await
        .expect_err("out of order");
    assert!(
        status.message().contains("batch.lines[1].sequence"),
        "{status:?}"
    );
    replica.stop().await.expect("stops");
}

#[tokio::test]
async fn logs_need_the_agents_session_token() {
    let nats = NatsServer::start().await.expect("nats");
    let mut config = ServerConfig::new(nats.url(), "server-a");
    config.bus = bus_config();
    let replica = Replica::start_config(config).await;
    let mut client = replica.client().await;
    let agent = "aa:bb:cc:dd:ee:03";
    let response = client
        .get_workflows(tink_bus::proto::GetWorkflowsRequest {
            agent_id: agent.into(),
            ..Default::default()
        })
        .await
        .expect("stream opens");
    let token = response
        .metadata()
        .get(tink_server::auth::TOKEN_HEADER)
        .expect("a token is issued")
        .clone();
    let _commands = response.into_inner();
    fn with_token<T>(
        message: T,
        token: &tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    ) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert(tink_server::auth::TOKEN_HEADER, token.clone());
        request
    }
    let wf = "ns/tok/uid/1";
    client
        .publish_event(with_token(receipt_of(agent, wf), &token))
        .await
        .expect("receipt");
    let status = client
        .publish_logs(batch(agent, wf, "0-a", 1..=1))
        .await
        .expect_err("no token");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    client
        .publish_logs(with_token(batch(agent, wf, "0-a", 1..=1), &token))
        .await
        .expect("with the token");
    replica.stop().await.expect("stops");
}

#[tokio::test]
async fn a_batch_resent_after_its_replica_was_killed_is_stored_once() {
    let nats = NatsServer::start().await.expect("nats");
    let a = ProcessReplica::start(&nats.url(), "server-a").await;
    let b = Replica::start(&nats.url(), "server-b").await;
    let js = jetstream(&nats.url()).await;
    let agent = "aa:bb:cc:dd:ee:04";
    let wf = "ns/killed/uid/1";
    let mut to_a = client(a.addr).await;
    let _stream = receive_dispatch(&js, &mut to_a, agent, wf).await;
    to_a.publish_event(receipt_of(agent, wf))
        .await
        .expect("receipt");
    // Replica A stores the batch; the agent never hears back because A is killed (SIGKILL).
    let sent = batch(agent, wf, "0-a", 1..=50);
    to_a.publish_logs(sent.clone()).await.expect("stored by A");
    a.kill().await;
    // The agent resends the same batch to B, then goes on.
    let mut to_b = b.client().await;
    let ack = to_b
        .publish_logs(sent)
        .await
        .expect("B answers")
        .into_inner();
    assert_eq!(ack.stored_lines, 0, "B recognised the resend");
    to_b.publish_logs(batch(agent, wf, "0-a", 51..=60))
        .await
        .expect("stored by B");
    let lines: Vec<u64> = stored(&js, tink_bus::logs_subject(wf, "0-a").unwrap())
        .await
        .iter()
        .flat_map(|b| b.lines.iter().map(|l| l.sequence))
        .collect();
    assert_eq!(lines, (1..=60).collect::<Vec<_>>());
    assert_eq!(b.metrics.log_batches_duplicate.get(), 1);
    b.stop().await.expect("stops");
}

/// The server stores a batch from the call's own task, so an agent that gives up on a call (its
/// deadline passed, its connection dropped) can cut the store anywhere: before the publish, after
/// it and before the acknowledgement, or after it. Whatever the point, the agent's resend leaves
/// each line stored exactly once and the replica keeps serving.
#[tokio::test]
async fn a_call_abandoned_anywhere_then_resent_stores_each_line_once() {
    let nats = NatsServer::start().await.expect("nats");
    let replica = Replica::start(&nats.url(), "server-a").await;
    let js = jetstream(&nats.url()).await;
    let agent = "aa:bb:cc:dd:ee:05";
    let wf = "ns/abandoned/uid/1";
    let mut client = replica.client().await;
    let _stream = receive_dispatch(&js, &mut client, agent, wf).await;
    client
        .publish_event(receipt_of(agent, wf))
        .await
        .expect("receipt");
    let mut abandoned = 0;
    for round in 0..40u64 {
        let sent = batch(agent, wf, "0-a", round * 10 + 1..=round * 10 + 10);
        // From cut at once to cut after the store: 0, 50, 100, ... 1,950 microseconds.
        let wait = std::time::Duration::from_micros(round * 50);
        let mut impatient = replica.client().await;
        if tokio::time::timeout(wait, impatient.publish_logs(sent.clone()))
            .await
            .is_err()
        {
            abandoned += 1;
        }
        drop(impatient);
        client
            .publish_logs(sent)
            .await
            .expect("the resend is answered");
    }
    assert!(abandoned > 0, "some calls were cut mid-way");
    let lines: Vec<u64> = stored(&js, tink_bus::logs_subject(wf, "0-a").unwrap())
        .await
        .iter()
        .flat_map(|b| b.lines.iter().map(|l| l.sequence))
        .collect();
    assert_eq!(
        lines,
        (1..=400).collect::<Vec<_>>(),
        "each line once, in order"
    );
    replica.stop().await.expect("stops");
}

/// The dispatch's recorded target owns its output, even when another agent's event about it
/// was stored first (e.g. before the dispatch was forwarded, or by an older replica).
#[tokio::test]
async fn the_dispatch_target_owns_its_output_whoever_stored_an_event_first() {
    let nats = NatsServer::start().await.expect("nats");
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let js = jetstream(&nats.url()).await;
    let (target, other) = ("aa:bb:cc:dd:ee:41", "aa:bb:cc:dd:ee:42");
    let wf = "ns/owned/uid-4/1";
    store_event(&js, receipt_of(other, wf)).await;
    let _stream = receive_dispatch(&js, &mut client, target, wf).await;
    client
        .publish_logs(batch(target, wf, "0-a", 1..=2))
        .await
        .expect("the target's output is stored");
    let status = client
        .publish_logs(batch(other, wf, "0-a", 3..=3))
        .await
        .expect_err("not the other agent's");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    replica.stop().await.expect("stops");
}
