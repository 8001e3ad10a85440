//! Running one gateway tool call: arguments checked against the schema, the
//! tool run within its timeout, its answer turned into text. Every failure
//! (bad arguments, timeout, a server error, an MCP `isError`) becomes an
//! [`Outcome`] with an error the model sees; nothing here ends a stream.

use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Map, Value};

use opentelemetry::trace::{SpanKind, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use crate::metrics as m;
use crate::telemetry::genai as g;
use crate::tools::{GatewayTool, ToolKind, Tools};

/// What a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The tool's answer, as text (truncated with a visible marker if long).
    Completed(String),
    /// Why there is no answer, as text.
    Failed(String),
}

impl Outcome {
    pub fn is_error(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }

    /// The text the model gets as the call's result.
    pub fn for_model(&self) -> String {
        match self {
            Outcome::Completed(text) => text.clone(),
            Outcome::Failed(error) => format!("Error: {error}"),
        }
    }
}

/// Who asked for a call: the `route` label of the call's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A model, in the gateway's tool loop.
    Model,
    /// An MCP client, through `[mcp_gateway]`.
    Mcp,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::Model => "model",
            Route::Mcp => "mcp",
        }
    }
}

/// Runs `tool` with `arguments` (the call's JSON text). `max_chars` bounds
/// the answer's length (`max_tool_result_chars`).
pub async fn execute(
    tools: &Tools,
    tool: &GatewayTool,
    call_id: &str,
    arguments: &str,
    max_chars: usize,
    route: Route,
) -> Outcome {
    let mut watch = CallWatch::start(tool, call_id, route);
    // The tool's own requests (HTTP, MCP) carry this call's span as their parent.
    let outcome = crate::telemetry::scope::with_trace(
        watch.span.clone(),
        run(tools, tool, arguments, max_chars),
    )
    .await;
    if let (Some(cx), Outcome::Failed(error)) = (&watch.span, &outcome) {
        g::fail(cx, "tool_error", error.clone());
    }
    watch.finish(if outcome.is_error() {
        "failed"
    } else {
        "completed"
    });
    match outcome {
        Outcome::Completed(text) => Outcome::Completed(truncate(text, max_chars)),
        failed => failed,
    }
}

/// One call's metrics: in flight from [`CallWatch::start`] until it is
/// finished or dropped. A call whose future is dropped (the client left, the
/// answer was cancelled) is counted as `cancelled`, so the in-flight gauge
/// never keeps a call that is gone.
struct CallWatch {
    tool: String,
    server: String,
    route: Route,
    started: Instant,
    outcome: Option<&'static str>,
    /// The call's `execute_tool {name}` span, when traces are on.
    span: Option<Context>,
}

impl CallWatch {
    fn start(tool: &GatewayTool, call_id: &str, route: Route) -> Self {
        metrics::gauge!(m::GATEWAY_TOOLS_IN_FLIGHT).increment(1.0);
        let span = crate::telemetry::scope::trace().and_then(|parent| {
            let kind = match tool.kind {
                ToolKind::Builtin(_) => "function",
                ToolKind::Http(_) | ToolKind::Mcp { .. } => "extension",
            };
            g::start(
                format!("execute_tool {}", tool.name),
                SpanKind::Internal,
                vec![
                    KeyValue::new(g::OPERATION_NAME, "execute_tool"),
                    KeyValue::new(g::TOOL_NAME, tool.name.clone()),
                    KeyValue::new(g::TOOL_CALL_ID, call_id.to_owned()),
                    KeyValue::new(g::TOOL_TYPE, kind),
                    KeyValue::new("toolgate.tool.server", tool.server().to_owned()),
                ],
                &parent,
            )
        });
        CallWatch {
            tool: tool.name.clone(),
            server: tool.server().to_owned(),
            route,
            started: Instant::now(),
            outcome: None,
            span,
        }
    }

    fn finish(&mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        metrics::gauge!(m::GATEWAY_TOOLS_IN_FLIGHT).decrement(1.0);
        let outcome = self.outcome.unwrap_or("cancelled");
        let route = self.route.label();
        metrics::counter!(m::GATEWAY_TOOL_CALLS, "tool" => self.tool.clone(), "server" => self.server.clone(), "outcome" => outcome, "route" => route)
            .increment(1);
        metrics::histogram!(m::GATEWAY_TOOL_DURATION, "server" => self.server.clone(), "tool" => self.tool.clone(), "route" => route)
            .record(self.started.elapsed().as_secs_f64());
        if let Some(cx) = self.span.take() {
            if outcome == "cancelled" {
                g::fail(&cx, "cancelled", "the call was cancelled");
            }
            cx.span().end();
        }
    }
}

async fn run(tools: &Tools, tool: &GatewayTool, arguments: &str, max_chars: usize) -> Outcome {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let parsed: Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Outcome::Failed("the arguments are not a JSON object".into()),
        Err(e) => return Outcome::Failed(format!("the arguments are not valid JSON: {e}")),
    };
    if let Err(complaint) = tool.check(&Value::Object(parsed.clone())) {
        return Outcome::Failed(format!(
            "the arguments do not match the tool's schema: {complaint}"
        ));
    }
    match &tool.kind {
        ToolKind::Builtin(b) => match b.run(&parsed) {
            Ok(text) => Outcome::Completed(text),
            Err(e) => Outcome::Failed(e),
        },
        ToolKind::Http(config) => {
            // Read a little past the cap, so truncation still says how much was cut.
            let max_bytes = max_chars.saturating_mul(4).saturating_add(1024);
            match timeout(config.timeout, tools.http().call(config, text, max_bytes)).await {
                Err(e) => Outcome::Failed(e),
                Ok(Err(e)) => Outcome::Failed(e),
                Ok(Ok(answer)) if answer.truncated => Outcome::Completed(format!(
                    "{}\n[... truncated: the answer was longer than {max_bytes} bytes]",
                    answer.text
                )),
                Ok(Ok(answer)) => Outcome::Completed(answer.text),
            }
        }
        ToolKind::Mcp {
            server,
            original,
            timeout,
        } => match tools.mcp().call(server, original, parsed, *timeout).await {
            Ok(result) => from_mcp(result),
            Err(e) => Outcome::Failed(e.to_string()),
        },
    }
}

async fn timeout<T>(limit: Duration, f: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| format!("timed out after {:.1}s", limit.as_secs_f64()))
}

/// An MCP result as text: text blocks joined, other blocks described;
/// `isError` makes it a failure.
fn from_mcp(result: CallToolResult) -> Outcome {
    let mut parts: Vec<String> = Vec::with_capacity(result.content.len());
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[image: {}]", i.mime_type),
            ContentBlock::Audio(a) => format!("[audio: {}]", a.mime_type),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, .. } => format!("[resource: {uri}]"),
                _ => "[resource]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource: {}]", link.uri),
            // Block kinds added by later protocol versions.
            _ => "[content]".to_owned(),
        });
    }
    let mut text = parts.join("\n");
    if text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    if result.is_error == Some(true) {
        if text.is_empty() {
            text = "the tool reported an error".into();
        }
        Outcome::Failed(text)
    } else {
        Outcome::Completed(text)
    }
}

/// Cuts `text` to `max` characters with a marker saying how many were cut.
pub fn truncate(text: String, max: usize) -> String {
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let removed = text[cut..].chars().count();
    let mut kept = text;
    kept.truncate(cut);
    kept.push_str(&format!("\n[... truncated {removed} characters]"));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_a_marker() {
        assert_eq!(truncate("héllo".into(), 10), "héllo");
        assert_eq!(
            truncate("héllo".into(), 2),
            "hé\n[... truncated 3 characters]"
        );
    }

    #[test]
    fn mcp_errors_and_blocks_become_text() {
        let ok: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "", "mimeType": "image/png"}]
        }))
        .unwrap();
        assert_eq!(
            from_mcp(ok),
            Outcome::Completed("a\n[image: image/png]".into())
        );
        let err: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "no such city"}], "isError": true
        }))
        .unwrap();
        assert_eq!(from_mcp(err), Outcome::Failed("no such city".into()));
    }
}
