//! A checker for what real OpenAI clients accept, rule by rule (the numbers
//! the rest of the code cites): [`check_stream`] validates a whole SSE
//! response body (rules 1-15), [`check_completion`] a non-streaming
//! `chat.completion` (rule 16).
#![allow(dead_code)]

pub mod messages;
pub mod responses;

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

/// What the request allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expect {
    /// The request had `stream_options.include_usage: true` (rule 14).
    pub include_usage: bool,
    /// An in-stream error event is acceptable (rule 15).
    pub allow_error: bool,
}

impl Expect {
    pub fn usage() -> Self {
        Expect {
            include_usage: true,
            ..Expect::default()
        }
    }

    pub fn error() -> Self {
        Expect {
            allow_error: true,
            ..Expect::default()
        }
    }
}

/// One tool call as a client would assemble it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The concatenated argument fragments.
    pub arguments: String,
}

impl Call {
    pub fn args(&self) -> Value {
        serde_json::from_str(&self.arguments).expect("checked to be JSON")
    }
}

/// One choice as a client would assemble it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChoiceSummary {
    pub content: String,
    pub calls: Vec<Call>,
    pub finish_reason: Option<String>,
    /// Gateway tool calls (rules 21-22), each in its last reported state.
    pub gateway: Vec<Value>,
    /// The legacy `function_call` (requests with `functions`); its `id` is empty.
    pub function_call: Option<Call>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StreamSummary {
    /// By choice index.
    pub choices: BTreeMap<u64, ChoiceSummary>,
    /// The error event, if one was seen.
    pub error: Option<Value>,
    /// The usage chunk's `usage`, if one was seen.
    pub usage: Option<Value>,
    pub id: Option<String>,
    pub created: Option<u64>,
    pub model: Option<String>,
    pub system_fingerprint: Option<Value>,
    /// Number of `data:` chunks before `[DONE]` (error included).
    pub chunks: usize,
}

impl StreamSummary {
    pub fn error_seen(&self) -> bool {
        self.error.is_some()
    }

    /// Choice 0 (panics if there is none).
    pub fn choice(&self) -> &ChoiceSummary {
        self.choices.get(&0).expect("choice 0 in the stream")
    }

    /// The same summary with call ids blanked and the chunk count cleared,
    /// to compare streams whose call ids are random.
    pub fn without_ids(&self) -> StreamSummary {
        let mut s = self.clone();
        for c in s.choices.values_mut() {
            for call in &mut c.calls {
                call.id.clear();
            }
        }
        s.chunks = 0;
        s
    }
}

const FINISH_REASONS: [&str; 5] = [
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "function_call",
];

#[derive(Default)]
struct ChoiceState {
    summary: ChoiceSummary,
    deltas: usize,
}

/// Validates a whole streamed response body; see the module docs.
pub fn check_stream(body: &[u8], opts: &Expect) -> Result<StreamSummary, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    // Rule 1: framing.
    if !text.ends_with("data: [DONE]\n\n") {
        return Err(format!(
            "rule 1: the body does not end with `data: [DONE]\\n\\n`: ...{:?}",
            tail(text)
        ));
    }
    if text.contains('\r') {
        return Err("rule 1: frames must use `\\n` line ends only".into());
    }
    let mut events: Vec<&str> = text.split("\n\n").collect();
    // The body ends with "\n\n", so the split ends with "".
    if events.pop() != Some("") {
        return Err("rule 1: the body does not end with a blank line".into());
    }
    let mut payloads: Vec<(usize, &str)> = Vec::new();
    for (n, event) in events.iter().enumerate() {
        if event.is_empty() {
            return Err(format!("rule 1: event {n} is empty (stray blank line)"));
        }
        let mut data: Option<&str> = None;
        for line in event.split('\n') {
            if line.starts_with(':') {
                continue; // a comment (keep-alive)
            }
            if line.starts_with("event:") || line.starts_with("id:") {
                return Err(format!("rule 1: event {n} has a forbidden line {line:?}"));
            }
            let Some(payload) = line.strip_prefix("data: ") else {
                return Err(format!(
                    "rule 1: event {n} has a line that is not `data: ...` nor a comment: {line:?}"
                ));
            };
            if payload.trim().is_empty() {
                return Err(format!("rule 1: event {n} has empty data"));
            }
            if data.is_some() {
                return Err(format!("rule 1: event {n} has more than one data line"));
            }
            data = Some(payload);
        }
        if let Some(d) = data {
            payloads.push((n, d));
        }
    }
    let Some(&(last_n, "[DONE]")) = payloads.last() else {
        return Err("rule 1: the last event is not `data: [DONE]`".into());
    };
    if last_n != events.len() - 1 {
        return Err("rule 1: something follows `data: [DONE]`".into());
    }
    payloads.pop();

    let mut summary = StreamSummary {
        choices: BTreeMap::new(),
        error: None,
        usage: None,
        id: None,
        created: None,
        model: None,
        system_fingerprint: None,
        chunks: payloads.len(),
    };
    let mut states: BTreeMap<u64, ChoiceState> = BTreeMap::new();
    let mut call_ids: HashSet<String> = HashSet::new();
    let count = payloads.len();
    for (pos, (n, payload)) in payloads.into_iter().enumerate() {
        let at = |msg: String| format!("event {n} ({payload}): {msg}");
        if payload == "[DONE]" {
            return Err(at("rule 1: `[DONE]` before the end".into()));
        }
        let value: Value =
            serde_json::from_str(payload).map_err(|e| at(format!("not JSON: {e}")))?;
        let Value::Object(chunk) = value else {
            return Err(at("not a JSON object".into()));
        };
        if summary.usage.is_some() {
            return Err(at("rule 14: a chunk after the usage chunk".into()));
        }
        if let Some(error) = chunk.get("error") {
            if !opts.allow_error {
                return Err(at("rule 15: an error event where none is allowed".into()));
            }
            check_error(error).map_err(&at)?;
            if pos + 1 != count {
                return Err(at(
                    "rule 15: the error event is not followed by `[DONE]`".into()
                ));
            }
            summary.error = Some(error.clone());
            continue;
        }
        check_chunk_header(&chunk, &mut summary).map_err(&at)?;
        let Some(Value::Array(choices)) = chunk.get("choices") else {
            return Err(at("rule 2: `choices` is not an array".into()));
        };
        match chunk.get("usage") {
            None | Some(Value::Null) => {}
            Some(usage) => {
                if !opts.include_usage {
                    return Err(at("rule 14: usage without `include_usage`".into()));
                }
                if !choices.is_empty() {
                    return Err(at("rule 14: the usage chunk must have `choices: []`".into()));
                }
                for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
                    if !usage.get(k).is_some_and(Value::is_u64) {
                        return Err(at(format!("rule 14: usage.{k} is not an integer")));
                    }
                }
                summary.usage = Some(usage.clone());
            }
        }
        for choice in choices {
            check_choice(choice, &mut states, &mut call_ids).map_err(&at)?;
        }
    }

    for (index, state) in &states {
        let s = &state.summary;
        if let Some(last) = s.calls.last() {
            check_arguments(last).map_err(|e| format!("choice {index}: {e}"))?;
        }
        if summary.error.is_none() && s.finish_reason.is_none() {
            return Err(format!("rule 13: choice {index} never got a finish_reason"));
        }
    }
    if summary.error.is_none() && states.is_empty() {
        return Err("the stream has no choice at all".into());
    }
    summary.choices = states.into_iter().map(|(i, s)| (i, s.summary)).collect();
    Ok(summary)
}

fn tail(text: &str) -> &str {
    let mut start = text.len().saturating_sub(60);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    &text[start..]
}

fn check_error(error: &Value) -> Result<(), String> {
    let Value::Object(e) = error else {
        return Err("rule 15: `error` is not an object".into());
    };
    if !e.get("message").is_some_and(Value::is_string) {
        return Err("rule 15: error.message is not a string".into());
    }
    if !e.get("type").is_some_and(Value::is_string) {
        return Err("rule 15: error.type is not a string".into());
    }
    match e.get("code") {
        Some(Value::String(_) | Value::Null) => Ok(()),
        _ => Err("rule 15: error.code must be a string or null".into()),
    }
}

fn check_chunk_header(
    chunk: &Map<String, Value>,
    summary: &mut StreamSummary,
) -> Result<(), String> {
    let id = match chunk.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id,
        _ => return Err("rule 2: `id` is not a non-empty string".into()),
    };
    match &summary.id {
        None => summary.id = Some(id.clone()),
        Some(first) if first != id => {
            return Err(format!("rule 2: `id` changed from {first:?} to {id:?}"));
        }
        Some(_) => {}
    }
    if chunk.get("object") != Some(&Value::from("chat.completion.chunk")) {
        return Err("rule 2: `object` is not \"chat.completion.chunk\"".into());
    }
    let Some(created) = chunk.get("created").and_then(Value::as_u64) else {
        return Err("rule 2: `created` is not integer seconds".into());
    };
    summary.created.get_or_insert(created);
    let Some(model) = chunk.get("model").and_then(Value::as_str) else {
        return Err("rule 2: `model` is not a string".into());
    };
    summary.model.get_or_insert_with(|| model.to_owned());
    if summary.system_fingerprint.is_none()
        && let Some(fp) = chunk.get("system_fingerprint").filter(|v| !v.is_null())
    {
        summary.system_fingerprint = Some(fp.clone());
    }
    Ok(())
}

fn check_choice(
    choice: &Value,
    states: &mut BTreeMap<u64, ChoiceState>,
    call_ids: &mut HashSet<String>,
) -> Result<(), String> {
    let Value::Object(choice) = choice else {
        return Err("rule 3: a choice is not an object".into());
    };
    let Some(index) = choice.get("index").and_then(Value::as_u64) else {
        return Err("rule 3: choice `index` is not an integer".into());
    };
    let Some(Value::Object(delta)) = choice.get("delta") else {
        return Err(format!("rule 3: choice {index} has no `delta` object"));
    };
    let finish = match choice.get("finish_reason") {
        None => return Err(format!("rule 3: choice {index} has no `finish_reason` key")),
        Some(Value::Null) => None,
        Some(Value::String(r)) if FINISH_REASONS.contains(&r.as_str()) => Some(r.clone()),
        Some(other) => {
            return Err(format!(
                "rule 3: choice {index} finish_reason {other} is not allowed"
            ));
        }
    };
    let state = states.entry(index).or_default();
    let s = &mut state.summary;
    if s.finish_reason.is_some() {
        return Err(format!("choice {index}: a delta after its finish_reason"));
    }
    let first = state.deltas == 0;
    state.deltas += 1;

    match delta.get("role") {
        None => {}
        Some(role) if first && role != "assistant" => {
            return Err(format!("rule 4: choice {index} role is {role}"));
        }
        Some(_) if first => {}
        Some(_) => {
            return Err(format!(
                "rule 4: choice {index} repeats `role` after its first delta"
            ));
        }
    }
    match delta.get("content") {
        None | Some(Value::Null) => {}
        Some(Value::String(c)) => {
            if !c.is_empty() && (!s.calls.is_empty() || s.function_call.is_some()) {
                return Err(format!(
                    "rule 12: choice {index} has content {c:?} after a tool call"
                ));
            }
            s.content.push_str(c);
        }
        Some(other) => return Err(format!("choice {index}: content {other} is not a string")),
    }
    match delta.get("gateway_tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(entries)) => {
            for entry in entries {
                check_gateway_call(entry, s, call_ids)
                    .map_err(|e| format!("choice {index}: {e}"))?;
            }
        }
        Some(other) => {
            return Err(format!(
                "rule 22: choice {index} gateway_tool_calls {other} is not an array"
            ));
        }
    }
    match delta.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(entries)) => {
            if entries.len() > 1 {
                return Err(format!(
                    "rule 11: choice {index} has several calls in one delta"
                ));
            }
            for entry in entries {
                check_call_delta(entry, s, call_ids).map_err(|e| format!("choice {index}: {e}"))?;
            }
        }
        Some(other) => {
            return Err(format!(
                "choice {index}: tool_calls {other} is not an array"
            ));
        }
    }
    match delta.get("function_call") {
        None | Some(Value::Null) => {}
        Some(Value::Object(f)) => {
            if !s.calls.is_empty() || delta.get("tool_calls").is_some_and(|t| !t.is_null()) {
                return Err(format!(
                    "choice {index}: both tool_calls and the legacy function_call"
                ));
            }
            let arguments = match f.get("arguments") {
                Some(Value::String(a)) => a.as_str(),
                _ => {
                    return Err(format!(
                        "choice {index}: function_call.arguments is not a string"
                    ));
                }
            };
            match (&mut s.function_call, f.get("name")) {
                (None, Some(Value::String(name))) if !name.is_empty() => {
                    if !arguments.is_empty() {
                        return Err(format!(
                            "choice {index}: the first function_call delta has arguments"
                        ));
                    }
                    s.function_call = Some(Call {
                        id: String::new(),
                        name: name.clone(),
                        arguments: String::new(),
                    });
                }
                (None, _) => {
                    return Err(format!(
                        "choice {index}: the first function_call delta has no name"
                    ));
                }
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "choice {index}: a later function_call delta repeats the name (or a second call)"
                    ));
                }
                (Some(call), None) => call.arguments.push_str(arguments),
            }
        }
        Some(other) => {
            return Err(format!(
                "choice {index}: function_call {other} is not an object"
            ));
        }
    }
    if let Some(reason) = finish {
        if s.function_call.is_some() != (reason == "function_call") {
            return Err(format!(
                "choice {index}: finish_reason {reason:?} does not match its function_call"
            ));
        }
        if let Some(call) = &s.function_call
            && serde_json::from_str::<Value>(&call.arguments).is_err()
        {
            return Err(format!(
                "choice {index}: function_call.arguments is not JSON: {:?}",
                call.arguments
            ));
        }
        if let Some(open) = s.gateway.iter().find(|g| g["status"] == "in_progress") {
            return Err(format!(
                "rule 21: choice {index} finished while gateway call {} was still in progress",
                open["id"]
            ));
        }
        if !s.calls.is_empty() && reason != "tool_calls" {
            return Err(format!(
                "rule 13: choice {index} has calls but finish_reason {reason:?}"
            ));
        }
        if s.calls.is_empty() && reason == "tool_calls" {
            return Err(format!(
                "rule 13: choice {index} has finish_reason \"tool_calls\" but no call"
            ));
        }
        s.finish_reason = Some(reason);
    }
    Ok(())
}

/// Rules 21-22: a gateway call is reported `in_progress` once (indexes 0,
/// 1, 2 …), then once `completed` (with `output`) or `failed` (with `error`);
/// its id is never a client call's.
fn check_gateway_call(
    entry: &Value,
    s: &mut ChoiceSummary,
    call_ids: &mut HashSet<String>,
) -> Result<(), String> {
    let Value::Object(g) = entry else {
        return Err("rule 22: a gateway_tool_calls entry is not an object".into());
    };
    let id = g
        .get("id")
        .and_then(Value::as_str)
        .filter(|i| !i.is_empty());
    let Some(id) = id else {
        return Err("rule 22: a gateway call has no id".into());
    };
    for key in ["name", "server", "arguments", "status"] {
        if !g.get(key).is_some_and(Value::is_string) {
            return Err(format!("rule 22: gateway call {id} has no string `{key}`"));
        }
    }
    let Some(index) = g.get("index").and_then(Value::as_u64) else {
        return Err(format!("rule 22: gateway call {id} has no integer index"));
    };
    let status = g["status"].as_str().unwrap_or_default();
    let known = s.gateway.iter().position(|k| k["id"] == id);
    match (known, status) {
        (None, "in_progress") => {
            if index != s.gateway.len() as u64 {
                return Err(format!(
                    "rule 22: gateway call {id} has index {index}, expected {}",
                    s.gateway.len()
                ));
            }
            if !call_ids.insert(id.to_owned()) {
                return Err(format!("rule 21: gateway call id {id} is used twice"));
            }
            s.gateway.push(entry.clone());
        }
        (Some(k), "completed" | "failed") => {
            if s.gateway[k]["status"] != "in_progress" {
                return Err(format!("rule 22: gateway call {id} ended twice"));
            }
            if s.gateway[k]["index"] != g["index"] {
                return Err(format!("rule 22: gateway call {id} changed its index"));
            }
            let needs = if status == "completed" {
                "output"
            } else {
                "error"
            };
            if !g.get(needs).is_some_and(Value::is_string) {
                return Err(format!(
                    "rule 22: {status} gateway call {id} has no `{needs}`"
                ));
            }
            s.gateway[k] = entry.clone();
        }
        (None, other) => {
            return Err(format!(
                "rule 22: gateway call {id} first reported as {other:?}, not in_progress"
            ));
        }
        (Some(_), other) => {
            return Err(format!(
                "rule 22: gateway call {id} reported {other:?} again"
            ));
        }
    }
    Ok(())
}

fn check_call_delta(
    entry: &Value,
    s: &mut ChoiceSummary,
    call_ids: &mut HashSet<String>,
) -> Result<(), String> {
    let Value::Object(entry) = entry else {
        return Err("rule 6: a tool_calls entry is not an object".into());
    };
    let Some(i) = entry.get("index").and_then(Value::as_u64) else {
        return Err("rule 6: a tool_calls entry has no integer `index`".into());
    };
    let Some(Value::Object(function)) = entry.get("function") else {
        return Err(format!("rule 6: call {i} has no `function` object"));
    };
    let i = i as usize;
    let n = s.calls.len();
    let arguments = match function.get("arguments") {
        None => None,
        Some(Value::String(a)) => Some(a.as_str()),
        Some(other) => return Err(format!("call {i}: arguments {other} is not a string")),
    };
    if i == n {
        // Rule 11: the previous call is complete before this one starts.
        if let Some(prev) = s.calls.last() {
            check_arguments(prev)?;
        }
        // Rule 7.
        let id = match entry.get("id") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            _ => {
                return Err(format!(
                    "rule 7: call {i} starts without a non-empty string id"
                ));
            }
        };
        if !call_ids.insert(id.clone()) {
            return Err(format!("rule 7: call id {id:?} is not unique"));
        }
        if entry.get("type") != Some(&Value::from("function")) {
            return Err(format!("rule 7: call {i} starts without type \"function\""));
        }
        let name = match function.get("name") {
            Some(Value::String(name)) if !name.is_empty() => name.clone(),
            _ => return Err(format!("rule 7: call {i} starts without its name")),
        };
        let Some(arguments) = arguments else {
            return Err(format!("rule 7: call {i} starts without `arguments`"));
        };
        s.calls.push(Call {
            id,
            name,
            arguments: arguments.to_owned(),
        });
        Ok(())
    } else if i + 1 == n {
        // Rule 8.
        if let Some(k) = entry.keys().find(|k| *k != "index" && *k != "function") {
            return Err(format!("rule 8: a later delta of call {i} carries `{k}`"));
        }
        if let Some(k) = function.keys().find(|k| *k != "arguments") {
            return Err(format!(
                "rule 8: a later delta of call {i} carries function.{k}"
            ));
        }
        s.calls[i].arguments.push_str(arguments.unwrap_or(""));
        Ok(())
    } else if i < n {
        Err(format!(
            "rule 11: call {i} continues after call {} started",
            n - 1
        ))
    } else {
        Err(format!("rule 5: call index {i} where {n} was next"))
    }
}

/// Rules 9 and 10: the fragments make exactly one JSON object.
fn check_arguments(call: &Call) -> Result<(), String> {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(Value::Object(_)) => Ok(()),
        _ => Err(format!(
            "rule 9/10: the arguments of call {} ({}) are not one JSON object: {:?}",
            call.id, call.name, call.arguments
        )),
    }
}

/// Rule 16, for a non-streaming `chat.completion`.
pub fn check_completion(v: &Value) -> Result<(), String> {
    if v.get("object") != Some(&Value::from("chat.completion")) {
        return Err("rule 16: `object` is not \"chat.completion\"".into());
    }
    if !v.get("id").is_some_and(Value::is_string) {
        return Err("`id` is not a string".into());
    }
    if !v.get("created").is_some_and(Value::is_u64) {
        return Err("rule 16: `created` is not integer seconds".into());
    }
    if !v.get("model").is_some_and(Value::is_string) {
        return Err("`model` is not a string".into());
    }
    let Some(choices) = v.get("choices").and_then(Value::as_array) else {
        return Err("`choices` is not an array".into());
    };
    let mut ids = HashSet::new();
    for choice in choices {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .ok_or("choice `index` is not an integer")?;
        let at = |m: &str| format!("choice {index}: {m}");
        let message = choice
            .get("message")
            .and_then(Value::as_object)
            .ok_or_else(|| at("no `message` object"))?;
        if message.get("role") != Some(&Value::from("assistant")) {
            return Err(at("rule 16: message role is not \"assistant\""));
        }
        let finish = choice.get("finish_reason");
        match finish {
            Some(Value::String(r)) if FINISH_REASONS.contains(&r.as_str()) => {}
            Some(Value::Null) => {}
            _ => return Err(at("finish_reason is missing or not allowed")),
        }
        let content = message.get("content");
        match message.get("function_call") {
            None | Some(Value::Null) => {
                if finish == Some(&Value::from("function_call")) {
                    return Err(at("finish_reason \"function_call\" without function_call"));
                }
            }
            Some(Value::Object(f)) => {
                if message.get("tool_calls").is_some_and(|t| !t.is_null()) {
                    return Err(at("both tool_calls and the legacy function_call"));
                }
                if finish != Some(&Value::from("function_call")) {
                    return Err(at(
                        "a function_call whose finish_reason is not \"function_call\"",
                    ));
                }
                if f.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(at("function_call has no name"));
                }
                let args = f.get("arguments").and_then(Value::as_str).unwrap_or("");
                if serde_json::from_str::<Value>(args).is_err() {
                    return Err(at("function_call.arguments is not a JSON string"));
                }
            }
            Some(_) => return Err(at("function_call is not an object")),
        }
        match message.get("tool_calls") {
            None | Some(Value::Null) => {
                if !matches!(content, Some(Value::String(_) | Value::Null)) {
                    return Err(at("content is neither a string nor null"));
                }
                if finish == Some(&Value::from("tool_calls")) {
                    return Err(at("finish_reason \"tool_calls\" without tool_calls"));
                }
            }
            Some(Value::Array(calls)) => {
                if calls.is_empty() {
                    return Err(at("`tool_calls` is an empty array"));
                }
                match content {
                    Some(Value::Null) => {}
                    Some(Value::String(c)) if !c.trim().is_empty() => {}
                    _ => {
                        return Err(at(
                            "rule 16: content must be null when only calls remain, else text",
                        ));
                    }
                }
                if finish != Some(&Value::from("tool_calls")) {
                    return Err(at("rule 16: finish_reason is not \"tool_calls\""));
                }
                for call in calls {
                    let id = call
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .ok_or_else(|| at("rule 16: a call has no string id"))?;
                    if !ids.insert(id.to_owned()) {
                        return Err(at(&format!("call id {id:?} repeated")));
                    }
                    if call.get("type") != Some(&Value::from("function")) {
                        return Err(at("rule 16: a call's type is not \"function\""));
                    }
                    if call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        return Err(at("rule 16: a call has no function.name"));
                    }
                    let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str)
                    else {
                        return Err(at("rule 16: function.arguments is not a string"));
                    };
                    if !matches!(serde_json::from_str::<Value>(args), Ok(Value::Object(_))) {
                        return Err(at(&format!("arguments {args:?} are not a JSON object")));
                    }
                }
            }
            Some(_) => return Err(at("`tool_calls` is not an array")),
        }
        if let Some(gateway) = message.get("gateway_tool_calls") {
            let Some(gateway) = gateway.as_array() else {
                return Err(at("rule 22: gateway_tool_calls is not an array"));
            };
            for (i, g) in gateway.iter().enumerate() {
                let status = g.get("status").and_then(Value::as_str);
                let needs = match status {
                    Some("completed") => "output",
                    Some("failed") => "error",
                    _ => return Err(at("rule 22: a gateway call is not completed or failed")),
                };
                if !g.get(needs).is_some_and(Value::is_string) {
                    return Err(at(&format!("rule 22: gateway call {i} has no `{needs}`")));
                }
                if g.get("index").and_then(Value::as_u64) != Some(i as u64) {
                    return Err(at(&format!("rule 22: gateway call {i} has another index")));
                }
                let id = g.get("id").and_then(Value::as_str).unwrap_or_default();
                if id.is_empty() || !ids.insert(id.to_owned()) {
                    return Err(at("rule 21: a gateway call id is missing or shared"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn head(choices: Value) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000u64,
               "model": "m", "choices": choices})
    }

    fn delta(d: Value) -> Value {
        head(json!([{"index": 0, "delta": d, "finish_reason": null}]))
    }

    fn finish(reason: &str) -> Value {
        head(json!([{"index": 0, "delta": {}, "finish_reason": reason}]))
    }

    fn body(chunks: &[Value]) -> Vec<u8> {
        let mut out = String::new();
        for c in chunks {
            out.push_str(&format!("data: {c}\n\n"));
        }
        out.push_str("data: [DONE]\n\n");
        out.into_bytes()
    }

    fn call_start(i: usize, id: &str, name: &str) -> Value {
        delta(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                      "function": {"name": name, "arguments": ""}}]}),
        )
    }

    fn call_args(i: usize, args: &str) -> Value {
        delta(json!({"tool_calls": [{"index": i, "function": {"arguments": args}}]}))
    }

    fn good() -> Vec<Value> {
        vec![
            delta(json!({"role": "assistant", "content": "Hi "})),
            delta(json!({"content": "there"})),
            call_start(0, "call_a", "A"),
            call_args(0, "{\"x\":"),
            call_args(0, "1}"),
            call_start(1, "call_b", "B"),
            call_args(1, "{}"),
            finish("tool_calls"),
        ]
    }

    fn rejects(chunks: &[Value], needle: &str) {
        let err = check_stream(&body(chunks), &Expect::default())
            .expect_err("the checker should reject this stream");
        assert!(err.contains(needle), "error {err:?} lacks {needle:?}");
    }

    #[test]
    fn accepts_a_good_stream_and_summarizes_it() {
        let s = check_stream(&body(&good()), &Expect::default()).unwrap();
        let c = s.choice();
        assert_eq!(c.content, "Hi there");
        assert_eq!(c.calls.len(), 2);
        assert_eq!(c.calls[0].name, "A");
        assert_eq!(c.calls[0].arguments, "{\"x\":1}");
        assert_eq!(c.calls[1].arguments, "{}");
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert!(!s.error_seen());
        // Comments are fine.
        let mut b = b": keep-alive\n\n".to_vec();
        b.extend(body(&good()));
        check_stream(&b, &Expect::default()).unwrap();
    }

    #[test]
    fn rejects_a_repeated_call_id() {
        let mut c = good();
        c[5] = call_start(1, "call_a", "B");
        rejects(&c, "not unique");
    }

    #[test]
    fn rejects_a_missing_tool_call_index() {
        let mut c = good();
        c[3] = delta(json!({"tool_calls": [{"function": {"arguments": "{\"x\":"}}]}));
        rejects(&c, "rule 6");
    }

    #[test]
    fn rejects_skipped_or_interleaved_indexes() {
        let mut c = good();
        c[5] = call_start(2, "call_b", "B");
        rejects(&c, "rule 5");
        let mut c = good();
        c.insert(6, call_args(0, " "));
        rejects(&c, "rule 11");
        // Call 0 incomplete when call 1 starts.
        let mut c = good();
        c[4] = call_args(0, "1");
        rejects(&c, "rule 9/10");
    }

    #[test]
    fn rejects_content_after_a_call() {
        let mut c = good();
        c.insert(7, delta(json!({"content": "late"})));
        rejects(&c, "rule 12");
    }

    #[test]
    fn rejects_role_twice() {
        let mut c = good();
        c[1] = delta(json!({"role": "assistant", "content": "there"}));
        rejects(&c, "rule 4");
    }

    #[test]
    fn rejects_a_missing_done() {
        let mut b = body(&good());
        b.truncate(b.len() - "data: [DONE]\n\n".len());
        assert!(check_stream(&b, &Expect::default()).is_err());
        let mut b = body(&good());
        b.extend_from_slice(b": late\n\n");
        assert!(check_stream(&b, &Expect::default()).is_err());
    }

    #[test]
    fn rejects_an_empty_finish_reason() {
        let mut c = good();
        c[7] = head(json!([{"index": 0, "delta": {}, "finish_reason": ""}]));
        rejects(&c, "rule 3");
    }

    #[test]
    fn rejects_id_or_type_repeated_in_a_later_delta() {
        let mut c = good();
        c[3] = delta(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": "{\"x\":"}}]}),
        );
        rejects(&c, "rule 8");
        let mut c = good();
        c[3] = delta(
            json!({"tool_calls": [{"index": 0, "type": "function", "function": {"arguments": "{\"x\":"}}]}),
        );
        rejects(&c, "rule 8");
        let mut c = good();
        c[3] = delta(
            json!({"tool_calls": [{"index": 0, "id": null, "function": {"arguments": "{\"x\":"}}]}),
        );
        rejects(&c, "rule 8");
        let mut c = good();
        c[3] = delta(
            json!({"tool_calls": [{"index": 0, "function": {"name": "A", "arguments": "{\"x\":"}}]}),
        );
        rejects(&c, "rule 8");
    }

    #[test]
    fn rejects_bad_framing() {
        for bad in [
            "event: message\ndata: {}\n\ndata: [DONE]\n\n",
            "id: 1\ndata: {}\n\ndata: [DONE]\n\n",
            "data: \n\ndata: [DONE]\n\n",
            "data: [DONE]\r\n\r\n",
            "data: [DONE]\n\ndata: [DONE]\n\n",
        ] {
            assert!(
                check_stream(bad.as_bytes(), &Expect::default()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rejects_other_chunk_and_call_faults() {
        // No finish reason at all.
        let c = &good()[..7];
        rejects(c, "rule 13");
        // "length" with a complete call.
        let mut c = good();
        c[7] = finish("length");
        rejects(&c, "rule 13");
        // A changing id.
        let mut c = good();
        c[1]["id"] = json!("chatcmpl-2");
        rejects(&c, "rule 2");
        // Float created.
        let mut c = good();
        c[0]["created"] = json!(1.5);
        rejects(&c, "rule 2");
        // Empty arguments for a no-argument call.
        let mut c = good();
        c[6] = call_args(1, "");
        rejects(&c, "rule 9/10");
        // Two calls in one delta.
        let mut c = good();
        c[2] = delta(json!({"tool_calls": [
            {"index": 0, "id": "x", "type": "function", "function": {"name": "A", "arguments": "{}"}},
            {"index": 1, "id": "y", "type": "function", "function": {"name": "B", "arguments": "{}"}}]}));
        rejects(&c, "rule 11");
        // A placeholder "{}" then the real arguments.
        let mut c = good();
        c[2] = delta(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                           "function": {"name": "A", "arguments": "{}"}}]}),
        );
        rejects(&c, "rule 9/10");
    }

    #[test]
    fn usage_and_errors_follow_the_options() {
        let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}});
        let mut c = good();
        c.push(usage.clone());
        assert!(check_stream(&body(&c), &Expect::default()).is_err());
        let s = check_stream(&body(&c), &Expect::usage()).unwrap();
        assert_eq!(s.usage.unwrap()["total_tokens"], 3);
        // Usage not last.
        let mut c = good();
        c.insert(7, usage);
        assert!(check_stream(&body(&c), &Expect::usage()).is_err());

        let error = json!({"error": {"message": "boom", "type": "upstream_error", "code": null}});
        let mut c = good()[..2].to_vec();
        c.push(error.clone());
        assert!(check_stream(&body(&c), &Expect::default()).is_err());
        let s = check_stream(&body(&c), &Expect::error()).unwrap();
        assert!(s.error_seen());
        // Something after the error event.
        c.push(finish("stop"));
        assert!(check_stream(&body(&c), &Expect::error()).is_err());
    }

    #[test]
    fn completion_checks() {
        let ok = json!({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "A", "arguments": "{}"}}]}}]});
        check_completion(&ok).unwrap();
        let mut bad = ok.clone();
        bad["choices"][0]["message"]["content"] = json!("  \n");
        assert!(check_completion(&bad).is_err());
        let mut bad = ok.clone();
        bad["choices"][0]["finish_reason"] = json!("stop");
        assert!(check_completion(&bad).is_err());
        let mut bad = ok.clone();
        bad["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = json!({});
        assert!(check_completion(&bad).is_err());
        let mut bad = ok;
        bad["created"] = json!("now");
        assert!(check_completion(&bad).is_err());
    }
}
