//! The attribute names of the OpenTelemetry GenAI semantic conventions
//! (and the HTTP ones toolgate sets), and the spans built from them.

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

pub const OPERATION_NAME: &str = "gen_ai.operation.name";
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const TOOL_NAME: &str = "gen_ai.tool.name";
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";
pub const ERROR_TYPE: &str = "error.type";
pub const HTTP_METHOD: &str = "http.request.method";
pub const HTTP_STATUS: &str = "http.response.status_code";
pub const URL_PATH: &str = "url.path";
pub const HTTP_ROUTE: &str = "http.route";
/// toolgate's own: the key's tenant and the upstream target.
pub const TENANT: &str = "toolgate.tenant";
pub const TARGET: &str = "toolgate.target";
pub const ATTEMPT: &str = "toolgate.attempt";
/// The request's `x-request-id` (the HTTP conventions' request header attribute).
pub const REQUEST_ID: &str = "http.request.header.x-request-id";

/// Starts a span under `parent` and returns the context holding it.
pub fn start(
    name: String,
    kind: SpanKind,
    attributes: Vec<KeyValue>,
    parent: &Context,
) -> Option<Context> {
    let telemetry = super::get()?;
    let span = telemetry
        .tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(&telemetry.tracer, parent);
    Some(parent.with_span(span))
}

/// Marks the span of `cx` failed with `error_type` and a message.
pub fn fail(cx: &Context, error_type: impl Into<opentelemetry::Value>, message: impl Into<String>) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(ERROR_TYPE, error_type));
    span.set_status(Status::error(message.into()));
}

/// Adds an event to the span of `cx`.
pub fn event(cx: &Context, name: &'static str, attributes: Vec<KeyValue>) {
    cx.span().add_event(name, attributes);
}
