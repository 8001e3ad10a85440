//! A [`Request`] written as the Responses request an
//! `api = "responses"` provider takes: messages become `input` items (calls
//! and results as `function_call` / `function_call_output`), chat tools flat
//! function tools, `response_format` `text.format`. A chat field the
//! Responses API has no equivalent for is a `400` naming it. Pure.

use serde_json::{Map, Value, json};

use crate::error::GatewayError;
use crate::exchange::request::{
    Content, Message, Part, Request, ResponseFormat, Role, Tool, ToolChoice,
};

fn bad(message: impl Into<String>, param: &str) -> GatewayError {
    GatewayError::bad_request(message, Some(param))
}

/// Fields a chat request passes on as they are, when it carries them.
const SAME: &[&str] = &[
    "user",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "store",
];

/// Translates a request.
pub fn translate(request: &Request) -> Result<Map<String, Value>, GatewayError> {
    let mut out = Map::new();
    // Chat completions are not stored unless asked; neither is this.
    out.insert("store".into(), json!(false));
    // Fields nothing else reads: the ones with a Responses form, or a 400
    // naming the first (in name order) without one.
    let mut extra: Vec<(&String, &Value)> =
        request.extra.iter().filter(|(_, v)| !v.is_null()).collect();
    extra.sort_by_key(|(k, _)| *k);
    for (key, value) in extra {
        match key.as_str() {
            k if SAME.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            "verbosity" => {
                let text = out.entry("text").or_insert_with(|| json!({}));
                text["verbosity"] = value.clone();
            }
            _ => return Err(unsupported(key)),
        }
    }
    if request.stop.is_some() {
        return Err(unsupported("stop"));
    }
    if let Some(n) = request.sampling.n
        && n != 1
    {
        return Err(unsupported("n"));
    }
    if let Some(model) = &request.model {
        out.insert("model".into(), json!(model));
    }
    let sampling = &request.sampling;
    if let Some(t) = &sampling.temperature {
        out.insert("temperature".into(), json!(t));
    }
    if let Some(p) = &sampling.top_p {
        out.insert("top_p".into(), json!(p));
    }
    if let Some(max) = sampling.max_tokens.or(sampling.max_completion_tokens) {
        out.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(parallel) = request.parallel_tool_calls {
        out.insert("parallel_tool_calls".into(), json!(parallel));
    }
    if let Some(metadata) = &request.metadata {
        out.insert("metadata".into(), Value::Object(metadata.clone()));
    }
    if request.stream {
        out.insert("stream".into(), json!(true));
    }
    // Responses streams always report usage: `stream_options` has no form.
    out.insert("input".into(), Value::Array(input(&request.messages)?));
    if !request.tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools(&request.tools)?));
    }
    if let Some(choice) = &request.tool_choice {
        out.insert("tool_choice".into(), tool_choice(choice)?);
    }
    if let Some(format) = &request.response_format {
        let format = match format {
            ResponseFormat::JsonSchema(schema) => {
                let mut f = schema.clone();
                f.insert("type".into(), json!("json_schema"));
                Value::Object(f)
            }
            ResponseFormat::JsonObject => json!({"type": "json_object"}),
            ResponseFormat::Text => json!({"type": "text"}),
            ResponseFormat::Other(_) => {
                return Err(bad(
                    "`response_format.type` must be text, json_object or json_schema",
                    "response_format.type",
                ));
            }
        };
        let text = out.entry("text").or_insert_with(|| json!({}));
        text["format"] = format;
    }
    if let Some(effort) = &request.reasoning_effort {
        out.insert("reasoning".into(), json!({"effort": effort}));
    }
    Ok(out)
}

fn unsupported(key: &str) -> GatewayError {
    bad(
        format!("`{key}` cannot be sent to this provider, which speaks the Responses API"),
        key,
    )
}

fn input(messages: &[Message]) -> Result<Vec<Value>, GatewayError> {
    let mut items = Vec::with_capacity(messages.len());
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = match message.role {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => {
                items.push(json!({
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.text_content(),
                }));
                continue;
            }
            Role::Function => {
                return Err(bad(
                    "messages with role `function` cannot be sent to a Responses provider",
                    &format!("{at}.role"),
                ));
            }
        };
        if let Some(content) = &message.content {
            items.push(json!({"type": "message", "role": role, "content": self::content(content, message.role, &at)?}));
        }
        for call in &message.tool_calls {
            items.push(json!({
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }));
        }
    }
    Ok(items)
}

/// A message's content as Responses content: a string, or typed parts.
fn content(content: &Content, role: Role, at: &str) -> Result<Value, GatewayError> {
    let parts = match content {
        Content::Text(s) => return Ok(Value::String(s.clone())),
        Content::Parts(parts) => parts,
    };
    let assistant = role == Role::Assistant;
    let text_type = if assistant {
        "output_text"
    } else {
        "input_text"
    };
    let image = |url: &Value, detail: Option<&Value>| json!({"type": "input_image", "image_url": url, "detail": detail.cloned().unwrap_or(json!("auto"))});
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        match part {
            Part::Text(text) => out.push(json!({"type": text_type, "text": text})),
            Part::Image { url, detail } if !assistant => {
                out.push(image(
                    &json!(url),
                    detail.as_ref().map(|d| json!(d)).as_ref(),
                ));
            }
            // A text part with fields of its own (`cache_control` …) is
            // sent as its text.
            Part::Other(map) if map.get("type").and_then(Value::as_str) == Some("text") => {
                out.push(json!({"type": text_type, "text": map.get("text").cloned().unwrap_or(json!(""))}));
            }
            Part::Other(map)
                if !assistant && map.get("type").and_then(Value::as_str) == Some("image_url") =>
            {
                let url = map.get("image_url").and_then(|i| i.get("url"));
                let detail = map.get("image_url").and_then(|i| i.get("detail"));
                out.push(image(url.unwrap_or(&Value::Null), detail));
            }
            other => {
                let kind = match other {
                    Part::Text(_) => "text",
                    Part::Image { .. } => "image_url",
                    Part::Other(map) => map.get("type").and_then(Value::as_str).unwrap_or("(none)"),
                };
                return Err(bad(
                    format!(
                        "content parts of type `{kind}` cannot be sent to a Responses provider"
                    ),
                    &format!("{at}.content[{j}].type"),
                ));
            }
        }
    }
    Ok(Value::Array(out))
}

fn tools(tools: &[Tool]) -> Result<Vec<Value>, GatewayError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let Tool::Function(function) = tool else {
            return Err(bad(
                "only function tools can be sent to a Responses provider",
                &format!("tools[{i}]"),
            ));
        };
        let mut flat = function.to_map();
        flat.insert("type".into(), json!("function"));
        // The Responses API defaults `strict` to true; chat to false.
        flat.entry("strict").or_insert(json!(false));
        out.push(Value::Object(flat));
    }
    Ok(out)
}

fn tool_choice(choice: &ToolChoice) -> Result<Value, GatewayError> {
    match choice {
        ToolChoice::Function(name) => Ok(json!({"type": "function", "name": name})),
        ToolChoice::Other(Value::Object(o))
            if o.get("type").and_then(Value::as_str) == Some("allowed_tools") =>
        {
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
        ToolChoice::Other(Value::Object(_)) => Err(bad(
            "this `tool_choice` has no Responses form",
            "tool_choice",
        )),
        ToolChoice::Other(Value::String(_))
        | ToolChoice::Auto
        | ToolChoice::None
        | ToolChoice::Required => Ok(choice.to_value()),
        ToolChoice::Other(_) => Err(bad(
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

    fn translate(m: &Map<String, Value>) -> Result<Map<String, Value>, GatewayError> {
        super::translate(&Request::from_chat(m.clone())?)
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
