//! The server span of one `/v1` request: continued from the client's
//! `traceparent`, ended with the request's log line.

use opentelemetry::trace::{SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use super::genai as g;

/// Starts the request's span, when traces are on.
pub fn start(headers: &http::HeaderMap, method: &http::Method, path: &str) -> Option<Context> {
    super::get()?;
    let parent = super::propagate::extract(headers);
    g::start(
        format!("{method} {path}"),
        SpanKind::Server,
        vec![
            KeyValue::new(g::HTTP_METHOD, method.to_string()),
            KeyValue::new(g::URL_PATH, path.to_owned()),
        ],
        &parent,
    )
}

/// What the request came to, for its span.
pub struct Ended<'a> {
    pub status: u16,
    pub provider: &'a str,
    pub tenant: Option<&'a str>,
    pub model: &'a str,
    pub error: Option<&'a str>,
}

pub fn end(cx: &Context, ended: Ended<'_>) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(g::HTTP_STATUS, i64::from(ended.status)));
    span.set_attribute(KeyValue::new(g::PROVIDER_NAME, ended.provider.to_owned()));
    if !ended.model.is_empty() {
        span.set_attribute(KeyValue::new(g::REQUEST_MODEL, ended.model.to_owned()));
    }
    if let Some(tenant) = ended.tenant {
        span.set_attribute(KeyValue::new(g::TENANT, tenant.to_owned()));
    }
    if ended.status >= 500 {
        span.set_attribute(KeyValue::new(g::ERROR_TYPE, ended.status.to_string()));
        span.set_status(Status::error(format!("status {}", ended.status)));
    } else if let Some(error) = ended.error {
        span.set_attribute(KeyValue::new(g::ERROR_TYPE, "stream_error"));
        span.set_status(Status::error(error.to_owned()));
    }
    span.end();
}
