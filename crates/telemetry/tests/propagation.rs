//! Trace context survives a trip through NATS headers and gRPC metadata.

use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tink_telemetry::propagation::{extract_grpc, extract_nats, inject_grpc, inject_nats};

fn remote_context() -> Context {
    let span = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("trace id"),
        SpanId::from_hex("00f067aa0ba902b7").expect("span id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(span)
}

#[test]
fn nats_and_grpc_round_trip_and_garbage_is_ignored() {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let cx = remote_context();
    let want = cx.span().span_context().clone();

    let mut headers = async_nats::HeaderMap::new();
    inject_nats(&cx, &mut headers);
    assert_eq!(
        headers.get("traceparent").map(|v| v.as_str()),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    let got = extract_nats(&headers);
    assert_eq!(got.span().span_context().trace_id(), want.trace_id());
    assert_eq!(got.span().span_context().span_id(), want.span_id());

    let mut metadata = tonic::metadata::MetadataMap::new();
    inject_grpc(&cx, &mut metadata);
    let got = extract_grpc(&metadata);
    assert_eq!(got.span().span_context().trace_id(), want.trace_id());
    assert!(got.span().span_context().is_remote());

    // A malformed traceparent from the network yields an empty context, never a panic.
    let mut bad = async_nats::HeaderMap::new();
    bad.insert("traceparent", "00-zz-not-a-trace-01");
    assert!(!extract_nats(&bad).span().span_context().is_valid());
    let mut bad = tonic::metadata::MetadataMap::new();
    bad.insert("traceparent", "garbage".parse().expect("ascii"));
    assert!(!extract_grpc(&bad).span().span_context().is_valid());
}
