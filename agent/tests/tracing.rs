//! Each action is a span in the workflow's trace, and the trace context reaches the server in
//! gRPC metadata. Its own test binary: it installs the process-wide subscriber.
#![forbid(unsafe_code)]

mod common;

use common::*;
use tink_bus::proto::Workflow;
use tink_testkit::nats::NatsServer;
use tink_testkit::otlp::{OtlpReceiver, RecordedSpan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_are_spans_of_the_workflow_trace() -> TestResult {
    let receiver = OtlpReceiver::start().await?;
    let args = tink_telemetry::TelemetryArgs {
        otlp_endpoint: Some(receiver.endpoint()),
        log_filter: "info".into(),
        ..Default::default()
    };
    let _telemetry = tink_telemetry::init("tink-agent-test", &args).map_err(|e| e.to_string())?;

    let nats = NatsServer::start().await?;
    let server = Replica::start(&nats.url(), "server-a").await?;
    let Some(agent) = Agent::start("02:00:00:00:02:01", &[server.addr]).await? else {
        return Ok(());
    };
    let js = jetstream(&nats.url()).await?;
    wait_presence(&js, &agent.id, "server-a").await?;

    let wf = Workflow {
        workflow_id: "default/traced".into(),
        actions: vec![script("a1", "true"), script("a2", "exit 4")],
        ..Default::default()
    };
    dispatch(&js, &agent.id, &start_command(wf)).await?;
    let events = events_until(&js, "default/traced", terminal("a2")).await?;
    assert_eq!(
        summary(&events),
        [
            "Started:a1",
            "Succeeded:a1",
            "Started:a2",
            "Failed:a2:NonZeroExitCode"
        ]
    );

    let named = |spans: &[RecordedSpan], name: &str| -> Vec<RecordedSpan> {
        spans
            .iter()
            .filter(|s| s.name == name && s.trace_id == TRACE_ID)
            .cloned()
            .collect()
    };
    let spans = receiver
        .wait_for(|spans| {
            named(spans, "workflow").len() == 1
                && named(spans, "action").len() == 2
                && named(spans, "publish_event").len() >= 5
        })
        .await?;
    let workflow = &named(&spans, "workflow")[0];
    assert_eq!(workflow.parent_span_id.as_deref(), Some(PARENT_SPAN_ID));
    assert_eq!(workflow.attribute("workflow_id"), Some("default/traced"));
    let actions = named(&spans, "action");
    for action in &actions {
        assert_eq!(action.parent_span_id.as_ref(), Some(&workflow.span_id));
    }
    let outcomes: Vec<(Option<&str>, Option<&str>)> = actions
        .iter()
        .map(|a| (a.attribute("action_id"), a.attribute("outcome")))
        .collect();
    assert!(
        outcomes.contains(&(Some("a1"), Some("Succeeded"))),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&(Some("a2"), Some("NonZeroExitCode"))),
        "{outcomes:?}"
    );
    // The server's PublishEvent spans are children of the action spans (the receipt's, sent
    // before any action, of the command's context): the context crossed gRPC in the request
    // metadata.
    let action_ids: Vec<&str> = actions.iter().map(|a| a.span_id.as_str()).collect();
    let publishes = named(&spans, "publish_event");
    let under_actions = publishes
        .iter()
        .filter(|p| {
            p.parent_span_id
                .as_deref()
                .is_some_and(|id| action_ids.contains(&id))
        })
        .count();
    assert_eq!(under_actions, 4, "{publishes:#?}");
    assert!(
        publishes
            .iter()
            .all(|p| p.parent_span_id.as_deref() == Some(PARENT_SPAN_ID)
                || p.parent_span_id
                    .as_deref()
                    .is_some_and(|id| action_ids.contains(&id))),
        "{publishes:#?}"
    );
    agent.stop().await?;
    server.stop().await?;
    Ok(())
}
