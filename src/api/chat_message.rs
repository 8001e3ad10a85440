//! [`Event`]s gathered into one `chat.completion` (conformance rule 16):
//! the text of every round in `message.content` (null when the answer has
//! no text but calls, gateway calls or reasoning), the client's calls in
//! `message.tool_calls`, the gateway's own calls in
//! `message.gateway_tool_calls`, usage summed.

use serde_json::{Value, json};

use crate::config::ShowGatewayTools;
use crate::error::GatewayError;
use crate::exchange::{Call, Event, GatewayCall, Meta, Sink, Usage};
use crate::tools::show;

pub struct ChatMessage {
    meta: Meta,
    text: String,
    reasoning: String,
    calls: Vec<Call>,
    gateway: Vec<GatewayCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    show: ShowGatewayTools,
    error: Option<GatewayError>,
}

impl ChatMessage {
    pub fn new(show: ShowGatewayTools) -> Self {
        ChatMessage {
            meta: Meta::default(),
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            gateway: Vec::new(),
            finish: None,
            usage: None,
            show,
            error: None,
        }
    }

    /// The completion, or the error that ended it.
    pub fn into_completion(self) -> Result<Value, GatewayError> {
        if let Some(error) = self.error {
            // The text said before an invalid call reaches its client.
            return Err(error.with_unsent_text(self.text));
        }
        // As a stream of the same answer adds up: without text, `null` when
        // something else was said (calls, gateway calls shown, reasoning),
        // `""` when nothing was.
        let said = !self.calls.is_empty()
            || !self.reasoning.is_empty()
            || (self.show != ShowGatewayTools::None && !self.gateway.is_empty());
        let content = if self.text.is_empty() && said {
            Value::Null
        } else {
            Value::String(self.text)
        };
        let mut message = json!({"role": "assistant", "content": content});
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = json!(self.reasoning);
        }
        if !self.calls.is_empty() {
            message["tool_calls"] = self
                .calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                .collect();
        }
        if self.show != ShowGatewayTools::None && !self.gateway.is_empty() {
            message["gateway_tool_calls"] = json!(self.gateway);
        }
        let finish = if self.calls.is_empty() {
            self.finish.unwrap_or_else(|| "stop".into())
        } else {
            "tool_calls".into()
        };
        let mut completion = json!({
            "id": self.meta.id.unwrap_or_else(|| "chatcmpl-toolgate".into()),
            "object": "chat.completion",
            "created": self.meta.created.unwrap_or_else(now),
            "model": self.meta.model.unwrap_or_default(),
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        });
        if let Some(fp) = self.meta.system_fingerprint {
            completion["system_fingerprint"] = json!(fp);
        }
        if let Some(usage) = self.usage {
            completion["usage"] = json!(usage);
        }
        Ok(completion)
    }
}

impl crate::tools::drive::Output for ChatMessage {
    async fn flush(&mut self) -> crate::tools::drive::Flushed {
        crate::tools::drive::Flushed::Nothing
    }
}

impl Sink for ChatMessage {
    fn event(&mut self, event: Event) {
        match event {
            Event::Start(meta) => {
                if self.meta == Meta::default() {
                    self.meta = meta;
                }
            }
            Event::Text(t) => self.text.push_str(&t),
            Event::Reasoning(t) => self.reasoning.push_str(&t),
            Event::Call(c) => self.calls.push(c),
            Event::Gateway(call) => {
                if self.show == ShowGatewayTools::Details {
                    self.text.push_str(&show::details_block(&call));
                }
                // One entry per call, in its final state.
                match self.gateway.iter_mut().find(|g| g.id == call.id) {
                    Some(known) => *known = call,
                    None => self.gateway.push(call),
                }
            }
            Event::Finish(reason) => self.finish = Some(reason),
            Event::Usage(u) => self.usage = Some(u),
        }
    }

    fn fail(&mut self, error: GatewayError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    fn end(&mut self) {}
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
