//! End to end: NATS, a server replica (or two), the agent and Docker, with commands published
//! on the dispatch subject and events read back from JetStream.
#![forbid(unsafe_code)]

mod common;

use std::collections::HashSet;

use common::*;
use tink_bus::proto::{Workflow, event};
use tink_testkit::nats::NatsServer;

fn workflow(id: &str, actions: Vec<tink_bus::proto::workflow::Action>) -> Workflow {
    Workflow {
        workflow_id: id.into(),
        actions,
        ..Default::default()
    }
}

#[tokio::test]
async fn three_action_workflow_succeeds() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:01", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let mut wf = workflow(
        "default/three",
        vec![
            script(
                "a1",
                "test \"$FROM_TEMPLATE\" = t && test \"$OVERRIDDEN\" = action",
            ),
            script("a2", "echo hello > /shared/file"),
            script("a3", "grep -q hello /shared/file"),
        ],
    );
    wf.env = [
        ("FROM_TEMPLATE".into(), "t".into()),
        ("OVERRIDDEN".into(), "template".into()),
    ]
    .into();
    wf.actions[0].env = [("OVERRIDDEN".into(), "action".into())].into();
    let volume = format!("tink-agent-e2e-{}", uuid::Uuid::new_v4().simple());
    wf.volumes = vec![format!("{volume}:/shared")];
    dispatch(&js, &agent.id, &start_command(wf)).await?;

    let events = events_until(&js, "default/three", terminal("a3")).await?;
    assert_eq!(
        summary(&events),
        [
            "Started:a1",
            "Succeeded:a1",
            "Started:a2",
            "Succeeded:a2",
            "Started:a3",
            "Succeeded:a3"
        ]
    );
    let ids: HashSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "every event has its own id");
    assert!(
        events
            .iter()
            .all(|e| e.agent_id == agent.id && e.occurred_at.is_some())
    );
    // The command's trace context travels with every event (gRPC metadata, then NATS headers).
    for (event, headers) in stored_messages(&js, "default/three").await? {
        let traceparent = headers.get("traceparent").map(|v| v.as_str().to_owned());
        assert!(
            traceparent.as_deref().is_some_and(|t| t.contains(TRACE_ID)),
            "{}: {traceparent:?}",
            describe(&event)
        );
    }
    assert_eq!(agent.containers().await?, 0);
    agent
        .runner
        .docker()
        .remove_volume(
            &volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await?;
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn non_zero_exit_fails_with_the_exit_code() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:02", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let wf = workflow(
        "default/exit",
        vec![
            script("a1", "echo partitioning; echo 'no disk' >&2; exit 7"),
            script("a2", "true"),
        ],
    );
    dispatch(&js, &agent.id, &start_command(wf)).await?;
    let events = progress(events_until(&js, "default/exit", terminal("a2")).await?);
    assert_eq!(
        summary(&events),
        ["Started:a1", "Failed:a1:NonZeroExitCode"]
    );
    let Some(event::Event::ActionFailed(failed)) = &events[1].event else {
        unreachable!()
    };
    let message = failed.failure_message.as_deref().unwrap_or_default();
    assert!(message.contains("exit code 7"), "{message}");
    assert!(
        message.contains("partitioning") && message.contains("no disk"),
        "{message}"
    );
    assert_eq!(agent.containers().await?, 0);
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn action_timeout_fails_the_action() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:03", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let mut slow = script("a1", "echo working; exec sleep 600");
    slow.timeout_seconds = Some(1);
    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/slow", vec![slow])),
    )
    .await?;
    let events = progress(events_until(&js, "default/slow", terminal("a1")).await?);
    assert_eq!(summary(&events), ["Started:a1", "Failed:a1:Timeout"]);
    let Some(event::Event::ActionFailed(failed)) = &events[1].event else {
        unreachable!()
    };
    let message = failed.failure_message.as_deref().unwrap_or_default();
    assert!(
        message.contains("timeout of 1s") && message.contains("working"),
        "{message}"
    );
    assert_eq!(agent.containers().await?, 0);
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn cancel_stops_the_running_container_and_the_agent_becomes_idle() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:04", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let gate = Gate::new()?;
    let mut long = script("a1", &Gate::script("a1"));
    long.volumes = vec![gate.volume()];
    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/cancel", vec![long, script("a2", "true")])),
    )
    .await?;
    gate.wait_started("a1").await?;
    assert_eq!(agent.containers().await?, 1);

    dispatch(&js, &agent.id, &stop_command("default/cancel")).await?;
    let events = progress(events_until(&js, "default/cancel", terminal("a2")).await?);
    assert_eq!(summary(&events), ["Started:a1", "Canceled:a1"]);
    let Some(event::Event::WorkflowCanceled(canceled)) = &events[1].event else {
        unreachable!()
    };
    assert_eq!(canceled.reason.as_deref(), Some("Canceled"));
    assert!(
        canceled
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("Deleted"),
        "{canceled:?}"
    );
    assert_eq!(agent.containers().await?, 0);

    // Idle again: the next workflow runs.
    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/after", vec![script("b1", "true")])),
    )
    .await?;
    let events = events_until(&js, "default/after", terminal("b1")).await?;
    assert_eq!(summary(&events), ["Started:b1", "Succeeded:b1"]);
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn stop_for_a_workflow_not_running_is_confirmed() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:05", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;
    dispatch(&js, &agent.id, &stop_command("default/ghost")).await?;
    let events = events_until(&js, "default/ghost", |e| e.len() >= 2).await?;
    assert_eq!(all_events(&events), ["Received:Stop", "Canceled:"]);
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn second_workflow_while_busy_is_rejected() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:06", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let gate = Gate::new()?;
    let mut first = script("a1", &Gate::script("a1"));
    first.volumes = vec![gate.volume()];
    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/first", vec![first])),
    )
    .await?;
    gate.wait_started("a1").await?;

    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/second", vec![script("b1", "true")])),
    )
    .await?;
    let rejected =
        progress(events_until(&js, "default/second", |e| !progress(e.to_vec()).is_empty()).await?);
    assert_eq!(summary(&rejected), ["Rejected:AgentBusy"]);
    let Some(event::Event::WorkflowRejected(r)) = &rejected[0].event else {
        unreachable!()
    };
    assert!(r.failure_message.contains("default/first"), "{r:?}");

    gate.open()?;
    let events = events_until(&js, "default/first", terminal("a1")).await?;
    assert_eq!(summary(&events), ["Started:a1", "Succeeded:a1"]);
    // The rejected workflow never ran.
    assert_eq!(
        summary(&stored_events(&js, "default/second").await?),
        ["Rejected:AgentBusy"]
    );
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn agent_finishes_through_server_b_when_server_a_dies() -> TestResult {
    let nats = NatsServer::start().await?;
    let a = Replica::start(&nats.url(), "server-a").await?;
    let b = Replica::start(&nats.url(), "server-b").await?;
    let proxy_a = Proxy::start(a.addr).await?;
    let Some(agent) = Agent::start("02:00:00:00:01:07", &[proxy_a.addr, b.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let gate = Gate::new()?;
    let mut held = script("a2", &Gate::script("a2"));
    held.volumes = vec![gate.volume()];
    let wf = workflow(
        "default/failover",
        vec![script("a1", "true"), held, script("a3", "true")],
    );
    dispatch(&js, &agent.id, &start_command(wf)).await?;
    gate.wait_started("a2").await?;

    // Server A disappears while action a2 runs; the workflow keeps going.
    proxy_a.kill().await?;
    wait_presence(&js, &agent.id, "server-b").await?;
    gate.open()?;

    let events = events_until(&js, "default/failover", terminal("a3")).await?;
    assert_eq!(
        summary(&events),
        [
            "Started:a1",
            "Succeeded:a1",
            "Started:a2",
            "Succeeded:a2",
            "Started:a3",
            "Succeeded:a3"
        ]
    );
    assert!(agent.metrics.stream_connects.get() >= 2);
    assert_eq!(agent.containers().await?, 0);

    // Commands now reach the agent through B.
    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/via-b", vec![script("b1", "true")])),
    )
    .await?;
    let events = events_until(&js, "default/via-b", terminal("b1")).await?;
    assert_eq!(summary(&events), ["Started:b1", "Succeeded:b1"]);
    agent.stop().await?;
    a.stop().await?;
    b.stop().await?;
    Ok(())
}

#[tokio::test]
async fn nats_restart_loses_no_event() -> TestResult {
    let mut nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:08", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let gate = Gate::new()?;
    let mut held = script("a2", &Gate::script("a2"));
    held.volumes = vec![gate.volume()];
    let wf = workflow(
        "default/nats",
        vec![script("a1", "true"), held, script("a3", "true")],
    );
    dispatch(&js, &agent.id, &start_command(wf)).await?;
    gate.wait_started("a2").await?;

    // NATS goes down; a2 finishes and a3 runs while no event can be stored.
    nats.stop().await?;
    let failures_before = agent.metrics.event_publish_failures.get();
    gate.open()?;
    within("the agent to fail publishing while NATS is down", async {
        while agent.metrics.event_publish_failures.get() == failures_before {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await?;
    nats.restart().await?;

    let js = jetstream(&nats.url()).await?;
    // The controller's part: after a reconnection its leader ensures the streams again (the
    // memory-stored presence bucket is gone; the server waits for it, not ready).
    tink_bus::ensure_streams(&js, &bus_config()).await?;
    let events = events_until(&js, "default/nats", terminal("a3")).await?;
    assert_eq!(
        summary(&events),
        [
            "Started:a1",
            "Succeeded:a1",
            "Started:a2",
            "Succeeded:a2",
            "Started:a3",
            "Succeeded:a3"
        ]
    );
    assert_eq!(agent.containers().await?, 0);
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn agent_shutdown_stops_the_action_and_reports_it() -> TestResult {
    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:01:09", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let gate = Gate::new()?;
    let mut held = script("a1", &Gate::script("a1"));
    held.volumes = vec![gate.volume()];
    dispatch(
        &js,
        &agent.id,
        &start_command(workflow("default/shutdown", vec![held])),
    )
    .await?;
    gate.wait_started("a1").await?;
    let runner = agent.runner.clone();
    let id = agent.id.clone();
    agent.stop().await?;

    // The stop waited for the container and flushed the last event.
    let events = stored_events(&js, "default/shutdown").await?;
    assert_eq!(summary(&events), ["Started:a1", "Failed:a1:AgentShutdown"]);
    let filters = std::collections::HashMap::from([(
        "label".to_owned(),
        vec![format!("{}={id}", tink_agent::runtime::LABEL_AGENT)],
    )]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    assert!(
        runner
            .docker()
            .list_containers(Some(options))
            .await?
            .is_empty()
    );
    server.stop().await?;
    Ok(())
}
