//! The Anthropic Messages door (`POST /v1/messages`) in front of a Chat
//! Completions provider: the body is translated into a chat request
//! (`messages_request`), answered through [`crate::answer`] like any chat
//! request (every tool mode, the gateway's tools), and the answer's events
//! are written as Anthropic events or one message (`messages_events`).
//! Errors take Anthropic's shape ([`error_response`]).

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, header};
use serde_json::{Value, json};

use crate::answer::{self, Ask, Started, Transcript};
use crate::api::messages_events::{MessagesEvents, error_body};
use crate::api::messages_request;
use crate::body::{self, Body};
use crate::config::{Provider, Tenant};
use crate::error::GatewayError;
use crate::runtime::Runtime;

/// Whether `path` is one of this door's.
pub fn is_messages_path(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    path == "/v1/messages" || path == "/v1/messages/count_tokens"
}

/// A gateway error as this door answers it: the usual status and headers,
/// Anthropic's body.
pub fn error_response(error: GatewayError) -> Response<Body> {
    let body = error_body(&error);
    let mut response = error.into_response();
    *response.body_mut() = body::json(&body);
    response.headers_mut().remove(header::CONTENT_LENGTH);
    response
}

pub async fn handle(
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    tenant: Arc<Tenant>,
    parts: http::request::Parts,
    bytes: Bytes,
    transcript: &mut Transcript,
) -> Result<Response<Body>, GatewayError> {
    if parts.uri.path().trim_end_matches('/') == "/v1/messages/count_tokens" {
        let request = super::json_object(&bytes)?;
        return Ok(super::json(
            &json!({"input_tokens": estimate_tokens(&request)}),
        ));
    }
    let request = super::json_object(&bytes)?;
    // Parsed: the raw body is not held for the rest of the answer.
    drop(bytes);
    let translated = messages_request::translate(request)?;
    let model = translated.request.model.clone().unwrap_or_default();
    let uri = http::Uri::from_static("/v1/chat/completions");
    let ask = Ask {
        request: translated.request,
        uri,
        headers: parts.headers,
        tenant,
        transcript,
    };
    let running = match answer::start(runtime, provider, ask).await? {
        Started::Refused(response) => return Ok(response),
        Started::Running(running) => running,
    };
    let encoder = MessagesEvents::new(&model, translated.stream, running.show())
        .with_stop_sequences(translated.stop_sequences);
    if translated.stream {
        return Ok(super::streamed(running, encoder));
    }
    super::whole(running, encoder, MessagesEvents::into_message).await
}

/// Bytes of text per token in [`estimate_tokens`]: about what English
/// prose and JSON average in the common BPE vocabularies.
const BYTES_PER_TOKEN: usize = 4;

/// `count_tokens` without a tokenizer: the text of the system prompt, the
/// messages and the tools (as JSON), one token per [`BYTES_PER_TOKEN`] bytes
/// rounded up, plus one per message for its framing. The same estimate for
/// every provider: an upper bound for planning, not a bill.
fn estimate_tokens(request: &serde_json::Map<String, Value>) -> usize {
    fn text_bytes(value: &Value) -> usize {
        match value {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(text_bytes).sum(),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| match k.as_str() {
                    "text" | "content" | "thinking" | "input" => text_bytes(v),
                    "type" | "cache_control" | "id" | "tool_use_id" => 0,
                    _ => text_bytes(v),
                })
                .sum(),
            other => other.to_string().len(),
        }
    }
    let messages = request.get("messages").and_then(Value::as_array);
    let bytes = request.get("system").map_or(0, text_bytes)
        + messages.map_or(0, |m| m.iter().map(text_bytes).sum())
        + request.get("tools").map_or(0, |t| t.to_string().len());
    bytes.div_ceil(BYTES_PER_TOKEN) + messages.map_or(0, Vec::len)
}
