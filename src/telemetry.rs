//! OpenTelemetry traces, when `[telemetry]` is configured: a server span per
//! `/v1` request, a client span `chat {model}` per upstream attempt, an
//! `execute_tool {name}` span per gateway tool call, named and attributed
//! after the GenAI semantic conventions ([`genai`]).
//!
//! Without `[telemetry]` nothing here costs anything on the request path:
//! [`get`] is `None` and no span, context or header is made.
//!
//! Spans end on other threads than they start and export in batches on the
//! SDK's own thread (`export`), behind a bounded queue whose drops are
//! counted. The request's trace context travels with its [`scope`].

pub mod content;
mod export;
pub mod genai;
pub mod propagate;
pub mod scope;
pub mod server_span;

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

use crate::config::TelemetryConfig;

pub use opentelemetry::Context;

/// How long one export may take before it is abandoned.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The process's tracer, once [`install`]ed.
pub struct Telemetry {
    provider: SdkTracerProvider,
    pub(crate) tracer: SdkTracer,
    /// `capture_content`: chat spans carry the messages.
    pub capture_content: bool,
}

static INSTALLED: OnceLock<Telemetry> = OnceLock::new();

/// The tracer, when traces are exported.
#[inline]
pub fn get() -> Option<&'static Telemetry> {
    INSTALLED.get()
}

/// Starts exporting traces for the rest of the process. A second call keeps
/// the first tracer (the settings are restart-only).
pub fn install(config: &TelemetryConfig) -> Result<(), String> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    // reqwest (the exporter's client) takes rustls' process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = std::collections::HashMap::new();
    if let Some(value) = config.authorization.as_ref().and_then(|v| v.to_str().ok()) {
        headers.insert("authorization".to_owned(), value.to_owned());
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(config.traces_url.clone())
        .with_headers(headers)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(export::processor(exporter, config.max_queue_spans))
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let tracer = provider.tracer("toolgate");
    let _ = INSTALLED.set(Telemetry {
        provider,
        tracer,
        capture_content: config.capture_content,
    });
    Ok(())
}

/// Exports what is queued (at most `deadline`) and stops. Call at exit.
pub fn shutdown(deadline: Duration) {
    if let Some(t) = INSTALLED.get()
        && let Err(e) = t.provider.shutdown_with_timeout(deadline)
    {
        tracing::warn!(error = %e, "traces still queued at exit were not exported");
    }
}
