//! What every tool transform does with the upstream's answer before
//! rewriting it: insist on an uncompressed body, drop the length it is about
//! to invalidate, tell a stream from a whole completion, and read and parse
//! a whole completion with a bound.

use bytes::Bytes;
use http::header;
use http::response::Parts;
use serde_json::Value;

use crate::body::{self, Body};
use crate::error::GatewayError;

/// Largest non-streaming upstream completion read to rewrite.
const MAX_COMPLETION_BYTES: usize = 64 * 1024 * 1024;

/// How the reply arrives.
pub enum Shape {
    Stream,
    Whole,
}

/// Prepares the response head for a rewritten body and says which shape it has.
pub fn prepare(parts: &mut Parts) -> Result<Shape, GatewayError> {
    if let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING)
        && encoding != "identity"
    {
        return Err(GatewayError::UpstreamInvalid {
            message: format!(
                "The upstream compressed its reply ({encoding:?}) although toolgate asked for none"
            ),
            code: "upstream_invalid_body",
        });
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    let sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    Ok(if sse { Shape::Stream } else { Shape::Whole })
}

/// Reads a whole completion's body.
pub async fn read(upstream: Body) -> Result<Bytes, GatewayError> {
    body::collect_limited(upstream, MAX_COMPLETION_BYTES)
        .await
        .map_err(|e| GatewayError::UpstreamInvalid {
            message: format!("Could not read the upstream's completion: {e}"),
            code: "upstream_invalid_body",
        })
}

/// Parses a whole completion.
pub fn parse(body: &[u8]) -> Result<Value, GatewayError> {
    serde_json::from_slice(body).map_err(|e| GatewayError::UpstreamInvalid {
        message: format!("The upstream's completion is not valid JSON: {e}"),
        code: "upstream_invalid_body",
    })
}
