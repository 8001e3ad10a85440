//! W3C trace context (`traceparent`, `tracestate`) in and out of HTTP headers.

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The trace a client's request continues; an empty context when it names
/// none (or an invalid one).
pub fn extract(headers: &http::HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Writes `cx`'s span as the request's `traceparent` (replacing the
/// client's, which named the parent of toolgate's own span).
pub fn inject(cx: &Context, headers: &mut http::HeaderMap) {
    TraceContextPropagator::new().inject_context(cx, &mut HeaderInjector(headers));
}

/// The `traceparent` of `cx`'s span, when it has a valid one.
pub fn traceparent(cx: &Context) -> Option<String> {
    let mut headers = http::HeaderMap::new();
    inject(cx, &mut headers);
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The 32 hex digits of `cx`'s trace, when it has one.
pub fn trace_id(cx: &Context) -> Option<String> {
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let cx = extract(&headers);
        assert_eq!(
            trace_id(&cx).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(
            traceparent(&cx).as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        headers.insert("traceparent", "garbage".parse().unwrap());
        assert_eq!(trace_id(&extract(&headers)), None);
    }
}
