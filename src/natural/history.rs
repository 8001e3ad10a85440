//! Rewrites a conversation's tool history into text.
//!
//! An assistant message with `tool_calls` becomes its text followed by the
//! calls written in the configured syntax, exactly as the model is asked to
//! write them. In bracket syntax the client's content already ends with the
//! calls' `[description]`s (they were shown as text): each is written once,
//! as its call's own, so the model reads back what it wrote. The `tool` messages answering it become one message of
//! `<tool_response>` blocks in the order of the calls. Finally consecutive
//! messages of the same role are merged, because many chat templates of
//! models without tool support demand alternating roles.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value};

use crate::config::{ResultRole, SEARCH_TOOL};
use crate::natural::content::{Content, part_text, pretty};
use crate::natural::error::RequestError;
use crate::natural::syntax::Syntax;

/// Keys only native tool calling understands; an upstream in natural mode may
/// reject them, so they are dropped from every message.
const TOOL_KEYS: [&str; 3] = ["tool_calls", "function_call", "tool_call_id"];

/// Separates the `<tool_response>` blocks of one turn.
const RESULT_SEPARATOR: &str = "\n---\n";

/// Closes the user turn that hands the model its results when the model
/// answers next. Without it Qwen2.5-Coder-0.5B called the same tool again
/// after 8 of 8 results in bracket syntax; with it (and the instruction rule
/// about results, in `prompt::instructions`), 1 of 8. Asking to "answer my
/// question" made it refuse actions ("I can't assist with that") after an
/// email was sent or a table booked; this wording did not (14/16 loops used
/// the result across three syntaxes, against 9/16).
pub const ANSWER_NOW: &str = "Reply to me with what these results say.";

/// What ends the results of `search_tools` calls instead (`tool_search`):
/// the next step is a call of a tool it found, not an answer.
pub const CALL_FOUND: &str =
    "Now call the tool from these results that does what I asked, with the values I gave.";

/// How history is written.
#[derive(Debug, Clone, Copy)]
pub struct HistoryOptions {
    /// The syntax of the calls.
    pub syntax: Syntax,
    /// Results longer than this many characters are cut, with a marker.
    pub max_tool_result_chars: usize,
    /// The role of the message holding the results.
    pub result_role: ResultRole,
}

/// Whether `messages` holds anything natural mode must rewrite: calls, results
/// or the keys that belong to them.
pub fn has_tool_history(messages: Option<&Value>) -> bool {
    let Some(Value::Array(messages)) = messages else {
        return false;
    };
    messages.iter().any(|message| {
        let role = message.get("role").and_then(Value::as_str);
        matches!(role, Some("tool" | "function"))
            || TOOL_KEYS.iter().any(|key| message.get(*key).is_some())
    })
}

/// Rewrites `messages` in place. Only a message that is not an object is an
/// error; every odd shape of calls and results is rendered as well as it can.
pub fn rewrite(messages: &mut Vec<Value>, options: &HistoryOptions) -> Result<(), RequestError> {
    if let Some(i) = messages.iter().position(|message| !message.is_object()) {
        return Err(RequestError::wrong_type(
            format!("messages[{i}]"),
            "an object",
        ));
    }
    let names = call_names(messages);
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    // The calls of the message just before, which the next results answer.
    let mut open_calls: Vec<Call> = Vec::new();
    let mut pending = std::mem::take(messages).into_iter().peekable();
    // Every message is an object (checked above), so these patterns see all.
    while let Some(Value::Object(message)) = pending.next() {
        if is_result(&message) {
            let mut run = vec![message];
            while let Some(Value::Object(next)) = pending.peek() {
                if !is_result(next) {
                    break;
                }
                if let Some(Value::Object(next)) = pending.next() {
                    run.push(next);
                }
            }
            let searched =
                !open_calls.is_empty() && open_calls.iter().all(|c| c.name == SEARCH_TOOL);
            out.push(results_message(&open_calls, run, &names, options));
            open_calls.clear();
            if pending.peek().is_none() && options.result_role == ResultRole::User {
                // The model's turn comes next: it is to answer with them (or,
                // after a search, to call what it found).
                let next = if searched { CALL_FOUND } else { ANSWER_NOW };
                if let Some(Value::Object(last)) = out.last_mut() {
                    let content = Content::from_owned(last.shift_remove("content"));
                    let content = content.append(Content::Text(next.to_owned()));
                    last.insert("content".to_string(), content.into_value());
                }
            }
            continue;
        }
        let (message, calls) = rewrite_message(message, options.syntax);
        open_calls = calls;
        out.push(Value::Object(message));
    }
    *messages = merge_consecutive(out);
    Ok(())
}

/// A call from history, as far as results need it.
#[derive(Debug)]
struct Call {
    id: Option<String>,
    name: String,
}

/// A result from history before rendering.
struct ToolResult {
    id: Option<String>,
    name: Option<String>,
    content: Option<Value>,
}

fn is_result(message: &Map<String, Value>) -> bool {
    matches!(
        message.get("role").and_then(Value::as_str),
        Some("tool" | "function")
    )
}

/// Every call id in the conversation with its tool name, so results that do
/// not directly follow their call still get the right name.
fn call_names(messages: &[Value]) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for message in messages {
        let Some(Value::Array(calls)) = message.get("tool_calls") else {
            continue;
        };
        for call in calls {
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                names.insert(id.to_string(), call_name(call).to_string());
            }
        }
    }
    names
}

/// The name of a `tool_calls` entry (`function` or `custom` tools).
fn call_name(call: &Value) -> &str {
    ["function", "custom"]
        .iter()
        .find_map(|kind| call.get(*kind)?.get("name")?.as_str())
        .unwrap_or("unknown")
}

/// Drops the tool keys and, for an assistant message with calls, writes the
/// calls after its text. Returns the calls for the results that follow.
fn rewrite_message(
    mut message: Map<String, Value>,
    syntax: Syntax,
) -> (Map<String, Value>, Vec<Call>) {
    let tool_calls = message.shift_remove("tool_calls");
    let function_call = message.shift_remove("function_call");
    let had_tool_keys = tool_calls.is_some() || function_call.is_some();
    message.shift_remove("tool_call_id");
    if message.get("role").and_then(Value::as_str) != Some("assistant") || !had_tool_keys {
        return (message, Vec::new());
    }
    let mut calls = Vec::new();
    let mut text = String::new();
    let entries = match &tool_calls {
        Some(Value::Array(entries)) => entries.as_slice(),
        _ => &[],
    };
    let mut content = Content::from_value(message.get("content"));
    let described = match (&mut content, syntax) {
        (Content::Text(prose), Syntax::Bracket) => take_descriptions(prose, entries.len()),
        _ => Vec::new(),
    };
    // The descriptions belong to the last calls (all of them, as a rule).
    let plain = entries.len() - described.len();
    for (i, entry) in entries.iter().enumerate() {
        let name = call_name(entry);
        let body = entry.get("function").or_else(|| entry.get("custom"));
        let arguments = body.and_then(|body| body.get("arguments").or_else(|| body.get("input")));
        let description = i.checked_sub(plain).and_then(|d| described.get(d));
        push_call(syntax, description, name, arguments, &mut text);
        let id = entry.get("id").and_then(Value::as_str).map(str::to_string);
        calls.push(Call {
            id,
            name: name.to_string(),
        });
    }
    if let Some(call @ Value::Object(_)) = &function_call {
        let name = call
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        push_call(syntax, None, name, call.get("arguments"), &mut text);
        calls.push(Call {
            id: None,
            name: name.to_string(),
        });
    }
    if syntax == Syntax::Python && !text.is_empty() {
        // One list holds the message's calls, as the model writes them.
        text = format!("[{text}]");
    }
    let content = content.append(Content::Text(text));
    message.insert("content".to_string(), content.into_value());
    (message, calls)
}

/// Writes one call, separated from what came before by a blank line (in
/// python, by a comma: the message's calls are one list).
/// `arguments` is normally a JSON string; `""` and absent mean `{}`, and a
/// string that is not JSON is written as it is. A bracket call with a
/// `description` of its own is written with it.
fn push_call(
    syntax: Syntax,
    description: Option<&String>,
    name: &str,
    arguments: Option<&Value>,
    out: &mut String,
) {
    if !out.is_empty() {
        out.push_str(if syntax == Syntax::Python {
            ", "
        } else {
            "\n\n"
        });
    }
    let parsed = match arguments {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(Value::String(raw)) if raw.trim().is_empty() => Ok(Value::Object(Map::new())),
        Some(Value::String(raw)) => serde_json::from_str::<Value>(raw).map_err(|_| raw.as_str()),
        // Some clients send the arguments as an object.
        Some(other) => Ok(other.clone()),
    };
    match (description, parsed) {
        // The list around the message's calls is written by the caller.
        (_, Ok(value)) if syntax == Syntax::Python => {
            crate::natural::syntax::python::write_call(name, &value, out);
        }
        (_, Err(raw)) if syntax == Syntax::Python => {
            out.push_str(name);
            out.push('(');
            out.push_str(raw);
            out.push(')');
        }
        (Some(description), Ok(value)) => {
            Syntax::render_bracket_call(description, name, &value.to_string(), out);
        }
        (Some(description), Err(raw)) => Syntax::render_bracket_call(description, name, raw, out),
        (None, Ok(value)) => syntax.render_call(name, &value, out),
        (None, Err(raw)) => syntax.render_call_text(name, raw, out),
    }
}

/// Longest `[description]` taken back from a bracket call's content.
const MAX_DESCRIPTION: usize = 202;

/// Takes up to `n` `[description]`s off the end of `text` (each alone on
/// the rest of its line, whitespace between them), with the whitespace
/// before them; returns them in order.
fn take_descriptions(text: &mut String, n: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut end = text.trim_end().len();
    while found.len() < n {
        let before = &text[..end];
        if !before.ends_with(']') {
            break;
        }
        let line = before.rfind('\n').map_or(0, |i| i + 1);
        let Some(open) = before[line..].rfind('[').map(|i| line + i) else {
            break;
        };
        if end - open > MAX_DESCRIPTION {
            break;
        }
        found.push(before[open..].to_owned());
        end = text[..open].trim_end().len();
    }
    if !found.is_empty() {
        text.truncate(end);
    }
    found.reverse();
    found
}

/// One message holding every result of `run`, in the order of `calls`;
/// results that match no call follow in their own order. A call without a
/// result gets no block: nothing is invented about a result that never came.
fn results_message(
    calls: &[Call],
    run: Vec<Map<String, Value>>,
    names: &HashMap<String, String>,
    options: &HistoryOptions,
) -> Value {
    let mut results: Vec<Option<ToolResult>> = run
        .into_iter()
        .map(|mut message| {
            Some(ToolResult {
                id: message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                name: message
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                content: message.shift_remove("content"),
            })
        })
        .collect();
    // Each call takes the earliest result that answers it: one with its id,
    // or one without an id that names its tool. Results are indexed by id
    // and by name (queues in order), so matching is linear, not calls x results.
    let mut by_id: HashMap<&str, VecDeque<usize>> = HashMap::new();
    let mut by_name: HashMap<&str, VecDeque<usize>> = HashMap::new();
    for (i, result) in results.iter().enumerate() {
        let Some(result) = result else { continue };
        match (&result.id, &result.name) {
            (Some(id), _) => by_id.entry(id.as_str()).or_default().push_back(i),
            (None, Some(name)) => by_name.entry(name.as_str()).or_default().push_back(i),
            (None, None) => {}
        }
    }
    let mut matches: Vec<(usize, usize)> = Vec::with_capacity(calls.len());
    for (c, call) in calls.iter().enumerate() {
        let with_id = call
            .id
            .as_deref()
            .and_then(|id| by_id.get(id))
            .and_then(|queue| queue.front().copied());
        let with_name = by_name
            .get(call.name.as_str())
            .and_then(|queue| queue.front().copied());
        let pick = match (with_id, with_name) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(i) = pick {
            let queue = if Some(i) == with_id {
                call.id.as_deref().and_then(|id| by_id.get_mut(id))
            } else {
                by_name.get_mut(call.name.as_str())
            };
            if let Some(queue) = queue {
                queue.pop_front();
            }
            matches.push((c, i));
        }
    }
    drop((by_id, by_name));
    let mut ordered: Vec<(String, ToolResult)> = Vec::with_capacity(results.len());
    for (c, i) in matches {
        if let Some(result) = results[i].take() {
            ordered.push((calls[c].name.clone(), result));
        }
    }
    for result in results.into_iter().flatten() {
        let name = result
            .id
            .as_ref()
            .and_then(|id| names.get(id).cloned())
            .or_else(|| result.name.clone())
            .or_else(|| result.id.clone())
            .unwrap_or_else(|| "unknown".to_string());
        ordered.push((name, result));
    }

    let mut text = String::new();
    let mut extra_parts = Vec::new();
    for (i, (name, result)) in ordered.iter().enumerate() {
        if i > 0 {
            text.push_str(RESULT_SEPARATOR);
        }
        let (body, parts) = result_text(result.content.as_ref());
        let body = truncate(body, options.max_tool_result_chars);
        Syntax::render_tool_response(name, &body, &mut text);
        extra_parts.extend(parts);
    }
    let content = if extra_parts.is_empty() {
        Content::Text(text)
    } else {
        Content::Text(text).append(Content::Parts(extra_parts))
    };
    let role = match options.result_role {
        ResultRole::User => "user",
        ResultRole::Assistant => "assistant",
    };
    let mut message = Map::new();
    message.insert("role".to_string(), Value::from(role));
    message.insert("content".to_string(), content.into_value());
    Value::Object(message)
}

/// The text of a result and its non-text parts. JSON objects and arrays are
/// pretty-printed; anything else is shown as it is.
fn result_text(content: Option<&Value>) -> (String, Vec<Value>) {
    match Content::from_value(content) {
        Content::Text(text) => (prettify(text), Vec::new()),
        Content::Parts(parts) => {
            let mut texts = Vec::new();
            let mut others = Vec::new();
            for part in parts {
                match part_text(&part) {
                    Some(text) => texts.push(text.to_string()),
                    None => others.push(part),
                }
            }
            (prettify(texts.join("\n")), others)
        }
    }
}

/// Pretty-prints text that is a JSON object or array; leaves the rest alone.
fn prettify(text: String) -> String {
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return text;
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(value @ (Value::Object(_) | Value::Array(_))) => pretty(&value),
        _ => text,
    }
}

/// Cuts `text` to `max` characters (at a char boundary) and says how much
/// was cut, so the model knows the result is incomplete.
fn truncate(text: String, max: usize) -> String {
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let removed = text[cut..].chars().count();
    let mut kept = text[..cut].to_string();
    kept.push_str(&format!("\n[... truncated {removed} characters]"));
    kept
}

/// Merges runs of messages with the same role into one. Messages whose
/// `name`s differ stay apart: they are different speakers.
fn merge_consecutive(messages: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    for message in messages {
        if let (Some(Value::Object(last)), Value::Object(next)) = (out.last_mut(), &message)
            && same_speaker(last, next)
        {
            if let Value::Object(next) = message {
                merge_into(last, next);
            }
            continue;
        }
        out.push(message);
    }
    out
}

fn same_speaker(left: &Map<String, Value>, right: &Map<String, Value>) -> bool {
    let role = |m: &Map<String, Value>| m.get("role").and_then(Value::as_str).map(str::to_string);
    let name = |m: &Map<String, Value>| m.get("name").and_then(Value::as_str).map(str::to_string);
    role(left).is_some()
        && role(left) == role(right)
        && match (name(left), name(right)) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
}

/// Appends `next`'s content to `last`; keys only `next` has are kept too.
///
/// The accumulated content is moved out and back, never copied: a run of
/// many messages is merged in time linear in its total size.
fn merge_into(last: &mut Map<String, Value>, mut next: Map<String, Value>) {
    let left = Content::from_owned(last.get_mut("content").map(Value::take));
    let right = Content::from_owned(next.shift_remove("content"));
    last.insert("content".to_string(), left.append(right).into_value());
    for (key, value) in next {
        last.entry(key).or_insert(value);
    }
}
