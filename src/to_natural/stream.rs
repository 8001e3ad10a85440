//! The client direction of to_natural mode, sans-IO: upstream chunks with
//! native `tool_calls` deltas in, chunks whose content carries the calls as
//! text out.
//!
//! A call's opening tag goes out as soon as its name is known and its
//! argument fragments follow as they arrive (pretty-printed on the fly).
//! Deltas that interleave several calls are reassembled: the call being
//! written streams, the others wait their turn and are written one after
//! another. Content that arrives while a call is open waits until it closes.
//! `finish_reason: "tool_calls"` becomes `"stop"`; every other field of the
//! upstream's chunks (`id`, `created`, `model`, `system_fingerprint`,
//! `logprobs`) is kept. Usage goes out once, last, and only when the client
//! asked for it.
//!
//! Most chunks are one choice's content or call fragments and nothing else.
//! Those are read borrowed, without building a JSON tree, and written back
//! with the upstream's own top-level fields copied as they came.

use std::collections::BTreeMap;

use bytes::BytesMut;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::error::GatewayError;
use crate::natural::emit::{self, ChunkHeader};
use crate::sse::encoder;
use crate::sse::transform::{self, Incoming, Transform};
use crate::to_natural::RenderOptions;
use crate::to_natural::pretty::PrettyPrinter;
use crate::upstream::plain;
use crate::upstream::stencil::Stencil;

/// Distinct choice `index`es one stream may use; each holds state.
pub const MAX_CHOICES: usize = 128;

/// Distinct tool-call `index`es one choice may use.
pub const MAX_CALLS_PER_CHOICE: usize = 256;

/// Bytes one choice may hold back (text waiting for an open call, call
/// names and arguments not yet written).
pub const MAX_HELD_BYTES: usize = 16 * 1024 * 1024;

pub struct StreamRenderer {
    options: RenderOptions,
    header: Option<ChunkHeader>,
    choices: BTreeMap<u64, ChoiceState>,
    ended: bool,
    /// The upstream sent `[DONE]`: a body that ends without it, and without
    /// every choice finished, was cut.
    upstream_done: bool,
    text: String,
    /// The client asked for usage (`stream_options.include_usage`): the
    /// upstream's latest goes out once, in its own chunk before `[DONE]`
    /// (rule 14). Servers that send usage unasked (llama.cpp, Ollama,
    /// Mistral) have it dropped.
    include_usage: bool,
    usage: Option<Value>,
    /// A limit the upstream crossed while handling the current event.
    overflow: Option<String>,
    /// The last plain chunk read in full, its choice and what its hole
    /// holds: the next chunks usually differ only there.
    stencil: Stencil,
    stencil_hole: Option<(u64, Hole)>,
}

/// What a plain chunk brings to one choice.
struct Fragments<'a, C> {
    index: u64,
    /// `role: "assistant"`, as a choice's first delta has it.
    role: bool,
    content: Option<&'a str>,
    /// Call fragments: `(index, name, arguments)`.
    calls: C,
    finish: Option<Value>,
}

/// The delta of a chunk the fast path writes.
#[derive(Serialize)]
struct OutDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    content: &'a str,
}

/// The string a stencil's hole holds.
#[derive(Clone, Copy)]
enum Hole {
    Content,
    /// The `arguments` of the call at this index.
    Arguments(u64),
}

#[derive(Default)]
struct CallBuf {
    name: String,
    /// Argument text received but not yet written.
    pending: String,
    any_arguments: bool,
    done: bool,
}

#[derive(Default)]
struct ChoiceState {
    calls: BTreeMap<u64, CallBuf>,
    /// The call being written, and the printer tracking its JSON.
    current: Option<(u64, PrettyPrinter)>,
    calls_written: usize,
    wrote_text: bool,
    /// Content that arrived while a call was open.
    waiting_text: String,
    finished: bool,
}

impl StreamRenderer {
    pub fn new(options: RenderOptions, include_usage: bool) -> Self {
        StreamRenderer {
            options,
            include_usage,
            usage: None,
            header: None,
            choices: BTreeMap::new(),
            ended: false,
            upstream_done: false,
            text: String::new(),
            overflow: None,
            stencil: Stencil::default(),
            stencil_hole: None,
        }
    }

    /// Ends the stream with an error event when the last event crossed a
    /// limit (conformance rule 15).
    fn check_overflow(&mut self, out: &mut BytesMut) {
        if let Some(message) = self.overflow.take() {
            self.fail(
                out,
                &GatewayError::UpstreamInvalid {
                    message,
                    code: "upstream_stream_too_large",
                },
            );
        }
    }

    pub fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        self.on_event_unchecked(data, out);
        self.check_overflow(out);
    }

    fn on_event_unchecked(&mut self, data: &[u8], out: &mut BytesMut) {
        if self.ended {
            return;
        }
        // Multi-line `data:` payloads must be re-framed, never copied (rule 1),
        // so they take the general path.
        if plain::single_line(data) && self.on_plain(data, out) {
            return;
        }
        let mut chunk = match transform::classify(data) {
            Incoming::Done => {
                self.upstream_done = true;
                return self.finish(out);
            }
            Incoming::Invalid => return self.fail(out, &transform::invalid_event()),
            Incoming::Error(error) => {
                emit::write_error(out, &error);
                self.ended = true;
                return;
            }
            Incoming::Chunk(chunk) => chunk,
        };
        if self.header.is_none() {
            self.header = Some(ChunkHeader::from_chunk(&chunk));
        }
        if let Some(usage) = chunk.remove("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage);
        }
        let Some(Value::Array(choices)) = chunk.remove("choices") else {
            encoder::write_json(out, &Value::Object(chunk));
            return;
        };
        let mut kept = Vec::with_capacity(choices.len());
        for choice in choices {
            if let Value::Object(choice) = choice
                && let Some(choice) = self.on_choice(choice)
            {
                kept.push(Value::Object(choice));
            }
        }
        if !kept.is_empty() {
            chunk.insert("choices".into(), Value::Array(kept));
            encoder::write_json(out, &Value::Object(chunk));
        }
    }

    /// The fast path: a chunk of one choice holding only its role, content,
    /// call fragments and finish reason, read through the stencil of the
    /// previous one when it fits. `false`: not that shape; nothing was
    /// changed, take the general path.
    fn on_plain(&mut self, data: &[u8], out: &mut BytesMut) -> bool {
        if let Some((index, hole)) = self.stencil_hole
            && let Some(fit) = self.stencil.fit(data)
        {
            // A string the reader accepted decodes; should it not, the general path decides.
            let Some(text) = fit.text.decode() else {
                return false;
            };
            let (content, call) = match hole {
                Hole::Content => (Some(&*text), None),
                Hole::Arguments(call) => (None, Some((call, None, Some(&*text)))),
            };
            let delta = Fragments {
                index,
                role: false,
                content,
                calls: call,
                finish: None,
            };
            return self.on_fragments(delta, fit.around_choices(), out);
        }
        let Some(read) = plain::read(data) else {
            return false;
        };
        // Any `error` key, even `null`, is an error event to the general path.
        if read.chunk.usage.is_some() || read.error_key {
            return false;
        }
        let [choice] = &read.chunk.choices;
        let delta = &choice.delta;
        let plain = choice.logprobs.is_none()
            && delta.role.is_none_or(|role| role == "assistant")
            && delta.is_plain();
        if !plain {
            return false;
        }
        let finish = match choice.finish_reason {
            None => None,
            Some(raw) => match serde_json::from_str::<Value>(raw.0) {
                Ok(reason) => Some(reason),
                Err(_) => return false,
            },
        };
        if self.header.is_none() {
            let Some(header) = ChunkHeader::from_fields(&read.header) else {
                return false;
            };
            self.header = Some(header);
        }
        // What a later chunk may change while the rest stays the same.
        let hole = match (&delta.content, delta.tool_calls.as_deref()) {
            _ if delta.role.is_some() || finish.is_some() => None,
            (Some(_), None) => read.holes.content.clone().map(|at| (Hole::Content, at)),
            (None, Some([call])) if call.function.as_ref().is_some_and(|f| f.name.is_none()) => {
                let at = read.holes.arguments.clone();
                at.map(|at| (Hole::Arguments(call.index), at))
            }
            _ => None,
        };
        let calls = delta.tool_calls.iter().flatten().map(|call| {
            let function = call.function.as_ref();
            (
                call.index,
                function.and_then(|f| f.name.as_deref()),
                function.and_then(|f| f.arguments.as_deref()),
            )
        });
        let fragments = Fragments {
            index: choice.index,
            role: delta.role.is_some(),
            content: delta.content.as_deref(),
            calls,
            finish,
        };
        self.on_fragments(fragments, read.around_choices(), out);
        if let Some((hole, at)) = hole {
            self.stencil.learn(data, at, read.choices_span());
            self.stencil_hole = Some((choice.index, hole));
        }
        true
    }

    /// What a plain chunk brings to one choice; the text it releases goes
    /// out in the upstream's chunk, its `choices` replaced: `around` is the
    /// chunk's bytes before and after them.
    fn on_fragments<'a>(
        &mut self,
        delta: Fragments<'a, impl IntoIterator<Item = (u64, Option<&'a str>, Option<&'a str>)>>,
        around: (&[u8], &[u8]),
        out: &mut BytesMut,
    ) -> bool {
        let Some(state) = choice_state(&mut self.choices, &mut self.overflow, delta.index) else {
            return true;
        };
        if state.finished {
            return true;
        }
        self.text.clear();
        if let Some(content) = delta.content {
            state.content(content, &mut self.text);
        }
        for (call, name, arguments) in delta.calls {
            state.fragment(call, name, arguments);
        }
        if let Some(message) = state.held() {
            self.overflow = Some(message);
            return true;
        }
        advance(state, &self.options, &mut self.text, delta.finish.is_some());
        let finish = delta.finish.map(|reason| {
            state.finished = true;
            match reason.as_str() {
                Some("tool_calls" | "function_call") => json!("stop"),
                _ => reason,
            }
        });
        if !self.text.is_empty() || delta.role || finish.is_some() {
            let choices = [emit::Choice {
                index: delta.index,
                delta: OutDelta {
                    role: delta.role.then_some("assistant"),
                    content: &self.text,
                },
                logprobs: (),
                finish_reason: finish.as_ref(),
            }];
            encoder::write_spliced(out, around.0, &choices, around.1);
        }
        true
    }

    /// Rewrites one choice of a chunk; `None` when nothing is left to send.
    fn on_choice(&mut self, mut choice: Map<String, Value>) -> Option<Map<String, Value>> {
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        let state = choice_state(&mut self.choices, &mut self.overflow, index)?;
        if state.finished {
            return None;
        }
        let mut delta = match choice.remove("delta") {
            Some(Value::Object(d)) => d,
            _ => Map::new(),
        };
        self.text.clear();
        if let Some(Value::String(content)) = delta.remove("content") {
            state.content(&content, &mut self.text);
        }
        if let Some(Value::Array(calls)) = delta.remove("tool_calls") {
            for call in calls {
                state.fragment(
                    call.get("index").and_then(Value::as_u64).unwrap_or(0),
                    call.pointer("/function/name").and_then(Value::as_str),
                    call.pointer("/function/arguments").and_then(Value::as_str),
                );
            }
        }
        // Legacy streamed `function_call` is one call at index 0.
        if let Some(Value::Object(f)) = delta.remove("function_call") {
            state.fragment(
                0,
                f.get("name").and_then(Value::as_str),
                f.get("arguments").and_then(Value::as_str),
            );
        }
        let finish = choice.remove("finish_reason").filter(|f| !f.is_null());
        if let Some(message) = state.held() {
            self.overflow = Some(message);
            return None;
        }
        advance(state, &self.options, &mut self.text, finish.is_some());
        let finish = finish.map(|f| {
            state.finished = true;
            match f.as_str() {
                Some("tool_calls" | "function_call") => json!("stop"),
                _ => f,
            }
        });
        if !self.text.is_empty() {
            delta.insert(
                "content".into(),
                Value::String(std::mem::take(&mut self.text)),
            );
        }
        if delta.is_empty() && finish.is_none() && choice.get("logprobs").is_none_or(Value::is_null)
        {
            return None;
        }
        choice.insert("delta".into(), Value::Object(delta));
        choice.insert("finish_reason".into(), finish.unwrap_or(Value::Null));
        Some(choice)
    }

    /// `[DONE]` or end of body: choices that never finished are closed.
    pub fn finish(&mut self, out: &mut BytesMut) {
        if self.ended {
            return;
        }
        let finished = !self.choices.is_empty() && self.choices.values().all(|c| c.finished);
        if !self.upstream_done && !finished {
            return self.fail(out, &crate::upstream::chat_decode::cut());
        }
        let header = self.header.clone().unwrap_or_else(ChunkHeader::fallback);
        for (&index, state) in &mut self.choices {
            if state.finished {
                continue;
            }
            self.text.clear();
            advance(state, &self.options, &mut self.text, true);
            state.finished = true;
            if !self.text.is_empty() {
                header.write_text(out, index, &self.text, false);
            }
            header.write_finish(out, index, &json!("stop"), false);
        }
        if self.include_usage
            && let Some(usage) = &self.usage
        {
            header.write_usage(out, usage);
        }
        out.extend_from_slice(encoder::DONE);
        self.ended = true;
    }

    pub fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        if self.ended {
            return;
        }
        crate::body::observed::told(error.code());
        emit::write_error(out, &error.to_json());
        self.ended = true;
    }
}

impl Transform for StreamRenderer {
    fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        StreamRenderer::on_event(self, data, out);
    }
    fn finish(&mut self, out: &mut BytesMut) {
        StreamRenderer::finish(self, out);
    }
    fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        StreamRenderer::fail(self, out, error);
    }
    fn is_ended(&self) -> bool {
        self.ended
    }
}

/// The state of choice `index`; `None` (and `overflow` says why) past
/// [`MAX_CHOICES`].
fn choice_state<'a>(
    choices: &'a mut BTreeMap<u64, ChoiceState>,
    overflow: &mut Option<String>,
    index: u64,
) -> Option<&'a mut ChoiceState> {
    if !choices.contains_key(&index) && choices.len() >= MAX_CHOICES {
        *overflow = Some(format!(
            "The upstream stream uses more than {MAX_CHOICES} choices"
        ));
        return None;
    }
    Some(choices.entry(index).or_default())
}

impl ChoiceState {
    /// Why this choice holds more than the limits allow, if it does. Costs
    /// a pass over at most [`MAX_CALLS_PER_CHOICE`] calls.
    fn held(&self) -> Option<String> {
        if self.calls.len() > MAX_CALLS_PER_CHOICE {
            return Some(format!(
                "The upstream stream uses more than {MAX_CALLS_PER_CHOICE} tool calls in one choice"
            ));
        }
        let calls: usize = self
            .calls
            .values()
            .map(|call| call.name.len() + call.pending.len())
            .sum();
        (self.waiting_text.len() + calls > MAX_HELD_BYTES).then(|| {
            format!("The upstream stream made toolgate hold more than {MAX_HELD_BYTES} bytes of one choice")
        })
    }

    /// Content: written now, or after the call that is open.
    fn content(&mut self, content: &str, text: &mut String) {
        if self.current.is_some() {
            self.waiting_text.push_str(content);
        } else {
            self.wrote_text |= !content.is_empty();
            text.push_str(content);
        }
    }

    /// A fragment of the call at `index`.
    fn fragment(&mut self, index: u64, name: Option<&str>, arguments: Option<&str>) {
        let buf = self.calls.entry(index).or_default();
        if let Some(name) = name {
            buf.name.push_str(name);
        }
        if let Some(arguments) = arguments {
            buf.pending.push_str(arguments);
            buf.any_arguments |= !arguments.is_empty();
        }
    }
}

/// Writes as much of the choice's calls as can be written now; with `flush`,
/// everything (the message ended).
fn advance(state: &mut ChoiceState, options: &RenderOptions, out: &mut String, flush: bool) {
    loop {
        if state.current.is_none() {
            let next = state
                .calls
                .iter()
                .find(|(_, c)| !c.done && (!c.name.is_empty()))
                .map(|(&i, _)| i);
            let Some(i) = next else { break };
            let name = state.calls[&i].name.clone();
            if state.calls_written > 0 {
                out.push('\n');
                out.push_str(&options.separator);
                out.push('\n');
            } else if state.wrote_text {
                out.push_str("\n\n");
            }
            options.syntax.write_call_open(&name, out);
            state.current = Some((i, PrettyPrinter::new()));
        }
        let Some((i, printer)) = state.current.as_mut() else {
            break;
        };
        let buf = state.calls.get_mut(i).expect("current call exists");
        let fragment = std::mem::take(&mut buf.pending);
        if options.pretty_arguments() {
            printer.feed(&fragment, out);
        } else {
            let mut scratch = String::new();
            printer.feed(&fragment, &mut scratch);
            out.push_str(&fragment);
        }
        if !(printer.is_complete() || flush) {
            break;
        }
        if !buf.any_arguments {
            out.push_str("{}");
        } else if options.pretty_arguments() {
            printer.finish(out);
        }
        options.syntax.write_call_close(&buf.name, out);
        buf.done = true;
        state.calls_written += 1;
        state.current = None;
        if !state.waiting_text.is_empty() {
            state.wrote_text = true;
            out.push_str(&std::mem::take(&mut state.waiting_text));
        }
    }
    if flush && !state.waiting_text.is_empty() {
        out.push_str(&std::mem::take(&mut state.waiting_text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natural::syntax::Syntax;
    use crate::sse::transform::twin;

    fn renderer() -> StreamRenderer {
        StreamRenderer::new(
            RenderOptions {
                syntax: Syntax::Tag,
                pretty: true,
                separator: "---".into(),
            },
            false,
        )
    }

    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            r#"{{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
        )
    }

    fn arguments(call: u64, text: &str) -> String {
        let fragment = json!([{"index": call, "function": {"arguments": text}}]);
        chunk(&format!(r#"{{"tool_calls":{fragment}}}"#), "null")
    }

    fn open(call: u64, name: &str) -> String {
        let open = json!([{"index": call, "id": format!("call_{call}"), "type": "function",
            "function": {"name": name, "arguments": ""}}]);
        chunk(&format!(r#"{{"tool_calls":{open}}}"#), "null")
    }

    #[test]
    fn the_role_chunk_takes_the_fast_path() {
        let mut r = renderer();
        let mut out = BytesMut::new();
        // Spacing that re-serializing would change: only the fast path,
        // which copies the bytes around `choices`, keeps it.
        let first = r#"{"id": "c1", "created": 7, "model": "m", "choices":[{"index":0,"delta":{"role":"assistant","content":null},"logprobs":null,"finish_reason":null}], "service_tier": "default"}"#;
        r.on_event(first.as_bytes(), &mut out);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "data: {\"id\": \"c1\", \"created\": 7, \"model\": \"m\", \"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"logprobs\":null,\"finish_reason\":null}], \"service_tier\": \"default\"}\n\n"
        );
    }

    #[test]
    fn the_fast_paths_write_what_the_general_path_writes() {
        let streams = [
            // Text, then two calls whose arguments arrive in pieces.
            vec![
                chunk(r#"{"role":"assistant","content":null}"#, "null"),
                chunk(r#"{"content":"Checking \"both\".\n"}"#, "null"),
                open(0, "GetWeather"),
                arguments(0, "{\"loc"),
                arguments(0, "ation\": \"Pa"),
                arguments(0, "ris\"}"),
                open(1, "GetTime"),
                arguments(1, "{}"),
                chunk("{}", r#""tool_calls""#),
            ],
            // Content that arrives while a call is open waits for it.
            vec![
                chunk(r#"{"role":"assistant","content":"Hi"}"#, "null"),
                open(0, "GetWeather"),
                chunk(r#"{"content":" later"}"#, "null"),
                arguments(0, "{\"location\": \"Oslo\"}"),
                chunk("{}", r#""stop""#),
            ],
            // No finish chunk: the end of the stream closes the call.
            vec![
                chunk(r#"{"role":"assistant","content":null}"#, "null"),
                open(0, "GetWeather"),
                arguments(0, "{\"location\""),
            ],
        ];
        for stream in streams {
            let mut chunks: Vec<&str> = stream.iter().map(String::as_str).collect();
            chunks.push("[DONE]");
            let (fast, general) = twin::fast_and_general(renderer, &chunks);
            assert_eq!(fast, general, "{chunks:#?}");
            assert!(fast.len() >= 3, "{fast:#?}");
        }
    }

    #[test]
    fn usage_goes_last_and_only_when_asked() {
        // Mistral's shape: usage on the chunk that finishes; llama.cpp's: a
        // usage chunk of its own after it.
        let finishing = r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
        let alone = r#"{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#;
        for (events, asked) in [
            (vec![finishing], true),
            (vec![finishing, alone], true),
            (vec![finishing, alone], false),
        ] {
            let mut r = StreamRenderer::new(
                RenderOptions {
                    syntax: Syntax::Tag,
                    pretty: true,
                    separator: "---".into(),
                },
                asked,
            );
            let mut out = BytesMut::new();
            for event in events.iter().chain(&["[DONE]"]) {
                r.on_event(event.as_bytes(), &mut out);
            }
            let text = std::str::from_utf8(&out).unwrap();
            let chunks: Vec<Value> = text
                .split("\n\n")
                .filter_map(|e| e.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let with_usage: Vec<usize> = (0..chunks.len())
                .filter(|&i| chunks[i].get("usage").is_some())
                .collect();
            if asked {
                let last = chunks.len() - 1;
                assert_eq!(with_usage, vec![last], "{text}");
                assert_eq!(chunks[last]["choices"], json!([]));
                let want = if events.len() == 2 { 5 } else { 4 };
                assert_eq!(chunks[last]["usage"]["total_tokens"], want);
            } else {
                assert!(with_usage.is_empty(), "{text}");
            }
            assert!(text.ends_with("data: [DONE]\n\n"));
        }
    }
}
