//! One answer's transcript: the request's new messages when it starts, then
//! the answer's events as rows, as they happen: text when a call or the end
//! closes it, each gateway call when it starts and each result when it
//! arrives, the aggregate of a round's calls and results when the round
//! ends, the client's calls and the usage at the end. Every row is
//! published to live viewers as it is made; the exchange's rows are queued
//! for the writer together when it ends, so that a full queue drops a whole
//! exchange, never part of one. Nothing waits.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::exchange::{Call, Event, GatewayCall, GatewayStatus};
use crate::store::link::Chain;
use crate::store::record::{ChatUpdate, Head, Kind, Message, Write, now_ms};
use crate::store::{Begin, Shared, redact};

/// Rows an answer keeps before queueing them (a long gateway-tools answer
/// is queued in parts of this size).
const PENDING_MAX: usize = 256;

pub struct Recorder {
    shared: Arc<Shared>,
    chat_id: Arc<str>,
    /// The tenant that owns the chat.
    tenant: Arc<str>,
    provider: String,
    model: String,
    title: String,
    /// The request's messages hashed; the reply is added at the end.
    chain: Chain,
    /// Position of the reply in the conversation (for redaction).
    index: usize,
    text: String,
    reasoning: String,
    reply_text: String,
    client_calls: Vec<Call>,
    /// This round's gateway calls (chat-shaped, redacted) and results.
    round_calls: Vec<Value>,
    round_results: Vec<Value>,
    tool_calls: i64,
    messages: i64,
    /// The answer reached its finish, or failed with a recorded error.
    ended: bool,
    /// Gateway calls started and not yet answered.
    running: Vec<String>,
    closed: bool,
    /// Rows made and not queued yet: the exchange is queued as one unit.
    pending: Vec<Write>,
}

impl Recorder {
    /// Starts a transcript of `request` and records `messages[known..]`
    /// (its messages); `chain` is the tenant's hash chain over all of them.
    pub(super) fn start(
        shared: Arc<Shared>,
        chat_id: Arc<str>,
        request: &Begin<'_>,
        chain: Chain,
        messages: &[Value],
        known: usize,
    ) -> Recorder {
        let title = messages
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(|m| text_of(m.get("content")).chars().take(120).collect())
            .unwrap_or_default();
        let mut recorder = Recorder {
            shared,
            chat_id,
            tenant: request.tenant.clone(),
            provider: request.provider.to_owned(),
            model: request.model.to_owned(),
            title,
            chain,
            index: messages.len(),
            text: String::new(),
            reasoning: String::new(),
            reply_text: String::new(),
            client_calls: Vec::new(),
            round_calls: Vec::new(),
            round_results: Vec::new(),
            tool_calls: 0,
            messages: 0,
            ended: false,
            running: Vec::new(),
            closed: false,
            pending: Vec::new(),
        };
        for (i, message) in messages.iter().enumerate().skip(known) {
            recorder.request_message(i, message);
        }
        recorder
    }

    pub fn chat_id(&self) -> &str {
        &self.chat_id
    }

    fn request_message(&mut self, index: usize, message: &Value) {
        let redacted;
        let message = if redact::reaches(&self.shared.config.redact, index) {
            let mut copy = message.clone();
            redact::apply(&self.shared.config.redact, index, &mut copy);
            redacted = copy;
            &redacted
        } else {
            message
        };
        let role = match message.get("role").and_then(Value::as_str) {
            Some("assistant") => "assistant",
            Some("tool") => "tool",
            Some("system" | "developer") => "system",
            _ => "user",
        };
        if role == "tool" {
            let id = message.get("tool_call_id").cloned().unwrap_or(Value::Null);
            let result = text_of(message.get("content"));
            self.row(
                "tool",
                Kind::ToolResult,
                json!({"toolCallId": id, "result": result, "isError": false}),
            );
            return;
        }
        let text = text_of(message.get("content"));
        if !text.is_empty() {
            self.row(role, Kind::Text, json!({"text": text}));
        }
        if let Some(Value::Array(calls)) = message.get("tool_calls")
            && !calls.is_empty()
        {
            self.tool_calls += calls.len() as i64;
            let calls: Vec<Value> = calls.iter().map(dto_call).collect();
            self.row("assistant", Kind::ToolsCall, json!({"toolCalls": calls}));
        }
    }

    /// Publishes one row and keeps it for the exchange's unit (queued
    /// when the answer ends, or every [`PENDING_MAX`] rows of a long one).
    fn row(&mut self, role: &'static str, kind: Kind, fields: Value) {
        let message = Arc::new(Message::new(self.chat_id.clone(), role, kind, fields));
        self.messages += 1;
        self.shared.live.publish(&self.chat_id, &message);
        self.pending.push(Write::Message(message));
        if self.pending.len() >= PENDING_MAX {
            self.queue(now_ms());
        }
    }

    fn flush_text(&mut self) {
        if !self.reasoning.is_empty() {
            let text = std::mem::take(&mut self.reasoning);
            self.row("assistant", Kind::Reasoning, json!({"text": text}));
        }
        if !self.text.is_empty() {
            let mut text = std::mem::take(&mut self.text);
            if redact::reaches(&self.shared.config.redact, self.index) {
                let mut message = json!({"role": "assistant", "content": text});
                redact::apply(&self.shared.config.redact, self.index, &mut message);
                text = text_of(message.get("content"));
            }
            self.row("assistant", Kind::Text, json!({"text": text}));
        }
    }

    /// Ends a round of gateway calls with its aggregate.
    fn flush_round(&mut self) {
        if self.round_calls.is_empty() {
            return;
        }
        let calls = std::mem::take(&mut self.round_calls);
        let results = std::mem::take(&mut self.round_results);
        self.row(
            "assistant",
            Kind::ToolsAggregate,
            json!({"toolCalls": calls, "toolResults": results}),
        );
    }

    fn gateway(&mut self, call: &GatewayCall) {
        match call.status {
            GatewayStatus::InProgress => {
                self.flush_text();
                let mut message = json!({"role": "assistant", "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                ]});
                redact::apply(&self.shared.config.redact, self.index, &mut message);
                let mut dto = dto_call(&message["tool_calls"][0]);
                dto["server"] = json!(call.server);
                self.tool_calls += 1;
                self.running.push(call.id.clone());
                self.round_calls.push(dto.clone());
                self.row("assistant", Kind::ToolsCall, json!({"toolCalls": [dto]}));
            }
            GatewayStatus::Completed | GatewayStatus::Failed => {
                self.running.retain(|id| *id != call.id);
                let failed = call.status == GatewayStatus::Failed;
                let text = if failed {
                    call.error.clone().unwrap_or_default()
                } else {
                    call.output.clone().unwrap_or_default()
                };
                let mut message = json!({"role": "tool", "tool_call_id": call.id, "content": text});
                redact::apply(&self.shared.config.redact, self.index, &mut message);
                let result = json!({"toolCallId": call.id, "result": text_of(message.get("content")), "isError": failed});
                self.round_results.push(result.clone());
                self.row("tool", Kind::ToolResult, result);
            }
        }
    }

    pub fn event(&mut self, event: &Event) {
        if self.closed {
            return;
        }
        match event {
            Event::Start(_) => {}
            Event::Text(text) => {
                self.flush_round();
                self.text.push_str(text);
                self.reply_text.push_str(text);
            }
            Event::Reasoning(text) => {
                self.flush_round();
                self.reasoning.push_str(text);
            }
            Event::Call(call) => self.client_calls.push(call.clone()),
            Event::Gateway(call) => self.gateway(call),
            Event::Finish(_) => {
                self.ended = true;
                self.flush_round();
                self.flush_text();
                if !self.client_calls.is_empty() {
                    let calls: Vec<Value> = self
                        .client_calls
                        .iter()
                        .map(|c| {
                            let mut message = json!({"role": "assistant", "tool_calls": [
                                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                            ]});
                            redact::apply(&self.shared.config.redact, self.index, &mut message);
                            dto_call(&message["tool_calls"][0])
                        })
                        .collect();
                    self.tool_calls += calls.len() as i64;
                    self.row("assistant", Kind::ToolsCall, json!({"toolCalls": calls}));
                }
            }
            Event::Usage(usage) => {
                let usage = serde_json::to_value(usage).unwrap_or(Value::Null);
                self.row("assistant", Kind::Usage, json!({"usage": usage}));
            }
        }
    }

    /// The answer failed after it began: the rows so far, and one `error`
    /// row saying why (the code and the message the client got).
    pub fn fail(&mut self, error: &crate::error::GatewayError) {
        if self.closed {
            return;
        }
        self.ended = true;
        self.flush_round();
        self.flush_text();
        self.row(
            "assistant",
            Kind::Error,
            json!({"text": error.to_string(), "code": error.code()}),
        );
    }

    /// The answer is over: the chat's row, and the state a follow-up
    /// request will continue from. (Dropping the recorder does the same: an
    /// answer the client left is recorded as far as it went.)
    pub fn finish(mut self) {
        self.close();
    }

    /// [`Recorder::finish`] in place: later events are ignored.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        if !self.ended {
            self.cut();
        }
        self.flush_round();
        self.flush_text();
        let at = now_ms();
        let mut reply = json!({"role": "assistant", "content": self.reply_text});
        if !self.client_calls.is_empty() {
            reply["tool_calls"] = self
                .client_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                .collect();
        }
        self.chain.push(&reply);
        let head = Head {
            hash: self.chain.hex(),
            tenant: self.tenant.clone(),
            chat_id: self.chat_id.clone(),
            len: self.index as i64 + 1,
            at,
        };
        self.shared
            .heads
            .remember(head.hash.clone(), self.chat_id.clone(), head.len);
        self.pending.push(Write::Head(head));
        self.queue(at);
        self.shared.live.finish(&self.chat_id);
    }

    /// Queues the rows made so far as one unit, with the chat's row
    /// counting them (so a unit dropped whole still names its chat).
    fn queue(&mut self, at: i64) {
        self.pending.push(Write::Chat(ChatUpdate {
            id: self.chat_id.clone(),
            tenant: self.tenant.clone(),
            at,
            provider: self.provider.clone(),
            model: self.model.clone(),
            title: std::mem::take(&mut self.title),
            tool_calls: std::mem::take(&mut self.tool_calls),
            messages: std::mem::take(&mut self.messages),
        }));
        self.shared.push(std::mem::take(&mut self.pending));
    }
}

impl Recorder {
    /// The answer ended before its finish (the client left, the gateway
    /// shut down): the calls still running are recorded as cancelled, and an
    /// `error` row says the answer was cut, so the transcript never reads as
    /// a finished answer.
    fn cut(&mut self) {
        for id in std::mem::take(&mut self.running) {
            let result = json!({"toolCallId": id, "result": "The call was cancelled: the answer ended before it finished.", "isError": true});
            self.round_results.push(result.clone());
            self.row("tool", Kind::ToolResult, result);
        }
        self.flush_round();
        self.flush_text();
        self.row(
            "assistant",
            Kind::Error,
            json!({"text": "The answer ended before it finished: the client left or the gateway shut down.", "code": "cut"}),
        );
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close();
    }
}

/// A chat call as the seed's `ToolCall`: id, name, arguments.
fn dto_call(call: &Value) -> Value {
    json!({
        "id": call.get("id").cloned().unwrap_or(Value::Null),
        "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
        "arguments": call.pointer("/function/arguments").cloned().unwrap_or(Value::Null),
    })
}

/// A message's content as text (parts joined, images named).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("image_url") => "[image]".to_owned(),
                _ => p
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
