//! Logging and OpenTelemetry tracing shared by every tinkerbell-rs service.
//!
//! [`init`] installs one `tracing` subscriber: an `EnvFilter`, a text or JSON log layer, and, when
//! an OTLP endpoint is configured, an OpenTelemetry layer exporting spans over OTLP/gRPC with a
//! batch processor. The W3C trace-context propagator is installed globally so that
//! [`propagation`] can carry a workflow's trace through NATS headers and gRPC metadata.
#![forbid(unsafe_code)]

pub mod propagation;

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines are written to standard error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Logging and tracing flags, flattened into each service's arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct TelemetryArgs {
    /// Log line format.
    #[arg(long, env = "TINK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info,tink_server=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,
    /// OTLP/gRPC endpoint receiving traces, e.g. `http://otel-collector:4317`. Traces are not
    /// exported when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute; defaults to the binary's service name.
    #[arg(long, env = "OTEL_SERVICE_NAME")]
    pub otel_service_name: Option<String>,
}

impl Default for TelemetryArgs {
    fn default() -> Self {
        Self {
            log_format: LogFormat::Text,
            log_filter: "info".to_owned(),
            otlp_endpoint: None,
            otel_service_name: None,
        }
    }
}

/// Keeps the trace pipeline alive; flushes and shuts it down when dropped, so drop it last.
#[must_use = "traces are flushed when the guard is dropped"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Flushes pending spans now (also done on drop).
    pub fn flush(&self) {
        if let Some(provider) = &self.provider
            && let Err(error) = provider.force_flush()
        {
            eprintln!("cannot flush traces: {error}");
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown_with_timeout(Duration::from_secs(5))
        {
            eprintln!("cannot shut down the trace exporter: {error}");
        }
    }
}

/// Builds the OpenTelemetry tracer provider exporting to `endpoint` over OTLP/gRPC.
///
/// Must be called inside a Tokio runtime (the gRPC channel runs on it).
pub fn otlp_provider(service_name: &str, endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .with_context(|| format!("cannot build the OTLP exporter for {endpoint}"))?;
    Ok(SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .with_batch_exporter(exporter)
        .build())
}

/// Installs the global subscriber and propagator for service `service_name`.
///
/// Fails when the filter is invalid, the endpoint cannot be used, or a subscriber is already set.
pub fn init(service_name: &str, args: &TelemetryArgs) -> anyhow::Result<TelemetryGuard> {
    let filter = EnvFilter::try_new(&args.log_filter).with_context(|| {
        format!(
            "invalid log filter {:?} (--log-filter / RUST_LOG)",
            args.log_filter
        )
    })?;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let name = args.otel_service_name.as_deref().unwrap_or(service_name);
    let provider = match &args.otlp_endpoint {
        Some(endpoint) => Some(otlp_provider(name, endpoint)?),
        None => None,
    };
    let otel_layer = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer().with_tracer(provider.tracer(name.to_owned()))
    });
    let (text, json) = match args.log_format {
        LogFormat::Text => (
            Some(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_writer(std::io::stderr),
            ),
        ),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .with(otel_layer)
        .try_init()
        .context("a tracing subscriber is already installed")?;
    if let Some(provider) = &provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
    }
    Ok(TelemetryGuard { provider })
}
