//! OpenTelemetry traces (`[telemetry]`): one SERVER span per host JSON-RPC request
//! and one CLIENT span per upstream call it makes, exported over OTLP/HTTP
//! (protobuf) by a batch processor, with W3C Trace Context (`traceparent`,
//! `tracestate`) read from the host and sent to backends.
//!
//! Off unless `[telemetry] otlp_endpoint` is set: then nothing is installed, no
//! span is made and no trace context is read or written (a host's
//! `_meta.traceparent` passes to the backend unchanged, like any `_meta` key).
//! The one cost left on the request path is [`enabled`], an atomic load.
//!
//! Spans are `tracing` spans of target [`TARGET`], turned into OpenTelemetry
//! spans by `tracing-opentelemetry`; the log output never shows them (main.rs
//! filters the target out of the fmt layer). Names and attributes follow the
//! OpenTelemetry semantic conventions for MCP (`span.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use crate::config::TelemetryConfig;

mod export;
mod span;

pub(crate) use span::{ClientSpan, ServerSpan, inject_current};

/// The `tracing` target of every span meant for OpenTelemetry.
pub const TARGET: &str = "mcpgate::otel";

/// How long one OTLP export may take (the collector's answer included).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the batch processor exports what it gathered.
const EXPORT_INTERVAL: Duration = Duration::from_secs(2);

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether tracing is on in this process (a [`Pipeline`] was started).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why the trace pipeline could not start.
#[derive(Debug, thiserror::Error)]
#[error("telemetry.otlp_endpoint: {0}")]
pub struct TelemetryError(String);

/// The running trace pipeline: the tracer provider and its batch exporter.
pub struct Pipeline {
    provider: SdkTracerProvider,
}

impl Pipeline {
    /// Starts exporting to `config.otlp_endpoint` (`None` when it is not set: no
    /// tracing). Must run inside the Tokio runtime: the exporter's HTTP requests
    /// are spawned on it (export.rs).
    ///
    /// Errors: the exporter could not be built (an unusable endpoint).
    pub fn start(config: &TelemetryConfig) -> Result<Option<Pipeline>, TelemetryError> {
        let Some(url) = config.traces_url() else {
            return Ok(None);
        };
        let client = export::ExportClient::new(EXPORT_TIMEOUT).map_err(TelemetryError)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError(e.to_string()))?;
        let batch = BatchConfigBuilder::default()
            .with_scheduled_delay(EXPORT_INTERVAL)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sampling_ratio)));
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Some(Pipeline { provider }))
    }

    /// The `tracing` layer that turns [`TARGET`] spans into OpenTelemetry spans
    /// (and sees nothing else).
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let tracer = self.provider.tracer("mcpgate");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO))
    }

    /// Exports the spans still queued and stops the exporter (the SIGTERM path,
    /// after the gateway drained). Waits at most the export timeout.
    pub async fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        let provider = self.provider;
        // The processor's thread needs this runtime to send (export.rs), so the
        // blocking wait happens off it.
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => tracing::info!("traces flushed"),
            Ok(Err(e)) => tracing::warn!(cause = %e, "traces not flushed"),
            Err(e) => tracing::warn!(cause = %e, "traces not flushed"),
        }
    }
}
