//! The `WorkflowService` implementation.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::TraceContextExt as _;
use tink_bus::BusError;
use tink_bus::proto::workflow_service_server::WorkflowService;
use tink_bus::proto::{
    GetWorkflowsRequest, LogAck, LogBatch, PublishEventRequest, PublishEventResponse,
    ReportInventoryRequest, ReportInventoryResponse,
};
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, debug, warn};

use crate::auth::Auth;
use crate::session::{self, CommandStream, Shared};

/// The agent-facing gRPC service of one replica.
#[derive(Clone)]
pub(crate) struct Gateway {
    pub shared: Arc<Shared>,
    /// State of `PublishLogs` (see [`crate::logs`]).
    pub logs: Arc<crate::logs::Logs>,
}

#[tonic::async_trait]
impl WorkflowService for Gateway {
    type GetWorkflowsStream = CommandStream;

    async fn get_workflows(
        &self,
        request: Request<GetWorkflowsRequest>,
    ) -> Result<Response<Self::GetWorkflowsStream>, Status> {
        let auth = Auth::of(&request);
        if let (Some(limiter), Some(peer)) = (&self.shared.stream_opens, request.remote_addr())
            && limiter.check_key(&peer.ip()).is_err()
        {
            self.shared.metrics.error("stream_rate_limited");
            return Err(Status::resource_exhausted(format!(
                "{} opens more than {} streams per second; retry after a pause",
                peer.ip(),
                self.shared.limits.stream_opens_per_peer
            )));
        }
        let request = request.into_inner();
        if request.instance_id.len() > 256 {
            return Err(Status::invalid_argument(
                "instance_id: longer than 256 bytes",
            ));
        }
        let agent =
            crate::auth::claimed_agent("agent_id", &request.agent_id).inspect_err(|_| {
                self.shared.metrics.error("invalid_agent_id");
            })?;
        let (stream, issued) =
            session::open(self.shared.clone(), agent, request.instance_id, auth).await?;
        let mut response = Response::new(stream);
        if let Some(token) = issued
            && let Ok(value) = token.parse()
        {
            response
                .metadata_mut()
                .insert(crate::auth::TOKEN_HEADER, value);
        }
        Ok(response)
    }

    async fn publish_event(
        &self,
        request: Request<PublishEventRequest>,
    ) -> Result<Response<PublishEventResponse>, Status> {
        let auth = Auth::of(&request);
        let (metadata, _, message) = request.into_parts();
        let metrics = &self.shared.metrics;
        let Some(mut event) = message.event else {
            metrics.error("invalid_event");
            return Err(Status::invalid_argument("event: must be set"));
        };
        // Malformed events are refused naming the field, before any look-up.
        if let Err(e) = tink_bus::validate_event(&event) {
            metrics.error("invalid_event");
            return Err(Status::invalid_argument(e.to_string()));
        }
        // The event is recorded for the authenticated agent (the dispatch's target), whatever
        // the body claims.
        event.agent_id = self
            .shared
            .authenticate_event(&auth, "event.agent_id", &event.agent_id, &event.workflow_id)
            .await?
            .into_string();
        let kind = tink_bus::event_kind(&event);
        // Fields given at creation: recording them later costs the log layer a second pass.
        let span = tracing::info_span!(
            "publish_event",
            workflow_id = event.workflow_id.as_str(),
            kind = kind.map_or("None", tink_bus::EventKind::as_str)
        );
        let traced = metadata.contains_key("traceparent");
        if traced {
            let incoming = tink_telemetry::propagation::extract_grpc(&metadata);
            tink_telemetry::propagation::set_parent(&span, incoming);
        }
        let shared = &self.shared;
        async move {
            let started = Instant::now();
            // The server span's context when tracing is exported; otherwise the agent's own
            // trace headers pass through unchanged.
            let cx = tink_telemetry::propagation::current_context();
            let result = if cx.span().span_context().is_valid() {
                tink_bus::publish_event(&shared.bus.jetstream, &event, &cx).await
            } else {
                let headers = if traced {
                    raw_trace_headers(&metadata)
                } else {
                    async_nats::HeaderMap::new()
                };
                tink_bus::publish_event_with_headers(&shared.bus.jetstream, &event, headers).await
            };
            match result {
                Ok(ack) => {
                    metrics
                        .publish_event_seconds
                        .observe(started.elapsed().as_secs_f64());
                    metrics.event_published(kind);
                    if ack.duplicate {
                        metrics.events_duplicate.inc();
                        debug!(sequence = ack.sequence, "duplicate event");
                    }
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

    async fn publish_logs(&self, request: Request<LogBatch>) -> Result<Response<LogAck>, Status> {
        let auth = Auth::of(&request);
        let ack =
            crate::logs::publish(&self.shared, &self.logs, auth, request.into_inner()).await?;
        Ok(Response::new(ack))
    }

    async fn report_inventory(
        &self,
        request: Request<ReportInventoryRequest>,
    ) -> Result<Response<ReportInventoryResponse>, Status> {
        let auth = Auth::of(&request);
        let peer = request.remote_addr().map(|a| a.ip());
        let response =
            crate::inventory::report(&self.shared, auth, peer, request.into_inner()).await?;
        Ok(Response::new(response))
    }
}

/// NATS headers holding the `traceparent` and `tracestate` metadata as sent by the agent.
fn raw_trace_headers(metadata: &tonic::metadata::MetadataMap) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    for key in ["traceparent", "tracestate"] {
        if let Some(value) = metadata.get(key).and_then(|v| v.to_str().ok()) {
            headers.insert(key, value);
        }
    }
    headers
}
