//! [`Event`]s written as one Responses API answer: a stream of typed events
//! with increasing `sequence_number` (`response.created`, output items with
//! their deltas, one `response.completed` / `.incomplete` / `.failed`), and
//! the response object it builds, which is also the non-streaming answer.
//! Gateway tool calls are `mcp_call` items after an `mcp_list_tools` item per
//! server, as a hosted MCP tool's are. Sans-IO.

use bytes::{BufMut, BytesMut};
use serde_json::{Value, json};

use crate::api::responses_request::Echo;
use crate::config::ShowGatewayTools;
use crate::error::GatewayError;
use crate::exchange::{Call, Event, GatewayCall, GatewayStatus, Sink, Usage};
use crate::sse::encoder;
use crate::tools::drive::Take;
use crate::tools::{GatewayTool, Offer};

/// An output item still receiving deltas.
struct Open {
    index: usize,
    id: String,
    text: String,
}

/// Called once with the finished response object (to store it).
pub type OnComplete = Box<dyn FnOnce(&Value) + Send>;

/// Writes one Responses answer; streams its events when `stream`.
pub struct ResponsesEvents {
    response: Value,
    stream: bool,
    show: ShowGatewayTools,
    seq: u64,
    output: Vec<Value>,
    message: Option<Open>,
    reasoning: Option<Open>,
    /// Output index of each gateway call under way, by call id.
    gateway: Vec<(String, usize)>,
    finish: Option<String>,
    usage: Option<Usage>,
    error: Option<GatewayError>,
    /// The response object holds its end state.
    completed: bool,
    /// Called with the finished response object (to store it).
    on_complete: Option<OnComplete>,
    ended: bool,
    out: BytesMut,
}

/// A fresh id with `prefix` (`resp`, `msg`, `fc`, …).
fn new_id(prefix: &str) -> String {
    let call = crate::exchange::call_id();
    format!("{prefix}_{}", call.trim_start_matches("call_"))
}

impl ResponsesEvents {
    /// `model` is the model the client asked for; `offer` the gateway tools,
    /// listed first.
    pub fn new(
        model: &str,
        echo: &Echo,
        offer: &Offer,
        stream: bool,
        show: ShowGatewayTools,
    ) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let response = json!({
            "id": new_id("resp"),
            "object": "response",
            "created_at": created,
            "status": "in_progress",
            "error": null,
            "incomplete_details": null,
            "instructions": echo.instructions,
            "max_output_tokens": echo.max_output_tokens,
            "metadata": echo.metadata,
            "model": model,
            "output": [],
            "parallel_tool_calls": echo.parallel_tool_calls,
            "previous_response_id": echo.previous_response_id,
            "reasoning": echo.reasoning,
            "store": echo.store,
            "temperature": echo.temperature,
            "text": echo.text,
            "tool_choice": echo.tool_choice,
            "tools": echo.tools,
            "top_p": echo.top_p,
            "truncation": echo.truncation,
            "usage": null,
            "user": echo.user,
        });
        let mut this = ResponsesEvents {
            response,
            stream,
            show,
            seq: 0,
            output: Vec::new(),
            message: None,
            reasoning: None,
            gateway: Vec::new(),
            finish: None,
            usage: None,
            error: None,
            completed: false,
            on_complete: None,
            ended: false,
            out: BytesMut::new(),
        };
        if this.stream {
            // The same object twice: written out once.
            let object = serde_json::to_vec(&this.response).unwrap_or_default();
            this.write_object("response.created", &object);
            this.write_object("response.in_progress", &object);
        }
        if show != ShowGatewayTools::None {
            this.list_tools(offer);
        }
        this
    }

    /// `f` gets the finished response object (not a failed one).
    pub fn on_complete(&mut self, f: OnComplete) {
        self.on_complete = Some(f);
    }

    /// The response object as it stands (the whole answer once ended).
    pub fn into_response(mut self) -> Result<Value, GatewayError> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        self.complete();
        Ok(self.response)
    }

    fn write(&mut self, kind: &str, mut event: Value) {
        if !self.stream {
            return;
        }
        event["type"] = json!(kind);
        event["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.out.put_slice(b"event: ");
        self.out.put_slice(kind.as_bytes());
        self.out.put_slice(b"\n");
        encoder::write_json(&mut self.out, &event);
    }

    /// `{"response": <the object as it stands>}`, written without copying
    /// the object (its key order is what `write` would give).
    fn write_response(&mut self, kind: &str) {
        if !self.stream {
            return;
        }
        self.open_response(kind);
        put_json(&mut self.out, &self.response);
        self.close_response(kind);
    }

    /// [`Self::write_response`] with the object already written out.
    fn write_object(&mut self, kind: &str, object: &[u8]) {
        self.open_response(kind);
        self.out.put_slice(object);
        self.close_response(kind);
    }

    fn open_response(&mut self, kind: &str) {
        self.out.put_slice(b"event: ");
        self.out.put_slice(kind.as_bytes());
        self.out.put_slice(b"\ndata: {\"response\":");
    }

    fn close_response(&mut self, kind: &str) {
        self.out.put_slice(b",\"type\":");
        put_json(&mut self.out, kind);
        self.out.put_slice(b",\"sequence_number\":");
        put_json(&mut self.out, &self.seq);
        self.out.put_slice(b"}\n\n");
        self.seq += 1;
    }

    fn add_item(&mut self, item: Value) -> usize {
        let index = self.output.len();
        self.output.push(item.clone());
        self.write(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        index
    }

    fn item_done(&mut self, index: usize, item: Value) {
        self.output[index] = item.clone();
        self.write(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }

    /// One `mcp_list_tools` item per server the offered tools come from.
    fn list_tools(&mut self, offer: &Offer) {
        let mut servers: Vec<(&str, Vec<&GatewayTool>)> = Vec::new();
        for tool in &offer.tools {
            match servers.iter_mut().find(|(s, _)| *s == tool.server()) {
                Some((_, tools)) => tools.push(tool),
                None => servers.push((tool.server(), vec![tool])),
            }
        }
        for (server, tools) in servers {
            let id = new_id("mcpl");
            let listed: Vec<Value> = tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters, "annotations": null}))
                .collect();
            let item = json!({"id": id, "type": "mcp_list_tools", "server_label": server, "tools": [], "error": null});
            let index = self.add_item(item.clone());
            self.write(
                "response.mcp_list_tools.in_progress",
                json!({"item_id": id, "output_index": index}),
            );
            self.write(
                "response.mcp_list_tools.completed",
                json!({"item_id": id, "output_index": index}),
            );
            let mut done = item;
            done["tools"] = Value::Array(listed);
            self.item_done(index, done);
        }
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.close_reasoning();
        if self.message.is_none() {
            let id = new_id("msg");
            let index = self.add_item(json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}));
            self.write(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            self.message = Some(Open {
                index,
                id,
                text: String::new(),
            });
        }
        let Some(open) = &mut self.message else {
            return;
        };
        open.text.push_str(text);
        if !self.stream {
            return;
        }
        let index = open.index;
        let id = &open.id;
        write_text_delta(&mut self.out, id, index, text, self.seq);
        self.seq += 1;
    }

    fn close_message(&mut self) {
        let Some(Open { index, id, text }) = self.message.take() else {
            return;
        };
        self.write(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
        );
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        self.write(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        self.item_done(
            index,
            json!({"id": id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}),
        );
    }

    fn reasoning(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.close_message();
        if self.reasoning.is_none() {
            let id = new_id("rs");
            let index =
                self.add_item(json!({"id": id, "type": "reasoning", "summary": [], "content": []}));
            self.reasoning = Some(Open {
                index,
                id,
                text: String::new(),
            });
        }
        let Some(open) = &mut self.reasoning else {
            return;
        };
        open.text.push_str(text);
        let (id, index) = (open.id.clone(), open.index);
        self.write(
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text}),
        );
    }

    fn close_reasoning(&mut self) {
        let Some(Open { index, id, text }) = self.reasoning.take() else {
            return;
        };
        self.write(
            "response.reasoning_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
        );
        self.item_done(
            index,
            json!({"id": id, "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}]}),
        );
    }

    fn call(&mut self, call: Call) {
        self.close_message();
        self.close_reasoning();
        let id = new_id("fc");
        let index = self.add_item(
            json!({"id": id, "type": "function_call", "status": "in_progress",
            "call_id": call.id, "name": call.name, "arguments": ""}),
        );
        self.write(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": call.arguments}),
        );
        self.write(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments}),
        );
        self.item_done(
            index,
            json!({"id": id, "type": "function_call", "status": "completed",
                "call_id": call.id, "name": call.name, "arguments": call.arguments}),
        );
    }

    fn gateway_call(&mut self, call: GatewayCall) {
        if self.show == ShowGatewayTools::None {
            return;
        }
        self.close_message();
        self.close_reasoning();
        let item = |status: &str| {
            json!({"id": call.id, "type": "mcp_call", "server_label": call.server, "name": call.name,
                "arguments": call.arguments, "approval_request_id": null, "status": status,
                "output": call.output, "error": call.error})
        };
        match call.status {
            GatewayStatus::InProgress => {
                let index = self.add_item(item("in_progress"));
                self.gateway.push((call.id.clone(), index));
                let at = json!({"item_id": call.id, "output_index": index});
                self.write("response.mcp_call.in_progress", at.clone());
                let mut delta = at.clone();
                delta["delta"] = json!(call.arguments);
                self.write("response.mcp_call_arguments.delta", delta);
                let mut done = at;
                done["arguments"] = json!(call.arguments);
                self.write("response.mcp_call_arguments.done", done);
            }
            GatewayStatus::Completed | GatewayStatus::Failed => {
                let Some(pos) = self.gateway.iter().position(|(id, _)| *id == call.id) else {
                    return;
                };
                let (_, index) = self.gateway.swap_remove(pos);
                let (kind, status) = if call.status == GatewayStatus::Completed {
                    ("response.mcp_call.completed", "completed")
                } else {
                    ("response.mcp_call.failed", "failed")
                };
                self.write(kind, json!({"item_id": call.id, "output_index": index}));
                self.item_done(index, item(status));
            }
        }
    }

    /// Closes what is open and fills in the response object's end state.
    fn complete(&mut self) {
        if std::mem::replace(&mut self.completed, true) {
            return;
        }
        self.close_message();
        self.close_reasoning();
        let (status, incomplete) = match self.finish.as_deref() {
            Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some("content_filter") => ("incomplete", json!({"reason": "content_filter"})),
            _ => ("completed", Value::Null),
        };
        self.response["status"] = json!(status);
        self.response["incomplete_details"] = incomplete;
        self.response["output"] = Value::Array(std::mem::take(&mut self.output));
        if let Some(u) = self.usage {
            self.response["usage"] = json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.total_tokens,
            });
        }
        if let Some(f) = self.on_complete.take() {
            f(&self.response);
        }
    }
}

fn put_json<T: serde::Serialize + ?Sized>(out: &mut BytesMut, value: &T) {
    // Serializing plain data into memory cannot fail.
    let _ = serde_json::to_writer(out.writer(), value);
}

/// A `response.output_text.delta` event, written as `write` would write
/// it (same keys, same order) without building it as a tree: most of a
/// streamed answer is these.
fn write_text_delta(out: &mut BytesMut, id: &str, index: usize, text: &str, seq: u64) {
    out.put_slice(b"event: response.output_text.delta\ndata: {\"item_id\":");
    put_json(out, id);
    out.put_slice(b",\"output_index\":");
    put_json(out, &index);
    out.put_slice(b",\"content_index\":0,\"delta\":");
    put_json(out, text);
    out.put_slice(b",\"logprobs\":[],\"type\":\"response.output_text.delta\",\"sequence_number\":");
    put_json(out, &seq);
    out.put_slice(b"}\n\n");
}

impl crate::tools::drive::Output for ResponsesEvents {
    async fn flush(&mut self) -> crate::tools::drive::Flushed {
        crate::tools::drive::Flushed::Nothing
    }
}

impl Take for ResponsesEvents {
    fn take(&mut self) -> BytesMut {
        self.out.split()
    }
}

impl Sink for ResponsesEvents {
    fn event(&mut self, event: Event) {
        if self.ended {
            return;
        }
        match event {
            Event::Start(_) => {}
            Event::Text(text) => self.text(&text),
            Event::Reasoning(text) => self.reasoning(&text),
            Event::Call(call) => self.call(call),
            Event::Gateway(call) => self.gateway_call(call),
            Event::Finish(reason) => self.finish = Some(reason),
            Event::Usage(usage) => self.usage = Some(usage),
        }
    }

    fn fail(&mut self, error: GatewayError) {
        if self.ended || self.error.is_some() {
            return;
        }
        if self.stream {
            crate::body::observed::told(error.code());
            let body = error.to_json();
            self.response["status"] = json!("failed");
            self.response["error"] =
                json!({"code": body["error"]["code"], "message": body["error"]["message"]});
            self.write_response("response.failed");
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
        let kind = if self.response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.write_response(kind);
    }

    fn keep_alive(&mut self) {
        if !self.ended && self.stream {
            self.out.extend_from_slice(encoder::KEEP_ALIVE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Meta;
    use crate::exchange::answers::{self, without_made_up};

    fn encoder(stream: bool) -> ResponsesEvents {
        let echo = Echo {
            tools: json!([{"type": "function", "name": "f"}]),
            ..Echo::default()
        };
        let offer = Offer {
            tools: Vec::new(),
            withheld: Vec::new(),
            unavailable: Vec::new(),
        };
        ResponsesEvents::new("m", &echo, &offer, stream, ShowGatewayTools::Fields)
    }

    /// Each event of a stream, as (event name, payload).
    fn events(bytes: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(bytes).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (head, data) = e.split_once('\n').unwrap();
                let name = head.strip_prefix("event: ").unwrap().to_owned();
                let data = data.strip_prefix("data: ").unwrap();
                (name, serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    /// What the hand-written events write is what the tree would: same
    /// keys, same order, same escapes.
    #[test]
    fn hand_written_events_match_the_tree_byte_for_byte() {
        for text in [
            "plain",
            "\"quoted\" \\ back",
            "line\nbreak\ttab\u{1}",
            "é 日本 🎉",
            "",
        ] {
            let mut fast = BytesMut::new();
            write_text_delta(&mut fast, "msg_a\"b", 3, text, 41);
            let mut tree = encoder(true);
            tree.out.clear();
            tree.seq = 41;
            tree.write(
                "response.output_text.delta",
                json!({"item_id": "msg_a\"b", "output_index": 3, "content_index": 0, "delta": text, "logprobs": []}),
            );
            assert_eq!(fast, tree.out, "{text:?}");
        }
        let mut e = encoder(true);
        e.out.clear();
        let seq = e.seq;
        e.write_response("response.in_progress");
        let fast = e.out.split();
        e.seq = seq;
        let snapshot = e.response.clone();
        e.write("response.in_progress", json!({"response": snapshot}));
        assert_eq!(fast, e.out.split());
    }

    /// A whole answer at every split: the events are numbered from 0 with
    /// no gap, the deltas add up to the text, and the completed response
    /// holds it.
    #[test]
    fn a_streamed_answer_is_numbered_and_adds_up() {
        let text = ["Hel", "lo, \"wor", "ld\" 🎉", "!"];
        for split in 0..=text.len() {
            let mut e = encoder(true);
            let mut out = e.take();
            e.event(Event::Start(Meta::default()));
            for (i, t) in text.iter().enumerate() {
                e.event(Event::Text((*t).to_owned()));
                if i + 1 == split {
                    out.extend_from_slice(&e.take());
                }
            }
            e.event(Event::Finish("stop".into()));
            e.end();
            out.extend_from_slice(&e.take());
            let events = events(&out);
            for (i, (name, data)) in events.iter().enumerate() {
                assert_eq!(data["sequence_number"], i, "{name}");
                assert_eq!(data["type"], *name);
            }
            let deltas: String = events
                .iter()
                .filter(|(n, _)| n == "response.output_text.delta")
                .map(|(_, d)| d["delta"].as_str().unwrap())
                .collect();
            assert_eq!(deltas, text.concat());
            let (last, done) = events.last().unwrap();
            assert_eq!(last, "response.completed");
            assert_eq!(
                done["response"]["output"][0]["content"][0]["text"],
                text.concat()
            );
            assert_eq!(done["response"]["status"], "completed");
        }
    }

    #[test]
    fn a_whole_answer_writes_no_events() {
        let mut e = encoder(false);
        e.event(Event::Text("hi".into()));
        e.event(Event::Finish("length".into()));
        e.end();
        assert!(e.take().is_empty());
        let response = e.into_response().unwrap();
        assert_eq!(response["status"], "incomplete");
        assert_eq!(response["output"][0]["content"][0]["text"], "hi");
    }

    proptest::proptest! {
        /// However an answer's texts are cut into events, its stream adds
        /// up: events numbered from 0 without a gap; each output item added
        /// once and done once, in order, done as the response holds it;
        /// every item's deltas are its text or arguments; and the stream
        /// ends with the response the same answer gives whole, unstreamed.
        #[test]
        fn any_cut_of_an_answer_streams_the_response_it_gives_whole(
            (answer, cuts) in answers::answer()
        ) {
            let mut streamed = encoder(true);
            for event in answer.events(&cuts) {
                streamed.event(event);
            }
            streamed.end();
            let events = events(&streamed.take());
            let mut whole = encoder(false);
            for event in answer.events(&[]) {
                whole.event(event);
            }
            whole.end();
            let expected = whole.into_response().unwrap();

            for (i, (name, data)) in events.iter().enumerate() {
                proptest::prop_assert_eq!(&data["sequence_number"], &json!(i));
                proptest::prop_assert_eq!(&data["type"], &json!(name));
            }
            let (last, end) = events.last().unwrap();
            let terminal = if answer.finish == "length" {
                "response.incomplete"
            } else {
                "response.completed"
            };
            proptest::prop_assert_eq!(last, terminal);
            let response = &end["response"];
            proptest::prop_assert_eq!(without_made_up(response), without_made_up(&expected));
            let output = response["output"].as_array().unwrap();
            let added: Vec<u64> = events
                .iter()
                .filter(|(n, _)| n == "response.output_item.added")
                .map(|(_, d)| d["output_index"].as_u64().unwrap())
                .collect();
            proptest::prop_assert_eq!(added, (0..output.len() as u64).collect::<Vec<_>>());
            for (index, item) in output.iter().enumerate() {
                let done: Vec<&Value> = events
                    .iter()
                    .filter(|(n, d)| n == "response.output_item.done" && d["output_index"] == index)
                    .map(|(_, d)| &d["item"])
                    .collect();
                proptest::prop_assert_eq!(done, vec![item]);
                let deltas = |kind: &str| -> String {
                    events
                        .iter()
                        .filter(|(n, d)| n == kind && d["item_id"] == item["id"])
                        .map(|(_, d)| d["delta"].as_str().unwrap())
                        .collect()
                };
                let (delta, whole) = match item["type"].as_str() {
                    Some("message") => ("response.output_text.delta", &item["content"][0]["text"]),
                    Some("reasoning") => ("response.reasoning_text.delta", &item["content"][0]["text"]),
                    Some("function_call") => ("response.function_call_arguments.delta", &item["arguments"]),
                    Some("mcp_call") => ("response.mcp_call_arguments.delta", &item["arguments"]),
                    other => panic!("an item of type {other:?}"),
                };
                proptest::prop_assert_eq!(&json!(deltas(delta)), whole);
                // Text and reasoning come one item at a time (gateway calls
                // run side by side).
                if matches!(item["type"].as_str(), Some("message" | "reasoning")) {
                    let at = |kind: &str| {
                        events
                            .iter()
                            .position(|(n, d)| n == kind && d["output_index"] == index)
                            .unwrap()
                    };
                    let between = &events[at("response.output_item.added")..at("response.output_item.done")];
                    proptest::prop_assert!(
                        between.iter().all(|(_, d)| d["output_index"] == index),
                        "item {} overlaps another: {:?}", index, between
                    );
                }
            }
            let texts = |kind: &str| -> String {
                output
                    .iter()
                    .filter(|i| i["type"] == kind)
                    .map(|i| i["content"][0]["text"].as_str().unwrap())
                    .collect()
            };
            proptest::prop_assert_eq!(texts("message"), answer.text.concat());
            proptest::prop_assert_eq!(texts("reasoning"), answer.reasoning.concat());
        }
    }
}
