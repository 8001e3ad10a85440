//! Repairing a broken call with a fallback model: a second, usually small model is shown the tool's contract,
//! what the first model wrote and what was wrong, and asked for the call's
//! arguments as JSON only. Its answer goes through the same validator; after
//! `fallback_attempts` failures the reply fails with a message that says so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, header};
use http_body_util::Full;
use serde_json::{Map, Value, json};

use crate::body;
use crate::config::{Mode, Provider};
use crate::metrics as m;
use crate::natural::contract;
use crate::natural::reply::{InvalidCall, RepairRequest};
use crate::natural::syntax::Syntax;
use crate::natural::tools::{Tool, ToolSet};
use crate::natural::validate::SchemaCache;
use crate::upstream::Upstreams;

/// Largest fallback answer read.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Added to the repairs' deadline beyond `fallback_timeout_secs × fallback_attempts`.
pub const DEADLINE_SLACK: Duration = Duration::from_secs(1);

pub struct Repairer {
    pub upstreams: Upstreams,
    /// The fallback provider and the model asked there.
    pub provider: Arc<Provider>,
    pub model: String,
    pub attempts: u32,
    pub timeout: Duration,
    /// Repairs one response may ask for (`fallback_max_calls`).
    pub max_calls: usize,
    pub tools: Arc<ToolSet>,
    pub schemas: Arc<SchemaCache>,
    pub syntax: Syntax,
    /// The client's credentials, used when the fallback provider has no key of its own.
    pub authorization: Option<HeaderValue>,
    /// The natural-mode provider whose call is repaired (metrics label).
    pub for_provider: Arc<str>,
}

type Arguments = Map<String, Value>;

impl Repairer {
    /// How long all repairs of one non-streaming response may take together:
    /// they run at once, so one repair's worst case (every attempt timing
    /// out) plus [`DEADLINE_SLACK`], so a repair's own timeout, which says
    /// more, normally ends it first.
    pub fn deadline(&self) -> Duration {
        self.timeout
            .saturating_mul(self.attempts)
            .saturating_add(DEADLINE_SLACK)
    }

    /// Asks the fallback model, up to `attempts` times, for a valid call.
    pub async fn repair(
        &self,
        request: &RepairRequest,
    ) -> Result<(String, Arguments), InvalidCall> {
        use crate::telemetry::genai as g;
        use opentelemetry::trace::TraceContextExt;
        let span = crate::telemetry::scope::trace().and_then(|parent| {
            // A call whose tool could not be read is repaired under no name.
            let tool = request.tool.clone().unwrap_or_default();
            g::start(
                format!("repair_tool_call {tool}").trim_end().to_owned(),
                opentelemetry::trace::SpanKind::Internal,
                vec![
                    opentelemetry::KeyValue::new(g::TOOL_NAME, tool),
                    opentelemetry::KeyValue::new(g::PROVIDER_NAME, self.provider.name.clone()),
                ],
                &parent,
            )
        });
        // The fallback model's own chat span is this one's child.
        let result =
            crate::telemetry::scope::with_trace(span.clone(), self.repair_attempts(request)).await;
        if let Some(cx) = span {
            if let Err(e) = &result {
                g::fail(&cx, "repair_failed", e.reason.clone());
            }
            cx.span().end();
        }
        result
    }

    async fn repair_attempts(
        &self,
        request: &RepairRequest,
    ) -> Result<(String, Arguments), InvalidCall> {
        let started = Instant::now();
        let mut complaint = request.error.clone();
        let mut last_failure = String::new();
        for _ in 0..self.attempts {
            metrics::counter!(m::REPAIR_ATTEMPTS, "provider" => self.for_provider.to_string())
                .increment(1);
            let outcome =
                match tokio::time::timeout(self.timeout, self.attempt(request, &complaint)).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(format!(
                        "the fallback model did not answer within {:.1}s",
                        self.timeout.as_secs_f64()
                    )),
                };
            match outcome {
                Ok(call) => {
                    self.record(started, "success");
                    return Ok(call);
                }
                Err(why) => {
                    complaint = format!(
                        "{}; your previous answer was rejected: {why}",
                        request.error
                    );
                    last_failure = why;
                }
            }
        }
        self.record(started, "failure");
        Err(InvalidCall {
            tool: request.tool.clone(),
            reason: format!(
                "{}; repair by {}/{} failed: {last_failure}",
                request.error, self.provider.name, self.model
            ),
            raw: Some(request.original.clone()),
        })
    }

    fn record(&self, started: Instant, outcome: &'static str) {
        let provider = self.for_provider.to_string();
        metrics::counter!(m::REPAIRS, "provider" => provider.clone(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!(m::REPAIR_DURATION, "provider" => provider)
            .record(started.elapsed().as_secs_f64());
    }

    /// Whether the fallback provider takes native tools (a passthrough HTTP provider).
    fn native(&self) -> bool {
        self.provider.tools.mode == Mode::Passthrough && self.provider.all_http()
    }

    async fn attempt(
        &self,
        request: &RepairRequest,
        complaint: &str,
    ) -> Result<(String, Arguments), String> {
        let tools: Vec<&Tool> = match &request.tool {
            Some(name) => vec![
                self.tools
                    .get(name)
                    .ok_or_else(|| format!("`{name}` is not a declared tool"))?,
            ],
            None => self.tools.tools.iter().collect(),
        };
        let body = self.request_body(&tools, request, complaint);
        let mut req = Request::post("/v1/chat/completions")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        if let Some(auth) = &self.authorization {
            req.headers_mut()
                .insert(header::AUTHORIZATION, auth.clone());
        }
        let response = self
            .upstreams
            .send(&self.provider, req)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = body::collect_limited(response.into_body(), MAX_ANSWER_BYTES)
            .await
            .map_err(|e| format!("could not read the fallback's answer: {e}"))?;
        if !status.is_success() {
            let excerpt: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(format!(
                "the fallback model answered HTTP {status}: {excerpt}"
            ));
        }
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the fallback's answer is not JSON: {e}"))?;
        let (name, arguments) = self.read_answer(&answer, request.tool.as_deref())?;
        let tool = self
            .tools
            .get(&name)
            .ok_or_else(|| format!("the fallback named `{name}`, which is not a declared tool"))?;
        self.schemas
            .check(tool, &arguments)
            .map_err(|e| format!("the repaired arguments do not match the schema: {e}"))?;
        Ok((name, arguments))
    }

    fn request_body(&self, tools: &[&Tool], request: &RepairRequest, complaint: &str) -> Value {
        let mut contracts = String::new();
        for tool in tools {
            contract::render(tool, self.syntax, &mut contracts);
            contracts.push('\n');
        }
        let shape = match &request.tool {
            Some(name) => format!("the arguments of one call to `{name}`, as a single JSON object"),
            None => "one call, as a JSON object {\"name\": \"ToolName\", \"arguments\": {...}}"
                .to_owned(),
        };
        let system = format!(
            "You repair tool calls written by another model. Reply with {shape} that satisfies the tool's \
             parameters. Reply with JSON only: no prose, no code fences.\n\n{contracts}"
        );
        let user = format!(
            "The model wrote:\n\n{}\n\nWhat was wrong: {complaint}\n\nWrite the corrected call.",
            transcript(&request.original)
        );
        let mut body = json!({
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
        });
        if self.native() {
            body["tools"] = tools
                .iter()
                .map(|t| {
                    let mut function = json!({"name": t.name});
                    if let Some(d) = &t.description {
                        function["description"] = json!(d);
                    }
                    function["parameters"] = t
                        .parameters
                        .clone()
                        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                    json!({"type": "function", "function": function})
                })
                .collect();
            body["tool_choice"] = match &request.tool {
                Some(name) => json!({"type": "function", "function": {"name": name}}),
                None => json!("required"),
            };
        } else {
            body["response_format"] = json!({"type": "json_object"});
        }
        body
    }

    /// Reads the call out of the fallback's completion: a native tool call, or JSON text.
    fn read_answer(
        &self,
        answer: &Value,
        tool: Option<&str>,
    ) -> Result<(String, Arguments), String> {
        let message = answer
            .pointer("/choices/0/message")
            .ok_or("the fallback's answer has no choices[0].message")?;
        if let Some(call) = message.pointer("/tool_calls/0/function") {
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or("the fallback's tool call has no name")?;
            let arguments = match call.get("arguments") {
                Some(Value::String(s)) if s.trim().is_empty() => Map::new(),
                Some(Value::String(s)) => as_object(
                    serde_json::from_str(s)
                        .map_err(|e| format!("the fallback's arguments are not JSON: {e}"))?,
                )?,
                Some(v @ Value::Object(_)) => as_object(v.clone())?,
                _ => Map::new(),
            };
            return Ok((name.to_owned(), arguments));
        }
        let text = message
            .get("content")
            .and_then(Value::as_str)
            .ok_or("the fallback answered with neither a tool call nor text")?;
        let value: Value = serde_json::from_str(strip_fence(text))
            .map_err(|e| format!("the fallback's answer is not a JSON object: {e}"))?;
        match (tool, value) {
            // The call's own shape, {"name", "arguments"}, is accepted whether or not it was asked for.
            (_, Value::Object(mut o))
                if o.get("name").is_some_and(Value::is_string)
                    && o.get("arguments").is_some_and(Value::is_object) =>
            {
                let name = o
                    .remove("name")
                    .and_then(|n| n.as_str().map(str::to_owned))
                    .unwrap_or_default();
                if tool.is_some_and(|t| t != name) {
                    return Err(format!(
                        "the fallback called `{name}` instead of `{}`",
                        tool.unwrap_or_default()
                    ));
                }
                Ok((name, as_object(o.remove("arguments").unwrap_or_default())?))
            }
            (Some(tool), value) => Ok((tool.to_owned(), as_object(value)?)),
            (None, _) => Err("the fallback's answer does not name a tool".into()),
        }
    }
}

fn as_object(value: Value) -> Result<Arguments, String> {
    match value {
        Value::Object(o) => Ok(o),
        other => Err(format!("arguments must be a JSON object, not {other}")),
    }
}

/// Small models wrap JSON in a code fence even when told not to.
/// How much of the model's text a repair request carries: the fallback is a
/// paid call, and a block of megabytes is not a call worth repairing.
pub const MAX_REPAIR_TRANSCRIPT_BYTES: usize = 64 * 1024;

/// `original`, cut at [`MAX_REPAIR_TRANSCRIPT_BYTES`] (at a char boundary)
/// with a visible marker.
fn transcript(original: &str) -> std::borrow::Cow<'_, str> {
    if original.len() <= MAX_REPAIR_TRANSCRIPT_BYTES {
        return original.into();
    }
    let mut cut = MAX_REPAIR_TRANSCRIPT_BYTES;
    while !original.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[... {} more bytes cut]",
        &original[..cut],
        original.len() - cut
    )
    .into()
}

fn strip_fence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let rest = rest.split_once('\n').map_or(rest, |(_, r)| r);
    rest.trim_end().strip_suffix("```").unwrap_or(rest).trim()
}

#[cfg(test)]
mod tests {
    use super::{MAX_REPAIR_TRANSCRIPT_BYTES, strip_fence, transcript};

    #[test]
    fn fences_are_stripped() {
        assert_eq!(strip_fence("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_fence(" {\"a\":1} "), "{\"a\":1}");
    }

    #[test]
    fn the_transcript_is_cut_at_a_char_boundary_with_a_marker() {
        assert_eq!(transcript("short"), "short");
        let long = "é".repeat(MAX_REPAIR_TRANSCRIPT_BYTES);
        let cut = transcript(&long);
        assert!(cut.len() <= MAX_REPAIR_TRANSCRIPT_BYTES + 64);
        assert!(cut.ends_with(&format!(
            "[... {} more bytes cut]",
            long.len() - MAX_REPAIR_TRANSCRIPT_BYTES
        )));
    }
}
