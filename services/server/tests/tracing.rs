//! The server's own spans, exported over OTLP: a `PublishEvent` carrying a `traceparent` is a
//! server span in the caller's trace, and the stored NATS message carries the context on with
//! the server span as the parent. Its own test binary: it installs the process-wide subscriber.

mod common;

use common::*;
use tink_testkit::nats::NatsServer;
use tink_testkit::otlp::{OtlpReceiver, RecordedSpan};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// `(trace id, parent span id)` of a `traceparent` header value.
fn parse_traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {value:?}");
    assert_eq!(parts[0], "00", "traceparent version in {value:?}");
    (parts[1].to_owned(), parts[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_event_is_a_server_span_whose_context_travels_on_in_nats() {
    let receiver = OtlpReceiver::start().await.expect("otlp receiver");
    let args = tink_telemetry::TelemetryArgs {
        otlp_endpoint: Some(receiver.endpoint()),
        log_filter: "info".into(),
        ..Default::default()
    };
    let _telemetry = tink_telemetry::init("tink-server-test", &args).expect("telemetry");

    let nats = NatsServer::start().await.expect("nats");
    let js = jetstream(&nats.url()).await;
    let replica = Replica::start(&nats.url(), "server-a").await;
    let mut client = replica.client().await;

    // With the agent's trace context in the request metadata.
    let mut request = tonic::Request::new(action_started("ns/traced", "a1", "e1"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01")
            .parse()
            .expect("ascii"),
    );
    client.publish_event(request).await.expect("stored");
    // Without one: the server span starts a trace of its own, still carried on.
    client
        .publish_event(action_started("ns/untraced", "a1", "e1"))
        .await
        .expect("stored");

    let server_spans = |spans: &[RecordedSpan], workflow: &str| -> Vec<RecordedSpan> {
        spans
            .iter()
            .filter(|s| s.name == "publish_event" && s.attribute("workflow_id") == Some(workflow))
            .cloned()
            .collect()
    };
    let spans = receiver
        .wait_for(|spans| {
            server_spans(spans, "ns/traced").len() == 1
                && server_spans(spans, "ns/untraced").len() == 1
        })
        .await
        .expect("the server's spans");

    // The traced call: a child of the agent's span, in the agent's trace.
    let traced = &server_spans(&spans, "ns/traced")[0];
    assert_eq!(traced.trace_id, TRACE_ID);
    assert_eq!(traced.parent_span_id.as_deref(), Some(PARENT_SPAN_ID));
    assert_eq!(traced.service_name.as_deref(), Some("tink-server-test"));
    assert_eq!(traced.attribute("kind"), Some("ActionStarted"));
    assert_ne!(traced.span_id, PARENT_SPAN_ID);
    let stored = stored_events(&js, "ns/traced").await;
    assert_eq!(stored.len(), 1);
    let header = stored[0]
        .1
        .get("traceparent")
        .map(|v| v.as_str().to_owned())
        .expect("the stored event carries a traceparent");
    assert_eq!(
        parse_traceparent(&header),
        (TRACE_ID.to_owned(), traced.span_id.clone()),
        "the NATS message continues the trace from the server span"
    );

    // The untraced call: a root span, and the message names it as the parent.
    let untraced = &server_spans(&spans, "ns/untraced")[0];
    assert_eq!(untraced.parent_span_id, None);
    assert_ne!(untraced.trace_id, TRACE_ID);
    let stored = stored_events(&js, "ns/untraced").await;
    assert_eq!(stored.len(), 1);
    let header = stored[0]
        .1
        .get("traceparent")
        .map(|v| v.as_str().to_owned())
        .expect("the stored event carries a traceparent");
    assert_eq!(
        parse_traceparent(&header),
        (untraced.trace_id.clone(), untraced.span_id.clone())
    );

    replica.stop().await.expect("clean stop");
}
