//! A Responses API stream read as the Chat Completions stream the rest of
//! toolgate works with: text and reasoning deltas become content and
//! `reasoning_content` deltas, function call items `tool_calls` deltas, the
//! terminal event a finish reason and a usage chunk, `response.failed` an
//! error event. A [`Transform`], sans-IO.

use std::collections::HashMap;

use bytes::BytesMut;
use serde_json::{Value, json};

use crate::error::GatewayError;
use crate::sse::encoder;
use crate::sse::transform::Transform;

/// Most function calls one answer may hold.
const MAX_CALLS: usize = 1024;

#[derive(Default)]
pub struct FromResponses {
    id: String,
    model: Value,
    created: Value,
    /// Chat call index of each function call item, by item id.
    calls: HashMap<String, usize>,
    started: bool,
    ended: bool,
}

impl FromResponses {
    pub fn new() -> Self {
        FromResponses::default()
    }

    fn chunk(&mut self, delta: Value, finish: Value, out: &mut BytesMut) {
        let mut delta = delta;
        if !self.started {
            self.started = true;
            delta["role"] = json!("assistant");
        }
        let chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        encoder::write_json(out, &chunk);
    }

    fn terminal(&mut self, response: &Value, out: &mut BytesMut) {
        let reason = match (
            response["status"].as_str(),
            response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str),
        ) {
            _ if !self.calls.is_empty() => "tool_calls",
            (Some("incomplete"), Some("content_filter")) => "content_filter",
            (Some("incomplete"), _) => "length",
            _ => "stop",
        };
        self.chunk(json!({}), json!(reason), out);
        let usage = &response["usage"];
        if usage.is_object() {
            let usage = json!({
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
            });
            let chunk = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [], "usage": usage});
            encoder::write_json(out, &chunk);
        }
        out.extend_from_slice(encoder::DONE);
        self.ended = true;
    }

    fn error(&mut self, message: &str, code: &Value, out: &mut BytesMut) {
        encoder::write_json(
            out,
            &json!({"error": {"message": message, "type": "upstream_error", "code": code}}),
        );
        out.extend_from_slice(encoder::DONE);
        self.ended = true;
    }
}

impl Transform for FromResponses {
    fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        if self.ended {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            self.fail(out, &crate::sse::transform::invalid_event());
            return;
        };
        match event["type"].as_str().unwrap_or_default() {
            "response.created" => {
                let r = &event["response"];
                self.id = format!(
                    "chatcmpl-{}",
                    r["id"]
                        .as_str()
                        .unwrap_or_default()
                        .trim_start_matches("resp_")
                );
                self.model = r["model"].clone();
                self.created = r["created_at"].clone();
            }
            "response.output_text.delta" => {
                let delta = event["delta"].clone();
                self.chunk(json!({"content": delta}), Value::Null, out);
            }
            "response.refusal.delta" => {
                let delta = event["delta"].clone();
                self.chunk(json!({"refusal": delta}), Value::Null, out);
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                let delta = event["delta"].clone();
                self.chunk(json!({"reasoning_content": delta}), Value::Null, out);
            }
            "response.output_item.added" if event["item"]["type"] == "function_call" => {
                let item = &event["item"];
                if self.calls.len() >= MAX_CALLS {
                    let e = GatewayError::UpstreamInvalid {
                        message: format!("The upstream made more than {MAX_CALLS} calls"),
                        code: "upstream_stream_too_large",
                    };
                    self.fail(out, &e);
                    return;
                }
                let index = self.calls.len();
                self.calls
                    .insert(item["id"].as_str().unwrap_or_default().to_owned(), index);
                let call = json!([{"index": index, "id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"].as_str().unwrap_or("")}}]);
                self.chunk(json!({"tool_calls": call}), Value::Null, out);
            }
            "response.function_call_arguments.delta" => {
                let Some(&index) = event["item_id"].as_str().and_then(|id| self.calls.get(id))
                else {
                    return;
                };
                let call = json!([{"index": index, "function": {"arguments": event["delta"]}}]);
                self.chunk(json!({"tool_calls": call}), Value::Null, out);
            }
            "response.completed" | "response.incomplete" => {
                let response = event["response"].clone();
                self.terminal(&response, out);
            }
            "response.failed" => {
                let error = &event["response"]["error"];
                let message = error["message"]
                    .as_str()
                    .unwrap_or("The upstream's response failed")
                    .to_owned();
                let code = error["code"].clone();
                self.error(&message, &code, out);
            }
            "error" => {
                let message = event["message"]
                    .as_str()
                    .unwrap_or("The upstream reported an error")
                    .to_owned();
                let code = event["code"].clone();
                self.error(&message, &code, out);
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut BytesMut) {
        if !self.ended {
            let e = GatewayError::UpstreamInvalid {
                message: "The upstream's Responses stream ended before its response did".into(),
                code: "upstream_stream_truncated",
            };
            self.fail(out, &e);
        }
    }

    fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        if self.ended {
            return;
        }
        crate::body::observed::told(error.code());
        encoder::write_error(out, &error.to_json());
        self.ended = true;
    }

    fn is_ended(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[Value]) -> String {
        let mut t = FromResponses::new();
        let mut out = BytesMut::new();
        for e in events {
            t.on_event(e.to_string().as_bytes(), &mut out);
        }
        t.finish(&mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn text_calls_finish_and_usage() {
        let out = run(&[
            json!({"type": "response.created", "response": {"id": "resp_1", "model": "m", "created_at": 5}}),
            json!({"type": "response.output_item.added", "item": {"type": "message", "id": "msg"}}),
            json!({"type": "response.output_text.delta", "item_id": "msg", "delta": "Hi"}),
            json!({"type": "response.output_item.added", "item": {"type": "function_call", "id": "fc", "call_id": "c1", "name": "F", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc", "delta": "{}"}),
            json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}}}),
        ]);
        let events: Vec<Value> = out
            .split("\n\n")
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(events.len(), 5, "{out}");
        assert_eq!(
            events[0]["choices"][0]["delta"],
            json!({"content": "Hi", "role": "assistant"})
        );
        assert_eq!(events[0]["id"], "chatcmpl-1");
        assert_eq!(
            events[1]["choices"][0]["delta"]["tool_calls"][0]["id"],
            "c1"
        );
        assert_eq!(
            events[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert_eq!(events[3]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(events[4]["usage"]["total_tokens"], 7);
        assert!(out.ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn failures_and_truncation_are_error_events() {
        let out = run(&[
            json!({"type": "response.created", "response": {"id": "resp_1"}}),
            json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}}}),
        ]);
        assert!(out.contains(r#""message":"boom""#), "{out}");
        let out = run(&[json!({"type": "response.created", "response": {"id": "resp_1"}})]);
        assert!(out.contains("upstream_stream_truncated"), "{out}");
        let out = run(&[
            json!({"type": "response.created", "response": {"id": "r"}}),
            json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
        ]);
        assert!(out.contains(r#""finish_reason":"length""#), "{out}");
    }
}
