//! The server against real NATS JetStream with simulated agents over real gRPC.

mod common;

use std::time::Duration;

use common::*;
use tink_bus::proto::{Event, PublishEventRequest, event};
use tink_testkit::nats::NatsServer;
use tonic::Code;

const AGENT: &str = "aa:bb:cc:dd:ee:ff";

#[tokio::test]
async fn commands_reach_the_agent_in_order_and_presence_is_recorded() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    // A command published before the agent ever connected waits for it.
    dispatch(&js, AGENT, "ns/first").await;

    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/first");
    dispatch(&js, AGENT, "ns/second").await;
    dispatch(&js, "another-agent", "ns/not-yours").await;
    dispatch(&js, AGENT, "ns/third").await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/second");
    assert_eq!(receive(&mut client, &mut commands).await, "ns/third");

    let entry = presence(&js, AGENT).await.expect("presence recorded");
    assert_eq!(entry.agent_id, AGENT);
    assert_eq!(entry.server, "server-a");
    assert_eq!(replica.metrics.connected_agents.get(), 1);

    // The agent leaves: its presence goes, the gauge drops.
    drop(commands);
    eventually("presence to be removed", || async {
        presence(&js, AGENT).await.is_none()
    })
    .await;
    assert_eq!(replica.metrics.connected_agents.get(), 0);
    assert!(replica.metrics.commands_forwarded.get() >= 2);
    replica.stop().await.expect("clean stop");
}

#[tokio::test]
async fn undelivered_commands_follow_the_agent_to_another_replica() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let a = Replica::start(&nats.url(), "server-a").await;
    let b = Replica::start(&nats.url(), "server-b").await;

    let mut client_a = a.client().await;
    let mut commands = connect_agent(&mut client_a, AGENT).await;
    dispatch(&js, AGENT, "ns/one").await;
    assert_eq!(receive(&mut client_a, &mut commands).await, "ns/one");
    drop(commands);
    eventually("the agent to be gone from A", || async {
        a.metrics.connected_agents.get() == 0
    })
    .await;

    // Published while the agent is between replicas.
    dispatch(&js, AGENT, "ns/two").await;
    dispatch(&js, AGENT, "ns/three").await;
    let mut client_b = b.client().await;
    let mut commands = connect_agent(&mut client_b, AGENT).await;
    assert_eq!(receive(&mut client_b, &mut commands).await, "ns/two");
    assert_eq!(receive(&mut client_b, &mut commands).await, "ns/three");
    assert_eq!(
        presence(&js, AGENT).await.expect("present").server,
        "server-b"
    );
}

#[tokio::test]
async fn a_killed_replica_loses_no_command() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let a = ProcessReplica::start(&nats.url(), "server-a").await;
    let b = Replica::start(&nats.url(), "server-b").await;

    let mut client_a = client(a.addr).await;
    let mut commands = connect_agent(&mut client_a, AGENT).await;
    dispatch(&js, AGENT, "ns/one").await;
    assert_eq!(receive(&mut client_a, &mut commands).await, "ns/one");

    a.kill().await;
    // The agent sees its stream break...
    let status = end_status(&mut commands).await;
    assert_ne!(status.code(), Code::Ok);
    // ...the dead replica's presence entry is still there (nobody cleaned up)...
    assert_eq!(
        presence(&js, AGENT).await.map(|p| p.server).as_deref(),
        Some("server-a")
    );

    // ...and commands published meanwhile reach the agent through B, in order.
    dispatch(&js, AGENT, "ns/two").await;
    dispatch(&js, AGENT, "ns/three").await;
    let mut client_b = b.client().await;
    let mut commands = connect_agent(&mut client_b, AGENT).await;
    assert_eq!(receive(&mut client_b, &mut commands).await, "ns/two");
    assert_eq!(receive(&mut client_b, &mut commands).await, "ns/three");
    assert_eq!(
        presence(&js, AGENT).await.expect("present").server,
        "server-b"
    );
}

/// The heartbeat of replica `id` in the replicas bucket, if any.
async fn replica_heartbeat(
    js: &async_nats::jetstream::Context,
    id: &str,
) -> Option<tink_bus::ReplicaHeartbeat> {
    let kv = js
        .get_key_value(tink_bus::REPLICAS_BUCKET)
        .await
        .expect("bucket");
    let value = kv.get(tink_bus::replica_key(id)).await.expect("kv get")?;
    Some(tink_bus::ReplicaHeartbeat::from_bytes(&value).expect("valid heartbeat"))
}

/// The last sequence of a stream (each KV write is one message).
async fn last_sequence(js: &async_nats::jetstream::Context, stream: &str) -> u64 {
    let mut stream = js.get_stream(stream).await.expect("stream");
    stream.info().await.expect("info").state.last_sequence
}

#[tokio::test]
async fn a_dead_replicas_heartbeat_expires_and_its_entries_stay_for_the_controller() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let a = ProcessReplica::start(&nats.url(), "server-a").await;
    let mut client_a = client(a.addr).await;
    let _commands = connect_agent(&mut client_a, AGENT).await;
    eventually("presence to be written", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;
    let entry = presence(&js, AGENT).await.expect("present");
    let beat = replica_heartbeat(&js, "server-a")
        .await
        .expect("the replica beats");
    assert_eq!(
        beat.instance, entry.replica_instance,
        "the entry names the replica process"
    );
    a.kill().await;
    // TTL 3 s in the process replica: the heartbeat goes without anyone deleting it...
    eventually("the dead replica's heartbeat to expire", || async {
        replica_heartbeat(&js, "server-a").await.is_none()
    })
    .await;
    // ...and with it the liveness of its agents' entries, which stay until the controller's
    // leader deletes them (readers count them offline already).
    let left = presence(&js, AGENT).await.expect("the entry stays");
    assert_eq!(left.server, "server-a");
    assert_eq!(left.replica_instance, beat.instance);
}

/// A replica with no periodic read of the queues within a test (1 h): a command can only
/// arrive through its announcement.
async fn replica_without_recheck(nats: &NatsServer) -> Replica {
    let mut config = tink_server::ServerConfig::new(nats.url(), "server-a");
    config.bus = tink_bus::BusConfig {
        dispatch_recheck: Duration::from_secs(3600),
        ..bus_config()
    };
    config.allow_unauthenticated_agents = true;
    Replica::start_config(config).await
}

/// Idle agents cost no presence write: after their entries are written on connect, only the
/// replica's own heartbeat is stored, every period.
#[tokio::test]
async fn idle_agents_write_nothing_to_presence_after_connecting() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica_without_recheck(&nats).await;
    let mut client = replica.client().await;
    let agents = [
        "aa:00:00:00:00:01",
        "aa:00:00:00:00:02",
        "aa:00:00:00:00:03",
    ];
    let mut streams = Vec::new();
    for agent in agents {
        streams.push(connect_agent(&mut client, agent).await);
    }
    for agent in agents {
        eventually("presence to be written", || async {
            presence(&js, agent).await.is_some()
        })
        .await;
    }
    let entries = last_sequence(&js, tink_bus::PRESENCE_STREAM).await;
    assert_eq!(entries, 3, "one write per agent");
    let beats = last_sequence(&js, tink_bus::REPLICAS_STREAM).await;
    // Six heartbeat periods (500 ms in the test configuration).
    tokio::time::sleep(bus_config().presence_heartbeat * 6).await;
    assert_eq!(
        last_sequence(&js, tink_bus::PRESENCE_STREAM).await,
        entries,
        "an idle agent's presence was written again"
    );
    let beaten = last_sequence(&js, tink_bus::REPLICAS_STREAM).await - beats;
    assert!(
        (3..=8).contains(&beaten),
        "{beaten} replica heartbeats in six periods"
    );
    for agent in agents {
        assert!(
            presence(&js, agent).await.is_some(),
            "{agent} is still present"
        );
    }
    // An idle agent holds nothing in JetStream for its commands: no consumer exists.
    let mut dispatch_stream = js
        .get_stream(tink_bus::DISPATCH_STREAM)
        .await
        .expect("dispatch stream");
    let info = dispatch_stream.info().await.expect("info");
    assert_eq!(info.state.consumer_count, 0, "a consumer per agent exists");
    // A command published to an idle agent reaches it through its announcement, and stays
    // queued until its receipt is stored (none is sent here).
    dispatch(&js, agents[1], "ns/after-rest").await;
    assert_eq!(next_workflow(&mut streams[1]).await, "ns/after-rest");
    let info = dispatch_stream.info().await.expect("info");
    assert_eq!(
        info.state.messages, 1,
        "a command without receipt was deleted"
    );
    drop(streams);
    eventually("presence to be removed on disconnect", || async {
        presence(&js, agents[0]).await.is_none()
    })
    .await;
}

/// With no periodic read, commands reach an agent through their announcements alone: a burst
/// whose announcements arrive together (while the session is idle, or while a command waits
/// for its receipt) is read through one by one, and after the queue was found empty the next
/// announcement is still read. After a receipt the session reads on only for announcements
/// no read has accounted for, so none of these may be left for the (1 h) recheck.
#[tokio::test]
async fn announced_commands_alone_reach_the_agent_in_bursts_and_after_rest() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = replica_without_recheck(&nats).await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    eventually("presence to be written", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;
    for round in 0..3 {
        // A burst: published back to back, all announced before the first receipt.
        let burst: Vec<String> = (0..4).map(|i| format!("ns/r{round}-b{i}")).collect();
        for id in &burst {
            dispatch(&js, AGENT, id).await;
        }
        for id in &burst {
            assert_eq!(&receive(&mut client, &mut commands).await, id);
        }
        // One at a time after rest: each announced alone to an idle session.
        for i in 0..3 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let id = format!("ns/r{round}-s{i}");
            dispatch(&js, AGENT, &id).await;
            assert_eq!(receive(&mut client, &mut commands).await, id);
        }
        // One published while the previous waits for its receipt.
        dispatch(&js, AGENT, &format!("ns/r{round}-x0")).await;
        let command = next_workflow(&mut commands).await;
        assert_eq!(command, format!("ns/r{round}-x0"));
        dispatch(&js, AGENT, &format!("ns/r{round}-x1")).await;
        // The receipt for x0, then x1 follows.
        client
            .publish_event(receipt(&command, false))
            .await
            .expect("receipt stored");
        assert_eq!(
            receive(&mut client, &mut commands).await,
            format!("ns/r{round}-x1")
        );
    }
    eventually("every command deleted after its receipt", || async {
        let mut stream = js
            .get_stream(tink_bus::DISPATCH_STREAM)
            .await
            .expect("dispatch stream");
        stream.info().await.expect("info").state.messages == 0
    })
    .await;
    drop(commands);
    replica.stop().await.expect("clean stop");
}

/// A takeover whose core-NATS notice never arrived (here: no notice at all, only the newer
/// entry, as after a partition) still ends the older stream: the replica's presence watch sees
/// the newer session's entry.
#[tokio::test]
async fn a_newer_entry_ends_the_older_stream_without_a_notice() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut old = connect_agent(&mut client, AGENT).await;
    eventually("presence to be written", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;
    let mut newer = presence(&js, AGENT).await.expect("present");
    newer.session = "a-newer-session".into();
    newer.server = "server-b".into();
    let kv = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("bucket");
    kv.put(
        tink_bus::agent_token(AGENT).expect("token"),
        newer.to_bytes(),
    )
    .await
    .expect("the newer session's entry");
    let status = end_status(&mut old).await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("server-b"), "{status:?}");
    assert_eq!(replica.metrics.streams_superseded.get(), 1);
    // The older stream's end left the newer entry alone.
    assert_eq!(
        presence(&js, AGENT).await.expect("present").session,
        "a-newer-session"
    );
}

/// A reset (`tinkctl agent reset`, the reset annotation: the entry is purged) ends the live
/// stream, so the agent reconnects and writes a new entry.
#[tokio::test]
async fn a_purged_entry_ends_the_stream() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    eventually("presence to be written", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;
    js.get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .expect("bucket")
        .purge(tink_bus::agent_token(AGENT).expect("token"))
        .await
        .expect("purged");
    let status = end_status(&mut commands).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("reset"), "{status:?}");
    let _commands = connect_agent(&mut client, AGENT).await;
    eventually("a new entry", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;
}

#[tokio::test]
async fn a_second_stream_for_the_same_agent_wins_on_the_same_replica() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut old = connect_agent(&mut client, AGENT).await;
    let mut new = connect_agent(&mut client, AGENT).await;

    let status = end_status(&mut old).await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("superseded"), "{status:?}");

    dispatch(&js, AGENT, "ns/after").await;
    assert_eq!(next_workflow(&mut new).await, "ns/after");
    assert_eq!(replica.metrics.streams_superseded.get(), 1);
    assert_eq!(replica.metrics.connected_agents.get(), 1);
    // The old stream's end did not remove the new stream's presence.
    let entry = presence(&js, AGENT).await.expect("present");
    assert_eq!(entry.server, "server-a");
}

#[tokio::test]
async fn a_second_stream_for_the_same_agent_wins_across_replicas() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let a = Replica::start(&nats.url(), "server-a").await;
    let b = Replica::start(&nats.url(), "server-b").await;
    let mut client_a = a.client().await;
    let mut client_b = b.client().await;
    let mut old = connect_agent(&mut client_a, AGENT).await;
    let mut new = connect_agent(&mut client_b, AGENT).await;

    let status = end_status(&mut old).await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("server-b"), "{status:?}");

    dispatch(&js, AGENT, "ns/after").await;
    assert_eq!(next_workflow(&mut new).await, "ns/after");
    eventually("A to release the agent", || async {
        a.metrics.connected_agents.get() == 0
    })
    .await;
    assert_eq!(
        presence(&js, AGENT).await.expect("present").server,
        "server-b"
    );
}

#[tokio::test]
async fn events_are_stored_deduplicated_and_carry_the_trace() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;

    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for _ in 0..2 {
        let mut request = tonic::Request::new(action_started("ns/wf", "a1", "event-1"));
        request
            .metadata_mut()
            .insert("traceparent", traceparent.parse().expect("ascii"));
        client.publish_event(request).await.expect("stored");
    }
    client
        .publish_event(action_started("ns/wf", "a2", "event-2"))
        .await
        .expect("stored");

    let stored = stored_events(&js, "ns/wf").await;
    assert_eq!(stored.len(), 2, "the retry of event-1 was de-duplicated");
    assert_eq!(stored[0].0.event_id, "event-1");
    assert_eq!(stored[1].0.event_id, "event-2");
    assert_eq!(
        stored[0].1.get("traceparent").map(|v| v.as_str()),
        Some(traceparent)
    );
    assert_eq!(
        stored[0].1.get(tink_bus::MSG_ID_HEADER).map(|v| v.as_str()),
        Some("ns_2fwf.event-1")
    );
    assert_eq!(replica.metrics.events_duplicate.get(), 1);
}

#[tokio::test]
async fn invalid_events_are_refused_and_the_server_keeps_serving() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;

    let invalid = [
        PublishEventRequest { event: None },
        action_started("", "a1", "e"),
        action_started("ns/wf", "", "e"),
        PublishEventRequest {
            event: Some(Event {
                workflow_id: "ns/wf".into(),
                ..Default::default()
            }),
        },
        PublishEventRequest {
            event: Some(Event {
                workflow_id: "ns/wf".into(),
                event: Some(event::Event::ActionFailed(event::ActionFailed {
                    action_id: "a1".into(),
                    failure_reason: Some("R".repeat(10_000)),
                    failure_message: None,
                })),
                ..Default::default()
            }),
        },
    ];
    for request in invalid {
        let status = client
            .publish_event(request.clone())
            .await
            .expect_err("refused");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{request:?}: {status:?}"
        );
    }
    // An invalid agent id is refused too.
    let status = client
        .get_workflows(tink_bus::proto::GetWorkflowsRequest {
            agent_id: String::new(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument);

    // Garbage bytes on the wire: tonic refuses to decode, the server lives on.
    let status = raw_publish_event(replica.addr, b"\xff\xff\xff\xff").await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");

    client
        .publish_event(action_started("ns/wf", "a1", "ok"))
        .await
        .expect("a valid event is still stored");
    assert_eq!(stored_events(&js, "ns/wf").await.len(), 1);
    assert!(replica.metrics.error_count("invalid_event") >= 5);
}

/// Calls PublishEvent with a raw (possibly malformed) protobuf body.
async fn raw_publish_event(addr: std::net::SocketAddr, body: &[u8]) -> tonic::Status {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/internal.proto.workflow.v2.WorkflowService/PublishEvent",
    );
    grpc.unary::<_, tink_bus::proto::PublishEventResponse, _>(
        tonic::Request::new(bytes::Bytes::copy_from_slice(body)),
        path,
        RawCodec,
    )
    .await
    .expect_err("garbage is refused")
}

#[tokio::test]
async fn malformed_commands_are_dropped_and_delivery_goes_on() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;

    let subject = tink_bus::dispatch_subject(AGENT).expect("subject");
    // Not protobuf at all, then valid protobuf that breaks the rules (no command set).
    for payload in [&b"\xff\xfe garbage"[..], &b""[..]] {
        js.publish(subject.clone(), bytes::Bytes::copy_from_slice(payload))
            .await
            .expect("published")
            .await
            .expect("stored");
    }
    dispatch(&js, AGENT, "ns/valid").await;
    assert_eq!(receive(&mut client, &mut commands).await, "ns/valid");
    assert_eq!(replica.metrics.error_count("malformed_command"), 2);
    // The malformed ones are gone from the queue, not redelivered.
    eventually("the queue to drain", || {
        let js = js.clone();
        async move {
            let mut stream = js
                .get_stream(tink_bus::DISPATCH_STREAM)
                .await
                .expect("stream");
            stream.info().await.map(|i| i.state.messages).unwrap_or(1) == 0
        }
    })
    .await;
}

#[tokio::test]
async fn a_nats_restart_loses_no_event_and_no_command() {
    let mut nats = NatsServer::start().await.expect("nats");
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    client
        .publish_event(action_started("ns/wf", "a1", "before"))
        .await
        .expect("stored before the restart");

    nats.restart().await.expect("nats restarts");
    // The controller's part: after a reconnection its leader ensures the streams again (the
    // memory-stored presence bucket does not survive a restart; the server only waits for it).
    create_streams(&nats.url(), &bus_config()).await;

    // The agent retries until the server confirms, as a real agent does.
    within("the event after the restart to be stored", async {
        loop {
            match client
                .publish_event(action_started("ns/wf", "a2", "after"))
                .await
            {
                Ok(_) => break,
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .await;
    let js = jetstream(&nats.url()).await;
    // The memory-stored presence bucket came back empty: the session wrote its entry again
    // (the replica's presence watch resumed and every session read its entry).
    eventually("the agent's presence to be written again", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;
    let ids: Vec<String> = stored_events(&js, "ns/wf")
        .await
        .into_iter()
        .map(|(e, _)| e.event_id)
        .collect();
    assert_eq!(ids, ["before", "after"]);

    // The agent's stream survived the restart and still receives commands.
    dispatch(&js, AGENT, "ns/after-restart").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/after-restart");
    eventually("readiness to come back", || async {
        replica.health.is_ready()
    })
    .await;
}

/// A replica cut off from NATS (here: NATS gone) keeps its agents' streams through a short
/// outage (above), but not past the presence TTL: by then the controller counts the agents
/// offline, and only a replica that reaches NATS can serve them. The stream ends with
/// `Unavailable`, and the agent connects again once NATS is back.
#[tokio::test]
async fn a_replica_that_cannot_reach_nats_for_the_presence_ttl_ends_its_streams() {
    let mut nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    eventually("presence to be written", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;

    let before = replica_heartbeat(&js, "server-a")
        .await
        .expect("the replica beats");

    nats.stop().await.expect("nats stops");
    let status = end_status(&mut commands).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("has not reached NATS"),
        "{status:?}"
    );
    assert_eq!(replica.metrics.streams_nats_lost.get(), 1);

    nats.restart().await.expect("nats back");
    create_streams(&nats.url(), &bus_config()).await;
    eventually("readiness to come back", || async {
        replica.health.is_ready()
    })
    .await;
    // Readiness follows the NATS connection; the replica takes streams again once it has stored
    // a heartbeat, which it tries on each stream it is asked for. JetStream may still refuse
    // that write right after its restart: such a stream is refused as Unavailable (the agent
    // connects again), never taken without a heartbeat.
    let mut commands = within("a stream taken after the outage", async {
        loop {
            let opened = client
                .get_workflows(tink_bus::proto::GetWorkflowsRequest {
                    agent_id: AGENT.into(),
                    ..Default::default()
                })
                .await;
            match opened {
                Ok(response) => break response.into_inner(),
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                    assert!(
                        status.message().contains("cannot store its heartbeat"),
                        "{status:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .await;
    let js = jetstream(&nats.url()).await;
    // Back under a new instance id: entries of the streams it ended (had NATS kept them) stay
    // dead; the new stream's entry names the new one.
    let after = replica_heartbeat(&js, "server-a")
        .await
        .expect("the replica beats again");
    assert_ne!(after.instance, before.instance);
    eventually("the new stream's entry", || async {
        presence(&js, AGENT)
            .await
            .is_some_and(|p| p.replica_instance == after.instance)
    })
    .await;
    dispatch(&js, AGENT, "ns/after-the-outage").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/after-the-outage");
}

#[tokio::test]
async fn graceful_shutdown_ends_agent_streams_with_unavailable() {
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;
    let mut commands = connect_agent(&mut client, AGENT).await;
    eventually("presence to be written", || async {
        presence(&js, AGENT).await.is_some()
    })
    .await;

    let shutdown = replica.shutdown.clone();
    let health = replica.health.clone();
    let stopping = tokio::spawn(replica.stop());
    shutdown.cancel();
    let status = end_status(&mut commands).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    stopping.await.expect("joined").expect("clean stop");
    assert!(!health.is_ready());
    assert!(
        presence(&js, AGENT).await.is_none(),
        "presence removed on shutdown"
    );
}

#[tokio::test]
async fn grpc_health_reports_serving() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    let nats = NatsServer::start().await.expect("nats");
    let replica = Replica::start(&nats.url(), "server-a").await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", replica.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connects");
    let mut health = HealthClient::new(channel);
    let response = health
        .check(HealthCheckRequest {
            service: "internal.proto.workflow.v2.WorkflowService".into(),
        })
        .await
        .expect("health answers")
        .into_inner();
    assert_eq!(response.status(), ServingStatus::Serving);
}

/// A codec sending raw bytes and decoding responses with prost.
#[derive(Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = tink_bus::proto::PublishEventResponse;
    type Encoder = RawEncoder;
    type Decoder = tonic_prost::ProstDecoder<tink_bus::proto::PublishEventResponse>;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic::codec::Codec::decoder(&mut tonic_prost::ProstCodec::<
            bytes::Bytes,
            tink_bus::proto::PublishEventResponse,
        >::default())
    }
}

struct RawEncoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Self::Item,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        use bytes::BufMut as _;
        dst.put_slice(&item);
        Ok(())
    }
}

#[tokio::test]
async fn serves_over_tls() {
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};
    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let (ca, cert, key) = test_certificates();
    let replica = Replica::start_with(
        &nats.url(),
        "server-tls",
        Some(tink_server::TlsConfig {
            cert_pem: cert,
            key_pem: key,
            client_ca_pem: None,
        }),
    )
    .await;
    let channel = Channel::from_shared(format!("https://127.0.0.1:{}", replica.addr.port()))
        .expect("uri")
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&ca))
                .domain_name("localhost"),
        )
        .expect("tls config")
        .connect()
        .await
        .expect("TLS handshake");
    let mut client = tink_bus::proto::workflow_service_client::WorkflowServiceClient::new(channel);
    let mut commands = connect_agent(&mut client, AGENT).await;
    dispatch(&js, AGENT, "ns/over-tls").await;
    assert_eq!(next_workflow(&mut commands).await, "ns/over-tls");

    // Plain HTTP/2 is refused on the TLS port.
    let plain = Channel::from_shared(format!("http://{}", replica.addr))
        .expect("uri")
        .connect()
        .await;
    if let Ok(plain) = plain {
        let mut plain = tink_bus::proto::workflow_service_client::WorkflowServiceClient::new(plain);
        assert!(
            plain
                .publish_event(action_started("ns/wf", "a1", "e"))
                .await
                .is_err()
        );
    }
}

#[tokio::test]
async fn the_binary_is_ready_only_while_nats_is_connected() {
    let mut nats = NatsServer::start().await.expect("nats");
    let replica = ProcessReplica::start(&nats.url(), "server-admin").await;
    eventually("ready", || async {
        http_get(replica.admin, "/readyz").await.0 == 200
    })
    .await;
    assert_eq!(http_get(replica.admin, "/healthz").await.0, 200);

    let mut client = client(replica.addr).await;
    let _commands = connect_agent(&mut client, AGENT).await;
    let (status, metrics) = http_get(replica.admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("tink_server_connected_agents 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tink_server_publish_event_seconds"),
        "{metrics}"
    );

    nats.stop().await.expect("nats stops");
    eventually("not ready without NATS", || async {
        http_get(replica.admin, "/readyz").await.0 == 503
    })
    .await;
    assert_eq!(
        http_get(replica.admin, "/healthz").await.0,
        200,
        "still alive"
    );
    nats.restart().await.expect("nats back");
    // The controller's part (see a_nats_restart_loses_no_event_and_no_command).
    create_streams(
        &nats.url(),
        &tink_bus::BusConfig {
            presence_ttl: Duration::from_secs(3),
            presence_heartbeat: Duration::from_secs(1),
            ..Default::default()
        },
    )
    .await;
    eventually("ready again", || async {
        http_get(replica.admin, "/readyz").await.0 == 200
    })
    .await;
    replica.kill().await;
}
