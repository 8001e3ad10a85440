//! The streaming rewrite, sans-IO: upstream SSE event payloads in, the
//! client's SSE bytes out.
//!
//! Content deltas go through a [`ReplyParser`] per choice; text is written as
//! soon as the parser releases it, and the calls when the choice finishes,
//! followed by a finish chunk with `finish_reason: "tool_calls"`. A chunk whose
//! content the parser passes through untouched is forwarded as the upstream's
//! own bytes, so prose costs one parse and no re-serialization.

use bytes::BytesMut;
use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::error::GatewayError;
use crate::natural::emit::{self, ChunkHeader};
use crate::natural::reply::{InvalidCall, RepairRequest, ReplyParser, ReplySettings};
use crate::sse::encoder;
use crate::sse::transform::{self, Incoming};
use crate::upstream::plain::{self, PlainChunk};
use crate::upstream::stencil::Stencil;

/// Distinct choice `index`es one stream may use; each holds a parser.
pub const MAX_CHOICES: usize = 128;

pub struct StreamRewriter {
    settings: ReplySettings,
    header: Option<ChunkHeader>,
    choices: Vec<ChoiceState>,
    /// Each choice index's position in `choices`.
    positions: HashMap<u64, usize>,
    /// Latest usage seen; written once, last, when the client asked for it (rule 14).
    usage: Option<Value>,
    include_usage: bool,
    ended: bool,
    /// The upstream's stream is over; `[DONE]` waits only for repairs.
    done_requested: bool,
    /// The upstream sent `[DONE]`: a body that ends without it, and without
    /// every choice finished, was cut.
    upstream_done: bool,
    /// Repairs asked for since the driver last took them, by choice index.
    repairs: Vec<(u64, RepairRequest)>,
    text: String,
    /// The last content chunk read in full, and its choice: the next ones
    /// usually differ only in their content.
    stencil: Stencil,
    stencil_choice: Option<u64>,
}

struct ChoiceState {
    index: u64,
    reply: ReplyParser,
    /// Whether any delta was written for this choice (the first carries the role).
    started: bool,
    finished: bool,
    /// Calls written before the choice's end (`ReplySettings::early_calls`).
    calls_written: usize,
    /// Finished, but its calls wait for repairs; holds the upstream's finish reason.
    waiting: Option<Option<Value>>,
}

impl StreamRewriter {
    pub fn new(settings: ReplySettings, include_usage: bool) -> Self {
        StreamRewriter {
            settings,
            header: None,
            // One choice is the rule (n > 1 is rare): no room for four.
            choices: Vec::with_capacity(1),
            positions: HashMap::new(),
            usage: None,
            include_usage,
            ended: false,
            done_requested: false,
            upstream_done: false,
            repairs: Vec::new(),
            text: String::new(),
            stencil: Stencil::default(),
            stencil_choice: None,
        }
    }

    /// The upstream is over and a choice's calls still wait for a repair:
    /// `[DONE]` waits. Until the upstream is over, the other choices' text
    /// keeps flowing while a repair runs; only the repaired choice's calls
    /// and finish wait.
    pub fn is_blocked(&self) -> bool {
        !self.ended && self.done_requested && self.choices.iter().any(|c| c.waiting.is_some())
    }

    /// Repairs to start, tagged with their choice index.
    pub fn take_repairs(&mut self) -> Vec<(u64, RepairRequest)> {
        std::mem::take(&mut self.repairs)
    }

    /// A repair finished: its call takes its slot, and a choice whose calls no
    /// longer wait is written out (then `[DONE]`, if the upstream was done).
    pub fn resolve(
        &mut self,
        choice: u64,
        id: u32,
        result: Result<(String, Map<String, Value>), InvalidCall>,
        out: &mut BytesMut,
    ) {
        if self.ended {
            return;
        }
        let Some(&pos) = self.positions.get(&choice) else {
            return;
        };
        self.choices[pos].reply.resolve(id, result);
        self.write_ready(pos, out);
        let state = &mut self.choices[pos];
        if state.waiting.is_some() && !state.reply.is_waiting() {
            let reason = state.waiting.take().flatten();
            self.emit_calls(pos, reason, out);
        }
        if self.done_requested && !self.is_blocked() {
            self.finish(out);
        }
    }

    fn collect_repairs(&mut self, pos: usize) {
        let state = &mut self.choices[pos];
        let index = state.index;
        self.repairs
            .extend(state.reply.take_repairs().into_iter().map(|r| (index, r)));
    }

    /// Handles one upstream event's `data`.
    pub fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        if self.ended {
            return;
        }
        // Almost every chunk is one plain content delta: read it borrowed,
        // without building a JSON tree (through the stencil of the previous
        // one when it fits), and forward its bytes if the parser lets its
        // text through. Multi-line `data:` payloads must be re-framed, never
        // copied (rule 1), so they take the general path.
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
                // The upstream's own in-stream error (rule 15): pass it on, then
                // end the stream; nothing may follow an error but `[DONE]`.
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
            return;
        };
        for choice in choices {
            if let Value::Object(choice) = choice {
                self.on_choice(&chunk, choice, out);
                if self.ended {
                    return;
                }
            }
        }
    }

    /// A plain content delta, read through the stencil or in full; `false`:
    /// not one, or not handled here, take the general path.
    fn on_plain(&mut self, data: &[u8], out: &mut BytesMut) -> bool {
        if let Some(index) = self.stencil_choice
            && let Some(fit) = self.stencil.fit(data)
        {
            // A string the reader accepted decodes; should it not, the general path decides.
            return fit
                .text
                .decode()
                .is_some_and(|content| self.forward_plain(index, false, &content, data, out));
        }
        let Some(plain) = plain::read(data) else {
            return false;
        };
        if self.header.is_none() {
            let Some(header) = ChunkHeader::from_fields(&plain.header) else {
                return false;
            };
            self.header = Some(header);
        }
        let (hole, choices) = (plain.holes.content.clone(), plain.choices_span());
        if let Some((index, reason)) = finish_only(&plain.chunk) {
            return self.finish_plain(index, reason, out);
        }
        let Some((index, has_role, content)) = content_only(plain.chunk) else {
            return false;
        };
        if !self.forward_plain(index, has_role, &content, data, out) {
            return false;
        }
        if let (false, Some(hole)) = (has_role, hole) {
            self.stencil.learn(data, hole, choices);
            self.stencil_choice = Some(index);
        }
        true
    }

    /// A choice's finish chunk with nothing else in it; what the general path
    /// does with it, without its tree.
    fn finish_plain(&mut self, index: u64, reason: plain::Raw<'_>, out: &mut BytesMut) -> bool {
        let Ok(reason) = serde_json::from_str::<Value>(reason.0) else {
            return false;
        };
        let Some(pos) = self.state(index, out) else {
            return true;
        };
        if self.choices[pos].finished {
            return true;
        }
        self.write_ready(pos, out);
        self.finish_choice(pos, Some(reason), out);
        true
    }

    /// The fast path: a plain content delta that the parser passes through
    /// whole is forwarded as the upstream's bytes. `false`: not applicable,
    /// take the general path.
    fn forward_plain(
        &mut self,
        index: u64,
        has_role: bool,
        content: &str,
        data: &[u8],
        out: &mut BytesMut,
    ) -> bool {
        let Some(pos) = self.state(index, out) else {
            // Failed: the event is handled.
            return true;
        };
        let state = &mut self.choices[pos];
        // Rule 4: the role in the first delta only; otherwise the general path fixes it.
        if state.finished || state.started == has_role {
            return false;
        }
        self.text.clear();
        let fed = state.reply.feed(content, &mut self.text);
        self.collect_repairs(pos);
        let state = &mut self.choices[pos];
        match fed {
            Err(invalid) => self.fail_invalid(pos, &invalid, out),
            Ok(()) if self.text == content => {
                // An empty delta after the first says nothing; the general
                // path drops it as well.
                if !(content.is_empty() && state.started) {
                    encoder::write_raw(out, data);
                }
                state.started = true;
                // A block the parser closed on this text's first character.
                self.write_ready(pos, out);
            }
            Ok(()) => {
                let header = self.header.as_ref().expect("set before choices");
                if !self.text.is_empty() || !state.started {
                    header.write_text(out, index, &self.text, !state.started);
                    state.started = true;
                }
                self.write_ready(pos, out);
            }
        }
        true
    }

    fn on_choice(
        &mut self,
        chunk: &Map<String, Value>,
        mut choice: Map<String, Value>,
        out: &mut BytesMut,
    ) {
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
        let Some(pos) = self.state(index, out) else {
            return;
        };
        let mut delta = match choice.remove("delta") {
            Some(Value::Object(d)) => d,
            _ => Map::new(),
        };
        let finish_reason = choice.remove("finish_reason").filter(|f| !f.is_null());
        let state = &mut self.choices[pos];
        if state.finished {
            return;
        }
        // Calls the upstream made natively (rescue) pass on; the calls read
        // from the text are numbered after them.
        if let Some(Value::Array(native)) = delta.get("tool_calls") {
            let next = native
                .iter()
                .filter_map(|c| c.get("index")?.as_u64())
                .map(|i| usize::try_from(i).unwrap_or(usize::MAX).saturating_add(1))
                .max()
                .unwrap_or(0);
            state.calls_written = state.calls_written.max(next);
        }
        self.text.clear();
        let fed = match delta.remove("content") {
            Some(Value::String(content)) => state.reply.feed(&content, &mut self.text),
            _ => Ok(()),
        };
        self.collect_repairs(pos);
        if let Err(invalid) = fed {
            self.fail_invalid(pos, &invalid, out);
            return;
        }
        let state = &mut self.choices[pos];
        // Rule 4: the role once, in the first delta of the choice.
        if state.started {
            delta.remove("role");
        } else {
            delta.insert("role".into(), json!("assistant"));
        }
        if !self.text.is_empty() || (!state.started && finish_reason.is_none()) {
            delta.insert(
                "content".into(),
                Value::String(std::mem::take(&mut self.text)),
            );
        }
        let has_delta = delta.keys().any(|k| k != "role");
        let header = self
            .header
            .get_or_insert_with(|| ChunkHeader::from_chunk(chunk));
        if has_delta {
            choice.insert("index".into(), json!(index));
            choice.insert("delta".into(), Value::Object(delta));
            choice.insert("finish_reason".into(), Value::Null);
            header.write_choices(out, &Value::Array(vec![Value::Object(choice)]));
            state.started = true;
        }
        self.write_ready(pos, out);
        if let Some(reason) = finish_reason {
            self.finish_choice(pos, Some(reason), out);
        }
    }

    /// A block that could not become a call while `on_invalid` says to
    /// fail: the text the model wrote before it (what this delta made of
    /// it so far, in `self.text`) goes out first, then the error.
    fn fail_invalid(&mut self, pos: usize, invalid: &InvalidCall, out: &mut BytesMut) {
        if !self.text.is_empty() {
            let header = self.header.clone().unwrap_or_else(ChunkHeader::fallback);
            let state = &mut self.choices[pos];
            header.write_text(out, state.index, &self.text, !state.started);
            state.started = true;
            self.text.clear();
        }
        self.fail(out, &invalid.error());
    }

    /// The position of choice `index`'s state; past [`MAX_CHOICES`] distinct
    /// indexes the stream ends with an error event and `None` is returned.
    fn state(&mut self, index: u64, out: &mut BytesMut) -> Option<usize> {
        if let Some(&pos) = self.positions.get(&index) {
            return Some(pos);
        }
        if self.choices.len() >= MAX_CHOICES {
            self.fail(
                out,
                &GatewayError::UpstreamInvalid {
                    message: format!("The upstream stream uses more than {MAX_CHOICES} choices"),
                    code: "upstream_stream_too_large",
                },
            );
            return None;
        }
        self.positions.insert(index, self.choices.len());
        self.choices.push(ChoiceState {
            index,
            reply: ReplyParser::new(self.settings.clone()),
            started: false,
            finished: false,
            calls_written: 0,
            waiting: None,
        });
        Some(self.choices.len() - 1)
    }

    /// Ends a choice: the remaining text, then (once repairs are done) the
    /// calls and the finish chunk.
    fn finish_choice(&mut self, pos: usize, upstream_reason: Option<Value>, out: &mut BytesMut) {
        let header = self.header.clone().unwrap_or_else(ChunkHeader::fallback);
        let state = &mut self.choices[pos];
        state.finished = true;
        self.text.clear();
        if upstream_reason.as_ref().and_then(Value::as_str) == Some("length") {
            state.reply.cut_short();
        }
        if let Err(invalid) = state.reply.finish_text(&mut self.text) {
            self.fail_invalid(pos, &invalid, out);
            return;
        }
        if !self.text.is_empty() {
            header.write_text(out, state.index, &self.text, !state.started);
            state.started = true;
        }
        let waiting = state.reply.is_waiting();
        self.collect_repairs(pos);
        if waiting {
            self.choices[pos].waiting = Some(upstream_reason);
            return;
        }
        self.emit_calls(pos, upstream_reason, out);
    }

    /// Writes a finished choice's calls (indexes 0, 1, 2 ...) and its finish chunk.
    /// With `early_calls`, writes the choice's calls that are ready now.
    fn write_ready(&mut self, pos: usize, out: &mut BytesMut) {
        if !self.settings.early_calls || self.settings.legacy_functions || self.ended {
            return;
        }
        let header = self.header.clone().unwrap_or_else(ChunkHeader::fallback);
        let state = &mut self.choices[pos];
        for call in state.reply.take_ready() {
            header.write_whole_call(out, state.index, state.calls_written, &call, !state.started);
            state.calls_written += 1;
            state.started = true;
        }
    }

    fn emit_calls(&mut self, pos: usize, upstream_reason: Option<Value>, out: &mut BytesMut) {
        let header = self.header.clone().unwrap_or_else(ChunkHeader::fallback);
        let state = &mut self.choices[pos];
        let calls = match state.reply.take_calls() {
            Ok(calls) => calls,
            Err(invalid) => {
                self.fail(out, &invalid.error());
                return;
            }
        };
        let legacy = self.settings.legacy_functions;
        for call in &calls {
            if legacy {
                header.write_function_call(out, state.index, call, !state.started);
            } else {
                header.write_call(out, state.index, state.calls_written, call, !state.started);
            }
            state.calls_written += 1;
            state.started = true;
        }
        let reason = match (state.calls_written == 0, legacy) {
            (true, _) => upstream_reason.unwrap_or_else(|| json!("stop")),
            (false, true) => json!("function_call"),
            (false, false) => json!("tool_calls"),
        };
        header.write_finish(out, state.index, &reason, !state.started);
        state.started = true;
    }

    /// The upstream's stream is over (`[DONE]` or end of body). A body that
    /// ended before `[DONE]` with a choice unfinished was cut: an error
    /// event, never a finished answer.
    pub fn finish(&mut self, out: &mut BytesMut) {
        if self.ended {
            return;
        }
        let finished = !self.choices.is_empty() && self.choices.iter().all(|c| c.finished);
        if !self.upstream_done && !finished && !self.done_requested {
            return self.fail(out, &crate::upstream::chat_decode::cut());
        }
        self.done_requested = true;
        for pos in 0..self.choices.len() {
            if !self.choices[pos].finished {
                self.finish_choice(pos, None, out);
                if self.ended {
                    return;
                }
            }
        }
        if self.is_blocked() {
            return;
        }
        if self.include_usage
            && let (Some(usage), Some(header)) = (&self.usage, &self.header)
        {
            header.write_usage(out, usage);
        }
        out.extend_from_slice(encoder::DONE);
        self.ended = true;
    }

    /// The stream cannot go on: an error event, `[DONE]`, nothing after.
    pub fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        if self.ended {
            return;
        }
        // The code goes on the request's log line (the message can quote
        // the model's arguments, which stay out of the logs).
        crate::body::observed::told(error.code());
        emit::write_error(out, &error.to_json());
        self.ended = true;
    }
}

/// `(choice index, has role, content)` when a chunk of the common shape is
/// a plain content delta: one choice whose delta holds content (and perhaps
/// the role) and nothing else.
/// A chunk that only finishes its choice: its index and finish reason.
fn finish_only<'a>(chunk: &PlainChunk<'a>) -> Option<(u64, plain::Raw<'a>)> {
    let [choice] = &chunk.choices;
    let d = &choice.delta;
    let only = chunk.usage.is_none()
        && chunk.error.is_none()
        && d.content.is_none()
        && d.role.is_none()
        && d.tool_calls.is_none()
        && d.is_plain();
    only.then_some((choice.index, choice.finish_reason?))
}

fn content_only(chunk: PlainChunk<'_>) -> Option<(u64, bool, Cow<'_, str>)> {
    let [choice] = chunk.choices;
    let d = choice.delta;
    let plain = chunk.usage.is_none()
        && chunk.error.is_none()
        && choice.finish_reason.is_none()
        && d.tool_calls.is_none()
        && d.is_plain()
        && d.role.is_none_or(|r| r == "assistant");
    let content = d.content?;
    plain.then(|| (choice.index, d.role.is_some(), content))
}

/// Without a fallback model the rewriter is the whole transform: it asks for
/// no repairs, so nothing runs beside reading the upstream.
impl crate::sse::transform::Transform for StreamRewriter {
    fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        StreamRewriter::on_event(self, data, out);
    }
    fn finish(&mut self, out: &mut BytesMut) {
        StreamRewriter::finish(self, out);
    }
    fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        StreamRewriter::fail(self, out, error);
    }
    fn is_ended(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OnInvalid;
    use crate::natural::cache::ContractCache;
    use crate::natural::parser::ParserOptions;
    use crate::natural::request::{self, NaturalOptions, Rewrite};
    use crate::natural::validate::SchemaCache;
    use crate::sse::transform::Transform;
    use std::sync::Arc;

    fn rewriter() -> StreamRewriter {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"GetWeather"}}]}"#;
        let Rewrite::Rewritten {
            plan: Some(plan), ..
        } = request::rewrite(body, &NaturalOptions::default(), &ContractCache::default()).unwrap()
        else {
            panic!("a plan")
        };
        let settings = ReplySettings::new(
            "p",
            &plan,
            ParserOptions::default(),
            OnInvalid::Error,
            0,
            Arc::new(SchemaCache::new()),
        );
        StreamRewriter::new(settings, false)
    }

    #[test]
    fn plain_content_chunks_are_forwarded_byte_for_byte() {
        let mut r = rewriter();
        let mut out = BytesMut::new();
        // The role chunk too, header included.
        let first: &[u8] = br#"{"id": "x", "object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        r.on_event(first, &mut out);
        assert_eq!(&out[..], [b"data: ", first, b"\n\n"].concat());
        out.clear();
        // Spaces and key order that re-serializing would change: only a
        // forwarded chunk keeps them.
        let plain: &[u8] = br#"{"id": "x", "choices": [{"delta": {"content": "Hello there"}, "index": 0, "logprobs": null, "finish_reason": null}], "object": "chat.completion.chunk", "created": 1, "model": "m"}"#;
        r.on_event(plain, &mut out);
        assert_eq!(&out[..], [b"data: ", plain, b"\n\n"].concat());
        // Text that may open a call is held: that chunk cannot be forwarded as is.
        out.clear();
        r.on_event(br#"{"id": "x", "choices": [{"index": 0, "delta": {"content": "a <Get"}, "finish_reason": null}]}"#, &mut out);
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(text.contains("\"content\":\"a \""), "{text}");
    }

    /// A chunk of the upstream's stream, in its own field order and spacing.
    fn chunk(delta: &str, finish: &str) -> String {
        format!(
            r#"{{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
        )
    }

    #[test]
    fn the_fast_paths_write_what_the_general_path_writes() {
        let content = |text: &str| chunk(&format!(r#"{{"content":{}}}"#, json!(text)), "null");
        let streams = [
            // The role and prose, a call split across chunks, the finish.
            vec![
                chunk(r#"{"role":"assistant","content":""}"#, "null"),
                content("Let me "),
                content("check \"that\".\n\n<GetW"),
                content("eather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>"),
                chunk("{}", r#""stop""#),
            ],
            // The role with text, no call, a finish of its own.
            vec![
                chunk(r#"{"role":"assistant","content":"Hi"}"#, "null"),
                content(" there"),
                content(""),
                chunk("{}", r#""length""#),
            ],
            // No finish chunk: the end of the stream finishes the choice.
            vec![
                chunk(r#"{"role":"assistant","content":"Hi"}"#, "null"),
                content("<GetWeather>{\"location\": \"Oslo\"}</GetWeather>"),
            ],
            // Header fields only the general path can carry: same output.
            vec![
                r#"{"id":"c\u0031","object":"chat.completion.chunk","created":7.5,"model":"","choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}]}"#.into(),
                r#"{"id":"c\u0031","object":"chat.completion.chunk","created":7.5,"model":"","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]}"#.into(),
            ],
        ];
        for stream in streams {
            let mut chunks: Vec<&str> = stream.iter().map(String::as_str).collect();
            chunks.push("[DONE]");
            let (mut fast, mut general) =
                crate::sse::transform::twin::fast_and_general(rewriter, &chunks);
            // Call ids are drawn at random.
            for event in fast.iter_mut().chain(general.iter_mut()) {
                if let Some(Value::String(id)) =
                    event.pointer_mut("/choices/0/delta/tool_calls/0/id")
                {
                    *id = "call".into();
                }
            }
            let created = |events: &[Value]| {
                events
                    .iter()
                    .map(|e| e.get("created").cloned())
                    .collect::<Vec<_>>()
            };
            if created(&fast) != created(&general) {
                // A clock time stood in for `created` on both sides.
                assert!(stream[0].contains("7.5"));
                let strip = |events: Vec<Value>| {
                    events
                        .into_iter()
                        .map(|mut e| {
                            e.as_object_mut().map(|o| o.remove("created"));
                            e
                        })
                        .collect::<Vec<_>>()
                };
                assert_eq!(strip(fast), strip(general));
                continue;
            }
            assert_eq!(fast, general, "{chunks:#?}");
            assert!(fast.len() >= 3, "{fast:#?}");
        }
    }

    /// An invalid block in the delta that also carries the text before it
    /// (`on_invalid = "error"`): the text goes out, then the error; on the
    /// fast path and the general one alike, in the delta and at the end.
    #[test]
    fn the_text_before_an_invalid_call_goes_out_before_the_error() {
        let content = |text: &str| chunk(&format!(r#"{{"content":{}}}"#, json!(text)), "null");
        let role = chunk(r#"{"role":"assistant","content":""}"#, "null");
        let streams = [
            vec![
                role.clone(),
                content("Checking.\n<GetWeather>{oops</GetWeather>"),
            ],
            // Read at the end: a block never closed, with its text before.
            vec![role.clone(), content("Checking.\n<GetWeather>{oops")],
        ];
        for stream in streams {
            let mut chunks: Vec<&str> = stream.iter().map(String::as_str).collect();
            chunks.push("[DONE]");
            let (fast, general) = crate::sse::transform::twin::fast_and_general(rewriter, &chunks);
            assert_eq!(fast, general, "{chunks:#?}");
            let said: String = fast
                .iter()
                .filter_map(|e| e.pointer("/choices/0/delta/content")?.as_str())
                .collect();
            assert_eq!(said, "Checking.\n", "{fast:#?}");
            let error = fast.iter().position(|e| e.get("error").is_some());
            let text = fast.iter().rposition(|e| {
                e.pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.is_empty())
            });
            assert!(text < error && error.is_some(), "{fast:#?}");
            assert_eq!(fast[error.unwrap()]["error"]["code"], "invalid_tool_call");
        }
    }

    #[test]
    fn too_many_choice_indexes_end_the_stream_with_an_error() {
        let mut r = rewriter();
        let mut out = BytesMut::new();
        for i in 0..1_000 {
            let chunk = format!(
                r#"{{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":{i},"delta":{{"content":"x"}},"finish_reason":null}}]}}"#
            );
            r.on_event(chunk.as_bytes(), &mut out);
        }
        assert!(r.is_ended());
        assert_eq!(r.choices.len(), MAX_CHOICES);
        let body = String::from_utf8(out.to_vec()).unwrap();
        assert!(body.contains("upstream_stream_too_large"), "{body}");
    }
}
