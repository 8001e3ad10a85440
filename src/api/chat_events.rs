//! [`Event`]s written as a Chat Completions stream, chunk by chunk, by the
//! rules real clients hold a stream to (checked by `tests/it/conformance`): one `id`, the role in the first delta
//! only, text before calls, calls one delta each with indexes 0, 1, 2, one
//! finish reason at the very end, usage (if asked) last, then `[DONE]`.
//! Gateway tool calls travel as `gateway_tool_calls` on deltas (rules 21-22),
//! never as `tool_calls` and never with a finish reason. Sans-IO.

use bytes::BytesMut;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::config::ShowGatewayTools;
use crate::error::GatewayError;
use crate::exchange::{Call, Event, GatewayCall, Meta, Sink};
use crate::natural::emit::{self, ChunkHeader};
use crate::natural::reply::ReadyCall;
use crate::sse::encoder;
use crate::tools::drive::Take;
use crate::tools::show;

/// Writes one streamed chat answer into a buffer the driver drains.
pub struct ChatEvents {
    header: Option<ChunkHeader>,
    /// Whether a delta was written (the first carries the role).
    started: bool,
    /// The client's calls, written at the finish.
    calls: Vec<Call>,
    include_usage: bool,
    show: ShowGatewayTools,
    ended: bool,
    out: BytesMut,
}

/// A delta holding only gateway call reports.
#[derive(Serialize)]
struct GatewayDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    gateway_tool_calls: [&'a GatewayCall; 1],
}

impl ChatEvents {
    pub fn new(include_usage: bool, show: ShowGatewayTools) -> Self {
        ChatEvents {
            header: None,
            started: false,
            calls: Vec::new(),
            include_usage,
            show,
            ended: false,
            out: BytesMut::new(),
        }
    }

    fn header(&mut self) -> &ChunkHeader {
        self.header.get_or_insert_with(ChunkHeader::fallback)
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let first = !self.started;
        self.started = true;
        let mut out = std::mem::take(&mut self.out);
        self.header().write_text(&mut out, 0, text, first);
        self.out = out;
    }

    fn gateway(&mut self, call: &GatewayCall) {
        if self.show == ShowGatewayTools::None {
            return;
        }
        let first = !self.started;
        self.started = true;
        let delta = GatewayDelta {
            role: first.then_some("assistant"),
            gateway_tool_calls: [call],
        };
        let choices =
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]);
        let mut out = std::mem::take(&mut self.out);
        self.header().write_choices(&mut out, &choices);
        self.out = out;
        if self.show == ShowGatewayTools::Details {
            self.text(&show::details_block(call));
        }
    }

    fn finish(&mut self, reason: &str) {
        let calls = std::mem::take(&mut self.calls);
        let mut out = std::mem::take(&mut self.out);
        let header = self.header.get_or_insert_with(ChunkHeader::fallback);
        for (i, call) in calls.iter().enumerate() {
            let ready = ReadyCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            };
            header.write_call(&mut out, 0, i, &ready, !self.started);
            self.started = true;
        }
        let reason = if calls.is_empty() {
            Value::String(reason.to_owned())
        } else {
            json!("tool_calls")
        };
        header.write_finish(&mut out, 0, &reason, !self.started);
        self.started = true;
        self.out = out;
    }
}

/// The chunk header fields of `meta`.
pub fn header_of(meta: &Meta) -> ChunkHeader {
    let mut fields = Map::new();
    if let Some(id) = &meta.id {
        fields.insert("id".into(), json!(id));
    }
    if let Some(created) = meta.created {
        fields.insert("created".into(), json!(created));
    }
    if let Some(model) = &meta.model {
        fields.insert("model".into(), json!(model));
    }
    if let Some(fp) = &meta.system_fingerprint {
        fields.insert("system_fingerprint".into(), json!(fp));
    }
    ChunkHeader::from_chunk(&fields)
}

impl Take for ChatEvents {
    fn take(&mut self) -> BytesMut {
        self.out.split()
    }
}

impl Sink for ChatEvents {
    fn event(&mut self, event: Event) {
        if self.ended {
            return;
        }
        match event {
            Event::Start(meta) => {
                if self.header.is_none() {
                    self.header = Some(header_of(&meta));
                }
            }
            Event::Text(text) => self.text(&text),
            Event::Reasoning(text) => {
                let first = !self.started;
                self.started = true;
                let mut delta = json!({"reasoning_content": text});
                if first {
                    delta["role"] = json!("assistant");
                }
                let choices =
                    json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]);
                let mut out = std::mem::take(&mut self.out);
                self.header().write_choices(&mut out, &choices);
                self.out = out;
            }
            Event::Call(call) => self.calls.push(call),
            Event::Gateway(call) => self.gateway(&call),
            Event::Finish(reason) => self.finish(&reason),
            Event::Usage(usage) => {
                if self.include_usage {
                    let usage = serde_json::to_value(usage).unwrap_or(Value::Null);
                    let mut out = std::mem::take(&mut self.out);
                    self.header().write_usage(&mut out, &usage);
                    self.out = out;
                }
            }
        }
    }

    fn fail(&mut self, error: GatewayError) {
        if self.ended {
            return;
        }
        crate::body::observed::told(error.code());
        emit::write_error(&mut self.out, &error.to_json());
        self.ended = true;
    }

    fn end(&mut self) {
        if !self.ended {
            self.out.extend_from_slice(encoder::DONE);
            self.ended = true;
        }
    }

    fn keep_alive(&mut self) {
        if !self.ended {
            self.out.extend_from_slice(encoder::KEEP_ALIVE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::answers;
    use crate::exchange::{GatewayStatus, Usage};

    fn run(show: ShowGatewayTools, events: Vec<Event>) -> String {
        let mut s = ChatEvents::new(true, show);
        for e in events {
            s.event(e);
        }
        s.end();
        String::from_utf8(s.take().to_vec()).unwrap()
    }

    fn gw(status: GatewayStatus) -> Event {
        Event::Gateway(GatewayCall {
            index: 0,
            id: "call_g".into(),
            name: "clock".into(),
            server: "builtin".into(),
            arguments: "{}".into(),
            status,
            output: (status == GatewayStatus::Completed).then(|| "12:00".into()),
            error: None,
        })
    }

    fn script() -> Vec<Event> {
        vec![
            Event::Start(Meta {
                id: Some("c1".into()),
                created: Some(7),
                model: Some("m".into()),
                system_fingerprint: None,
            }),
            Event::Text("Checking.".into()),
            gw(GatewayStatus::InProgress),
            gw(GatewayStatus::Completed),
            Event::Text(" It is noon.".into()),
            Event::Call(Call {
                id: "call_c".into(),
                name: "Notify".into(),
                arguments: "{}".into(),
            }),
            Event::Finish("stop".into()),
            Event::Usage(Usage {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
            }),
        ]
    }

    #[test]
    fn one_answer_with_gateway_fields_client_calls_and_usage() {
        let out = run(ShowGatewayTools::Fields, script());
        let lines: Vec<&str> = out.split("\n\n").filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 9, "{out}");
        assert!(
            lines[0].contains(r#""delta":{"role":"assistant","content":"Checking."}"#),
            "{out}"
        );
        assert!(lines[1].contains(r#""gateway_tool_calls":[{"index":0,"id":"call_g","name":"clock","server":"builtin","arguments":"{}","status":"in_progress"}]"#), "{out}");
        assert!(
            lines[2].contains(r#""status":"completed","output":"12:00""#),
            "{out}"
        );
        assert!(!lines[1].contains("role") && !lines[1].contains("finish_reason\":\""));
        assert!(
            lines[4].contains(r#""tool_calls":[{"index":0,"id":"call_c""#),
            "{out}"
        );
        assert!(
            lines[6].contains(r#""finish_reason":"tool_calls""#),
            "{out}"
        );
        assert!(lines[7].contains(r#""usage":{"prompt_tokens":1"#), "{out}");
        assert_eq!(lines[8], "data: [DONE]");
        assert!(
            lines
                .iter()
                .all(|l| l.contains("\"id\":\"c1\"") || *l == "data: [DONE]")
        );
    }

    #[test]
    fn details_and_none() {
        let out = run(ShowGatewayTools::Details, script());
        assert!(out.contains("gateway_tool_calls"));
        assert!(
            out.contains(r#"<details type=\"tool_calls\" done=\"true\""#),
            "{out}"
        );
        let out = run(ShowGatewayTools::None, script());
        assert!(
            !out.contains("gateway_tool_calls") && !out.contains("<details"),
            "{out}"
        );
    }

    /// The list at `key` of `message`, made empty when missing.
    fn list<'a>(message: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
        if message[key].is_null() {
            message[key] = json!([]);
        }
        message[key].as_array_mut().unwrap()
    }

    /// A stream put together the way OpenAI's SDKs do (content and
    /// reasoning appended, calls by index, each gateway call's latest
    /// state), as the message, finish reason and usage it adds up to. It
    /// checks on the way: one choice, every chunk the same id, `[DONE]` last.
    fn assemble(out: &str) -> Result<(Value, Value, Value), String> {
        let mut message = json!({"role": "assistant", "content": null});
        let (mut finish, mut usage, mut id) = (Value::Null, Value::Null, None);
        let frames: Vec<&str> = out.split("\n\n").filter(|f| !f.is_empty()).collect();
        if frames.last() != Some(&"data: [DONE]") {
            return Err("no [DONE] at the end".into());
        }
        for frame in &frames[..frames.len() - 1] {
            let data = frame.strip_prefix("data: ").ok_or("not a data line")?;
            let chunk: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
            if *id.get_or_insert_with(|| chunk["id"].clone()) != chunk["id"] {
                return Err("the id changed".into());
            }
            if !chunk["usage"].is_null() {
                usage = chunk["usage"].clone();
            }
            let choices = chunk["choices"].as_array().ok_or("no choices")?;
            let Some(choice) = choices.first() else {
                continue;
            };
            if choices.len() > 1 || choice["index"] != 0 {
                return Err("another choice".into());
            }
            if !choice["finish_reason"].is_null() {
                finish = choice["finish_reason"].clone();
            }
            let delta = &choice["delta"];
            for key in ["content", "reasoning_content"] {
                if let Some(text) = delta[key].as_str() {
                    answers::append(&mut message[key], text);
                }
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = call["index"].as_u64().ok_or("a call without an index")? as usize;
                let calls = list(&mut message, "tool_calls");
                if index == calls.len() {
                    calls.push(json!({"id": call["id"], "type": call["type"], "function": {"name": "", "arguments": ""}}));
                }
                let known = calls.get_mut(index).ok_or("a call index skipped")?;
                for key in ["name", "arguments"] {
                    if let Some(part) = call["function"][key].as_str() {
                        answers::append(&mut known["function"][key], part);
                    }
                }
            }
            for call in delta["gateway_tool_calls"].as_array().into_iter().flatten() {
                let calls = list(&mut message, "gateway_tool_calls");
                match calls.iter_mut().find(|c| c["id"] == call["id"]) {
                    Some(known) => *known = call.clone(),
                    None => calls.push(call.clone()),
                }
            }
        }
        Ok((message, finish, usage))
    }

    proptest::proptest! {
        /// However an answer's texts are cut into events, a client that
        /// puts its stream together gets the message, finish reason and
        /// usage the same answer gives whole, unstreamed.
        #[test]
        fn any_cut_of_an_answer_streams_the_completion_it_gives_whole(
            (answer, cuts) in answers::answer()
        ) {
            let out = run(ShowGatewayTools::Fields, answer.events(&cuts));
            let assembled = assemble(&out);
            proptest::prop_assert!(assembled.is_ok(), "{:?}: {}", assembled, out);
            let (message, finish, usage) = assembled.unwrap();
            let mut whole = crate::api::chat_message::ChatMessage::new(ShowGatewayTools::Fields);
            for event in answer.events(&[]) {
                whole.event(event);
            }
            let expected = whole.into_completion().unwrap();
            let choice = &expected["choices"][0];
            proptest::prop_assert_eq!(&message, &choice["message"]);
            proptest::prop_assert_eq!(&finish, &choice["finish_reason"]);
            proptest::prop_assert_eq!(&usage, &expected["usage"]);
        }
    }
}
