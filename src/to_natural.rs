//! to_natural mode: a native-tools upstream, a client that wants calls as
//! readable text (seeds 001 and 002).
//!
//! Upstream direction ([`history`]): the client's natural-text history is
//! parsed back into native `tool_calls` and `tool` messages; its `tools` go
//! upstream as they are. Client direction ([`stream`], [`complete`]): native
//! calls become text in the configured syntax, streamed as they arrive.

pub mod complete;
pub mod declared;
pub mod history;
pub mod pretty;
pub mod stream;

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;

use crate::body::{self as gbody, Body};
use crate::config::Provider;
use crate::error::GatewayError;
use crate::natural::syntax::Syntax;
use crate::sse::transform::TransformBody;
use crate::upstream::Upstreams;
use crate::upstream::reply::{self, Shape};

/// How calls are written as text.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    pub syntax: Syntax,
    /// Pretty-print the arguments JSON (tag and tool_call syntaxes).
    pub pretty: bool,
    /// Written on its own line between two calls.
    pub separator: String,
}

impl RenderOptions {
    /// Bracket calls stay on one line, so their JSON is never pretty-printed.
    pub fn pretty_arguments(&self) -> bool {
        self.pretty && self.syntax != Syntax::Bracket
    }

    /// One whole call, exactly as the streaming path writes it.
    pub fn write_call(&self, name: &str, arguments: &str, out: &mut String) {
        self.syntax.write_call_open(name, out);
        if arguments.trim().is_empty() {
            out.push_str("{}");
        } else if self.pretty_arguments() {
            match serde_json::from_str::<serde_json::Value>(arguments) {
                Ok(v) => out.push_str(
                    &serde_json::to_string_pretty(&v).unwrap_or_else(|_| arguments.to_owned()),
                ),
                Err(_) => out.push_str(arguments),
            }
        } else {
            out.push_str(arguments);
        }
        self.syntax.write_call_close(name, out);
    }
}

/// `stream_options.include_usage` in a chat request.
fn asks_for_usage(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Request {
        stream_options: Option<StreamOptions>,
    }
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        #[serde(default)]
        include_usage: bool,
    }
    serde_json::from_slice::<Request>(body)
        .ok()
        .and_then(|r| r.stream_options)
        .is_some_and(|o| o.include_usage)
}

/// Sends a chat completion to a to_natural provider and renders the reply.
pub async fn handle(
    upstreams: &Upstreams,
    provider: &Provider,
    parts: http::request::Parts,
    bytes: Bytes,
) -> Result<Response<Body>, GatewayError> {
    let tools = &provider.tools;
    let options = RenderOptions {
        syntax: tools.syntax,
        pretty: tools.pretty,
        separator: tools.separator.clone(),
    };
    let history = history::HistoryOptions {
        syntax: tools.syntax,
        max_tool_result_chars: tools.max_tool_result_chars,
    };
    let (rewritten, include_usage) = {
        let body = bytes.clone();
        crate::natural::engine::rewrite_off_worker(bytes.len(), move || {
            history::rewrite(&body, &history).map(|r| (r, asks_for_usage(&body)))
        })
        .await??
    };
    let bytes = match rewritten {
        Some(rewritten) => Bytes::from(rewritten),
        None => bytes,
    };
    let response = upstreams.send_to_read(provider, parts, bytes).await?;
    if !response.status().is_success() {
        return Ok(response);
    }
    let (mut parts, upstream_body) = response.into_parts();
    if let Shape::Stream = reply::prepare(&mut parts)? {
        let renderer = stream::StreamRenderer::new(options, include_usage);
        return Ok(Response::from_parts(
            parts,
            TransformBody::new(upstream_body, renderer).boxed_unsync(),
        ));
    }
    let collected = reply::read(upstream_body).await?;
    Ok(Response::from_parts(
        parts,
        gbody::full(complete::rewrite(&collected, &options)?),
    ))
}
