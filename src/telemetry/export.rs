//! The SDK's batch processor behind a count of the spans it holds: a span
//! that would overflow `max_queue_spans` is dropped here and counted
//! (`toolgate_trace_spans_total{outcome="dropped"}`), so the SDK's own queue
//! never drops silently. Export runs on the SDK's thread, off the request path.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};

use crate::metrics as m;

/// Spans handed to the SDK and not yet through an export.
#[derive(Debug, Default)]
struct Held(AtomicUsize);

impl Held {
    /// Takes a place if fewer than `max` are held.
    fn take(&self, max: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.0.fetch_sub(n, Ordering::AcqRel);
    }
}

pub fn processor<E: SpanExporter + 'static>(exporter: E, max: usize) -> Bounded {
    let held = Arc::new(Held::default());
    let batch = BatchSpanProcessor::builder(Counted {
        inner: exporter,
        held: held.clone(),
        failing: AtomicBool::new(false),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            // Above our own bound, so the SDK never drops.
            .with_max_queue_size(max + 1)
            .with_max_export_batch_size(512.min(max))
            .with_scheduled_delay(Duration::from_secs(1))
            .build(),
    )
    .build();
    Bounded { batch, held, max }
}

#[derive(Debug)]
pub struct Bounded {
    batch: BatchSpanProcessor,
    held: Arc<Held>,
    max: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.batch.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.held.take(self.max) {
            self.batch.on_end(span);
        } else {
            metrics::counter!(m::TRACE_SPANS, "outcome" => "dropped").increment(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batch.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batch.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.batch.set_resource(resource);
    }
}

/// The exporter, counting what each export did and giving back its places.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    held: Arc<Held>,
    /// Whether the last export failed: a change is logged once.
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.held.give_back(n);
        let outcome = if result.is_ok() { "exported" } else { "failed" };
        metrics::counter!(m::TRACE_SPANS, "outcome" => outcome).increment(n as u64);
        let was_failing = self.failing.swap(result.is_err(), Ordering::Relaxed);
        match &result {
            Err(e) if !was_failing => {
                tracing::warn!(error = %e, "cannot export traces; spans are dropped until the collector answers");
            }
            Ok(()) if was_failing => tracing::info!("traces are exported again"),
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_and_come_back() {
        let held = Held::default();
        assert!(held.take(2));
        assert!(held.take(2));
        assert!(!held.take(2));
        held.give_back(2);
        assert!(held.take(2));
    }
}
