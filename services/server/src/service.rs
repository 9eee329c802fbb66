//! The `WorkflowService` implementation.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::TraceContextExt as _;
use tink_bus::BusError;
use tink_bus::proto::workflow_service_server::WorkflowService;
use tink_bus::proto::{GetWorkflowsRequest, PublishEventRequest, PublishEventResponse};
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, debug, warn};

use crate::metrics::KindLabel;
use crate::session::{self, CommandStream, Shared};

/// The agent-facing gRPC service of one replica.
#[derive(Clone)]
pub(crate) struct Gateway {
    pub shared: Arc<Shared>,
}

#[tonic::async_trait]
impl WorkflowService for Gateway {
    type GetWorkflowsStream = CommandStream;

    async fn get_workflows(
        &self,
        request: Request<GetWorkflowsRequest>,
    ) -> Result<Response<Self::GetWorkflowsStream>, Status> {
        let agent_id = request.into_inner().agent_id;
        let stream = session::open(self.shared.clone(), agent_id).await?;
        Ok(Response::new(stream))
    }

    async fn publish_event(
        &self,
        request: Request<PublishEventRequest>,
    ) -> Result<Response<PublishEventResponse>, Status> {
        let incoming = tink_telemetry::propagation::extract_grpc(request.metadata());
        let raw_trace = raw_trace_headers(request.metadata());
        let span = tracing::info_span!(
            "publish_event",
            workflow_id = tracing::field::Empty,
            kind = tracing::field::Empty
        );
        tink_telemetry::propagation::set_parent(&span, incoming);
        let shared = self.shared.clone();
        async move {
            let metrics = &shared.metrics;
            let Some(event) = request.into_inner().event else {
                metrics.error("invalid_event");
                return Err(Status::invalid_argument("event: must be set"));
            };
            let kind = tink_bus::event_kind(&event);
            let current = tracing::Span::current();
            current.record("workflow_id", event.workflow_id.as_str());
            if let Some(kind) = kind {
                current.record("kind", kind.as_str());
            }
            let started = Instant::now();
            // The server span's context when tracing is exported; otherwise the agent's own
            // trace headers pass through unchanged.
            let cx = tink_telemetry::propagation::current_context();
            let result = if cx.span().span_context().is_valid() {
                tink_bus::publish_event(&shared.bus.jetstream, &event, &cx).await
            } else {
                publish_with_raw_trace(&shared, &event, &raw_trace).await
            };
            match result {
                Ok(ack) => {
                    metrics
                        .publish_event_seconds
                        .observe(started.elapsed().as_secs_f64());
                    let kind = kind.map_or("None", tink_bus::EventKind::as_str);
                    metrics
                        .events_published
                        .get_or_create(&KindLabel {
                            kind: kind.to_string(),
                        })
                        .inc();
                    if ack.duplicate {
                        metrics.events_duplicate.inc();
                    }
                    debug!(
                        sequence = ack.sequence,
                        duplicate = ack.duplicate,
                        "event stored"
                    );
                    Ok(Response::new(PublishEventResponse {}))
                }
                Err(BusError::Invalid(e)) => {
                    metrics.error("invalid_event");
                    debug!(error = %e, "refusing an invalid event");
                    Err(Status::invalid_argument(e.to_string()))
                }
                Err(BusError::Token(e)) => {
                    metrics.error("invalid_event");
                    Err(Status::invalid_argument(format!("event.workflow_id: {e}")))
                }
                Err(e) => {
                    metrics.error("publish_event");
                    warn!(error = %e, "event not stored");
                    Err(Status::unavailable(format!(
                        "event not stored, retry with the same event_id: {e}"
                    )))
                }
            }
        }
        .instrument(span)
        .await
    }
}

/// The `traceparent` and `tracestate` metadata as sent by the agent.
fn raw_trace_headers(metadata: &tonic::metadata::MetadataMap) -> Vec<(&'static str, String)> {
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|key| {
            let value = metadata.get(key)?.to_str().ok()?;
            Some((key, value.to_string()))
        })
        .collect()
}

async fn publish_with_raw_trace(
    shared: &Shared,
    event: &tink_bus::proto::Event,
    raw_trace: &[(&'static str, String)],
) -> Result<async_nats::jetstream::publish::PublishAck, BusError> {
    let mut headers = async_nats::HeaderMap::new();
    for (key, value) in raw_trace {
        headers.insert(*key, value.as_str());
    }
    tink_bus::publish_event_with_headers(&shared.bus.jetstream, event, headers).await
}
