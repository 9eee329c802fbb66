//! W3C trace-context propagation through NATS headers and gRPC metadata.
//!
//! Producers call `inject_*` with the current span's context; consumers call `extract_*` and set
//! the result as the parent of their span (`tracing_opentelemetry::OpenTelemetrySpanExt::set_parent`),
//! so one workflow is one trace across the controller, the servers and the agents.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Writes `traceparent`/`tracestate` for `cx` into NATS message headers.
pub fn inject_nats(cx: &Context, headers: &mut async_nats::HeaderMap) {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(cx, &mut NatsInjector(headers));
    });
}

/// Reads the trace context from NATS message headers (an empty context when absent or invalid).
pub fn extract_nats(headers: &async_nats::HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&NatsExtractor(headers))
    })
}

/// Writes `traceparent`/`tracestate` for `cx` into gRPC request or response metadata.
pub fn inject_grpc(cx: &Context, metadata: &mut tonic::metadata::MetadataMap) {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(cx, &mut GrpcInjector(metadata));
    });
}

/// Reads the trace context from gRPC metadata (an empty context when absent or invalid).
pub fn extract_grpc(metadata: &tonic::metadata::MetadataMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&GrpcExtractor(metadata))
    })
}

/// The OpenTelemetry context of the current `tracing` span.
pub fn current_context() -> Context {
    tracing::Span::current().context()
}

/// Makes `cx` the parent of `span`; a context with no valid span is ignored.
pub fn set_parent(span: &tracing::Span, cx: Context) {
    use opentelemetry::trace::TraceContextExt as _;
    if cx.span().span_context().is_valid() {
        // Fails only when the span is disabled or already started; nothing to propagate then.
        let _ = span.set_parent(cx);
    }
}

struct NatsInjector<'a>(&'a mut async_nats::HeaderMap);

impl Injector for NatsInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct NatsExtractor<'a>(&'a async_nats::HeaderMap);

impl Extractor for NatsExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|value| value.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_ref()).collect()
    }
}

struct GrpcInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for GrpcInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        let Ok(key) = tonic::metadata::MetadataKey::from_bytes(key.as_bytes()) else {
            return;
        };
        if let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_str()) {
            self.0.insert(key, value);
        }
    }
}

struct GrpcExtractor<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for GrpcExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                tonic::metadata::KeyRef::Ascii(key) => Some(key.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}
