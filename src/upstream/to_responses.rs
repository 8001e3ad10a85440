//! A Chat Completions request written as the Responses request an
//! `api = "responses"` provider takes: messages become `input` items (calls
//! and results as `function_call` / `function_call_output`), chat tools flat
//! function tools, `response_format` `text.format`. A chat field the
//! Responses API has no equivalent for is a `400` naming it. Pure.

use serde_json::{Map, Value, json};

use crate::error::GatewayError;

fn bad(message: impl Into<String>, param: &str) -> GatewayError {
    GatewayError::bad_request(message, Some(param))
}

/// Translates a chat request (already parsed).
pub fn translate(chat: &Map<String, Value>) -> Result<Map<String, Value>, GatewayError> {
    let mut out = Map::new();
    // Chat completions are not stored unless asked; neither is this.
    out.insert("store".into(), json!(false));
    let mut keys: Vec<&String> = chat.keys().collect();
    keys.sort();
    for key in keys {
        let value = &chat[key.as_str()];
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "model"
            | "temperature"
            | "top_p"
            | "user"
            | "parallel_tool_calls"
            | "metadata"
            | "prompt_cache_key"
            | "safety_identifier"
            | "service_tier"
            | "stream"
            | "store" => {
                out.insert(key.clone(), value.clone());
            }
            "messages" => {
                out.insert("input".into(), Value::Array(input(value)?));
            }
            "max_tokens" | "max_completion_tokens" => {
                out.insert("max_output_tokens".into(), value.clone());
            }
            "tools" => {
                out.insert("tools".into(), Value::Array(tools(value)?));
            }
            "tool_choice" => {
                out.insert("tool_choice".into(), tool_choice(value)?);
            }
            "response_format" => {
                let format = match value.get("type").and_then(Value::as_str) {
                    Some("json_schema") => {
                        let mut f = value
                            .get("json_schema")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default();
                        f.insert("type".into(), json!("json_schema"));
                        Value::Object(f)
                    }
                    Some(t @ ("json_object" | "text")) => json!({"type": t}),
                    _ => {
                        return Err(bad(
                            "`response_format.type` must be text, json_object or json_schema",
                            "response_format.type",
                        ));
                    }
                };
                let text = out.entry("text").or_insert_with(|| json!({}));
                text["format"] = format;
            }
            "verbosity" => {
                let text = out.entry("text").or_insert_with(|| json!({}));
                text["verbosity"] = value.clone();
            }
            "reasoning_effort" => {
                out.insert("reasoning".into(), json!({"effort": value}));
            }
            // Responses streams always report usage.
            "stream_options" => {}
            "n" if value.as_u64() == Some(1) => {}
            _ => {
                return Err(bad(
                    format!(
                        "`{key}` cannot be sent to this provider, which speaks the Responses API"
                    ),
                    key,
                ));
            }
        }
    }
    Ok(out)
}

fn input(messages: &Value) -> Result<Vec<Value>, GatewayError> {
    let Some(messages) = messages.as_array() else {
        return Err(bad("`messages` must be an array", "messages"));
    };
    let mut items = Vec::with_capacity(messages.len());
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "system" | "developer" | "user" | "assistant" => {
                let content = content(message.get("content"), role, &at)?;
                if !content.is_null() {
                    items.push(json!({"type": "message", "role": role, "content": content}));
                }
                if role == "assistant" {
                    for call in message
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        items.push(json!({
                            "type": "function_call",
                            "call_id": call.get("id").cloned().unwrap_or(Value::Null),
                            "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                            "arguments": call.pointer("/function/arguments").cloned().unwrap_or(json!("{}")),
                        }));
                    }
                }
            }
            "tool" => {
                let output = match message.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect(),
                    _ => String::new(),
                };
                items.push(json!({
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "output": output,
                }));
            }
            _ => {
                return Err(bad(
                    format!("messages with role `{role}` cannot be sent to a Responses provider"),
                    &format!("{at}.role"),
                ));
            }
        }
    }
    Ok(items)
}

/// A message's content as Responses content: a string, or typed parts.
fn content(content: Option<&Value>, role: &str, at: &str) -> Result<Value, GatewayError> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(Value::Null),
        Some(Value::String(s)) => return Ok(Value::String(s.clone())),
        Some(Value::Array(parts)) => parts,
        Some(_) => {
            return Err(bad(
                "`content` must be a string or an array",
                &format!("{at}.content"),
            ));
        }
    };
    let text_type = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => out.push(
                json!({"type": text_type, "text": part.get("text").cloned().unwrap_or(json!(""))}),
            ),
            Some("image_url") if role != "assistant" => {
                let mut image = json!({"type": "input_image", "image_url": part.pointer("/image_url/url").cloned().unwrap_or(Value::Null)});
                image["detail"] = part
                    .pointer("/image_url/detail")
                    .cloned()
                    .unwrap_or(json!("auto"));
                out.push(image);
            }
            other => {
                return Err(bad(
                    format!(
                        "content parts of type `{}` cannot be sent to a Responses provider",
                        other.unwrap_or("(none)")
                    ),
                    &format!("{at}.content[{j}].type"),
                ));
            }
        }
    }
    Ok(Value::Array(out))
}

fn tools(tools: &Value) -> Result<Vec<Value>, GatewayError> {
    let Some(tools) = tools.as_array() else {
        return Err(bad("`tools` must be an array", "tools"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let Some(function) = tool.get("function").and_then(Value::as_object) else {
            return Err(bad(
                "only function tools can be sent to a Responses provider",
                &format!("tools[{i}]"),
            ));
        };
        let mut flat = function.clone();
        flat.insert("type".into(), json!("function"));
        // The Responses API defaults `strict` to true; chat to false.
        flat.entry("strict").or_insert(json!(false));
        out.push(Value::Object(flat));
    }
    Ok(out)
}

fn tool_choice(choice: &Value) -> Result<Value, GatewayError> {
    match choice {
        Value::String(_) => Ok(choice.clone()),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => Ok(
                json!({"type": "function", "name": o.get("function").and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null)}),
            ),
            Some("allowed_tools") => {
                let inner = o.get("allowed_tools").cloned().unwrap_or(json!({}));
                let tools: Vec<Value> = inner
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|t| json!({"type": "function", "name": t.pointer("/function/name").cloned().unwrap_or(Value::Null)}))
                    .collect();
                Ok(
                    json!({"type": "allowed_tools", "mode": inner.get("mode").cloned().unwrap_or(json!("auto")), "tools": tools}),
                )
            }
            _ => Err(bad(
                "this `tool_choice` has no Responses form",
                "tool_choice",
            )),
        },
        _ => Err(bad(
            "`tool_choice` must be a string or an object",
            "tool_choice",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        let Value::Object(m) = v else { unreachable!() };
        m
    }

    #[test]
    fn a_chat_request_with_history_as_responses_items() {
        let out = translate(&map(json!({
            "model": "m", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 9,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": "https://x.test/i.png"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "F", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"},
            ],
            "tools": [{"type": "function", "function": {"name": "F", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "F"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
        })))
        .unwrap();
        assert_eq!(
            Value::Object(out),
            json!({
                "model": "m", "stream": true, "store": false, "max_output_tokens": 9,
                "input": [
                    {"type": "message", "role": "system", "content": "Be brief."},
                    {"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": "Hi"},
                        {"type": "input_image", "image_url": "https://x.test/i.png", "detail": "auto"},
                    ]},
                    {"type": "function_call", "call_id": "c1", "name": "F", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "done"},
                ],
                "tools": [{"type": "function", "name": "F", "parameters": {"type": "object"}, "strict": false}],
                "tool_choice": {"type": "function", "name": "F"},
                "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}},
            })
        );
    }

    #[test]
    fn fields_without_a_responses_form_are_named() {
        for (field, value) in [("stop", json!(["\n"])), ("seed", json!(1)), ("n", json!(2))] {
            let mut request = map(json!({"model": "m", "messages": []}));
            request.insert(field.into(), value);
            let e = translate(&request).unwrap_err().to_json();
            assert_eq!(e["error"]["param"], field);
        }
    }
}
