//! The upstream direction of to_natural mode: a client's natural-text
//! history parsed back into native messages for a model with native tools.
//!
//! Assistant messages holding call blocks (in the configured syntax) become
//! assistant messages with `tool_calls`; `<tool_response name="...">` blocks,
//! in user messages or in the consolidated form where text, calls,
//! responses and more text share one assistant message, become `tool`
//! messages. Each response is paired with the earliest unanswered call of the
//! same name through a synthesized id. Text that looks like a call but names
//! no declared tool, and responses that answer no call, stay text.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value, json};

use crate::natural::error::RequestError;
use crate::natural::parser::{Event, Parser, ParserOptions};
use crate::natural::syntax::Syntax;
use crate::natural::tools::ToolSet;
use crate::to_natural::declared;

pub struct HistoryOptions {
    pub syntax: Syntax,
    pub max_tool_result_chars: usize,
}

/// The rewritten body, or `None` when nothing in the history is natural text
/// (the original bytes are then forwarded unchanged).
pub fn rewrite(body: &[u8], options: &HistoryOptions) -> Result<Option<Vec<u8>>, RequestError> {
    if let Some(fields) = Quick::read(body)
        && !fields.may_hold_blocks
    {
        // Only the declarations are left to check: they are forwarded.
        declared::check(fields.tools, fields.functions)?;
        return Ok(None);
    }
    let mut request: Value =
        serde_json::from_slice(body).map_err(|e| RequestError::InvalidJson {
            message: e.to_string(),
        })?;
    let Some(object) = request.as_object_mut() else {
        return Err(RequestError::NotAnObject);
    };
    let tools = ToolSet::from_request(object.get("tools"), object.get("functions"))?;
    if tools.is_empty() {
        return Ok(None);
    }
    let Some(Value::Array(messages)) = object.get_mut("messages") else {
        return Ok(None);
    };
    let mut rewriter = Rewriter {
        tools: &tools,
        options,
        pending: HashMap::new(),
        next_id: 0,
        changed: false,
    };
    let mut out = Vec::with_capacity(messages.len());
    for message in messages.drain(..) {
        rewriter.message(message, &mut out);
    }
    *messages = out;
    if !rewriter.changed {
        return Ok(None);
    }
    Ok(Some(serde_json::to_vec(&request).unwrap_or_default()))
}

/// What a request's raw text says without parsing it into a tree: whether
/// its `messages` can hold a call block or a tool response at all, and its
/// tool declarations. Most first turns hold neither, and then the body is
/// forwarded as it came.
struct Quick<'a> {
    may_hold_blocks: bool,
    tools: Option<&'a str>,
    functions: Option<&'a str>,
}

impl<'a> Quick<'a> {
    /// `None` when the fast reader declines the body (the full path decides).
    fn read(body: &'a [u8]) -> Option<Self> {
        let mut r = crate::json::Reader::new(body)?;
        let (mut messages, mut tools, mut functions) = (None, None, None);
        // A repeated key: the last one counts, as in the parsed object.
        r.object(|r, key| {
            let value = r.skip()?;
            match key {
                "messages" => messages = Some(value),
                "tools" => tools = Some(value),
                "functions" => functions = Some(value),
                _ => {}
            }
            Some(())
        })?;
        r.end()?;
        Some(Quick {
            may_hold_blocks: messages.is_some_and(may_hold_blocks),
            tools: tools.filter(|t| *t != "null"),
            functions: functions.filter(|f| *f != "null"),
        })
    }
}

/// Every block this module turns back into messages opens with `<` (tag and
/// tool_call calls, `<tool_response`) or `[Calling` (bracket calls), written
/// as such or escaped in the JSON text. JSON's own `[` is never followed by
/// a letter, so `[Calling` cannot be structure.
fn may_hold_blocks(messages: &str) -> bool {
    let text = messages.as_bytes();
    memchr::memchr(b'<', text).is_some()
        || [
            "\\u003c",
            "\\u003C",
            "[Calling",
            "\\u005bCalling",
            "\\u005BCalling",
        ]
        .iter()
        .any(|needle| memchr::memmem::find(text, needle.as_bytes()).is_some())
}

enum Piece {
    Text(String),
    Call {
        name: String,
        arguments: Map<String, Value>,
    },
    Response {
        name: String,
        body: String,
        raw: String,
    },
}

struct Rewriter<'a> {
    tools: &'a ToolSet,
    options: &'a HistoryOptions,
    /// Calls waiting for their response: their ids by name, oldest first.
    pending: HashMap<String, VecDeque<String>>,
    next_id: u32,
    changed: bool,
}

impl Rewriter<'_> {
    fn message(&mut self, message: Value, out: &mut Vec<Value>) {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let Some(text) = text_content(&message) else {
            out.push(message);
            return;
        };
        let native_calls = message.get("tool_calls").is_some_and(|c| !c.is_null());
        match role.as_str() {
            "assistant" if !native_calls => self.assistant(message, &text, out),
            "user" if text.contains("<tool_response") => self.user(message, &text, out),
            _ => out.push(message),
        }
    }

    fn pieces(&self, text: &str, parse_calls: bool) -> Vec<Piece> {
        let mut events = Vec::new();
        if parse_calls {
            let options = ParserOptions {
                syntax: self.options.syntax,
                skip_think: true,
                max_block_bytes: usize::MAX,
                rescue: false,
            };
            let mut parser = Parser::new(self.tools.names(), options);
            parser.feed(text, &mut events);
            parser.finish(&mut events);
        } else {
            events.push(Event::Text(text.to_owned()));
        }
        let mut pieces = Vec::new();
        for event in events {
            match event {
                Event::Text(t) => split_responses(&t, &mut pieces),
                Event::Call(c) => pieces.push(Piece::Call {
                    name: c.name,
                    arguments: c.arguments,
                }),
                Event::Invalid(b) => split_responses(&b.raw, &mut pieces),
            }
        }
        pieces
    }

    fn assistant(&mut self, original: Value, text: &str, out: &mut Vec<Value>) {
        let pieces = self.pieces(text, true);
        if !pieces.iter().any(|p| matches!(p, Piece::Call { .. })) && !self.any_answerable(&pieces)
        {
            out.push(original);
            return;
        }
        self.changed = true;
        let mut turn = Turn::default();
        for piece in pieces {
            match piece {
                // Text between calls joins the turn's content: a native
                // message has one content and its calls must stay together
                // until their responses.
                Piece::Text(t) => {
                    if turn.calls.is_empty() || !is_separator(&t) {
                        turn.text.push_str(&t);
                    }
                }
                Piece::Call { name, arguments } => {
                    let id = format!("call_tg{:04}", self.next_id);
                    self.next_id += 1;
                    self.pending
                        .entry(name.clone())
                        .or_default()
                        .push_back(id.clone());
                    turn.calls.push(json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": Value::Object(arguments).to_string()},
                    }));
                }
                Piece::Response { name, body, raw } => match self.take_pending(&name) {
                    Some(id) => {
                        turn.flush(&original, out);
                        out.push(self.tool_message(&id, &body));
                    }
                    None => turn.text.push_str(&raw),
                },
            }
        }
        turn.flush(&original, out);
    }

    fn user(&mut self, original: Value, text: &str, out: &mut Vec<Value>) {
        let pieces = self.pieces(text, false);
        if !self.any_answerable(&pieces) {
            out.push(original);
            return;
        }
        self.changed = true;
        let mut rest = String::new();
        for piece in pieces {
            match piece {
                Piece::Response { name, body, raw } => match self.take_pending(&name) {
                    Some(id) => out.push(self.tool_message(&id, &body)),
                    None => rest.push_str(&raw),
                },
                Piece::Text(t) if !is_separator(&t) => rest.push_str(&t),
                Piece::Text(_) | Piece::Call { .. } => {}
            }
        }
        if !rest.trim().is_empty() {
            let mut message = original;
            message["content"] = json!(rest.trim());
            out.push(message);
        }
    }

    fn any_answerable(&self, pieces: &[Piece]) -> bool {
        pieces.iter().any(|p| match p {
            Piece::Response { name, .. } => {
                self.pending.get(name).is_some_and(|ids| !ids.is_empty())
            }
            _ => false,
        }) || pieces.iter().any(|p| matches!(p, Piece::Call { .. }))
    }

    fn take_pending(&mut self, name: &str) -> Option<String> {
        // Per name, the earliest call first; a map, so a history of 20k
        // calls is matched in linear time.
        self.pending.get_mut(name)?.pop_front()
    }

    fn tool_message(&self, id: &str, body: &str) -> Value {
        let mut content: String = body
            .chars()
            .take(self.options.max_tool_result_chars)
            .collect();
        let total = body.chars().count();
        if total > self.options.max_tool_result_chars {
            content.push_str(&format!(
                "\n[... truncated {} characters]",
                total - self.options.max_tool_result_chars
            ));
        }
        json!({"role": "tool", "tool_call_id": id, "content": content})
    }
}

/// One native assistant turn being assembled.
#[derive(Default)]
struct Turn {
    text: String,
    calls: Vec<Value>,
}

impl Turn {
    fn flush(&mut self, original: &Value, out: &mut Vec<Value>) {
        let text = std::mem::take(&mut self.text);
        let calls = std::mem::take(&mut self.calls);
        let trimmed = text.trim();
        if trimmed.is_empty() && calls.is_empty() {
            return;
        }
        let mut message = Map::new();
        if let Some(Value::Object(o)) = Some(original) {
            for (k, v) in o {
                if k != "content" && k != "tool_calls" {
                    message.insert(k.clone(), v.clone());
                }
            }
        }
        message.insert("role".into(), json!("assistant"));
        let content = if trimmed.is_empty() {
            Value::Null
        } else {
            json!(trimmed)
        };
        message.insert("content".into(), content);
        if !calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        out.push(Value::Object(message));
    }
}

/// String content, or the text of a text-only part array.
fn text_content(message: &Value) -> Option<String> {
    match message.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    _ => return None,
                }
            }
            Some(text)
        }
        _ => None,
    }
}

/// Whitespace and `---` lines between blocks (the results' separator).
fn is_separator(text: &str) -> bool {
    text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l == "---"
    })
}

const OPEN: &str = "<tool_response name=\"";
const CLOSE: &str = "</tool_response>";

/// Splits `<tool_response name="...">...</tool_response>` blocks out of text.
fn split_responses(text: &str, pieces: &mut Vec<Piece>) {
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let Some(name_end) = after.find("\">") else {
            break;
        };
        let body_start = name_end + 2;
        let Some(close) = after[body_start..].find(CLOSE) else {
            break;
        };
        if start > 0 {
            push_text(pieces, &rest[..start]);
        }
        let name = after[..name_end].replace("&quot;", "\"");
        let body = &after[body_start..body_start + close];
        let body = body.strip_prefix('\n').unwrap_or(body);
        let body = body.strip_suffix('\n').unwrap_or(body);
        let end = start + OPEN.len() + body_start + close + CLOSE.len();
        pieces.push(Piece::Response {
            name,
            body: body.to_owned(),
            raw: rest[start..end].to_owned(),
        });
        rest = &rest[end..];
    }
    if !rest.is_empty() {
        push_text(pieces, rest);
    }
}

fn push_text(pieces: &mut Vec<Piece>, text: &str) {
    if let Some(Piece::Text(t)) = pieces.last_mut() {
        t.push_str(text);
    } else {
        pieces.push(Piece::Text(text.to_owned()));
    }
}
