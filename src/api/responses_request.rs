//! A Responses API request read as the [`Request`] every door hands over:
//! `input` items become messages, `instructions` the first system message,
//! flat function tools function tools, `text.format` the response format. A
//! field or item that a Chat Completions provider has no equivalent for is a
//! `400` naming it, never dropped. Pure.

use serde_json::{Map, Value, json};

use super::fields::{self, Kind};
use crate::error::GatewayError;
use crate::exchange::Call;
use crate::exchange::request::{
    Content, Message, Part, Request, ResponseFormat, Role, Tool, ToolChoice,
};

/// The fields this door reads, with their types (`input`, `tools`,
/// `tool_choice` and `truncation` are read as their several shapes below).
pub const FIELDS: &[(&str, Kind)] = &[
    ("model", Kind::String),
    ("instructions", Kind::String),
    ("stream", Kind::Bool),
    ("store", Kind::Bool),
    ("previous_response_id", Kind::String),
    ("metadata", Kind::Object),
    ("max_output_tokens", Kind::Positive),
    ("temperature", Kind::Number),
    ("top_p", Kind::Number),
    ("parallel_tool_calls", Kind::Bool),
    ("user", Kind::String),
    ("include", Kind::Strings),
    ("stream_options", Kind::Object),
    ("reasoning", Kind::Object),
    ("text", Kind::Object),
];

/// The parts of the request the answer echoes back on the response object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Echo {
    pub instructions: Value,
    pub max_output_tokens: Value,
    pub metadata: Value,
    pub parallel_tool_calls: Value,
    pub reasoning: Value,
    pub temperature: Value,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Value,
    pub top_p: Value,
    pub truncation: Value,
    pub user: Value,
    /// Set by the door when it continues a stored response.
    pub previous_response_id: Value,
    /// Whether the answer is kept (only with a store).
    pub store: bool,
}

/// A translated request.
#[derive(Debug)]
pub struct Translated {
    /// The request, for any tool mode and any upstream dialect.
    pub request: Request,
    pub stream: bool,
    pub echo: Echo,
}

fn bad(message: impl Into<String>, param: &str) -> GatewayError {
    GatewayError::bad_request(message, Some(param))
}

/// Translates a Responses request body.
pub fn translate(mut body: Map<String, Value>) -> Result<Translated, GatewayError> {
    fields::check(&body, FIELDS)?;
    let mut request = Request::default();
    let mut echo = Echo {
        parallel_tool_calls: json!(true),
        tool_choice: json!("auto"),
        tools: json!([]),
        text: json!({"format": {"type": "text"}}),
        truncation: json!("disabled"),
        metadata: json!({}),
        ..Echo::default()
    };
    let mut stream = false;
    if let Some(instructions) = body.remove("instructions") {
        match &instructions {
            Value::String(text) => request
                .messages
                .push(Message::text(Role::System, text.clone())),
            Value::Null => {}
            _ => return Err(bad("`instructions` must be a string", "instructions")),
        }
        echo.instructions = instructions;
    }
    // Sorted, so the first unsupported field named is always the same one.
    let mut keys: Vec<String> = body.keys().cloned().collect();
    keys.sort();
    for key in keys {
        let value = body.remove(&key).unwrap_or(Value::Null);
        match key.as_str() {
            "model" => request.model = value.as_str().map(str::to_owned),
            "temperature" => {
                request.sampling.temperature = value.as_number().cloned();
                echo.temperature = value;
            }
            "top_p" => {
                request.sampling.top_p = value.as_number().cloned();
                echo.top_p = value;
            }
            "parallel_tool_calls" => {
                request.parallel_tool_calls = value.as_bool();
                echo.parallel_tool_calls = value;
            }
            "user" | "prompt_cache_key" | "safety_identifier" | "service_tier" => {
                if key == "user" {
                    echo.user = value.clone();
                }
                if !value.is_null() {
                    request.extra.insert(key, value);
                }
            }
            "input" => input(value, &mut request.messages)?,
            "stream" => stream = value.as_bool().unwrap_or(false),
            "max_output_tokens" => {
                request.sampling.max_tokens = value.as_u64();
                echo.max_output_tokens = value;
            }
            "tools" => {
                request.tools = tools(&value)?;
                echo.tools = value;
            }
            "tool_choice" => {
                request.tool_choice = tool_choice(&value)?;
                echo.tool_choice = value;
            }
            "text" => {
                text(&value, &mut request)?;
                echo.text = value;
            }
            "reasoning" => {
                request.reasoning_effort = match value.get("effort") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(effort)) => Some(effort.clone()),
                    Some(_) => {
                        return Err(bad(
                            "`reasoning.effort` must be a string",
                            "reasoning.effort",
                        ));
                    }
                };
                echo.reasoning = value;
            }
            "metadata" => echo.metadata = value,
            // Nothing is kept: `store` cannot be honoured without a store,
            // and the answer says `store: false`.
            "store" | "include" => {}
            "truncation" => {
                if !matches!(value.as_str(), None | Some("disabled" | "auto")) {
                    return Err(bad(
                        "`truncation` must be \"disabled\" or \"auto\"",
                        "truncation",
                    ));
                }
                echo.truncation = value;
            }
            "stream_options" => {}
            "previous_response_id" | "conversation" if value.is_null() => {}
            "previous_response_id" | "conversation" => {
                return Err(bad(
                    format!(
                        "`{key}` needs stored responses, and this toolgate has no `[store]` configured; send the whole conversation in `input`"
                    ),
                    &key,
                ));
            }
            "background" if value.as_bool() != Some(true) => {}
            _ => {
                return Err(bad(
                    format!(
                        "`{key}` is not supported by toolgate's Responses API in front of a Chat Completions provider"
                    ),
                    &key,
                ));
            }
        }
    }
    if !request.messages.iter().any(|m| m.role != Role::System) {
        return Err(bad("`input` is required", "input"));
    }
    Ok(Translated {
        request,
        stream,
        echo,
    })
}

/// `input`: a string (one user message) or a list of items.
fn input(value: Value, messages: &mut Vec<Message>) -> Result<(), GatewayError> {
    let items = match value {
        Value::String(text) => {
            messages.push(Message::text(Role::User, text));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => return Err(bad("`input` must be a string or an array", "input")),
    };
    // Whether a gateway item came since the last message: the answer the
    // gateway gave goes on, and its next text belongs to the same turn.
    let mut in_answer = false;
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("input[{i}]");
        let Value::Object(item) = item else {
            return Err(bad("an input item must be an object", &at));
        };
        let kind =
            item.get("type")
                .and_then(Value::as_str)
                .unwrap_or(if item.contains_key("role") {
                    "message"
                } else {
                    ""
                });
        let gateway = matches!(kind, "mcp_call" | "mcp_list_tools");
        let went_on = std::mem::replace(&mut in_answer, gateway);
        match kind {
            "message" => {
                let message = message(&item, &at)?;
                match messages.last_mut() {
                    // One answer of the gateway's, its text split around
                    // the gateway's calls: one assistant turn, as the
                    // chat door answers it and the transcript recorded it.
                    Some(last)
                        if went_on
                            && message.role == Role::Assistant
                            && last.role == Role::Assistant
                            && last.tool_calls.is_empty() =>
                    {
                        let text = last.text_content() + &message.text_content();
                        last.content = Some(Content::Text(text));
                    }
                    _ => messages.push(message),
                }
            }
            "function_call" => {
                let call = Call {
                    id: text_field(&item, "call_id", &at)?,
                    name: text_field(&item, "name", &at)?,
                    arguments: text_field(&item, "arguments", &at)?,
                };
                push_call(messages, call);
            }
            "function_call_output" => {
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts_text(parts, &format!("{at}.output"))?,
                    _ => {
                        return Err(bad(
                            "`output` must be a string or a list of parts",
                            &format!("{at}.output"),
                        ));
                    }
                };
                messages.push(Message::tool_result(
                    &text_field(&item, "call_id", &at)?,
                    output,
                ));
            }
            // The gateway's own earlier calls, as this door wrote them: the
            // steps kept for the follow-up put the real ones back, as the
            // other doors do, so the history links to the chat it continues.
            // A listing the gateway wrote, and reasoning the model wrote: a
            // chat upstream has no place for either, and neither is the user's.
            "mcp_call" | "mcp_list_tools" => {}
            // Reasoning between the gateway's calls and the text after them.
            "reasoning" => in_answer = went_on,
            "" => return Err(bad("an input item needs a `type`", &at)),
            other => {
                return Err(bad(
                    format!(
                        "input items of type `{other}` are not supported in front of a Chat Completions provider"
                    ),
                    &format!("{at}.type"),
                ));
            }
        }
    }
    Ok(())
}

/// Adds a call to the assistant message just before, or to a new one.
fn push_call(messages: &mut Vec<Message>, call: Call) {
    if let Some(last) = messages.last_mut()
        && last.role == Role::Assistant
    {
        last.tool_calls.push(call);
        return;
    }
    messages.push(Message::assistant("", vec![call]));
}

fn text_field(item: &Map<String, Value>, key: &str, at: &str) -> Result<String, GatewayError> {
    item.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("`{key}` must be a string"), &format!("{at}.{key}")))
}

fn message(item: &Map<String, Value>, at: &str) -> Result<Message, GatewayError> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system" | "developer") => Role::System,
        _ => {
            return Err(bad(
                "`role` must be user, assistant, system or developer",
                &format!("{at}.role"),
            ));
        }
    };
    let content = match item.get("content") {
        Some(Value::String(text)) => Content::Text(text.clone()),
        Some(Value::Array(parts)) if role == Role::User => Content::Parts(user_parts(parts, at)?),
        Some(Value::Array(parts)) => Content::Text(parts_text(parts, &format!("{at}.content"))?),
        _ => {
            return Err(bad(
                "`content` must be a string or a list of parts",
                &format!("{at}.content"),
            ));
        }
    };
    Ok(Message {
        content: Some(content),
        ..Message::text(role, "")
    })
}

/// A user message's parts: text and images.
fn user_parts(parts: &[Value], at: &str) -> Result<Vec<Part>, GatewayError> {
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match part.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => out.push(Part::Text(
                part.get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("`text` must be a string", &format!("{at}.text")))?
                    .to_owned(),
            )),
            Some("input_image") => {
                let Some(url) = part.get("image_url").and_then(Value::as_str) else {
                    return Err(bad(
                        "images are passed on by `image_url`; `file_id` needs the Files API of a Responses provider",
                        &format!("{at}.image_url"),
                    ));
                };
                let detail = match part.get("detail") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(detail)) => Some(detail.clone()),
                    Some(_) => {
                        return Err(bad("`detail` must be a string", &format!("{at}.detail")));
                    }
                };
                out.push(Part::Image {
                    url: url.to_owned(),
                    detail,
                });
            }
            other => {
                return Err(bad(
                    format!(
                        "content parts of type `{}` are not supported in front of a Chat Completions provider",
                        other.unwrap_or("(none)")
                    ),
                    &format!("{at}.type"),
                ));
            }
        }
    }
    Ok(out)
}

/// Text parts joined (assistant and system messages, tool outputs).
fn parts_text(parts: &[Value], at: &str) -> Result<String, GatewayError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        match part.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => {
                text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
            }
            Some("refusal") => {
                text.push_str(part.get("refusal").and_then(Value::as_str).unwrap_or(""));
            }
            other => {
                return Err(bad(
                    format!(
                        "parts of type `{}` can only be text here",
                        other.unwrap_or("(none)")
                    ),
                    &format!("{at}[{j}].type"),
                ));
            }
        }
    }
    Ok(text)
}

/// Flat function tools as function tools.
fn tools(value: &Value) -> Result<Vec<Tool>, GatewayError> {
    let Some(tools) = value.as_array() else {
        return if value.is_null() {
            Ok(Vec::new())
        } else {
            Err(bad("`tools` must be an array", "tools"))
        };
    };
    let mut out = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {
                let mut function = Map::new();
                for key in ["name", "description", "parameters", "strict"] {
                    if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                        function.insert(key.into(), v.clone());
                    }
                }
                let function = json!({"type": "function", "function": function});
                match Tool::from_value(function) {
                    tool @ Tool::Function(_) => out.push(tool),
                    Tool::Other(_) => {
                        return Err(bad(
                            "a function tool needs a `name`",
                            &format!("tools[{i}].name"),
                        ));
                    }
                }
            }
            other => {
                return Err(bad(
                    format!(
                        "tools of type `{}` are not supported in front of a Chat Completions provider; configure them as the provider's gateway_tools instead",
                        other.unwrap_or("(none)")
                    ),
                    &format!("tools[{i}].type"),
                ));
            }
        }
    }
    Ok(out)
}

fn tool_choice(value: &Value) -> Result<Option<ToolChoice>, GatewayError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => {
            Ok(Some(ToolChoice::from_value(value.clone())))
        }
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = o.get("name").and_then(Value::as_str).ok_or_else(|| {
                    bad("a function tool choice needs a `name`", "tool_choice.name")
                })?;
                Ok(Some(ToolChoice::Function(name.to_owned())))
            }
            Some("allowed_tools") => {
                let tools: Vec<Value> = o
                    .get("tools")
                    .and_then(Value::as_array)
                    .map(|t| {
                        t.iter()
                            .map(|t| json!({"type": "function", "function": {"name": t.get("name").cloned().unwrap_or(Value::Null)}}))
                            .collect()
                    })
                    .unwrap_or_default();
                let mode = o.get("mode").cloned().unwrap_or(json!("auto"));
                Ok(Some(ToolChoice::Other(
                    json!({"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}),
                )))
            }
            _ => Err(bad(
                "only function and allowed_tools tool choices are supported in front of a Chat Completions provider",
                "tool_choice",
            )),
        },
        _ => Err(bad(
            "`tool_choice` must be \"auto\", \"none\", \"required\" or an object",
            "tool_choice",
        )),
    }
}

/// `text.format` as the response format, `text.verbosity` as `verbosity`.
fn text(value: &Value, request: &mut Request) -> Result<(), GatewayError> {
    if let Some(verbosity) = value.get("verbosity").filter(|v| !v.is_null()) {
        request.extra.insert("verbosity".into(), verbosity.clone());
    }
    let Some(format) = value.get("format").filter(|f| !f.is_null()) else {
        return Ok(());
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => {}
        Some("json_object") => request.response_format = Some(ResponseFormat::JsonObject),
        Some("json_schema") => {
            let mut schema = Map::new();
            for key in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    schema.insert(key.into(), v.clone());
                }
            }
            request.response_format = Some(ResponseFormat::JsonSchema(schema));
        }
        _ => {
            return Err(bad(
                "`text.format.type` must be text, json_object or json_schema",
                "text.format.type",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_through_both_translations_keeps_the_conversation() {
        let responses = json!({"model": "m", "instructions": "Rules.", "input": [
            {"role": "user", "content": "Weather?"},
            {"type": "function_call", "call_id": "c0", "name": "W", "arguments": "{\"city\":\"Rome\"}"},
            {"type": "function_call_output", "call_id": "c0", "output": "hot"},
        ], "tools": [{"type": "function", "name": "W", "parameters": {"type": "object"}, "strict": false}]});
        let Value::Object(request) = responses.clone() else {
            unreachable!()
        };
        let chat = translate(request).unwrap().request;
        let back = crate::upstream::to_responses::translate(&chat).unwrap();
        assert_eq!(back["tools"], responses["tools"]);
        assert_eq!(
            back["input"],
            json!([
                {"type": "message", "role": "system", "content": "Rules."},
                {"type": "message", "role": "user", "content": "Weather?"},
                {"type": "function_call", "call_id": "c0", "name": "W", "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "c0", "output": "hot"},
            ])
        );
    }

    fn chat(request: Value) -> Value {
        let Value::Object(map) = request else {
            unreachable!()
        };
        serde_json::to_value(translate(map).unwrap().request).unwrap()
    }

    fn error(request: Value) -> (String, Option<String>) {
        let Value::Object(map) = request else {
            unreachable!()
        };
        let e = translate(map).unwrap_err().to_json();
        (
            e["error"]["message"].as_str().unwrap().to_owned(),
            e["error"]["param"].as_str().map(str::to_owned),
        )
    }

    #[test]
    fn a_string_input_with_instructions_and_settings() {
        let out = chat(json!({
            "model": "m", "input": "Hi", "instructions": "Be brief.",
            "max_output_tokens": 50, "temperature": 0.2, "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}},
            "store": true, "metadata": {"k": "v"},
        }));
        assert_eq!(
            out,
            json!({
                "model": "m",
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                "max_tokens": 50, "temperature": 0.2, "reasoning_effort": "low",
                "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}},
            })
        );
    }

    #[test]
    fn items_calls_outputs_parts_and_images() {
        let out = chat(json!({"model": "m", "input": [
            {"role": "developer", "content": "Rules."},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Weather here?"},
                {"type": "input_image", "image_url": "https://example.test/a.png", "detail": "low"},
            ]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "c1", "name": "GetWeather", "arguments": "{\"location\":\"Paris\"}"},
            {"type": "function_call", "call_id": "c2", "name": "GetTime", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
            {"type": "reasoning", "summary": []},
            {"type": "mcp_call", "id": "g1", "name": "clock", "arguments": "{}", "server_label": "builtin", "output": "12:00"},
        ],
        "tools": [{"type": "function", "name": "GetWeather", "description": "d", "parameters": {"type": "object"}, "strict": null}],
        "tool_choice": {"type": "function", "name": "GetWeather"}}));
        assert_eq!(
            out["messages"],
            json!([
                {"role": "system", "content": "Rules."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image_url", "image_url": {"url": "https://example.test/a.png", "detail": "low"}},
                ]},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\":\"Paris\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "GetTime", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "c2", "content": "noon"},
            ])
        );
        assert_eq!(
            out["tools"],
            json!([{"type": "function", "function": {"name": "GetWeather", "description": "d", "parameters": {"type": "object"}}}])
        );
        assert_eq!(
            out["tool_choice"],
            json!({"type": "function", "function": {"name": "GetWeather"}})
        );
    }

    /// An answer of the gateway's sent back as it came: its text around
    /// the gateway's calls is one assistant turn, as the chat door gives
    /// it (and the transcript linked it); two turns of the client's stay two.
    #[test]
    fn a_gateway_answer_sent_back_is_one_assistant_turn() {
        let out = chat(json!({"model": "m", "input": [
            {"role": "user", "content": "6 * 7?"},
            {"type": "mcp_list_tools", "id": "l1", "server_label": "builtin", "tools": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "I'll use calculator.\n\n"}]},
            {"type": "mcp_call", "id": "g1", "name": "calculator", "arguments": "{}", "server_label": "builtin", "output": "42"},
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 42."}]},
            {"role": "user", "content": "Thanks"},
            {"role": "assistant", "content": "You're welcome."},
            {"role": "assistant", "content": "Anything else?"},
        ]}));
        assert_eq!(
            out["messages"],
            json!([
                {"role": "user", "content": "6 * 7?"},
                {"role": "assistant", "content": "I'll use calculator.\n\nIt is 42."},
                {"role": "user", "content": "Thanks"},
                {"role": "assistant", "content": "You're welcome."},
                {"role": "assistant", "content": "Anything else?"},
            ])
        );
    }

    #[test]
    fn what_cannot_be_translated_is_named() {
        let cases = [
            (
                json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
                "[store]",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
                "gateway_tools",
            ),
            (
                json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
                "input[0].type",
                "item_reference",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
                "input[0].content[0].type",
                "input_file",
            ),
            (
                json!({"model": "m", "input": "x", "prompt": {"id": "p"}}),
                "prompt",
                "not supported",
            ),
            (
                json!({"model": "m", "input": "x", "background": true}),
                "background",
                "not supported",
            ),
            (json!({"model": "m"}), "input", "required"),
        ];
        for (request, param, words) in cases {
            let (message, got) = error(request.clone());
            assert_eq!(got.as_deref(), Some(param), "{request}: {message}");
            assert!(message.contains(words), "{request}: {message}");
        }
    }

    #[test]
    fn echo_keeps_what_the_response_object_repeats() {
        let Value::Object(map) = json!({"model": "m", "input": "x", "stream": true, "instructions": "I",
            "tools": [{"type": "function", "name": "F"}], "metadata": {"a": "b"}})
        else {
            unreachable!()
        };
        let t = translate(map).unwrap();
        assert!(t.stream);
        assert!(!t.request.stream);
        assert_eq!(t.echo.instructions, json!("I"));
        assert_eq!(t.echo.tools, json!([{"type": "function", "name": "F"}]));
        assert_eq!(t.echo.metadata, json!({"a": "b"}));
        assert_eq!(t.echo.tool_choice, json!("auto"));
    }
}
