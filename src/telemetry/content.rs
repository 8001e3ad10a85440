//! `capture_content = true`: a chat span's messages in the GenAI
//! conventions' JSON (`gen_ai.input.messages`, `gen_ai.output.messages`:
//! a role and typed parts per message). Pure functions of the request body
//! and of the first [`MAX_CAPTURE`] bytes of the answer.

use serde_json::{Map, Value, json};

/// The most of an answer kept for its output messages.
pub const MAX_CAPTURE: usize = 64 * 1024;

/// A chat request's `messages` as GenAI input messages.
pub fn input_messages(request: &Value) -> Option<String> {
    let messages = request.get("messages")?.as_array()?;
    let converted: Vec<Value> = messages.iter().map(input_message).collect();
    Some(Value::Array(converted).to_string())
}

fn input_message(message: &Value) -> Value {
    let role = message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("user");
    let mut parts = Vec::new();
    if role == "tool" {
        parts.push(json!({
            "type": "tool_call_response",
            "id": message.get("tool_call_id").cloned().unwrap_or(Value::Null),
            "response": text_of(message.get("content")),
        }));
    } else {
        let text = text_of(message.get("content"));
        if !text.is_empty() {
            parts.push(json!({"type": "text", "content": text}));
        }
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            parts.push(tool_call(
                call.get("id").and_then(Value::as_str).unwrap_or(""),
                call.pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                call.pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            ));
        }
    }
    json!({"role": role, "parts": parts})
}

/// A string content, or the text parts of an array content.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn tool_call(id: &str, name: &str, arguments: &str) -> Value {
    // Arguments that are not JSON are kept as the text they were.
    let arguments = serde_json::from_str::<Value>(arguments)
        .unwrap_or_else(|_| Value::String(arguments.to_owned()));
    json!({"type": "tool_call", "id": id, "name": name, "arguments": arguments})
}

/// The first choice of a chat answer (a stream of chunks or a whole
/// completion) as GenAI output messages.
pub fn output_messages(answer: &[u8]) -> Option<String> {
    let mut out = Assembled::default();
    let trimmed = answer.trim_ascii_start();
    if trimmed.first() == Some(&b'{') {
        let whole: Value = serde_json::from_slice(trimmed).ok()?;
        let choice = whole.get("choices")?.get(0)?;
        let message = choice.get("message")?;
        out.text = text_of(message.get("content"));
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.calls.push(Call {
                id: str_at(call, "/id"),
                name: str_at(call, "/function/name"),
                arguments: str_at(call, "/function/arguments"),
            });
        }
        out.finish = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
    } else {
        for line in answer.split(|b| *b == b'\n') {
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            if let Ok(chunk) = serde_json::from_slice::<Value>(data.trim_ascii()) {
                out.add_chunk(&chunk);
            }
        }
        if out.text.is_empty() && out.calls.is_empty() && out.finish.is_none() {
            return None;
        }
    }
    Some(out.into_messages().to_string())
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

#[derive(Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
struct Assembled {
    text: String,
    calls: Vec<Call>,
    finish: Option<String>,
}

impl Assembled {
    fn add_chunk(&mut self, chunk: &Value) {
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
            })
        else {
            return;
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(text);
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            // Indexes are small and dense; a wild one is not allocated for.
            if index > 1024 {
                continue;
            }
            if self.calls.len() <= index {
                self.calls.resize_with(index + 1, Call::default);
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.id = id.to_owned();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.name.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.arguments.push_str(args);
            }
        }
        if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(finish.to_owned());
        }
    }

    fn into_messages(self) -> Value {
        let mut parts = Vec::new();
        if !self.text.is_empty() {
            parts.push(json!({"type": "text", "content": self.text}));
        }
        for call in &self.calls {
            parts.push(tool_call(&call.id, &call.name, &call.arguments));
        }
        let mut message = Map::new();
        message.insert("role".into(), "assistant".into());
        message.insert("parts".into(), Value::Array(parts));
        if let Some(finish) = self.finish {
            message.insert("finish_reason".into(), finish.into());
        }
        Value::Array(vec![Value::Object(message)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_messages_become_role_and_parts() {
        let request = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "rain"}
        ]});
        let got: Value = serde_json::from_str(&input_messages(&request).unwrap()).unwrap();
        assert_eq!(
            got,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                {"role": "user", "parts": [{"type": "text", "content": "weather?"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "rain"}]}
            ])
        );
    }

    #[test]
    fn a_streamed_and_a_whole_answer_give_the_same_output() {
        let streamed = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Let me \"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"check.\",\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":\\\"Oslo\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let whole = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}"#;
        let want = json!([{"role": "assistant", "parts": [
            {"type": "text", "content": "Let me check."},
            {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}
        ], "finish_reason": "tool_calls"}]);
        for answer in [streamed, whole] {
            let got: Value =
                serde_json::from_str(&output_messages(answer.as_bytes()).unwrap()).unwrap();
            assert_eq!(got, want, "{answer}");
        }
    }
}
