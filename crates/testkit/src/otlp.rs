//! An OTLP/gRPC trace receiver that records spans so tests can assert a trace's shape.
//!
//! [`OtlpReceiver::start`] listens on `127.0.0.1:0`; point a service's exporter at
//! [`OtlpReceiver::endpoint`] (for the binaries: `OTEL_EXPORTER_OTLP_ENDPOINT`), run the
//! scenario, then wait for the spans you expect with [`OtlpReceiver::wait_for`] and assert on
//! names, parents and attributes.
//!
//! ```no_run
//! # async fn example() -> Result<(), tink_testkit::otlp::OtlpError> {
//! let receiver = tink_testkit::otlp::OtlpReceiver::start().await?;
//! // ... export spans to receiver.endpoint() ...
//! let spans = receiver
//!     .wait_for(|spans| spans.iter().any(|s| s.name == "reconcile"))
//!     .await?;
//! # let _ = spans; Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

/// How long [`OtlpReceiver::wait_for`] waits before giving up (exporters batch for a few
/// seconds by default).
pub const WAIT_DEADLINE: Duration = Duration::from_secs(30);

/// Errors of the receiver.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The loopback listener could not be bound.
    #[error("cannot bind the OTLP receiver: {0}")]
    Bind(#[source] std::io::Error),
    /// The expected spans did not arrive in time.
    #[error("the expected spans did not arrive within {WAIT_DEADLINE:?}; received: {received:#?}")]
    Timeout {
        /// What arrived.
        received: Vec<RecordedSpan>,
    },
}

/// One received span, flattened for assertions. Ids are lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedSpan {
    /// The `service.name` resource attribute of the exporter.
    pub service_name: Option<String>,
    /// The span name.
    pub name: String,
    /// The trace id (32 hex digits).
    pub trace_id: String,
    /// The span id (16 hex digits).
    pub span_id: String,
    /// The parent span id, `None` for a root span.
    pub parent_span_id: Option<String>,
    /// The span kind (OTLP enum value: 1 internal, 2 server, 3 client, 4 producer, 5 consumer).
    pub kind: i32,
    /// Attributes, values rendered as strings.
    pub attributes: BTreeMap<String, String>,
    /// Status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// Start time, nanoseconds since the Unix epoch.
    pub start_time_unix_nano: u64,
}

impl RecordedSpan {
    /// An attribute's value.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Debug, Default)]
struct Recorder {
    spans: Mutex<Vec<RecordedSpan>>,
    changed: tokio::sync::Notify,
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RecordedSpan>> {
        self.spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug, Clone)]
struct Collector(Arc<Recorder>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service_name = resource_spans.resource.as_ref().and_then(|r| {
                r.attributes
                    .iter()
                    .find(|kv| kv.key == "service.name")
                    .map(value_of)
            });
            for scope_spans in resource_spans.scope_spans {
                for span in scope_spans.spans {
                    received.push(RecordedSpan {
                        service_name: service_name.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: (!span.parent_span_id.is_empty())
                            .then(|| hex(&span.parent_span_id)),
                        kind: span.kind,
                        attributes: span
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), value_of(kv)))
                            .collect(),
                        status_code: span.status.map_or(0, |s| s.code),
                        start_time_unix_nano: span.start_time_unix_nano,
                    });
                }
            }
        }
        self.0.lock().extend(received);
        self.0.changed.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value_of(kv: &KeyValue) -> String {
    render(kv.value.as_ref())
}

fn render(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(b)) => hex(b),
        Some(any_value::Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(|v| render(Some(v))).collect();
            format!("[{}]", items.join(","))
        }
        Some(any_value::Value::KvlistValue(l)) => {
            let items: Vec<String> = l
                .values
                .iter()
                .map(|kv| format!("{}={}", kv.key, value_of(kv)))
                .collect();
            format!("{{{}}}", items.join(","))
        }
        // Newer OTLP value kinds have no assertions yet.
        #[allow(unreachable_patterns)]
        Some(_) => String::new(),
    }
}

/// A running OTLP/gRPC trace receiver on loopback; stopped on drop.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    recorder: Arc<Recorder>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl OtlpReceiver {
    /// Starts the receiver on `127.0.0.1:0`.
    pub async fn start() -> Result<Self, OtlpError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(OtlpError::Bind)?;
        let addr = listener.local_addr().map_err(OtlpError::Bind)?;
        let recorder = Arc::new(Recorder::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = TraceServiceServer::new(Collector(recorder.clone()));
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await;
            if let Err(e) = served {
                eprintln!("OTLP receiver on {addr} failed: {e}");
            }
        });
        Ok(OtlpReceiver {
            addr,
            recorder,
            stop: Some(stop),
        })
    }

    /// The endpoint for an OTLP/gRPC exporter, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// All spans received so far, in arrival order.
    pub fn spans(&self) -> Vec<RecordedSpan> {
        self.recorder.lock().clone()
    }

    /// The spans of one trace.
    pub fn trace(&self, trace_id: &str) -> Vec<RecordedSpan> {
        self.recorder
            .lock()
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Forgets the spans received so far.
    pub fn clear(&self) {
        self.recorder.lock().clear();
    }

    /// Waits until `done` holds for the spans received, and returns them; fails with
    /// everything received after [`WAIT_DEADLINE`].
    pub async fn wait_for<F>(&self, mut done: F) -> Result<Vec<RecordedSpan>, OtlpError>
    where
        F: FnMut(&[RecordedSpan]) -> bool,
    {
        let wait = async {
            loop {
                let changed = self.recorder.changed.notified();
                tokio::pin!(changed);
                // Register before checking, so an export between check and wait is not missed.
                changed.as_mut().enable();
                let spans = self.spans();
                if done(&spans) {
                    return spans;
                }
                changed.await;
            }
        };
        tokio::time::timeout(WAIT_DEADLINE, wait)
            .await
            .map_err(|_| OtlpError::Timeout {
                received: self.spans(),
            })
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_an_exported_trace_with_its_shape() {
        let receiver = OtlpReceiver::start().await.expect("starts");
        let provider =
            tink_telemetry::otlp_provider("testkit-otlp", &receiver.endpoint()).expect("exporter");
        let tracer = provider.tracer("test");
        tracer.in_span("parent", |cx| {
            cx.span()
                .set_attribute(opentelemetry::KeyValue::new("workflow", "ns/wf"));
            tracer.in_span("child", |_| {});
        });
        let flushed = tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .expect("joined");
        flushed.expect("flushed");

        let spans = receiver
            .wait_for(|spans| spans.len() >= 2)
            .await
            .expect("spans arrive");
        let parent = spans.iter().find(|s| s.name == "parent").expect("parent");
        let child = spans.iter().find(|s| s.name == "child").expect("child");
        assert_eq!(parent.service_name.as_deref(), Some("testkit-otlp"));
        assert_eq!(parent.parent_span_id, None);
        assert_eq!(child.trace_id, parent.trace_id);
        assert_eq!(
            child.parent_span_id.as_deref(),
            Some(parent.span_id.as_str())
        );
        assert_eq!(parent.attribute("workflow"), Some("ns/wf"));
        assert_eq!(parent.trace_id.len(), 32);
        assert_eq!(receiver.trace(&parent.trace_id).len(), 2);
        receiver.clear();
        assert!(receiver.spans().is_empty());
    }

    #[tokio::test]
    async fn wait_for_reports_what_arrived_on_timeout() {
        tokio::time::pause();
        let receiver = OtlpReceiver::start().await.expect("starts");
        let err = receiver
            .wait_for(|spans| !spans.is_empty())
            .await
            .expect_err("nothing is exported");
        assert!(matches!(err, OtlpError::Timeout { ref received } if received.is_empty()));
    }
}
