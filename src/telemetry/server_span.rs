//! The server span of one `/v1` request: continued from the client's
//! `traceparent`, ended with the request's log line.

use opentelemetry::trace::{SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use super::genai as g;

/// Starts the request's span, when traces are on. Its name is the method
/// and the route's template (`POST /v1/chat/completions`,
/// `GET /v1/responses/{id}`, or `known`: a route the config names, such as
/// `[mcp_gateway] path`), or the method alone for a path toolgate does not
/// know: a client-chosen path never becomes a span name.
pub fn start(
    headers: &http::HeaderMap,
    method: &http::Method,
    path: &str,
    known: Option<&str>,
    request_id: Option<&str>,
) -> Option<Context> {
    super::get()?;
    let parent = super::propagate::extract(headers);
    let mut attributes = vec![
        KeyValue::new(g::HTTP_METHOD, method.to_string()),
        KeyValue::new(g::URL_PATH, path.to_owned()),
    ];
    if let Some(id) = request_id {
        attributes.push(KeyValue::new(g::REQUEST_ID, id.to_owned()));
    }
    let name = match known.or_else(|| route(path)) {
        Some(route) => {
            attributes.push(KeyValue::new(g::HTTP_ROUTE, route.to_owned()));
            format!("{method} {route}")
        }
        None => method.to_string(),
    };
    g::start(name, SpanKind::Server, attributes, &parent)
}

/// The template of a `/v1` path toolgate knows.
fn route(path: &str) -> Option<&'static str> {
    const EXACT: [&str; 6] = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
        "/v1/messages",
        "/v1/models",
    ];
    let path = path.strip_suffix('/').unwrap_or(path);
    if let Some(known) = EXACT.iter().find(|k| **k == path) {
        return Some(known);
    }
    let id = path.strip_prefix("/v1/responses/")?;
    match id.split_once('/') {
        None => Some("/v1/responses/{id}"),
        Some((_, "input_items")) => Some("/v1/responses/{id}/input_items"),
        Some(_) => None,
    }
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

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn span_names_use_templates_never_ids_or_unknown_paths() {
        assert_eq!(route("/v1/chat/completions/"), Some("/v1/chat/completions"));
        assert_eq!(route("/v1/responses/resp_123"), Some("/v1/responses/{id}"));
        assert_eq!(
            route("/v1/responses/resp_123/input_items"),
            Some("/v1/responses/{id}/input_items")
        );
        assert_eq!(route("/v1/files/file-abc"), None);
        assert_eq!(route("/v1/anything"), None);
    }
}
