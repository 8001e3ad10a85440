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
    /// How many of `client_calls` have their row.
    client_calls_recorded: usize,
    /// This round's gateway calls (chat-shaped, redacted) and results.
    round_calls: Vec<Value>,
    round_results: Vec<Value>,
    tool_calls: i64,
    messages: i64,
    /// Error rows made, and the last one's code.
    errors: i64,
    last_error: String,
    /// The request's trace (32 hex digits), put on every row, when traces are on.
    trace_id: Option<String>,
    /// The request's `x-request-id`, put on every row.
    request_id: Option<String>,
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
            client_calls_recorded: 0,
            round_calls: Vec::new(),
            round_results: Vec::new(),
            tool_calls: 0,
            messages: 0,
            errors: 0,
            last_error: String::new(),
            trace_id: crate::telemetry::scope::trace()
                .as_ref()
                .and_then(crate::telemetry::propagate::trace_id),
            request_id: crate::telemetry::scope::request_id()
                .and_then(|id| id.to_str().ok().map(str::to_owned)),
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

    /// The request is now tried with another provider (failover): the
    /// chat's row names the one that answers.
    pub fn retarget(&mut self, provider: &str, model: &str) {
        provider.clone_into(&mut self.provider);
        model.clone_into(&mut self.model);
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
    fn row(&mut self, role: &'static str, kind: Kind, mut fields: Value) {
        if kind == Kind::Error {
            self.errors += 1;
            fields["code"]
                .as_str()
                .unwrap_or("error")
                .clone_into(&mut self.last_error);
        }
        if let Some(trace) = &self.trace_id {
            fields["traceId"] = json!(trace);
        }
        if let Some(id) = &self.request_id {
            fields["requestId"] = json!(id);
        }
        let message = Arc::new(Message::new(
            self.chat_id.clone(),
            self.tenant.clone(),
            role,
            kind,
            fields,
        ));
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

    /// The model's words after gateway calls: they end the round's calls
    /// unless some are still running. The next round starts only once
    /// every result is in, so words while a call runs are the same round's
    /// (a model may go on writing after a call), and the results still to
    /// come belong to this aggregate, not a later one.
    fn words(&mut self) {
        if self.running.is_empty() {
            self.flush_round();
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
                self.words();
                self.text.push_str(text);
                self.reply_text.push_str(text);
            }
            Event::Reasoning(text) => {
                self.words();
                self.reasoning.push_str(text);
            }
            Event::Call(call) => self.client_calls.push(call.clone()),
            Event::Gateway(call) => self.gateway(call),
            Event::Finish(_) => {
                self.ended = true;
                self.flush_round();
                self.flush_text();
                self.flush_client_calls();
            }
            Event::Usage(usage) => {
                let usage = serde_json::to_value(usage).unwrap_or(Value::Null);
                self.row("assistant", Kind::Usage, json!({"usage": usage}));
            }
        }
    }

    /// The client's calls that arrived and have no row yet, in one row.
    fn flush_client_calls(&mut self) {
        let calls: Vec<Value> = self.client_calls[self.client_calls_recorded..]
            .iter()
            .map(|c| {
                let mut message = json!({"role": "assistant", "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                ]});
                redact::apply(&self.shared.config.redact, self.index, &mut message);
                dto_call(&message["tool_calls"][0])
            })
            .collect();
        if calls.is_empty() {
            return;
        }
        self.client_calls_recorded = self.client_calls.len();
        self.tool_calls += calls.len() as i64;
        self.row("assistant", Kind::ToolsCall, json!({"toolCalls": calls}));
    }

    /// The answer failed after it began: the rows so far (the client's
    /// calls that arrived among them), and one `error` row saying why (the
    /// code and the message the client got).
    pub fn fail(&mut self, error: &crate::error::GatewayError) {
        let mut row = json!({"text": error.to_string(), "code": error.code()});
        if let Some(raw) = error.raw() {
            // The invalid call as the model wrote it.
            row["raw"] = json!(raw);
        }
        self.error_row(row);
    }

    /// The request ended in an error (`text`, `code`: what the client got),
    /// before or after its answer began: the rows so far, then the error.
    pub fn refuse(&mut self, text: &str, code: &str) {
        self.error_row(json!({"text": text, "code": code}));
    }

    fn error_row(&mut self, fields: Value) {
        if self.closed {
            return;
        }
        self.ended = true;
        self.flush_round();
        self.flush_text();
        self.flush_client_calls();
        self.row("assistant", Kind::Error, fields);
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
        self.shared.heads.remember(
            head.hash.clone(),
            crate::store::link::Reached {
                chat: self.chat_id.clone(),
                len: head.len,
                at,
            },
        );
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
            errors: std::mem::take(&mut self.errors),
            last_error: std::mem::take(&mut self.last_error),
        }));
        self.shared.push(std::mem::take(&mut self.pending));
    }
}

impl Recorder {
    /// The answer ended before its finish (the client left, the gateway
    /// shut down): the calls still running are recorded as cancelled, the
    /// client's calls that arrived are recorded, and an `error` row says the
    /// answer was cut, so the transcript never reads as a finished answer.
    fn cut(&mut self) {
        for id in std::mem::take(&mut self.running) {
            let result = json!({"toolCallId": id, "result": "The call was cancelled: the answer ended before it finished.", "isError": true});
            self.round_results.push(result.clone());
            self.row("tool", Kind::ToolResult, result);
        }
        self.flush_round();
        self.flush_text();
        self.flush_client_calls();
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

/// A chat call as a transcript's tool call: id, name, arguments.
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

/// The recorder is tested at the seam where it hands rows to the store:
/// the writer's channel and the live viewers' channel, with no database.
/// Ids, times and sequence numbers are made anew for every row, so rows are
/// compared without them.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Map;
    use tokio::sync::{broadcast, mpsc};

    use super::*;
    use crate::config::store::{Backend, RedactPath, Step};
    use crate::config::{Record, StoreConfig};
    use crate::error::GatewayError;
    use crate::exchange::{Meta, Usage};
    use crate::store::link;

    const TENANT: &str = "team-a";
    const CHAT: &str = "chat-1";

    /// A store without a database, and the writer's end of its queue.
    fn store(redact: Vec<RedactPath>) -> (Arc<Shared>, mpsc::Receiver<Vec<Write>>) {
        let (tx, rx) = mpsc::channel(64);
        let config = StoreConfig {
            backend: Backend::Sqlite {
                url: "sqlite::memory:".into(),
            },
            record: Record::All,
            retention: Duration::from_secs(86_400),
            usage_retention: Duration::from_secs(31 * 86_400),
            link_wait: Duration::from_millis(100),
            redact,
            live_views: crate::config::store::LiveViewLimits {
                total: 10,
                per_key: 10,
            },
        };
        let shared = Arc::new(Shared::new(config, tx));
        (shared, rx)
    }

    /// The request every answer here replies to.
    fn request() -> Vec<Value> {
        vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "What is 6 × 7?"}),
        ]
    }

    /// A recorder for [`request`], started as [`crate::store::Store::begin`]
    /// starts one for a new chat.
    fn begin(shared: &Arc<Shared>) -> Recorder {
        let messages = request();
        let tenant: Arc<str> = Arc::from(TENANT);
        let body = Map::new();
        let begin = Begin {
            tenant: &tenant,
            provider: "provider",
            model: "model",
            request: &body,
            chat_header: None,
            gateway_tools: true,
        };
        let mut chain = link::Chain::for_tenant(TENANT);
        link::prefixes(&mut chain, &messages, 8);
        let chat: Arc<str> = Arc::from(CHAT);
        shared.live.start(&chat);
        Recorder::start(shared.clone(), chat, &begin, chain, &messages, 0)
    }

    /// How the answer ends for the recorder.
    enum End<'a> {
        /// `finish`, after whatever events came.
        Finish,
        /// The recorder is dropped (the request's task went away).
        Drop,
        /// `fail`, then `finish`.
        Fail(&'a GatewayError),
    }

    /// What one answer left in the store.
    #[derive(Debug, PartialEq)]
    struct Transcript {
        /// Its rows in order, without the fields each row makes anew.
        rows: Vec<Value>,
        /// The chat's row, summed over the units it was queued in.
        messages: i64,
        tool_calls: i64,
        title: String,
        /// The conversation states it left: (hash, messages covered).
        heads: Vec<(String, i64)>,
        /// Units queued (each one a whole part of the exchange).
        units: usize,
    }

    fn record(events: &[Event], end: &End<'_>) -> Transcript {
        record_with(Vec::new(), events, end)
    }

    fn record_with(redact: Vec<RedactPath>, events: &[Event], end: &End<'_>) -> Transcript {
        let (shared, mut rx) = store(redact);
        let (mut viewer, _) = shared.live.subscribe(CHAT);
        let mut recorder = begin(&shared);
        for event in events {
            recorder.event(event);
        }
        match end {
            End::Finish => recorder.finish(),
            End::Drop => drop(recorder),
            End::Fail(error) => {
                recorder.fail(error);
                recorder.finish();
            }
        }
        let mut units = Vec::new();
        while let Ok(unit) = rx.try_recv() {
            units.push(unit);
        }
        // A viewer may fall behind a long answer (and is told so): what it
        // saw is then compared no further.
        let mut seen = Some(Vec::new());
        loop {
            match viewer.try_recv() {
                Ok(row) => seen.iter_mut().for_each(|s| s.push(row.clone())),
                Err(broadcast::error::TryRecvError::Lagged(_)) => seen = None,
                Err(_) => break,
            }
        }
        transcript(&units, seen.as_deref())
    }

    /// Reads the queued units, checking what holds for every answer: each
    /// unit ends with the chat's row, rows are in sequence and of this
    /// chat, and a live viewer (when one watched) saw exactly the rows
    /// queued.
    fn transcript(units: &[Vec<Write>], seen: Option<&[Arc<Message>]>) -> Transcript {
        let mut out = Transcript {
            rows: Vec::new(),
            messages: 0,
            tool_calls: 0,
            title: String::new(),
            heads: Vec::new(),
            units: units.len(),
        };
        let mut queued = Vec::new();
        for unit in units {
            let chats = unit.iter().filter(|w| matches!(w, Write::Chat(_)));
            assert_eq!(chats.count(), 1, "one chat row per unit: {unit:?}");
            let Some(Write::Chat(chat)) = unit.last() else {
                panic!("a unit ends with its chat's row: {unit:?}");
            };
            assert_eq!((&*chat.id, &*chat.tenant), (CHAT, TENANT));
            assert_eq!((&*chat.provider, &*chat.model), ("provider", "model"));
            out.messages += chat.messages;
            out.tool_calls += chat.tool_calls;
            out.title.push_str(&chat.title);
            for write in unit {
                match write {
                    Write::Message(m) => queued.push(m.clone()),
                    Write::Head(h) => {
                        assert_eq!((&*h.chat_id, &*h.tenant), (CHAT, TENANT));
                        out.heads.push((h.hash.clone(), h.len));
                    }
                    Write::Chat(_) => {}
                    Write::Response(_) | Write::Steps(_) | Write::Usage(_) => {
                        panic!("not the recorder's")
                    }
                }
            }
        }
        assert!(
            queued.windows(2).all(|w| w[0].sequence < w[1].sequence),
            "rows are queued in the order they were made"
        );
        let ids = |rows: &[Arc<Message>]| rows.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        if let Some(seen) = seen {
            assert_eq!(ids(seen), ids(&queued), "viewers see the rows queued");
        }
        for message in queued {
            assert_eq!(&*message.chat_id, CHAT);
            let mut row: Value = serde_json::from_str(&message.json).unwrap();
            let fields = row.as_object_mut().unwrap();
            for made in ["id", "chatId", "timestamp", "sequenceNumber"] {
                assert!(fields.remove(made).is_some(), "{made} in {}", message.json);
            }
            assert_eq!(fields["kind"], message.kind.as_str());
            assert_eq!(fields["role"], message.role);
            out.rows.push(row);
        }
        out
    }

    /// A row as compared: its role, kind and own fields.
    fn row(role: &str, kind: &str, fields: Value) -> Value {
        let mut row = fields;
        row["role"] = json!(role);
        row["kind"] = json!(kind);
        row
    }

    fn text(role: &str, text: &str) -> Value {
        row(role, "text", json!({"text": text}))
    }

    /// The rows of [`request`].
    fn asked() -> Vec<Value> {
        vec![text("system", "Be brief."), text("user", "What is 6 × 7?")]
    }

    /// Every way to deliver `text` as deltas cut at one or two points (on
    /// character boundaries), whole, and one character per delta.
    fn splits(text: &str) -> Vec<Vec<String>> {
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        let mut out = vec![vec![text.to_owned()]];
        for (n, &a) in cuts.iter().enumerate() {
            out.push(vec![text[..a].to_owned(), text[a..].to_owned()]);
            for &b in &cuts[n + 1..] {
                out.push(vec![
                    text[..a].to_owned(),
                    text[a..b].to_owned(),
                    text[b..].to_owned(),
                ]);
            }
        }
        out.push(text.chars().map(String::from).collect());
        out
    }

    fn texts(deltas: &[String]) -> Vec<Event> {
        deltas.iter().cloned().map(Event::Text).collect()
    }

    fn reasonings(deltas: &[String]) -> Vec<Event> {
        deltas.iter().cloned().map(Event::Reasoning).collect()
    }

    fn start() -> Event {
        Event::Start(Meta {
            id: Some("chatcmpl-1".into()),
            ..Meta::default()
        })
    }

    fn client_call() -> Event {
        Event::Call(Call {
            id: "c1".into(),
            name: "notify".into(),
            arguments: r#"{"to": "me"}"#.into(),
        })
    }

    fn client_call_row() -> Value {
        row(
            "assistant",
            "tools_call",
            json!({"toolCalls": [{"id": "c1", "name": "notify", "arguments": r#"{"to": "me"}"#}]}),
        )
    }

    fn usage(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }

    fn gateway(id: &str, status: GatewayStatus, outcome: &str) -> Event {
        let name = if id == "g1" { "calculator" } else { "clock" };
        Event::Gateway(GatewayCall {
            index: 0,
            id: id.into(),
            name: name.into(),
            server: "builtin".into(),
            arguments: format!(r#"{{"for": "{id}"}}"#),
            status,
            output: (status == GatewayStatus::Completed).then(|| outcome.to_owned()),
            error: (status == GatewayStatus::Failed).then(|| outcome.to_owned()),
        })
    }

    fn started(id: &str) -> Event {
        gateway(id, GatewayStatus::InProgress, "")
    }

    fn gateway_dto(id: &str) -> Value {
        let name = if id == "g1" { "calculator" } else { "clock" };
        json!({"id": id, "name": name, "arguments": format!(r#"{{"for": "{id}"}}"#), "server": "builtin"})
    }

    fn call_row(id: &str) -> Value {
        row(
            "assistant",
            "tools_call",
            json!({"toolCalls": [gateway_dto(id)]}),
        )
    }

    fn result(id: &str, result: &str, is_error: bool) -> Value {
        json!({"toolCallId": id, "result": result, "isError": is_error})
    }

    fn result_row(id: &str, text: &str, is_error: bool) -> Value {
        row("tool", "tool_result", result(id, text, is_error))
    }

    fn aggregate(ids: &[&str], results: &[Value]) -> Value {
        let calls: Vec<Value> = ids.iter().map(|id| gateway_dto(id)).collect();
        row(
            "assistant",
            "tools_aggregate",
            json!({"toolCalls": calls, "toolResults": results}),
        )
    }

    /// The state a client's next request continues when it sends back
    /// [`request`] and `reply`: the head a finished answer must leave.
    fn state_after(reply: &Value) -> (String, i64) {
        let mut history = request();
        history.push(reply.clone());
        history.push(json!({"role": "user", "content": "Thanks."}));
        let found = link::prefixes(&mut link::Chain::for_tenant(TENANT), &history, 8);
        let (hash, len) = found[0].clone();
        (hash, len as i64)
    }

    /// Tool results are recorded when they arrive, which is not the same
    /// point of the answer from one run to the next: the transcript with
    /// them taken out (and each aggregate's results in call order), and
    /// the results apart. Each result follows its call.
    fn settled(t: &Transcript) -> (Vec<Value>, Vec<Value>) {
        let mut rest = Vec::new();
        let mut results = Vec::new();
        for (i, r) in t.rows.iter().enumerate() {
            if r["kind"] == "tool_result" {
                let called = t.rows[..i].iter().any(|c| {
                    c["kind"] == "tools_call" && c["toolCalls"][0]["id"] == r["toolCallId"]
                });
                assert!(called, "a result follows its call: {:#?}", t.rows);
                results.push(r.clone());
            } else {
                let mut r = r.clone();
                if let Some(Value::Array(rs)) = r.get_mut("toolResults") {
                    rs.sort_by_key(|x| x["toolCallId"].as_str().unwrap_or("").to_owned());
                }
                rest.push(r);
            }
        }
        results.sort_by_key(|x| x["toolCallId"].as_str().unwrap_or("").to_owned());
        (rest, results)
    }

    /// An answer with reasoning, text and a call of the client's: however
    /// the reasoning and the text are cut into deltas, interleaved or not,
    /// and wherever the call comes before the finish, the transcript is one
    /// reasoning row, one text row, the call, the usage, and the state the
    /// client's follow-up continues.
    #[test]
    fn an_answer_split_at_every_point_makes_the_same_rows() {
        let thought = "Six sevens… 42.";
        let said = "6 × 7 = 42 ✓";
        let want = Transcript {
            rows: [
                asked(),
                vec![
                    row("assistant", "reasoning", json!({"text": thought})),
                    text("assistant", said),
                    client_call_row(),
                    row(
                        "assistant",
                        "usage",
                        json!({"usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}}),
                    ),
                ],
            ]
            .concat(),
            messages: 6,
            tool_calls: 1,
            title: "What is 6 × 7?".into(),
            heads: vec![state_after(&json!({"role": "assistant", "content": said,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "notify", "arguments": "{\"to\":\"me\"}"}}]}))],
            units: 1,
        };
        let deliver = |reasoning: &[String], text: &[String], call_at: usize, mixed: bool| {
            let mut deltas = Vec::new();
            if mixed {
                // Reasoning and text deltas taking turns.
                for i in 0..reasoning.len().max(text.len()) {
                    deltas.extend(reasonings(reasoning.get(i..=i).unwrap_or_default()));
                    deltas.extend(texts(text.get(i..=i).unwrap_or_default()));
                }
            } else {
                deltas.extend(reasonings(reasoning));
                deltas.extend(texts(text));
            }
            deltas.insert(call_at.min(deltas.len()), client_call());
            let mut events = vec![start()];
            events.extend(deltas);
            events.push(Event::Finish("tool_calls".into()));
            events.push(Event::Usage(usage(12, 9)));
            events
        };
        let (thoughts, saids) = (splits(thought), splits(said));
        let mut runs = 0;
        for (k, text) in saids.iter().enumerate() {
            let reasoning = &thoughts[k % thoughts.len()];
            for mixed in [false, true] {
                let events = deliver(reasoning, text, k, mixed);
                assert_eq!(record(&events, &End::Finish), want, "{events:?}");
                runs += 1;
            }
        }
        for reasoning in &thoughts {
            let events = deliver(reasoning, &saids[0], 0, false);
            assert_eq!(record(&events, &End::Finish), want, "{events:?}");
        }
        // The call at every point, the text one character per delta.
        let one_by_one = saids.last().unwrap();
        for call_at in 0..=one_by_one.len() + 1 {
            let events = deliver(&thoughts[0], one_by_one, call_at, false);
            assert_eq!(record(&events, &End::Finish), want, "{events:?}");
        }
        assert!(runs > 100, "{runs}");
    }

    /// Two rounds of gateway calls: the first round's reasoning and text,
    /// two calls, their results in either order at any point after each
    /// started; then the second round's text. However the text is cut, the
    /// transcript holds the same rows, one aggregate of the round with both
    /// calls and both results, and a result row after each call.
    #[test]
    fn gateway_rounds_split_at_every_point_make_the_same_rows() {
        let before = "Let me work it out.";
        let after = "It is 42, at noon.";
        let want_rest = [
            asked(),
            vec![
                text("assistant", before),
                call_row("g1"),
                call_row("g2"),
                aggregate(
                    &["g1", "g2"],
                    &[result("g1", "42", false), result("g2", "timed out", true)],
                ),
                text("assistant", after),
                row(
                    "assistant",
                    "usage",
                    json!({"usage": {"prompt_tokens": 30, "completion_tokens": 11, "total_tokens": 41}}),
                ),
            ],
        ]
        .concat();
        let want_results = vec![
            result_row("g1", "42", false),
            result_row("g2", "timed out", true),
        ];
        let head =
            state_after(&json!({"role": "assistant", "content": format!("{before}{after}")}));
        let done1 = gateway("g1", GatewayStatus::Completed, "42");
        let done2 = gateway("g2", GatewayStatus::Failed, "timed out");
        // When the results come: g1's before g2 starts, or both after, in
        // either order.
        let timings: [Vec<Event>; 3] = [
            vec![started("g1"), done1.clone(), started("g2"), done2.clone()],
            vec![started("g1"), started("g2"), done1.clone(), done2.clone()],
            vec![started("g1"), started("g2"), done2.clone(), done1.clone()],
        ];
        let (befores, afters) = (splits(before), splits(after));
        for (k, first) in befores.iter().enumerate() {
            for (n, calls) in timings.iter().enumerate() {
                let mut events = vec![start()];
                events.extend(texts(first));
                events.extend(calls.iter().cloned());
                events.extend(texts(&afters[(k + n) % afters.len()]));
                events.push(Event::Finish("stop".into()));
                events.push(Event::Usage(usage(30, 11)));
                let got = record(&events, &End::Finish);
                assert_eq!(
                    settled(&got),
                    (want_rest.clone(), want_results.clone()),
                    "{events:?}"
                );
                assert_eq!(
                    (got.messages, got.tool_calls, &got.heads),
                    (10, 2, &vec![head.clone()])
                );
            }
        }
    }

    /// A model may go on writing after a gateway call within its round, and
    /// the call's result may come before or after those words (the next
    /// round starts only when every result is in). Wherever it comes, the
    /// result is in its own call's aggregate, never in a later round's,
    /// and never missing.
    #[test]
    fn a_result_after_the_models_next_words_stays_with_its_call() {
        let more = " One moment.";
        let want_rest = [
            asked(),
            vec![
                text("assistant", "Checking."),
                call_row("g1"),
                aggregate(&["g1"], &[result("g1", "42", false)]),
                text("assistant", &format!("{more}Now the time.")),
                call_row("g2"),
                aggregate(&["g2"], &[result("g2", "noon", false)]),
                text("assistant", "Done."),
            ],
        ]
        .concat();
        let want_results = vec![
            result_row("g1", "42", false),
            result_row("g2", "noon", false),
        ];
        for deltas in splits(more) {
            for at in 0..=deltas.len() {
                let mut events = vec![start(), Event::Text("Checking.".into()), started("g1")];
                let mut round = texts(&deltas);
                round.insert(at, gateway("g1", GatewayStatus::Completed, "42"));
                events.extend(round);
                events.extend([
                    Event::Text("Now the time.".into()),
                    started("g2"),
                    gateway("g2", GatewayStatus::Completed, "noon"),
                    Event::Text("Done.".into()),
                    Event::Finish("stop".into()),
                ]);
                let got = record(&events, &End::Finish);
                assert_eq!(
                    settled(&got),
                    (want_rest.clone(), want_results.clone()),
                    "{events:?}"
                );
            }
        }
    }

    /// An answer that ends before its finish (the client left, the stream
    /// was cut): everything that arrived is recorded, however it was cut
    /// into deltas: the reasoning, the text, the client's call, the gateway
    /// call still running (as cancelled) and its aggregate, then an error
    /// row saying the answer was cut. Dropping the recorder records the
    /// same as finishing it.
    #[test]
    fn an_answer_cut_before_its_finish_keeps_all_that_arrived() {
        let thought = "Both, then.";
        let said = "Asking both: ";
        let cancelled = "The call was cancelled: the answer ended before it finished.";
        let want = Transcript {
            rows: [
                asked(),
                vec![
                    row("assistant", "reasoning", json!({"text": thought})),
                    text("assistant", said),
                    call_row("g1"),
                    result_row("g1", cancelled, true),
                    aggregate(&["g1"], &[result("g1", cancelled, true)]),
                    client_call_row(),
                    row(
                        "assistant",
                        "error",
                        json!({"text": "The answer ended before it finished: the client left or the gateway shut down.", "code": "cut"}),
                    ),
                ],
            ]
            .concat(),
            messages: 9,
            tool_calls: 2,
            title: "What is 6 × 7?".into(),
            heads: vec![state_after(&json!({"role": "assistant", "content": said,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "notify", "arguments": "{\"to\":\"me\"}"}}]}))],
            units: 1,
        };
        let (thoughts, saids) = (splits(thought), splits(said));
        for (k, deltas) in saids.iter().enumerate() {
            let mut events = vec![start()];
            events.extend(reasonings(&thoughts[k % thoughts.len()]));
            events.extend(texts(deltas));
            events.push(client_call());
            events.push(started("g1"));
            for end in [End::Finish, End::Drop] {
                assert_eq!(record(&events, &end), want, "{events:?}");
            }
        }
    }

    /// An answer that failed after it began: what arrived, then one error
    /// row with the message and code the client got, and no other error
    /// row (a failed answer is not also a cut one). A failure after the
    /// finish records the client's calls once.
    #[test]
    fn a_failed_answer_records_what_arrived_and_why() {
        let error = GatewayError::UpstreamInvalid {
            message: "The upstream's stream was cut".into(),
            code: "upstream_cut",
        };
        let failed = row(
            "assistant",
            "error",
            json!({"text": error.to_string(), "code": "upstream_cut"}),
        );
        let said = "Partly wri";
        let want = [
            asked(),
            vec![text("assistant", said), client_call_row(), failed.clone()],
        ]
        .concat();
        for deltas in splits(said) {
            let mut events = vec![start()];
            events.extend(texts(&deltas));
            events.push(client_call());
            let got = record(&events, &End::Fail(&error));
            assert_eq!(got.rows, want, "{events:?}");
            assert_eq!((got.messages, got.tool_calls, got.units), (5, 1, 1));
            events.push(Event::Finish("tool_calls".into()));
            let got = record(&events, &End::Fail(&error));
            assert_eq!(got.rows, want, "after the finish: {events:?}");
        }
        // A round of gateway calls that failed after its results: the
        // round's aggregate comes before the error.
        let events = [
            start(),
            Event::Text("Looking.".into()),
            started("g1"),
            gateway("g1", GatewayStatus::Completed, "42"),
        ];
        let got = record(&events, &End::Fail(&error));
        let want = [
            asked(),
            vec![
                text("assistant", "Looking."),
                call_row("g1"),
                result_row("g1", "42", false),
                aggregate(&["g1"], &[result("g1", "42", false)]),
                failed.clone(),
            ],
        ]
        .concat();
        assert_eq!(got.rows, want);
        // Failing before a word came is still a recorded exchange.
        let got = record(&[start()], &End::Fail(&error));
        assert_eq!(got.rows, [asked(), vec![failed]].concat());
        assert_eq!(got.heads.len(), 1);
    }

    /// Usage is recorded as it is reported, a row per report with its
    /// counts as given (the tool loop sums its rounds and reports once;
    /// a direct answer's upstream reports once), after the words it counts
    /// when it comes after the finish.
    #[test]
    fn usage_is_a_row_per_report_with_its_counts() {
        let events = [
            start(),
            Event::Text("4".into()),
            Event::Text("2".into()),
            Event::Finish("stop".into()),
            Event::Usage(usage(7, 1)),
            Event::Usage(usage(0, 2)),
        ];
        let got = record(&events, &End::Finish);
        let usage_row = |p: u64, c: u64| {
            row(
                "assistant",
                "usage",
                json!({"usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}}),
            )
        };
        assert_eq!(
            got.rows,
            [
                asked(),
                vec![text("assistant", "42"), usage_row(7, 1), usage_row(0, 2)]
            ]
            .concat()
        );
        assert_eq!(got.messages, 5);
    }

    /// Events after the end are not recorded, and ending twice (the tool
    /// path closes at the end and finishes after) queues the exchange once.
    #[test]
    fn nothing_is_recorded_after_the_end() {
        let (shared, mut rx) = store(Vec::new());
        let (mut viewer, _) = shared.live.subscribe(CHAT);
        let mut recorder = begin(&shared);
        recorder.event(&Event::Text("Hi.".into()));
        recorder.event(&Event::Finish("stop".into()));
        recorder.close();
        recorder.event(&Event::Text("late".into()));
        recorder.event(&Event::Usage(usage(1, 1)));
        recorder.fail(&GatewayError::Overloaded);
        recorder.finish();
        let mut units = Vec::new();
        while let Ok(unit) = rx.try_recv() {
            units.push(unit);
        }
        let mut seen = Vec::new();
        while let Ok(row) = viewer.try_recv() {
            seen.push(row);
        }
        let got = transcript(&units, Some(&seen));
        assert_eq!(got.units, 1);
        assert_eq!(got.rows, [asked(), vec![text("assistant", "Hi.")]].concat());
    }

    /// A long answer is queued in parts of [`PENDING_MAX`] rows, each naming
    /// its chat with its own rows' count; nothing is lost between parts.
    #[test]
    fn a_long_answer_is_queued_in_parts_that_lose_nothing() {
        let mut events = vec![start()];
        let calls = PENDING_MAX;
        for n in 0..calls {
            let id = format!("g{n}");
            events.push(Event::Text(format!("Call {n}.")));
            events.push(gateway(&id, GatewayStatus::InProgress, ""));
            events.push(gateway(&id, GatewayStatus::Completed, "ok"));
        }
        events.push(Event::Text("Done.".into()));
        events.push(Event::Finish("stop".into()));
        let got = record(&events, &End::Finish);
        // Per call: its text, the call, its result, its round's aggregate.
        let rows = 2 + 4 * calls + 1;
        assert_eq!(got.rows.len(), rows);
        assert_eq!(got.messages, rows as i64);
        assert_eq!(got.tool_calls, calls as i64);
        assert_eq!(got.units, rows.div_ceil(PENDING_MAX));
        assert_eq!(got.title, "What is 6 × 7?", "the title is sent once");
        assert_eq!(got.rows.last(), Some(&text("assistant", "Done.")));
        for n in 0..calls {
            let at = 2 + 4 * n;
            assert_eq!(got.rows[at], text("assistant", &format!("Call {n}.")));
            assert_eq!(got.rows[at + 2]["toolCallId"], format!("g{n}"));
            assert_eq!(
                got.rows[at + 3]["toolResults"][0]["toolCallId"],
                format!("g{n}")
            );
        }
    }

    /// A redacted reply is redacted whole, however its text was cut: no
    /// delta slips past. The state the follow-up continues is the reply as
    /// the client got it.
    #[test]
    fn a_redacted_reply_is_redacted_whole_however_it_was_cut() {
        let reply_content = RedactPath {
            message: Some(2),
            steps: vec![Step::Key("content".into())],
        };
        let said = "The code is 4417.";
        for deltas in splits(said) {
            let mut events = vec![start()];
            events.extend(texts(&deltas));
            events.push(Event::Finish("stop".into()));
            let got = record_with(vec![reply_content.clone()], &events, &End::Finish);
            assert_eq!(
                got.rows,
                [asked(), vec![text("assistant", redact::REDACTED)]].concat(),
                "{deltas:?}"
            );
            assert_eq!(
                got.heads,
                vec![state_after(&json!({"role": "assistant", "content": said}))]
            );
        }
    }
}
