//! What a client asks of a model, independent of any door: the messages
//! with typed parts, the tools and the tool policy, sampling, stop
//! sequences, the response format, reasoning and metadata, and the fields
//! no part of toolgate reads, carried through untouched ([`Request::extra`]).
//!
//! Each door reads its own request into a [`Request`] (the chat door with
//! [`Request::from_chat`]; `api/` for the others); each upstream dialect
//! writes it out (`Serialize` is the Chat Completions body;
//! `upstream::to_responses` the Responses one). A message and a call
//! serialise as Chat Completions JSON, the shape the store keeps.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value, json};

use super::Call;
use crate::error::GatewayError;

/// A model request.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Request {
    /// The model asked for (some providers need none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether and which tool the model must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// The answer is streamed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Streaming options (`include_usage`, …), as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<Map<String, Value>>,
    /// Temperature, nucleus sampling, lengths, choices.
    #[serde(flatten)]
    pub sampling: Sampling,
    /// Where the model stops writing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// The shape the answer's text must take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// How hard a reasoning model thinks (`low`, `medium`, `high` …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// The client's key-value tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Every other field, passed on as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Sampling and length settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Sampling temperature (a number kept as written: `0` stays `0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Number>,
    /// Nucleus sampling mass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<Number>,
    /// The answer's length limit in tokens (the older name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The answer's length limit in tokens, reasoning included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// How many choices to generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
}

/// Stop sequences: one, or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// A single sequence.
    One(String),
    /// Several sequences.
    Many(Vec<String>),
}

impl Stop {
    /// The sequences.
    pub fn sequences(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(list) => list.clone(),
        }
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// Instructions, as newer models name them.
    Developer,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
    /// A legacy function's result.
    Function,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says (`null` for a turn of calls only).
    #[serde(default)]
    pub content: Option<Content>,
    /// The model's calls (assistant messages).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_empty"
    )]
    pub tool_calls: Vec<Call>,
    /// The call a result answers (`tool` messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The author's or the function's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Every other field (`reasoning_content`, `refusal` …), as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// A message of `role` saying `text`.
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: Some(Content::Text(text.into())),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            extra: Map::new(),
        }
    }

    /// An assistant turn: its text (none when empty) and its calls.
    pub fn assistant(text: &str, calls: Vec<Call>) -> Message {
        Message {
            content: (!text.is_empty()).then(|| Content::Text(text.to_owned())),
            tool_calls: calls,
            ..Message::text(Role::Assistant, "")
        }
    }

    /// A tool's result for the call `id`.
    pub fn tool_result(id: &str, result: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(id.to_owned()),
            ..Message::text(Role::Tool, result)
        }
    }

    /// The message's text: the string, or its text parts joined.
    pub fn text_content(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(s)) => s.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect(),
        }
    }

    /// As Chat Completions JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A message's content.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Typed parts (text, images, audio, files …).
    Parts(Vec<Part>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Content::Text(s)),
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::Object(map) => Ok(Part::from_map(map)),
                    _ => Err(D::Error::custom("each content part must be an object")),
                })
                .collect::<Result<_, _>>()
                .map(Content::Parts),
            _ => Err(D::Error::custom(
                "`content` must be a string or an array of parts",
            )),
        }
    }
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// `{"type": "text", "text": …}`.
    Text(String),
    /// `{"type": "image_url", "image_url": {"url": …, "detail": …}}`.
    Image {
        /// An `https:` or `data:` URL.
        url: String,
        /// `low`, `high` or `auto`, when given.
        detail: Option<String>,
    },
    /// Any other part (audio, files, or a part with fields of its own), as
    /// it came.
    Other(Map<String, Value>),
}

impl Part {
    /// Reads a part; a shape with anything more than the typed fields
    /// stays whole as [`Part::Other`].
    fn from_map(map: Map<String, Value>) -> Part {
        let kind = map.get("type").and_then(Value::as_str);
        match kind {
            Some("text") if map.len() == 2 => {
                if let Some(Value::String(text)) = map.get("text") {
                    return Part::Text(text.clone());
                }
            }
            Some("image_url") if map.len() == 2 => {
                if let Some(Value::Object(image)) = map.get("image_url") {
                    let url = image.get("url").and_then(Value::as_str);
                    let detail = image.get("detail");
                    let known = image.keys().all(|k| {
                        k == "url" || (k == "detail" && detail.is_some_and(Value::is_string))
                    });
                    if let (Some(url), true) = (url, known) {
                        return Part::Image {
                            url: url.to_owned(),
                            detail: detail.and_then(Value::as_str).map(str::to_owned),
                        };
                    }
                }
            }
            _ => {}
        }
        Part::Other(map)
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Text(text) => json!({"type": "text", "text": text}).serialize(s),
            Part::Image { url, detail } => {
                let mut image = json!({"url": url});
                if let Some(detail) = detail {
                    image["detail"] = json!(detail);
                }
                json!({"type": "image_url", "image_url": image}).serialize(s)
            }
            Part::Other(map) => map.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Map::deserialize(d).map(Part::from_map)
    }
}

/// A call as a Chat Completions `tool_calls` entry.
#[derive(Serialize, Deserialize)]
struct WireCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default = "function")]
    kind: String,
    function: WireFunction,
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

fn function() -> String {
    "function".into()
}

impl Serialize for Call {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireCall {
            id: self.id.clone(),
            kind: function(),
            function: WireFunction {
                name: self.name.clone(),
                arguments: self.arguments.clone(),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Call {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = WireCall::deserialize(d)?;
        if wire.kind != "function" {
            return Err(D::Error::custom(format!(
                "calls of type `{}` are not supported; only `function`",
                wire.kind
            )));
        }
        Ok(Call {
            id: wire.id,
            name: wire.function.name,
            arguments: wire.function.arguments,
        })
    }
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub enum Tool {
    /// A function tool.
    Function(FunctionTool),
    /// Any other kind of tool, as it came.
    Other(Value),
}

impl Tool {
    /// The function tool's name.
    pub fn name(&self) -> Option<&str> {
        match self {
            Tool::Function(f) => Some(&f.name),
            Tool::Other(_) => None,
        }
    }

    /// Reads a chat `tools` entry.
    pub fn from_value(value: Value) -> Tool {
        let Value::Object(mut map) = value else {
            return Tool::Other(value);
        };
        let function = match map.remove("function") {
            Some(Value::Object(function))
                if map.len() == 1
                    && map.get("type").and_then(Value::as_str) == Some("function") =>
            {
                function
            }
            other => {
                if let Some(other) = other {
                    map.insert("function".into(), other);
                }
                return Tool::Other(Value::Object(map));
            }
        };
        match FunctionTool::from_map(function) {
            Ok(function) => Tool::Function(function),
            Err(function) => {
                map.insert("function".into(), Value::Object(function));
                Tool::Other(Value::Object(map))
            }
        }
    }
}

/// A function tool: its name, what it does and its arguments' schema.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FunctionTool {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// Its arguments' JSON Schema.
    pub parameters: Option<Value>,
    /// Whether the arguments must match the schema exactly.
    pub strict: Option<bool>,
    /// Any other field of the function, as it came.
    pub extra: Map<String, Value>,
}

impl FunctionTool {
    /// Reads a chat tool's `function`; one without a string `name` is
    /// handed back.
    fn from_map(mut function: Map<String, Value>) -> Result<FunctionTool, Map<String, Value>> {
        if !function.get("name").is_some_and(Value::is_string) {
            return Err(function);
        }
        let mut take_string = |key: &str| match function.remove(key) {
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                function.insert(key.into(), other);
                None
            }
            None => None,
        };
        let name = take_string("name").unwrap_or_default();
        let description = take_string("description");
        let parameters = function.remove("parameters");
        let strict = match function.remove("strict") {
            Some(Value::Bool(b)) => Some(b),
            Some(other) => {
                function.insert("strict".into(), other);
                None
            }
            None => None,
        };
        Ok(FunctionTool {
            name,
            description,
            parameters,
            strict,
            extra: function,
        })
    }

    /// The function's fields, flat (`name`, `description`, …).
    pub fn to_map(&self) -> Map<String, Value> {
        let mut function = Map::new();
        function.insert("name".into(), json!(self.name));
        if let Some(d) = &self.description {
            function.insert("description".into(), json!(d));
        }
        if let Some(p) = &self.parameters {
            function.insert("parameters".into(), p.clone());
        }
        if let Some(s) = self.strict {
            function.insert("strict".into(), json!(s));
        }
        function.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        function
    }
}

impl Serialize for Tool {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Tool::Function(f) => json!({"type": "function", "function": f.to_map()}).serialize(s),
            Tool::Other(value) => value.serialize(s),
        }
    }
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No calls.
    None,
    /// At least one call.
    Required,
    /// A call of this function.
    Function(String),
    /// Any other choice (`allowed_tools` …), as it came.
    Other(Value),
}

impl ToolChoice {
    /// Reads a chat `tool_choice`.
    pub fn from_value(value: Value) -> ToolChoice {
        match value.as_str() {
            Some("auto") => return ToolChoice::Auto,
            Some("none") => return ToolChoice::None,
            Some("required") => return ToolChoice::Required,
            _ => {}
        }
        if let Value::Object(o) = &value
            && o.len() == 2
            && o.get("type").and_then(Value::as_str) == Some("function")
            && let Some(Value::Object(f)) = o.get("function")
            && f.len() == 1
            && let Some(Value::String(name)) = f.get("name")
        {
            return ToolChoice::Function(name.clone());
        }
        ToolChoice::Other(value)
    }

    /// As chat JSON.
    pub fn to_value(&self) -> Value {
        match self {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
            ToolChoice::Other(v) => v.clone(),
        }
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// The shape the answer's text must take.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Free text.
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema: the `json_schema` object (`name`, `schema`,
    /// `strict` …).
    JsonSchema(Map<String, Value>),
    /// Any other format, as it came.
    Other(Value),
}

impl ResponseFormat {
    /// Reads a chat `response_format`.
    pub fn from_value(value: Value) -> ResponseFormat {
        let Value::Object(mut o) = value else {
            return ResponseFormat::Other(value);
        };
        match (o.get("type").and_then(Value::as_str), o.len()) {
            (Some("text"), 1) => ResponseFormat::Text,
            (Some("json_object"), 1) => ResponseFormat::JsonObject,
            (Some("json_schema"), 2) if o.get("json_schema").is_some_and(Value::is_object) => {
                let Some(Value::Object(schema)) = o.remove("json_schema") else {
                    unreachable!("checked above")
                };
                ResponseFormat::JsonSchema(schema)
            }
            _ => ResponseFormat::Other(Value::Object(o)),
        }
    }

    /// As chat JSON.
    pub fn to_value(&self) -> Value {
        match self {
            ResponseFormat::Text => json!({"type": "text"}),
            ResponseFormat::JsonObject => json!({"type": "json_object"}),
            ResponseFormat::JsonSchema(s) => json!({"type": "json_schema", "json_schema": s}),
            ResponseFormat::Other(v) => v.clone(),
        }
    }
}

impl Serialize for ResponseFormat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

fn bad(message: impl Into<String>, param: &str) -> GatewayError {
    GatewayError::bad_request(message, Some(param))
}

/// Takes `key` out of `map` as a `T`; `null` is absent, and a value of the
/// wrong shape is a `400` naming the field.
fn take<T: serde::de::DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<T>, GatewayError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value)
            .map(Some)
            .map_err(|e| bad(format!("`{key}` is not valid: {e}"), key)),
    }
}

impl Request {
    /// Reads a Chat Completions request. Legacy `functions` and
    /// `function_call` become `tools` and `tool_choice`; a known field of
    /// the wrong shape is a `400` naming it; unknown fields are kept.
    pub fn from_chat(mut map: Map<String, Value>) -> Result<Request, GatewayError> {
        legacy_functions(&mut map);
        let messages = match map.remove("messages") {
            Some(Value::Array(list)) => list
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    serde_json::from_value(m).map_err(|e| {
                        let at = format!("messages[{i}]");
                        bad(format!("`{at}` is not a valid message: {e}"), &at)
                    })
                })
                .collect::<Result<Vec<Message>, _>>()?,
            _ => return Err(bad("`messages` must be an array", "messages")),
        };
        let tools = match map.remove("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(tools)) => tools.into_iter().map(Tool::from_value).collect(),
            Some(_) => return Err(bad("`tools` must be an array", "tools")),
        };
        let tool_choice = match map.remove("tool_choice") {
            None | Some(Value::Null) => None,
            Some(v) => Some(ToolChoice::from_value(v)),
        };
        let response_format = match map.remove("response_format") {
            None | Some(Value::Null) => None,
            Some(v) => Some(ResponseFormat::from_value(v)),
        };
        Ok(Request {
            model: take(&mut map, "model")?,
            messages,
            tools,
            tool_choice,
            parallel_tool_calls: take(&mut map, "parallel_tool_calls")?,
            stream: take(&mut map, "stream")?.unwrap_or(false),
            stream_options: take(&mut map, "stream_options")?,
            sampling: Sampling {
                temperature: take(&mut map, "temperature")?,
                top_p: take(&mut map, "top_p")?,
                max_tokens: take(&mut map, "max_tokens")?,
                max_completion_tokens: take(&mut map, "max_completion_tokens")?,
                n: take(&mut map, "n")?,
            },
            stop: take(&mut map, "stop")?,
            response_format,
            reasoning_effort: take(&mut map, "reasoning_effort")?,
            metadata: take(&mut map, "metadata")?,
            extra: map,
        })
    }

    /// The Chat Completions body.
    pub fn to_chat_body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Whether a streamed answer ends with a usage chunk.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true)
    }
}

/// Legacy `functions` / `function_call` become `tools` / `tool_choice`.
fn legacy_functions(request: &mut Map<String, Value>) {
    if let Some(Value::Array(functions)) = request.remove("functions") {
        let tools: Vec<Value> = functions
            .into_iter()
            .map(|f| json!({"type": "function", "function": f}))
            .collect();
        if !request.contains_key("tools") {
            request.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = request.remove("function_call")
        && !request.contains_key("tool_choice")
    {
        let choice = match choice {
            Value::Object(f) => {
                json!({"type": "function", "function": {"name": f.get("name").cloned().unwrap_or(Value::Null)}})
            }
            other => other,
        };
        request.insert("tool_choice".into(), choice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(v: Value) -> Result<Request, GatewayError> {
        let Value::Object(map) = v else {
            panic!("a request is an object")
        };
        Request::from_chat(map)
    }

    fn written(r: &Request) -> Value {
        serde_json::to_value(r).unwrap()
    }

    /// What a chat client sends comes back out as it came: typed fields,
    /// parts the type does not know, fields nothing reads.
    #[test]
    fn a_chat_request_is_written_back_as_it_came() {
        let cases = [
            json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}),
            json!({
                "model": "m", "stream": true, "stream_options": {"include_usage": true, "x": 1},
                "temperature": 0, "top_p": 0.9, "max_tokens": 12, "max_completion_tokens": 30, "n": 1,
                "stop": ["\n", "END"], "seed": 7, "user": "u", "logprobs": true,
                "reasoning_effort": "low", "metadata": {"k": "v"}, "parallel_tool_calls": false,
                "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}, "strict": true}},
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "developer", "content": [{"type": "text", "text": "Dev"}]},
                    {"role": "user", "name": "ann", "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image_url", "image_url": {"url": "https://x.test/i.png", "detail": "low"}},
                        {"type": "image_url", "image_url": {"url": "https://x.test/j.png"}},
                        {"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}},
                        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                    ]},
                    {"role": "assistant", "content": null, "reasoning_content": "hmm", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "F", "arguments": "{\"a\":1}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "done"},
                    {"role": "assistant", "content": "ok", "refusal": null},
                ],
                "tools": [
                    {"type": "function", "function": {"name": "F", "description": "f", "parameters": {"type": "object"}, "strict": false}},
                    {"type": "function", "function": {"name": "G"}},
                    {"type": "custom", "custom": {"name": "H"}},
                ],
                "tool_choice": {"type": "function", "function": {"name": "F"}},
            }),
            json!({"messages": [], "stop": "END", "tool_choice": "required", "response_format": {"type": "text"}}),
            json!({"messages": [], "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}, "response_format": {"type": "json_object"}}),
        ];
        for case in cases {
            let request = read(case.clone()).unwrap();
            assert_eq!(written(&request), case);
            // And again: reading what was written changes nothing.
            let Value::Object(map) = written(&request) else {
                unreachable!()
            };
            assert_eq!(Request::from_chat(map).unwrap(), request);
        }
    }

    #[test]
    fn the_typed_fields_are_read() {
        let r = read(json!({
            "model": "m", "stream": true, "stream_options": {"include_usage": true},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "F", "arguments": "{}"}}]},
            ],
            "tools": [{"type": "function", "function": {"name": "F", "parameters": {"type": "object"}}}],
            "tool_choice": "auto",
            "stop": "x",
        }))
        .unwrap();
        assert!(r.stream && r.include_usage());
        assert_eq!(r.messages[0].text_content(), "ab");
        assert_eq!(r.messages[1].content, None);
        assert_eq!(
            r.messages[1].tool_calls,
            vec![Call {
                id: "c1".into(),
                name: "F".into(),
                arguments: "{}".into()
            }]
        );
        assert_eq!(r.tools[0].name(), Some("F"));
        assert_eq!(r.tool_choice, Some(ToolChoice::Auto));
        assert_eq!(r.stop.unwrap().sequences(), vec!["x".to_owned()]);
    }

    #[test]
    fn legacy_functions_become_tools() {
        let r = read(json!({
            "messages": [],
            "functions": [{"name": "F", "parameters": {"type": "object"}}],
            "function_call": {"name": "F"},
        }))
        .unwrap();
        assert_eq!(r.tools[0].name(), Some("F"));
        assert_eq!(r.tool_choice, Some(ToolChoice::Function("F".into())));
        assert!(r.extra.is_empty());
    }

    #[test]
    fn nulls_are_absent() {
        let r = read(json!({"messages": [], "tools": null, "temperature": null, "stop": null}))
            .unwrap();
        assert_eq!(written(&r), json!({"messages": []}));
    }

    #[test]
    fn a_field_of_the_wrong_shape_is_named() {
        for (case, param) in [
            (json!({"messages": {}}), "messages"),
            (json!({"messages": [], "tools": {}}), "tools"),
            (json!({"messages": [], "temperature": "hot"}), "temperature"),
            (json!({"messages": [], "stream": "yes"}), "stream"),
            (json!({"messages": [], "stop": 3}), "stop"),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages[0]",
            ),
            (json!({"messages": [{"content": "no role"}]}), "messages[0]"),
            (
                json!({"messages": [{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]}),
                "messages[1]",
            ),
            (
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "function": {"name": "F"}}]}]}),
                "messages[0]",
            ),
        ] {
            let e = read(case.clone()).unwrap_err().to_json();
            assert_eq!(e["error"]["param"], param, "{case}");
            assert_eq!(e["error"]["type"], "invalid_request_error", "{case}");
        }
    }

    #[test]
    fn the_constructors_write_chat_messages() {
        let call = Call {
            id: "c1".into(),
            name: "F".into(),
            arguments: "{}".into(),
        };
        assert_eq!(
            Message::assistant("", vec![call.clone()]).to_value(),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "F", "arguments": "{}"}}]})
        );
        assert_eq!(
            Message::assistant("hi", vec![]).to_value(),
            json!({"role": "assistant", "content": "hi"})
        );
        assert_eq!(
            Message::tool_result("c1", "4").to_value(),
            json!({"role": "tool", "content": "4", "tool_call_id": "c1"})
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof!["[a-z ]{0,8}", "\\PC{0,6}"]
        }

        /// A content part: the typed ones, and shapes the type keeps whole.
        fn part() -> impl Strategy<Value = Value> {
            prop_oneof![
                text().prop_map(|t| json!({"type": "text", "text": t})),
                (text(), proptest::option::of("low|high|auto")).prop_map(|(url, detail)| {
                    let mut image = json!({"url": url});
                    if let Some(d) = detail {
                        image["detail"] = json!(d);
                    }
                    json!({"type": "image_url", "image_url": image})
                }),
                text().prop_map(
                    |t| json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}})
                ),
                Just(
                    json!({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}})
                ),
                Just(json!({"type": "image_url", "image_url": {"url": "u", "detail": 3}})),
                Just(json!({"type": "text", "text": 5})),
            ]
        }

        fn content() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                text().prop_map(Value::String),
                proptest::collection::vec(part(), 0..4).prop_map(Value::Array),
            ]
        }

        fn call() -> impl Strategy<Value = Value> {
            ("[a-z0-9_]{1,6}", "[A-Za-z]{1,6}", "\\{\"a\":[0-9]{1,3}\\}").prop_map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
        }

        fn message() -> impl Strategy<Value = Value> {
            (
                prop_oneof![
                    Just("system"),
                    Just("developer"),
                    Just("user"),
                    Just("assistant"),
                    Just("tool")
                ],
                content(),
                proptest::collection::vec(call(), 0..3),
                proptest::option::of("[a-z0-9_]{1,6}"),
                proptest::option::of("[a-z]{1,4}"),
                proptest::option::of(prop_oneof![
                    Just(("reasoning_content", json!("hm"))),
                    Just(("refusal", Value::Null)),
                    Just(("audio", json!({"id": "a1"}))),
                ]),
            )
                .prop_map(|(role, content, calls, tool_call_id, name, extra)| {
                    let mut m = json!({"role": role, "content": content});
                    if !calls.is_empty() {
                        m["tool_calls"] = Value::Array(calls);
                    }
                    if let Some(id) = tool_call_id {
                        m["tool_call_id"] = json!(id);
                    }
                    if let Some(name) = name {
                        m["name"] = json!(name);
                    }
                    if let Some((k, v)) = extra {
                        m[k] = v;
                    }
                    m
                })
        }

        fn tool() -> impl Strategy<Value = Value> {
            prop_oneof![
                ("[A-Za-z]{1,6}", proptest::option::of(text()), any::<bool>()).prop_map(
                    |(name, d, strict)| {
                        let mut f = json!({"name": name, "parameters": {"type": "object"}});
                        if let Some(d) = d {
                            f["description"] = json!(d);
                        }
                        if strict {
                            f["strict"] = json!(true);
                        }
                        json!({"type": "function", "function": f})
                    }
                ),
                Just(json!({"type": "custom", "custom": {"name": "grammar"}})),
                Just(json!({"type": "function", "function": {"name": 3}})),
            ]
        }

        /// A chat request: every field the type reads, in each of its
        /// shapes, and fields nothing reads.
        fn request() -> impl Strategy<Value = Value> {
            let fields = (
                proptest::option::of("[a-z0-9-]{1,8}"),
                any::<bool>(),
                proptest::option::of(prop_oneof![
                    Just(json!(0)),
                    Just(json!(0.7)),
                    Just(json!(2))
                ]),
                proptest::option::of(prop_oneof![Just(json!("END")), Just(json!(["a", "b"]))]),
                proptest::collection::vec(tool(), 0..3),
                proptest::option::of(prop_oneof![
                    Just(json!("auto")),
                    Just(json!("none")),
                    Just(json!("required")),
                    Just(json!({"type": "function", "function": {"name": "F"}})),
                    Just(
                        json!({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}})
                    ),
                ]),
                proptest::option::of(prop_oneof![
                    Just(json!({"type": "text"})),
                    Just(json!({"type": "json_object"})),
                    Just(
                        json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {}}})
                    ),
                    Just(json!({"type": "grammar", "grammar": "x"})),
                ]),
                proptest::option::of(prop_oneof![
                    Just(("seed", json!(7))),
                    Just(("logprobs", json!(true))),
                    Just(("user", json!("u"))),
                ]),
            );
            (proptest::collection::vec(message(), 0..5), fields).prop_map(
                |(messages, (model, stream, temperature, stop, tools, choice, format, extra))| {
                    let mut r = json!({"messages": messages});
                    if let Some(model) = model {
                        r["model"] = json!(model);
                    }
                    if stream {
                        r["stream"] = json!(true);
                        r["stream_options"] = json!({"include_usage": true});
                    }
                    if let Some(t) = temperature {
                        r["temperature"] = t;
                    }
                    if let Some(stop) = stop {
                        r["stop"] = stop;
                    }
                    if !tools.is_empty() {
                        r["tools"] = Value::Array(tools);
                    }
                    if let Some(choice) = choice {
                        r["tool_choice"] = choice;
                    }
                    if let Some(format) = format {
                        r["response_format"] = format;
                    }
                    if let Some((k, v)) = extra {
                        r[k] = v;
                    }
                    r
                },
            )
        }

        proptest! {
            /// The typed request loses nothing: what a chat client sent is
            /// what the chat dialect writes, and reading that again gives
            /// the same request.
            #[test]
            fn a_chat_request_survives_the_typed_request(case in request()) {
                let request = read(case.clone()).unwrap();
                prop_assert_eq!(&written(&request), &case);
                let Value::Object(map) = written(&request) else { unreachable!() };
                prop_assert_eq!(Request::from_chat(map).unwrap(), request);
            }
        }
    }
}
