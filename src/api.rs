//! The wire formats toolgate speaks with clients and upstreams, each
//! converted to and from the format-free [`crate::exchange`] types.

pub mod chat;
pub mod chat_events;
pub mod chat_message;
pub mod chat_tap;
pub mod fields;
pub mod key_streams;
pub mod keys;
pub mod mcp;
pub mod messages;
pub mod messages_events;
pub mod messages_request;
pub mod responses;
pub mod responses_events;
pub mod responses_request;
pub mod transcripts;
pub mod usage;
pub mod viewer;

use http::{HeaderValue, Response, header};
use serde_json::{Map, Value};

use crate::answer::{self, Running};
use crate::body::{self, Body};
use crate::error::GatewayError;
use crate::exchange::Sink;
use crate::tools::drive::{self, Output, Take};

/// Most JSON objects and arrays one request body may hold (messages,
/// items, content blocks, tool calls and schemas together).
pub const MAX_JSON_CONTAINERS: usize = 100_000;

/// A body toolgate will parse: a parsed object or array costs far more
/// than its bytes, so a body of many small items is refused before it is
/// parsed, not after.
pub fn bounded(bytes: &[u8]) -> Result<(), GatewayError> {
    if containers_over(bytes, MAX_JSON_CONTAINERS) {
        return Err(GatewayError::bad_request(
            format!(
                "The request body holds more than {MAX_JSON_CONTAINERS} JSON objects and arrays (toolgate's limit per request)"
            ),
            None,
        ));
    }
    Ok(())
}

/// Whether `bytes` opens more than `limit` objects and arrays (outside
/// strings). One pass, no allocation; malformed JSON is left to the parser.
fn containers_over(bytes: &[u8], limit: usize) -> bool {
    let mut count = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'{' || b == b'[' {
            count += 1;
            if count > limit {
                return true;
            }
        }
    }
    false
}

/// A `200` server-sent event stream.
pub fn event_stream(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A query parameter, decoded (`+` and `%XX`); an empty one counts as absent.
pub fn param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

/// A `200` JSON answer.
pub fn json(value: &Value) -> Response<Body> {
    let mut response = Response::new(body::json(value));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An answer streamed to the client through `encoder`, as server-sent
/// events, tagged with the transcript chat it is recorded in.
pub fn streamed<E>(running: Box<Running>, encoder: E) -> Response<Body>
where
    E: Sink + Take + Send + 'static,
{
    let chat = running.chat_id().map(str::to_owned);
    let body = drive::stream(encoder, move |mut out| {
        Box::pin(async move { running.drive(&mut out).await })
    });
    let mut response = event_stream(body);
    answer::tag_chat(&mut response, chat.as_deref());
    response
}

/// An answer driven to its end into `sink`, then sent whole as the JSON
/// `finish` makes of it (or its error), tagged with its transcript chat.
pub async fn whole<S: Output>(
    running: Box<Running>,
    mut sink: S,
    finish: impl FnOnce(S) -> Result<Value, GatewayError>,
) -> Result<Response<Body>, GatewayError> {
    let chat = running.chat_id().map(str::to_owned);
    running.drive(&mut sink).await;
    let mut response = json(&finish(sink)?);
    answer::tag_chat(&mut response, chat.as_deref());
    Ok(response)
}

/// A front door's request body: a JSON object, or a `400` saying why not.
/// The body was checked with [`bounded`] on its way in (the dispatch scans
/// every body a door will parse), so it is not scanned again here.
pub fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, GatewayError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(GatewayError::bad_request(
            "The request body must be a JSON object",
            None,
        )),
        Err(e) => Err(GatewayError::bad_request(
            format!("The request body is not valid JSON: {e}"),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_counted_outside_strings() {
        assert!(!containers_over(br#"{"a": [1, {"b": 2}]}"#, 3));
        assert!(containers_over(br#"{"a": [1, {"b": 2}]}"#, 2));
        // Brackets in strings, escaped quotes included, are text.
        assert!(!containers_over(br#"{"a": "[{\"[{"}"#, 1));
        let many = format!("[{}]", ["{}"; 10].join(","));
        assert!(containers_over(many.as_bytes(), 10));
        assert!(!containers_over(many.as_bytes(), 11));
    }
}
