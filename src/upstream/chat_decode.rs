//! Chat Completions answers (a stream's event payloads, or a whole
//! completion) decoded into [`Event`]s. Sans-IO.
//!
//! Native call fragments are joined per index, in whatever order they come
//! (an upstream may interleave two calls' arguments), and the calls are
//! handed out in index order when the choice finishes; a call that arrives
//! whole in one delta is handed out at once. A call without arguments gets
//! `{}`. A stream that ends before its answer finished (no finish reason and
//! no `[DONE]`) is a failure, never a finished answer. Only choice 0 is read
//! (callers refuse `n > 1`). Every buffer is bounded.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::error::GatewayError;
use crate::exchange::{Call, Event, Meta, Usage};
use crate::upstream::plain;
use crate::upstream::stencil::Stencil;

/// Most calls one answer may hold.
pub const MAX_CALLS: usize = 128;
/// Most bytes of one call's name plus arguments.
pub const MAX_CALL_BYTES: usize = 4 * 1024 * 1024;

/// Decodes one streamed answer.
#[derive(Debug, Default)]
pub struct ChatDecoder {
    started: bool,
    /// Calls being assembled, in the order their first fragment came.
    open: Vec<Partial>,
    /// Calls handed out so far.
    calls: usize,
    /// The indexes of calls handed out as soon as they arrived whole.
    whole: Vec<u64>,
    finished: bool,
    done: bool,
    /// The last text-only chunk, cut around its content: the next one that
    /// fits it is read without parsing.
    stencil: Stencil,
}

#[derive(Debug)]
struct Partial {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    created: Option<Value>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    system_fingerprint: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    /// A whole completion's message.
    #[serde(default, borrow)]
    message: Option<Delta<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
    #[serde(default, borrow)]
    function_call: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

impl ChatDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `[DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event's `data`.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<Event>) -> Result<(), GatewayError> {
        if self.done {
            return Ok(());
        }
        if data == b"[DONE]" {
            self.done = true;
            return self.finish(out);
        }
        if self.started && self.feed_plain(data, out) {
            return Ok(());
        }
        self.feed_general(data, out)
    }

    /// Any chunk, through serde.
    fn feed_general(&mut self, data: &[u8], out: &mut Vec<Event>) -> Result<(), GatewayError> {
        let chunk: Chunk<'_> =
            serde_json::from_slice(data).map_err(|_| GatewayError::UpstreamInvalid {
                message: "The upstream sent a stream event that is not a chat completion chunk"
                    .into(),
                code: "upstream_invalid_event",
            })?;
        if let Some(error) = chunk.error {
            return Err(upstream_error(&error));
        }
        self.start(&chunk, out);
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta.or(choice.message) {
                self.delta(delta, out)?;
            }
            if let Some(reason) = choice.finish_reason {
                if reason == "length" {
                    self.drop_truncated();
                }
                self.flush_calls(out);
                if !self.finished {
                    self.finished = true;
                    out.push(Event::Finish(reason));
                }
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(Event::Usage(usage));
        }
        Ok(())
    }

    /// The fast path: a chunk of the common shape ([`plain::read`], no JSON
    /// tree) that carries only text. Anything else (the first chunk, a
    /// finish, usage, calls, reasoning, a refusal, an `error` key, another
    /// choice) returns `false` and takes the general path, which decodes it
    /// the same way (a test holds both to the same events).
    fn feed_plain(&mut self, data: &[u8], out: &mut Vec<Event>) -> bool {
        if let Some(fit) = self.stencil.fit(data) {
            // A string the reader accepted decodes; should it not, the
            // general path decides.
            let Some(text) = fit.text.decode() else {
                return false;
            };
            if !text.is_empty() {
                out.push(Event::Text(text.into_owned()));
            }
            return true;
        }
        let Some(read) = plain::read(data) else {
            return false;
        };
        let [choice] = &read.chunk.choices;
        let text_only = !read.error_key
            && read.chunk.usage.is_none()
            && choice.index == 0
            && choice.finish_reason.is_none()
            && choice.delta.is_plain()
            && choice.delta.tool_calls.is_none();
        if !text_only {
            return false;
        }
        if let Some(text) = &choice.delta.content
            && !text.is_empty()
        {
            out.push(Event::Text(text.clone().into_owned()));
        }
        if let Some(hole) = read.holes.content.clone() {
            self.stencil.learn(data, hole, read.choices_span());
        }
        true
    }

    /// The body ended. After `[DONE]` (or a finish reason) the calls still
    /// open are handed out, and an answer without a finish reason finishes
    /// as `stop`; a body that ended before either is a cut stream: an error,
    /// never a finished answer.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<(), GatewayError> {
        if !self.started {
            return Err(GatewayError::UpstreamInvalid {
                message: "The upstream's stream ended before any answer".into(),
                code: "upstream_empty_stream",
            });
        }
        if !self.finished && !self.done {
            return Err(cut());
        }
        self.flush_calls(out);
        if !self.finished {
            self.finished = true;
            out.push(Event::Finish("stop".into()));
        }
        Ok(())
    }

    fn start(&mut self, chunk: &Chunk<'_>, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(Event::Start(Meta {
            id: chunk.id.as_deref().map(str::to_owned),
            created: chunk.created.as_ref().and_then(Value::as_u64),
            model: chunk.model.as_deref().map(str::to_owned),
            system_fingerprint: chunk.system_fingerprint.as_deref().map(str::to_owned),
        }));
    }

    fn delta(&mut self, delta: Delta<'_>, out: &mut Vec<Event>) -> Result<(), GatewayError> {
        if let Some(r) = delta
            .reasoning_content
            .or(delta.reasoning)
            .filter(|r| !r.is_empty())
        {
            out.push(Event::Reasoning(r.into_owned()));
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            out.push(Event::Text(text.into_owned()));
        }
        // A refusal is the model's own words: shown, never dropped.
        if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
            out.push(Event::Text(text.into_owned()));
        }
        for call in delta.tool_calls.into_iter().flatten() {
            let index = call.index.unwrap_or(0);
            self.fragment(index, call.id, call.function, out)?;
        }
        if let Some(function) = delta.function_call {
            self.fragment(0, None, Some(function), out)?;
        }
        Ok(())
    }

    fn fragment(
        &mut self,
        index: u64,
        id: Option<String>,
        function: Option<FunctionDelta<'_>>,
        out: &mut Vec<Event>,
    ) -> Result<(), GatewayError> {
        if self.whole.contains(&index) {
            let empty = function.as_ref().is_none_or(|f| {
                f.name.as_deref().is_none_or(str::is_empty)
                    && f.arguments.as_deref().is_none_or(str::is_empty)
            });
            if empty {
                // Some upstreams close a call with an empty delta.
                return Ok(());
            }
            return Err(GatewayError::UpstreamInvalid {
                message: format!("The upstream continued tool call {index} after sending it whole"),
                code: "upstream_invalid_event",
            });
        }
        let (at, first) = match self.open.iter().position(|c| c.index == index) {
            Some(at) => (at, false),
            None => {
                if self.calls + self.open.len() >= MAX_CALLS {
                    return Err(too_large(format!("more than {MAX_CALLS} tool calls")));
                }
                self.open.push(Partial {
                    index,
                    id: None,
                    name: String::new(),
                    arguments: String::new(),
                });
                (self.open.len() - 1, true)
            }
        };
        let call = &mut self.open[at];
        if call.id.is_none() {
            call.id = id.filter(|id| !id.is_empty());
        }
        if let Some(f) = function {
            if let Some(name) = f.name {
                call.name.push_str(&name);
            }
            if let Some(arguments) = f.arguments {
                call.arguments.push_str(&arguments);
            }
        }
        let bytes: usize = self
            .open
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum();
        if bytes > MAX_CALL_BYTES {
            return Err(too_large(format!(
                "tool calls larger than {MAX_CALL_BYTES} bytes"
            )));
        }
        // A call that arrives whole in one delta (natural mode writes them so)
        // is handed out at once: a gateway tool can start while the model
        // goes on writing.
        // ... unless a call of a lower index is still open: calls go out in
        // index order.
        let call = &self.open[at];
        let whole = first
            && !self.open.iter().any(|c| c.index < index)
            && call.id.is_some()
            && !call.name.is_empty()
            && serde_json::from_str::<serde::de::IgnoredAny>(&call.arguments).is_ok()
            && call.arguments.trim_start().starts_with('{');
        if whole {
            let call = self.open.remove(at);
            self.whole.push(index);
            self.hand_out(call, out);
        }
        Ok(())
    }

    /// The answer ran out of tokens: a call whose arguments are not whole
    /// JSON was cut, and is no call a client could run (the answer's
    /// `length` says it was cut).
    fn drop_truncated(&mut self) {
        self.open.retain(|c| {
            let whole = c.arguments.trim().is_empty()
                || serde_json::from_str::<serde::de::IgnoredAny>(&c.arguments).is_ok();
            if !whole {
                tracing::warn!(
                    tool = %c.name,
                    arguments_bytes = c.arguments.len(),
                    "a call cut by finish_reason length is not handed out"
                );
            }
            whole
        });
    }

    /// Hands out every open call, in index order.
    fn flush_calls(&mut self, out: &mut Vec<Event>) {
        let mut open = std::mem::take(&mut self.open);
        open.sort_by_key(|c| c.index);
        for call in open {
            self.hand_out(call, out);
        }
    }

    fn hand_out(&mut self, call: Partial, out: &mut Vec<Event>) {
        self.calls += 1;
        // A call with no arguments has an empty object of them: clients
        // parse the string as JSON.
        let arguments = if call.arguments.trim().is_empty() {
            "{}".to_owned()
        } else {
            call.arguments
        };
        out.push(Event::Call(Call {
            id: call.id.unwrap_or_else(crate::exchange::call_id),
            name: call.name,
            arguments,
        }));
    }
}

/// The error of a stream that ended before its answer finished.
pub fn cut() -> GatewayError {
    GatewayError::UpstreamInvalid {
        message: "The upstream's stream ended before its answer finished".into(),
        code: "upstream_stream_cut",
    }
}

/// Decodes a whole completion.
pub fn completion(body: &[u8]) -> Result<Vec<Event>, GatewayError> {
    let mut decoder = ChatDecoder::new();
    let mut out = Vec::new();
    decoder.feed(body, &mut out)?;
    // A whole body is complete: a missing finish reason reads as `stop`.
    decoder.done = true;
    decoder.finish(&mut out)?;
    Ok(out)
}

fn too_large(what: String) -> GatewayError {
    GatewayError::UpstreamInvalid {
        message: format!("The upstream's answer holds {what}"),
        code: "upstream_too_large",
    }
}

/// An in-stream error, as a gateway error the client sees. A round of a
/// natural-mode provider is read through toolgate's own rewriter, whose
/// errors (an invalid call with `on_invalid = "error"`, a stream cut or
/// too large) keep their code and message: the client and the log then say
/// what happened, not "the upstream failed". Anything else is the
/// upstream's own.
fn upstream_error(error: &Value) -> GatewayError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the upstream reported an error");
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    const OWN: &[&str] = &[
        "upstream_stream_cut",
        "upstream_stream_too_large",
        "upstream_stream_truncated",
        "upstream_stream_error",
        "upstream_invalid_event",
        "upstream_invalid_body",
        "upstream_empty_stream",
    ];
    if code == "invalid_tool_call" {
        return GatewayError::InvalidToolCall {
            message: message.to_owned(),
            raw: error.get("raw").and_then(Value::as_str).map(str::to_owned),
            text: None,
        };
    }
    if let Some(own) = OWN.iter().find(|c| **c == code) {
        return GatewayError::UpstreamInvalid {
            message: message.to_owned(),
            code: own,
        };
    }
    GatewayError::UpstreamInvalid {
        message: format!("The upstream failed: {message}"),
        code: "upstream_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::answers::cut;
    use proptest::prelude::*;
    use serde_json::json;

    /// The fast path gives the events the general path gives, on every
    /// chunk it takes, and declines the rest.
    #[test]
    fn the_fast_path_agrees_with_the_general_path() {
        let first = r#"{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        let chunks = [
            (
                r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hello"}}]}"#,
                true,
            ),
            (
                r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a \"quoted\" \u00e9\n"},"logprobs":null}]}"#,
                true,
            ),
            (
                r#"{"id":"c","choices":[{"index":0,"delta":{"content":""}}]}"#,
                true,
            ),
            (
                r#"{"id":"c","choices":[{"index":0,"delta":{}}],"obfuscation":"x"}"#,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":null}}]}"#,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning":"hm"}}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":1,"delta":{"content":"other"}}]}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{}"}}]}}]}"#,
                false,
            ),
            (
                r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"x"}}],"error":null}"#,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"x"}}],"error":{"message":"boom"}}"#,
                false,
            ),
            (r#"{"choices":[{"index":0,"delta":{"content":5}}]}"#, false),
        ];
        for (chunk, fast) in chunks {
            let mut a = ChatDecoder::new();
            let mut b = ChatDecoder::new();
            let (mut fast_out, mut general_out) = (Vec::new(), Vec::new());
            a.feed(first.as_bytes(), &mut fast_out).unwrap();
            b.feed(first.as_bytes(), &mut general_out).unwrap();
            assert_eq!(
                a.feed_plain(chunk.as_bytes(), &mut fast_out),
                fast,
                "{chunk}"
            );
            if !fast {
                continue;
            }
            b.feed_general(chunk.as_bytes(), &mut general_out).unwrap();
            assert_eq!(fast_out, general_out, "{chunk}");
        }
        // A whole stream: text chunks that fit the stencil of the one
        // before, one that does not (another id), escapes, a finish, usage.
        let stream = [
            first,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"One"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":" two \"2\""}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":""}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"\u00e9\n"}}]}"#,
            r#"{"id":"d","choices":[{"index":0,"delta":{"content":" three"}}]}"#,
            r#"{"id":"d","choices":[{"index":0,"delta":{"content":5}}]}"#,
            r#"{"id":"d","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
            r#"{"id":"d","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
        ];
        let (mut a, mut b) = (ChatDecoder::new(), ChatDecoder::new());
        let (mut fast_out, mut general_out) = (Vec::new(), Vec::new());
        for chunk in stream {
            let fast = a.feed(chunk.as_bytes(), &mut fast_out);
            let general = b.feed_general(chunk.as_bytes(), &mut general_out);
            assert_eq!(fast.is_ok(), general.is_ok(), "{chunk}");
        }
        assert_eq!(fast_out, general_out);
        assert!(fast_out.len() > 6, "{fast_out:?}");
        // Before the first chunk the general path reads the header.
        let mut d = ChatDecoder::new();
        let mut out = Vec::new();
        d.feed(chunks[0].0.as_bytes(), &mut out).unwrap();
        assert!(matches!(out[0], Event::Start(_)), "{out:?}");
    }

    fn decode(events: &[&str]) -> Result<Vec<Event>, GatewayError> {
        let mut d = ChatDecoder::new();
        let mut out = Vec::new();
        for e in events {
            d.feed(e.as_bytes(), &mut out)?;
        }
        d.finish(&mut out)?;
        Ok(out)
    }

    fn calls(events: &[Event]) -> Vec<(String, String)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Call(c) => Some((c.name.clone(), c.arguments.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn text_calls_finish_usage() {
        let events = decode(&[
            r#"{"id":"c","created":5,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            events[0],
            Event::Start(Meta {
                id: Some("c".into()),
                created: Some(5),
                model: Some("m".into()),
                system_fingerprint: None
            })
        );
        assert_eq!(events[1], Event::Text("Hi".into()));
        assert_eq!(
            calls(&events),
            [("f".into(), "{\"x\":1}".into()), ("g".into(), "{}".into())]
        );
        // Both are handed out at the finish, in index order.
        assert!(matches!(&events[2], Event::Call(c) if c.id == "a"));
        assert_eq!(events[4], Event::Finish("tool_calls".into()));
        assert!(matches!(
            events[5],
            Event::Usage(Usage {
                total_tokens: 7,
                ..
            })
        ));
    }

    #[test]
    fn a_call_sent_whole_is_handed_out_before_the_text_after_it() {
        let events = decode(&[
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me look."}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"More text."}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        assert!(matches!(&events[2], Event::Call(c) if c.id == "a" && c.arguments == "{\"x\":1}"));
        assert_eq!(events[3], Event::Text("More text.".into()));
        assert_eq!(calls(&events).len(), 1);
        // A call continued after it came whole is the upstream's error.
        let continued = decode(&[
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"x"}}]}}]}"#,
        ]);
        assert!(continued.is_err());
    }

    /// Two calls whose fragments interleave (each later fragment carrying
    /// only its index), the name and id on a later fragment, a call with no
    /// arguments: assembled by index as the direct paths do.
    #[test]
    fn interleaved_fragments_are_joined_by_index() {
        let frag = |index: u32, rest: &str| {
            format!(
                r#"{{"id":"c","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{index}{rest}}}]}}}}]}}"#
            )
        };
        let events = [
            frag(
                0,
                r#","id":"a","type":"function","function":{"name":"weather","arguments":""}"#,
            ),
            frag(1, r#","function":{"arguments":"{\"city\":"}"#),
            frag(0, r#","function":{"arguments":"{\"city\":"}"#),
            frag(
                1,
                r#","id":"b","function":{"name":"time","arguments":"\"Rome\"}"}"#,
            ),
            frag(0, r#","function":{"arguments":"\"Paris\"}"}"#),
            frag(
                2,
                r#","id":"c","type":"function","function":{"name":"clock","arguments":""}"#,
            ),
            r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#
                .to_owned(),
            "[DONE]".to_owned(),
        ];
        let refs: Vec<&str> = events.iter().map(String::as_str).collect();
        let out = decode(&refs).unwrap();
        assert_eq!(
            calls(&out),
            [
                ("weather".into(), r#"{"city":"Paris"}"#.into()),
                ("time".into(), r#"{"city":"Rome"}"#.into()),
                ("clock".into(), "{}".into()),
            ]
        );
        let ids: Vec<&str> = out
            .iter()
            .filter_map(|e| match e {
                Event::Call(c) => Some(c.id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    /// A stream cut before its answer finished is an error; one that finished
    /// without `[DONE]`, or sent `[DONE]` without a finish reason, is not.
    #[test]
    fn a_cut_stream_is_a_failure_not_a_finished_answer() {
        let text = r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hal"}}]}"#;
        let err = decode(&[text]).unwrap_err();
        assert_eq!(err.code(), "upstream_stream_cut");
        let finished = r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
        let out = decode(&[text, finished]).unwrap();
        assert_eq!(out.last(), Some(&Event::Finish("length".into())));
        let out = decode(&[text, "[DONE]"]).unwrap();
        assert_eq!(out.last(), Some(&Event::Finish("stop".into())));
        // A call cut by `length` is not handed out.
        let cut_call = r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"pa"}}]}}]}"#;
        let out = decode(&[cut_call, finished]).unwrap();
        assert!(calls(&out).is_empty(), "{out:?}");
        assert_eq!(out.last(), Some(&Event::Finish("length".into())));
    }

    #[test]
    fn completion_message_and_legacy_function_call() {
        let body = br#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},"finish_reason":"function_call"}]}"#;
        let events = completion(body).unwrap();
        assert_eq!(calls(&events), [("f".into(), "{}".into())]);
        assert_eq!(events.last(), Some(&Event::Finish("function_call".into())));
    }

    #[test]
    fn errors_and_bounds() {
        let err = decode(&[r#"{"error":{"message":"overloaded"}}"#]).unwrap_err();
        assert!(err.to_string().contains("overloaded"), "{err}");
        assert!(decode(&["not json"]).is_err());
        assert!(decode(&[]).is_err(), "an empty stream is an error");
        let many: Vec<String> = (0..=MAX_CALLS)
            .map(|i| format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{i},"function":{{"name":"f"}}}}]}}}}]}}"#))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(decode(&refs).unwrap_err().to_string().contains("more than"));
    }

    #[test]
    fn refusals_and_reasoning_are_kept() {
        let events = decode(&[
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"refusal":"I can't"},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert!(events.contains(&Event::Reasoning("hmm".into())));
        assert!(events.contains(&Event::Text("I can't".into())));
    }

    /// A chunk as OpenAI writes it: header fields, one choice, its delta.
    fn chunk(delta: &Value, finish: Option<&str>) -> String {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{}}}]}}"#,
            json!(finish)
        )
    }

    fn piece() -> impl Strategy<Value = String> {
        "[a-z \"\\\\\n\té日🎉{}]{0,24}"
    }

    proptest! {
        /// However an answer is cut into chunks (reasoning, text and each
        /// call's arguments at any points, a call's id and name on any of
        /// its fragments, the calls' fragments one after the other or
        /// interleaved, a finish reason or only `[DONE]`), it
        /// decodes to the same answer: one start, the reasoning and the text
        /// whole, every call whole and in index order, one finish, the usage.
        #[test]
        fn any_chunking_of_an_answer_decodes_to_that_answer(
            reasoning in piece(),
            text in piece(),
            calls in proptest::collection::vec(("[a-z_]{1,8}", proptest::collection::btree_map("[a-z]{1,4}", piece(), 0..3)), 0..4),
            cuts in proptest::collection::vec(proptest::collection::vec(0usize..64, 0..6), 6),
            carriers in proptest::collection::vec(0usize..64, 4),
            interleave in any::<bool>(),
            reason in any::<bool>(),
            usage in any::<bool>(),
        ) {
            let calls: Vec<(String, String)> = calls
                .into_iter()
                .map(|(name, args)| (name, serde_json::to_string(&args).unwrap()))
                .collect();
            let mut chunks = vec![chunk(&json!({"role": "assistant", "content": ""}), None)];
            for p in cut(&reasoning, &cuts[0]) {
                chunks.push(chunk(&json!({"reasoning_content": p}), None));
            }
            for p in cut(&text, &cuts[1]) {
                chunks.push(chunk(&json!({"content": p}), None));
            }
            // Each call's fragments add arguments; one of them (usually
            // the first) carries its id and name.
            let fragments: Vec<Vec<Value>> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    let pieces = cut(args, &cuts[2 + i % 4]);
                    let named = if carriers[i] % 3 == 0 { carriers[i] % pieces.len() } else { 0 };
                    pieces
                        .into_iter()
                        .enumerate()
                        .map(|(k, p)| if k == named {
                            json!({"index": i, "id": format!("call_{i}"), "type": "function",
                                   "function": {"name": name, "arguments": p}})
                        } else {
                            json!({"index": i, "function": {"arguments": p}})
                        })
                        .collect()
                })
                .collect();
            let longest = fragments.iter().map(Vec::len).max().unwrap_or(0);
            let order: Vec<&Value> = if interleave {
                (0..longest)
                    .flat_map(|k| fragments.iter().filter_map(move |f| f.get(k)))
                    .collect()
            } else {
                fragments.iter().flatten().collect()
            };
            for fragment in order {
                chunks.push(chunk(&json!({"tool_calls": [fragment]}), None));
            }
            let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
            if reason {
                chunks.push(chunk(&json!({}), Some(finish)));
            }
            if usage {
                chunks.push(r#"{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#.into());
            }
            chunks.push("[DONE]".into());

            let mut decoder = ChatDecoder::new();
            let mut events = Vec::new();
            for c in &chunks {
                decoder.feed(c.as_bytes(), &mut events).unwrap();
            }
            decoder.finish(&mut events).unwrap();

            prop_assert!(matches!(events.first(), Some(Event::Start(m)) if m.id.as_deref() == Some("chatcmpl-1")));
            let (mut got_reasoning, mut got_text, mut got_calls) = (String::new(), String::new(), Vec::new());
            let (mut finishes, mut usages, mut starts) = (Vec::new(), 0, 0);
            for (i, event) in events.iter().enumerate() {
                match event {
                    Event::Start(_) => starts += 1,
                    Event::Reasoning(r) => got_reasoning.push_str(r),
                    Event::Text(t) => got_text.push_str(t),
                    Event::Call(c) => got_calls.push((c.id.clone(), c.name.clone(), c.arguments.clone())),
                    Event::Finish(f) => finishes.push((i, f.clone())),
                    Event::Usage(_) => usages += 1,
                    Event::Gateway(_) => prop_assert!(false, "a gateway event from upstream chunks"),
                }
                prop_assert!(!matches!(event, Event::Text(t) | Event::Reasoning(t) if t.is_empty()), "an empty delta event");
            }
            prop_assert_eq!(starts, 1);
            prop_assert_eq!(got_reasoning, reasoning);
            prop_assert_eq!(got_text, text);
            let expected: Vec<(String, String, String)> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| (format!("call_{i}"), name.clone(), args.clone()))
                .collect();
            prop_assert_eq!(got_calls, expected);
            prop_assert_eq!(finishes.len(), 1);
            prop_assert_eq!(&finishes[0].1, if reason { finish } else { "stop" });
            prop_assert!(events[..finishes[0].0].iter().all(|e| !matches!(e, Event::Finish(_))));
            prop_assert!(events[finishes[0].0..].iter().all(|e| matches!(e, Event::Finish(_) | Event::Usage(_))), "nothing but usage after the finish: {:?}", events);
            prop_assert_eq!(usages, usize::from(usage));
        }
    }
}
