//! [`Event`]s written as one Anthropic Messages answer: the stream
//! `message_start`, `ping`, then per content block `content_block_start`,
//! its `content_block_delta`s and `content_block_stop`, then `message_delta`
//! (stop reason, usage) and `message_stop`; a failure is an `error` event.
//! The same blocks make the message object that is the non-streaming
//! answer. Gateway tool calls are `mcp_tool_use` / `mcp_tool_result` blocks,
//! as Anthropic's MCP connector writes them, unless hidden. Sans-IO.

use bytes::{BufMut, BytesMut};
use serde_json::{Value, json};

use crate::config::ShowGatewayTools;
use crate::error::GatewayError;
use crate::exchange::{Call, Event, GatewayCall, GatewayStatus, Sink, Usage};
use crate::sse::encoder;
use crate::tools::drive::Take;

/// The kind of the content block receiving deltas.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
}

/// A fresh id with `prefix` (`msg`, `toolu`, …).
pub fn new_id(prefix: &str) -> String {
    let call = crate::exchange::call_id();
    format!("{prefix}_{}", call.trim_start_matches("call_"))
}

/// The Anthropic stop reason of a chat `finish_reason`.
fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("tool_calls") => "tool_use",
        Some("length") => "max_tokens",
        _ => "end_turn",
    }
}

/// Writes one Messages answer; streams its events when `stream`.
pub struct MessagesEvents {
    message: Value,
    stream: bool,
    show: ShowGatewayTools,
    blocks: Vec<Value>,
    open: Option<Open>,
    /// The open block's text so far (written into its block when it closes).
    open_text: String,
    finish: Option<String>,
    usage: Usage,
    error: Option<GatewayError>,
    /// The message object holds its end state.
    completed: bool,
    ended: bool,
    out: BytesMut,
    /// The request's `stop_sequences`, and the end of the text written so
    /// far (as long as the longest of them): an answer that stopped with one
    /// of them showing reports it.
    stop_sequences: Vec<String>,
    tail: String,
}

impl MessagesEvents {
    /// `model` is the model the client asked for.
    pub fn new(model: &str, stream: bool, show: ShowGatewayTools) -> Self {
        let message = json!({
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        let mut this = MessagesEvents {
            message,
            stream,
            show,
            blocks: Vec::new(),
            open: None,
            open_text: String::new(),
            finish: None,
            usage: Usage::default(),
            error: None,
            completed: false,
            ended: false,
            out: BytesMut::new(),
            stop_sequences: Vec::new(),
            tail: String::new(),
        };
        let snapshot = this.message.clone();
        this.write("message_start", json!({"message": snapshot}));
        this.write("ping", json!({}));
        this
    }

    /// The message object (the whole answer once ended), or the failure.
    pub fn into_message(mut self) -> Result<Value, GatewayError> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        self.complete();
        Ok(self.message)
    }

    fn write(&mut self, kind: &str, mut event: Value) {
        if !self.stream {
            return;
        }
        event["type"] = json!(kind);
        self.out.put_slice(b"event: ");
        self.out.put_slice(kind.as_bytes());
        self.out.put_slice(b"\n");
        encoder::write_json(&mut self.out, &event);
    }

    /// Starts a block; returns its index.
    fn start_block(&mut self, block: Value) -> usize {
        self.close();
        let index = self.blocks.len();
        self.blocks.push(block.clone());
        self.write(
            "content_block_start",
            json!({"index": index, "content_block": block}),
        );
        index
    }

    fn delta(&mut self, index: usize, delta: Value) {
        self.write(
            "content_block_delta",
            json!({"index": index, "delta": delta}),
        );
    }

    fn stop_block(&mut self, index: usize) {
        self.write("content_block_stop", json!({"index": index}));
    }

    /// Stops the block receiving deltas, if any.
    fn close(&mut self) {
        if let Some(kind) = self.open.take() {
            let index = self.blocks.len() - 1;
            self.blocks[index][kind.field()] = Value::String(std::mem::take(&mut self.open_text));
            self.stop_block(index);
        }
    }

    fn streamed(&mut self, kind: Open, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.open != Some(kind) {
            let block = match kind {
                Open::Text => json!({"type": "text", "text": ""}),
                Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            };
            self.start_block(block);
            self.open = Some(kind);
        }
        self.open_text.push_str(text);
        if self.stream {
            write_delta(&mut self.out, self.blocks.len() - 1, kind, text);
        }
    }

    /// A whole tool call block: started empty, its input as one delta.
    fn tool_block(&mut self, mut block: Value, input_field: &str, arguments: &str) {
        let input: Value = match serde_json::from_str::<Value>(arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        };
        block[input_field] = json!({});
        let index = self.start_block(block.clone());
        let partial = if input.as_object().is_some_and(|o| !o.is_empty()) {
            input.to_string()
        } else {
            "{}".to_owned()
        };
        self.delta(
            index,
            json!({"type": "input_json_delta", "partial_json": partial}),
        );
        self.blocks[index][input_field] = input;
        self.stop_block(index);
    }

    fn call(&mut self, call: Call) {
        // The chat call's own id behind `toolu_`: the history the client
        // sends back carries this one string on both the call and its
        // result, so the upstream sees them matched.
        let id = if call.id.is_empty() {
            new_id("toolu")
        } else if call.id.starts_with("toolu_") {
            call.id
        } else {
            format!("toolu_{}", call.id.trim_start_matches("call_"))
        };
        let block = json!({"type": "tool_use", "id": id, "name": call.name});
        self.tool_block(block, "input", &call.arguments);
    }

    fn gateway_call(&mut self, call: GatewayCall) {
        if self.show == ShowGatewayTools::None {
            return;
        }
        match call.status {
            GatewayStatus::InProgress => {
                let block = json!({"type": "mcp_tool_use", "id": call.id, "name": call.name, "server_name": call.server});
                self.tool_block(block, "input", &call.arguments);
            }
            GatewayStatus::Completed | GatewayStatus::Failed => {
                let failed = call.status == GatewayStatus::Failed;
                let text = if failed {
                    call.error.or(call.output).unwrap_or_default()
                } else {
                    call.output.unwrap_or_default()
                };
                let block = json!({"type": "mcp_tool_result", "tool_use_id": call.id,
                    "is_error": failed, "content": [{"type": "text", "text": text}]});
                let index = self.start_block(block);
                self.stop_block(index);
            }
        }
    }

    /// The request's `stop_sequences`: an answer that stops with one of
    /// them at the end of its text says `stop_sequence`.
    pub fn with_stop_sequences(mut self, stop_sequences: Vec<String>) -> Self {
        self.stop_sequences = stop_sequences;
        self
    }

    /// Keeps the end of the text, as long as the longest stop sequence.
    fn remember_tail(&mut self, text: &str) {
        let Some(longest) = self.stop_sequences.iter().map(String::len).max() else {
            return;
        };
        self.tail.push_str(text);
        if self.tail.len() > 2 * longest.max(64) {
            let mut cut = self.tail.len() - longest;
            while !self.tail.is_char_boundary(cut) {
                cut -= 1;
            }
            self.tail.drain(..cut);
        }
    }

    /// Closes the open block and fills in the message's end state.
    fn complete(&mut self) {
        if std::mem::replace(&mut self.completed, true) {
            return;
        }
        self.close();
        self.message["content"] = Value::Array(std::mem::take(&mut self.blocks));
        self.message["stop_reason"] = json!(stop_reason(self.finish.as_deref()));
        let stopped = self.finish.as_deref() == Some("stop");
        if let Some(sequence) = self
            .stop_sequences
            .iter()
            .find(|s| stopped && !s.is_empty() && self.tail.ends_with(s.as_str()))
        {
            self.message["stop_reason"] = json!("stop_sequence");
            self.message["stop_sequence"] = json!(sequence);
        }
        self.message["usage"] = json!({
            "input_tokens": self.usage.prompt_tokens,
            "output_tokens": self.usage.completion_tokens,
        });
    }
}

impl Open {
    /// The block's text field, and its delta's type.
    fn field(self) -> &'static str {
        match self {
            Open::Text => "text",
            Open::Thinking => "thinking",
        }
    }
}

/// A `content_block_delta` of text or thinking, written as `write` would
/// write it (same keys, same order) without building it as a tree: most of
/// a streamed answer is these.
fn write_delta(out: &mut BytesMut, index: usize, kind: Open, text: &str) {
    out.put_slice(b"event: content_block_delta\ndata: {\"index\":");
    // Serializing plain data into memory cannot fail.
    let _ = serde_json::to_writer(out.writer(), &index);
    out.put_slice(match kind {
        Open::Text => b",\"delta\":{\"type\":\"text_delta\",\"text\":".as_slice(),
        Open::Thinking => b",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":",
    });
    let _ = serde_json::to_writer(out.writer(), text);
    out.put_slice(b"},\"type\":\"content_block_delta\"}\n\n");
}

impl crate::tools::drive::Output for MessagesEvents {
    async fn flush(&mut self) -> crate::tools::drive::Flushed {
        crate::tools::drive::Flushed::Nothing
    }
}

impl Take for MessagesEvents {
    fn take(&mut self) -> BytesMut {
        self.out.split()
    }
}

impl Sink for MessagesEvents {
    fn event(&mut self, event: Event) {
        if self.ended {
            return;
        }
        match event {
            Event::Start(_) => {}
            Event::Text(text) => {
                self.remember_tail(&text);
                self.streamed(Open::Text, &text);
            }
            Event::Reasoning(text) => self.streamed(Open::Thinking, &text),
            Event::Call(call) => self.call(call),
            Event::Gateway(call) => self.gateway_call(call),
            Event::Finish(reason) => self.finish = Some(reason),
            Event::Usage(usage) => self.usage = usage,
        }
    }

    fn fail(&mut self, error: GatewayError) {
        if self.ended || self.error.is_some() {
            return;
        }
        if self.stream {
            crate::body::observed::told(error.code());
            let body = error_body(&error);
            self.write("error", json!({"error": body["error"]}));
            self.ended = true;
        }
        self.error = Some(error);
    }

    fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        if self.error.is_some() {
            return;
        }
        self.complete();
        let delta = json!({
            "delta": {"stop_reason": self.message["stop_reason"], "stop_sequence": self.message["stop_sequence"]},
            "usage": self.message["usage"],
        });
        self.write("message_delta", delta);
        self.write("message_stop", json!({}));
    }

    fn keep_alive(&mut self) {
        if !self.ended && self.stream {
            self.out.extend_from_slice(encoder::KEEP_ALIVE);
        }
    }
}

/// Anthropic's error type for a gateway error.
fn error_type(error: &GatewayError) -> &'static str {
    match error.status().as_u16() {
        400 | 405 | 408 | 413 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "api_error",
    }
}

/// `{"type": "error", "error": {"type", "message"}}`.
pub fn error_body(error: &GatewayError) -> Value {
    let mut message = error.to_string();
    if let Some(param) = error.to_json()["error"]["param"].as_str() {
        message = format!("{param}: {message}");
    }
    json!({"type": "error", "error": {"type": error_type(error), "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::answers::{self, without_made_up};

    /// What the hand-written deltas write is what the tree would: same keys,
    /// same order, same escapes.
    #[test]
    fn hand_written_deltas_match_the_tree_byte_for_byte() {
        for text in [
            "plain",
            "\"quoted\" \\ back",
            "line\nbreak\u{1}",
            "é 日本 🎉",
        ] {
            for (kind, delta) in [
                (Open::Text, json!({"type": "text_delta", "text": text})),
                (
                    Open::Thinking,
                    json!({"type": "thinking_delta", "thinking": text}),
                ),
            ] {
                let mut fast = BytesMut::new();
                write_delta(&mut fast, 7, kind, text);
                let mut tree = MessagesEvents::new("m", true, ShowGatewayTools::Fields);
                tree.take();
                tree.delta(7, delta);
                assert_eq!(fast, tree.take(), "{text:?}");
            }
        }
    }

    #[test]
    fn errors_take_anthropic_shape() {
        let e = GatewayError::bad_request("nope", Some("tools.0.type"));
        assert_eq!(
            error_body(&e),
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "tools.0.type: nope"}})
        );
        assert_eq!(
            error_type(&GatewayError::Unauthorized(
                crate::error::KeyRefused::Unknown
            )),
            "authentication_error"
        );
        assert_eq!(
            error_type(&GatewayError::UnknownModel("x".into())),
            "not_found_error"
        );
        assert_eq!(error_type(&GatewayError::Overloaded), "overloaded_error");
    }

    /// The `(event, data)` pairs written so far.
    fn events(m: &mut MessagesEvents) -> Vec<(String, Value)> {
        let text = String::from_utf8(m.take().to_vec()).unwrap();
        text.split("\n\n")
            .filter(|c| c.starts_with("event: "))
            .map(|c| {
                let mut lines = c.lines();
                let kind = lines
                    .next()
                    .unwrap()
                    .trim_start_matches("event: ")
                    .to_owned();
                let data = lines.next().unwrap().trim_start_matches("data: ");
                (kind, serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    fn answer(m: &mut MessagesEvents) {
        m.event(Event::Reasoning("think".into()));
        m.event(Event::Text("Hel".into()));
        m.event(Event::Text("lo".into()));
        m.event(Event::Call(Call {
            id: "toolu_a".into(),
            name: "f".into(),
            arguments: "{\"x\":1}".into(),
        }));
        m.event(Event::Finish("tool_calls".into()));
        m.event(Event::Usage(Usage {
            prompt_tokens: 5,
            completion_tokens: 7,
            total_tokens: 12,
        }));
        m.end();
    }

    #[test]
    fn stream_golden_event_sequence() {
        let mut m = MessagesEvents::new("demo", true, ShowGatewayTools::Fields);
        answer(&mut m);
        let got = events(&mut m);
        let kinds: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (kind, data) in &got {
            assert_eq!(data["type"], json!(kind));
        }
        assert_eq!(
            got[3].1["delta"],
            json!({"type": "thinking_delta", "thinking": "think"})
        );
        assert_eq!(
            got[7].1["delta"],
            json!({"type": "text_delta", "text": "lo"})
        );
        assert_eq!(
            got[9].1["content_block"],
            json!({"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}})
        );
        assert_eq!(
            got[10].1["delta"],
            json!({"type": "input_json_delta", "partial_json": "{\"x\":1}"})
        );
        assert_eq!(
            got[12].1,
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"input_tokens": 5, "output_tokens": 7}})
        );
    }

    #[test]
    fn message_golden() {
        let mut m = MessagesEvents::new("demo", false, ShowGatewayTools::Fields);
        answer(&mut m);
        assert!(m.take().is_empty());
        let message = m.into_message().unwrap();
        assert!(message["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["content"],
            json!([
                {"type": "thinking", "thinking": "think", "signature": ""},
                {"type": "text", "text": "Hello"},
                {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"x": 1}}
            ])
        );
        assert_eq!(
            message["usage"],
            json!({"input_tokens": 5, "output_tokens": 7})
        );
    }

    #[test]
    fn length_is_max_tokens_and_failure_is_an_error_event() {
        let mut m = MessagesEvents::new("demo", false, ShowGatewayTools::Fields);
        m.event(Event::Text("a".into()));
        m.event(Event::Finish("length".into()));
        m.end();
        assert_eq!(m.into_message().unwrap()["stop_reason"], "max_tokens");
        let mut m = MessagesEvents::new("demo", true, ShowGatewayTools::Fields);
        m.fail(GatewayError::Overloaded);
        m.end();
        let got = events(&mut m);
        let last = &got.last().unwrap().1;
        assert_eq!(last["type"], "error");
        assert_eq!(last["error"]["type"], "overloaded_error");
    }

    #[test]
    fn hidden_gateway_calls_write_nothing() {
        let mut m = MessagesEvents::new("demo", false, ShowGatewayTools::None);
        m.event(Event::Gateway(GatewayCall {
            index: 0,
            id: "g1".into(),
            name: "t".into(),
            server: "builtin".into(),
            arguments: "{}".into(),
            status: GatewayStatus::InProgress,
            output: None,
            error: None,
        }));
        m.end();
        assert_eq!(m.into_message().unwrap()["content"], json!([]));
    }

    /// A stream put together the way Anthropic's SDKs do: blocks from their
    /// starts, text, thinking and input JSON from their deltas, the end state
    /// from `message_delta`. It checks the order on the way: `message_start`
    /// first, one block open at a time, deltas only to the open one,
    /// `message_stop` last.
    fn assemble(events: &[(String, Value)]) -> Result<Value, String> {
        let mut message = Value::Null;
        let mut open: Option<(usize, String)> = None;
        for (i, (kind, data)) in events.iter().enumerate() {
            match kind.as_str() {
                "message_start" if i == 0 => message = data["message"].clone(),
                "ping" => {}
                "content_block_start" => {
                    let content = message["content"].as_array_mut().ok_or("no message")?;
                    if open.is_some() || data["index"] != content.len() {
                        return Err(format!("block {} starts out of turn", data["index"]));
                    }
                    content.push(data["content_block"].clone());
                    open = Some((content.len() - 1, String::new()));
                }
                "content_block_delta" => {
                    let Some((index, json)) = &mut open else {
                        return Err("a delta outside a block".into());
                    };
                    if data["index"] != *index {
                        return Err(format!(
                            "a delta to block {} while {index} is open",
                            data["index"]
                        ));
                    }
                    let block = &mut message["content"][*index];
                    let delta = &data["delta"];
                    match delta["type"].as_str() {
                        Some(kind @ ("text_delta" | "thinking_delta")) => {
                            let field = kind.trim_end_matches("_delta");
                            answers::append(&mut block[field], delta[field].as_str().unwrap());
                        }
                        Some("input_json_delta") => {
                            json.push_str(delta["partial_json"].as_str().unwrap());
                        }
                        other => return Err(format!("a delta of type {other:?}")),
                    }
                }
                "content_block_stop" => {
                    let Some((index, json)) = open.take() else {
                        return Err("a stop outside a block".into());
                    };
                    if data["index"] != index {
                        return Err(format!(
                            "block {} stopped while {index} is open",
                            data["index"]
                        ));
                    }
                    if !json.is_empty() {
                        message["content"][index]["input"] =
                            serde_json::from_str(&json).map_err(|e| format!("input JSON: {e}"))?;
                    }
                }
                "message_delta" => {
                    for key in ["stop_reason", "stop_sequence"] {
                        message[key] = data["delta"][key].clone();
                    }
                    for (key, value) in data["usage"].as_object().ok_or("no usage")? {
                        message["usage"][key] = value.clone();
                    }
                }
                "message_stop" if i == events.len() - 1 && open.is_none() => {}
                other => return Err(format!("{other} at {i}")),
            }
        }
        match events.last() {
            Some((kind, _)) if kind == "message_stop" => Ok(message),
            _ => Err("no message_stop".into()),
        }
    }

    proptest::proptest! {
        /// However an answer's texts are cut into events, a client that
        /// puts its stream together gets the message the same answer gives
        /// whole, unstreamed, and the stream keeps Anthropic's order.
        #[test]
        fn any_cut_of_an_answer_streams_the_message_it_gives_whole(
            (answer, cuts) in answers::answer()
        ) {
            let mut streamed = MessagesEvents::new("m", true, ShowGatewayTools::Fields);
            for event in answer.events(&cuts) {
                streamed.event(event);
            }
            streamed.end();
            let events = events(&mut streamed);
            let assembled = assemble(&events);
            proptest::prop_assert!(assembled.is_ok(), "{:?}: {:#?}", assembled, events);
            let mut whole = MessagesEvents::new("m", false, ShowGatewayTools::Fields);
            for event in answer.events(&[]) {
                whole.event(event);
            }
            whole.end();
            let expected = whole.into_message().unwrap();
            proptest::prop_assert_eq!(without_made_up(&assembled.unwrap()), without_made_up(&expected));
            let texts = |kind: &str| -> String {
                expected["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| b["type"] == kind)
                    .map(|b| b[kind].as_str().unwrap())
                    .collect()
            };
            proptest::prop_assert_eq!(texts("text"), answer.text.concat());
            proptest::prop_assert_eq!(texts("thinking"), answer.reasoning.concat());
        }
    }
}
