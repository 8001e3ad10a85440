//! An Anthropic Messages request read as the [`Request`] every door hands
//! over: `system` becomes the first system message, content blocks become
//! messages (`tool_use` an assistant's calls, `tool_result` tool messages,
//! with the same ids both ways), `tools` function tools. A field or block
//! with no equivalent is a `400` naming it, never dropped. Pure.

use serde_json::{Map, Value};

use super::fields::{self, Kind};
use crate::error::GatewayError;
use crate::exchange::Call;
use crate::exchange::request::{
    Content, FunctionTool, Message, Part, Request, Role, Stop, Tool, ToolChoice,
};

/// The fields this door reads, with their types (`system`, `tools` and
/// `tool_choice` are read as their several shapes below).
pub const FIELDS: &[(&str, Kind)] = &[
    ("model", Kind::String),
    ("messages", Kind::NonEmptyList),
    ("max_tokens", Kind::Positive),
    ("stream", Kind::Bool),
    ("temperature", Kind::Number),
    ("top_p", Kind::Number),
    ("top_k", Kind::Count),
    ("stop_sequences", Kind::Strings),
    ("metadata", Kind::Object),
];

/// A translated request.
#[derive(Debug)]
pub struct Translated {
    /// The request, for any tool mode and any upstream dialect.
    pub request: Request,
    pub stream: bool,
    /// The client's `stop_sequences`, to tell `stop_sequence` from `end_turn`.
    pub stop_sequences: Vec<String>,
}

/// The chat call id behind a `toolu_` id this door wrote (it writes
/// `call_X` as `toolu_X`), so the gateway's steps kept under the chat id are
/// found; any other id is the client's own and stays as it is.
fn chat_call_id(id: &str) -> String {
    match id.strip_prefix("toolu_") {
        Some(rest) if !rest.is_empty() => format!("call_{rest}"),
        _ => id.to_owned(),
    }
}

fn bad(message: impl Into<String>, param: &str) -> GatewayError {
    GatewayError::bad_request(message, Some(param))
}

/// The text of a `system` field: a string or a list of text blocks.
fn system_text(system: &Value) -> Result<String, GatewayError> {
    match system {
        Value::String(text) => Ok(text.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (i, block) in blocks.iter().enumerate() {
                if block["type"] != "text" {
                    return Err(bad(
                        "`system` blocks must be text blocks",
                        &format!("system.{i}.type"),
                    ));
                }
                let text = block["text"]
                    .as_str()
                    .ok_or_else(|| bad("A text block needs `text`", &format!("system.{i}.text")))?;
                parts.push(text.to_owned());
            }
            Ok(parts.join("\n\n"))
        }
        _ => Err(bad(
            "`system` must be a string or a list of text blocks",
            "system",
        )),
    }
}

/// An `image` block as an image part.
fn image(block: &Value, at: &str) -> Result<Part, GatewayError> {
    let source = &block["source"];
    let url = match source["type"].as_str() {
        Some("base64") => {
            let media = source["media_type"].as_str().ok_or_else(|| {
                bad(
                    "A base64 image needs `media_type`",
                    &format!("{at}.source.media_type"),
                )
            })?;
            let data = source["data"]
                .as_str()
                .ok_or_else(|| bad("A base64 image needs `data`", &format!("{at}.source.data")))?;
            format!("data:{media};base64,{data}")
        }
        Some("url") => source["url"]
            .as_str()
            .ok_or_else(|| bad("A URL image needs `url`", &format!("{at}.source.url")))?
            .to_owned(),
        _ => {
            return Err(bad(
                "An image source must be `base64` or `url`",
                &format!("{at}.source.type"),
            ));
        }
    };
    Ok(Part::Image { url, detail: None })
}

/// A text block's text.
fn text_of<'a>(block: &'a Value, at: &str) -> Result<&'a str, GatewayError> {
    block["text"]
        .as_str()
        .ok_or_else(|| bad("A text block needs `text`", &format!("{at}.text")))
}

/// Parts as content: text alone is one string (joined by `separator`).
fn content_of(parts: Vec<Part>, separator: &str) -> Content {
    if !parts.iter().all(|p| matches!(p, Part::Text(_))) {
        return Content::Parts(parts);
    }
    let texts: Vec<String> = parts
        .into_iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t),
            _ => None,
        })
        .collect();
    Content::Text(texts.join(separator))
}

/// A `tool_result`'s content as a tool message's content.
fn tool_result_content(block: &Value, at: &str) -> Result<Content, GatewayError> {
    let content = match &block["content"] {
        Value::Null => Content::Text(String::new()),
        Value::String(text) => Content::Text(text.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                let here = format!("{at}.content.{i}");
                match b["type"].as_str() {
                    Some("text") => parts.push(Part::Text(text_of(b, &here)?.to_owned())),
                    Some("image") => parts.push(image(b, &here)?),
                    _ => {
                        return Err(bad(
                            "`tool_result` content blocks must be text or image",
                            &format!("{here}.type"),
                        ));
                    }
                }
            }
            content_of(parts, "\n")
        }
        _ => {
            return Err(bad(
                "`tool_result` content must be a string or a list of blocks",
                &format!("{at}.content"),
            ));
        }
    };
    // A failed tool's output says so to the model, which reads only text.
    if block["is_error"] != true {
        return Ok(content);
    }
    Ok(match content {
        Content::Text(text) => Content::Text(format!("Error: {text}")),
        Content::Parts(mut parts) => {
            parts.insert(0, Part::Text("Error:".into()));
            Content::Parts(parts)
        }
    })
}

/// One Anthropic message as chat messages (a user turn with tool results
/// becomes tool messages, then a user message with the rest).
fn message(m: &Value, i: usize, out: &mut Vec<Message>) -> Result<(), GatewayError> {
    let at = format!("messages.{i}");
    let role = match m["role"].as_str() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => {
            return Err(bad(
                "A message's `role` must be `user` or `assistant`",
                &format!("{at}.role"),
            ));
        }
    };
    let assistant = role == Role::Assistant;
    let blocks = match &m["content"] {
        Value::String(text) => {
            out.push(Message::text(role, text.clone()));
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => {
            return Err(bad(
                "A message's `content` must be a string or a list of blocks",
                &format!("{at}.content"),
            ));
        }
    };
    let mut parts: Vec<Part> = Vec::new();
    let mut calls: Vec<Call> = Vec::new();
    let mut reasoning = String::new();
    for (j, block) in blocks.iter().enumerate() {
        let here = format!("{at}.content.{j}");
        match (assistant, block["type"].as_str()) {
            (_, Some("text")) => parts.push(Part::Text(text_of(block, &here)?.to_owned())),
            (false, Some("image")) => parts.push(image(block, &here)?),
            (true, Some("tool_use")) => {
                let id = block["id"]
                    .as_str()
                    .ok_or_else(|| bad("A `tool_use` block needs `id`", &format!("{here}.id")))?;
                let name = block["name"].as_str().ok_or_else(|| {
                    bad("A `tool_use` block needs `name`", &format!("{here}.name"))
                })?;
                if !block["input"].is_object() {
                    return Err(bad(
                        "A `tool_use` block's `input` must be an object",
                        &format!("{here}.input"),
                    ));
                }
                calls.push(Call {
                    id: chat_call_id(id),
                    name: name.to_owned(),
                    arguments: block["input"].to_string(),
                });
            }
            // The gateway's own calls and results, as this door wrote them:
            // the steps kept for the follow-up put the real ones back.
            (true, Some("mcp_tool_use" | "mcp_tool_result")) => {}
            (true, Some("thinking")) => {
                let text = block["thinking"].as_str().ok_or_else(|| {
                    bad(
                        "A `thinking` block needs `thinking`",
                        &format!("{here}.thinking"),
                    )
                })?;
                reasoning.push_str(text);
            }
            (false, Some("tool_result")) => {
                let id = block["tool_use_id"].as_str().ok_or_else(|| {
                    bad(
                        "A `tool_result` block needs `tool_use_id`",
                        &format!("{here}.tool_use_id"),
                    )
                })?;
                out.push(Message {
                    content: Some(tool_result_content(block, &here)?),
                    ..Message::tool_result(&chat_call_id(id), "")
                });
            }
            _ => {
                return Err(bad(
                    format!(
                        "toolgate cannot translate a `{}` block in a {} message",
                        block["type"].as_str().unwrap_or("untyped"),
                        if assistant { "assistant" } else { "user" },
                    ),
                    &format!("{here}.type"),
                ));
            }
        }
    }
    if parts.is_empty() && calls.is_empty() && reasoning.is_empty() {
        return Ok(());
    }
    let content = match content_of(parts, "") {
        Content::Text(text) if text.is_empty() && assistant => None,
        content => Some(content),
    };
    let mut message = Message {
        content,
        tool_calls: calls,
        ..Message::text(role, "")
    };
    if !reasoning.is_empty() {
        message
            .extra
            .insert("reasoning_content".into(), Value::String(reasoning));
    }
    out.push(message);
    Ok(())
}

/// Anthropic `tools` as function tools.
fn tools(tools: &Value) -> Result<Vec<Tool>, GatewayError> {
    let Some(list) = tools.as_array() else {
        return Err(bad("`tools` must be a list", "tools"));
    };
    let mut out = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let at = format!("tools.{i}");
        if let Some(kind) = tool["type"].as_str().filter(|k| *k != "custom") {
            return Err(bad(
                format!("toolgate cannot offer the server tool `{kind}` to a chat model"),
                &format!("{at}.type"),
            ));
        }
        let name = tool["name"]
            .as_str()
            .ok_or_else(|| bad("A tool needs `name`", &format!("{at}.name")))?;
        let schema = &tool["input_schema"];
        if !schema.is_object() {
            return Err(bad(
                "A tool needs an `input_schema` object",
                &format!("{at}.input_schema"),
            ));
        }
        let mut function = FunctionTool {
            name: name.to_owned(),
            parameters: Some(schema.clone()),
            ..FunctionTool::default()
        };
        match tool.get("description") {
            None => {}
            Some(Value::String(d)) => function.description = Some(d.clone()),
            Some(other) => {
                function.extra.insert("description".into(), other.clone());
            }
        }
        out.push(Tool::Function(function));
    }
    Ok(out)
}

/// `tool_choice` as the request's tool choice and `parallel_tool_calls`.
fn tool_choice(choice: &Value, request: &mut Request) -> Result<(), GatewayError> {
    request.tool_choice = Some(match choice["type"].as_str() {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => {
            let name = choice["name"].as_str().ok_or_else(|| {
                bad(
                    "`tool_choice` of type `tool` needs `name`",
                    "tool_choice.name",
                )
            })?;
            ToolChoice::Function(name.to_owned())
        }
        _ => {
            return Err(bad(
                "`tool_choice.type` must be `auto`, `any`, `tool` or `none`",
                "tool_choice.type",
            ));
        }
    });
    match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(disable)) => request.parallel_tool_calls = Some(!disable),
        Some(_) => {
            return Err(bad(
                "`disable_parallel_tool_use` must be a boolean",
                "tool_choice.disable_parallel_tool_use",
            ));
        }
    }
    Ok(())
}

/// Translates a Messages request body.
pub fn translate(mut body: Map<String, Value>) -> Result<Translated, GatewayError> {
    fields::check(&body, FIELDS)?;
    let mut request = Request::default();
    let mut stop_sequences = Vec::new();
    if let Some(system) = body.remove("system") {
        request
            .messages
            .push(Message::text(Role::System, system_text(&system)?));
    }
    let Some(Value::Array(list)) = body.remove("messages") else {
        return Err(bad("`messages` must be a list of messages", "messages"));
    };
    for (i, m) in list.iter().enumerate() {
        message(m, i, &mut request.messages)?;
    }
    // Sorted: which field is reported first does not depend on map order.
    let mut keys: Vec<String> = body.keys().cloned().collect();
    keys.sort();
    for key in keys {
        let value = body.remove(&key).unwrap_or(Value::Null);
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "model" => request.model = value.as_str().map(str::to_owned),
            "temperature" => request.sampling.temperature = value.as_number().cloned(),
            "top_p" => request.sampling.top_p = value.as_number().cloned(),
            "top_k" => {
                request.extra.insert(key, value);
            }
            "max_tokens" => {
                let Some(max) = value.as_u64() else {
                    return Err(bad("`max_tokens` must be a positive integer", "max_tokens"));
                };
                request.sampling.max_tokens = Some(max);
            }
            "stream" => match value {
                Value::Bool(b) => request.stream = b,
                _ => return Err(bad("`stream` must be a boolean", "stream")),
            },
            "stop_sequences" => {
                let list = value.as_array().filter(|l| l.iter().all(Value::is_string));
                let Some(list) = list else {
                    return Err(bad(
                        "`stop_sequences` must be a list of strings",
                        "stop_sequences",
                    ));
                };
                stop_sequences = list
                    .iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect();
                request.stop = Some(Stop::Many(stop_sequences.clone()));
            }
            "tools" => request.tools = tools(&value)?,
            "tool_choice" => tool_choice(&value, &mut request)?,
            "metadata" => {
                let Some(obj) = value.as_object() else {
                    return Err(bad("`metadata` must be an object", "metadata"));
                };
                for (k, v) in obj {
                    if k == "user_id" {
                        request.extra.insert("user".into(), v.clone());
                    } else {
                        return Err(bad(
                            format!("toolgate cannot pass `metadata.{k}` to a chat model"),
                            &format!("metadata.{k}"),
                        ));
                    }
                }
            }
            _ => {
                return Err(bad(
                    format!("toolgate cannot translate `{key}` to a chat request"),
                    &key,
                ));
            }
        }
    }
    if request.stream {
        let mut options = Map::new();
        options.insert("include_usage".into(), Value::Bool(true));
        request.stream_options = Some(options);
    }
    Ok(Translated {
        stream: request.stream,
        request,
        stop_sequences,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat_of(t: &Translated) -> Value {
        serde_json::to_value(&t.request).unwrap()
    }

    fn run(v: Value) -> Result<Translated, GatewayError> {
        translate(v.as_object().unwrap().clone())
    }

    #[test]
    fn golden_tool_loop_history() {
        let t = run(json!({
            "model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "be brief"}],
            "stop_sequences": ["END"], "metadata": {"user_id": "u1"},
            "tools": [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "rain"}], "is_error": true},
                    {"type": "text", "text": "and?"}]}
            ]
        }))
        .unwrap();
        assert!(!t.stream);
        assert_eq!(t.stop_sequences, vec!["END".to_owned()]);
        assert_eq!(
            serde_json::to_value(&t.request).unwrap(),
            json!({
                "model": "m", "max_tokens": 100, "stop": ["END"], "user": "u1",
                "tools": [{"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": {"type": "object"}}}],
                "tool_choice": "required", "parallel_tool_calls": false,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "content": "checking", "reasoning_content": "hm",
                     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "Error: rain"},
                    {"role": "user", "content": "and?"}
                ]
            })
        );
    }

    #[test]
    fn images_become_image_url_parts() {
        let t = run(json!({"model": "m", "max_tokens": 1, "stream": true, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            {"type": "text", "text": "what?"}]}]}))
        .unwrap();
        assert!(t.stream);
        assert_eq!(
            chat_of(&t)["stream_options"],
            json!({"include_usage": true})
        );
        assert_eq!(
            chat_of(&t)["messages"][0]["content"],
            json!([
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                {"type": "text", "text": "what?"}])
        );
    }

    #[test]
    fn tool_choice_tool_and_none() {
        let t = run(json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "tool", "name": "f"}})).unwrap();
        assert_eq!(
            chat_of(&t)["tool_choice"],
            json!({"type": "function", "function": {"name": "f"}})
        );
        let t = run(
            json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "none"}}),
        )
        .unwrap();
        assert_eq!(chat_of(&t)["tool_choice"], json!("none"));
    }

    fn param(e: GatewayError) -> Option<String> {
        e.to_json()["error"]["param"].as_str().map(str::to_owned)
    }

    #[test]
    fn untranslatable_fields_name_the_field() {
        let e = run(json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}], "container": "x"}))
            .unwrap_err();
        assert_eq!(param(e).as_deref(), Some("container"));
        let e = run(json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "document"}]}]})).unwrap_err();
        assert_eq!(param(e).as_deref(), Some("messages.0.content.0.type"));
        let e = run(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})).unwrap_err();
        assert_eq!(param(e).as_deref(), Some("tools.0.type"));
        let e = run(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {"other": 1}})).unwrap_err();
        assert_eq!(param(e).as_deref(), Some("metadata.other"));
        let e = run(json!({"model": "m"})).unwrap_err();
        assert_eq!(param(e).as_deref(), Some("messages"));
    }
}
