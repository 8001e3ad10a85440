//! One choice of a model's reply, turned from natural text into content and
//! validated native calls. Shared by the streaming and non-streaming paths so
//! both make exactly the same decisions.
//!
//! Sans-IO: text in, text and calls out. Calls are held until the message
//! ends (clients expect content before calls, conformance rules 11-12).

use std::sync::Arc;
use std::time::Instant;

use rand::RngExt;
use rand::distr::Alphanumeric;

use crate::config::OnInvalid;
use crate::metrics as m;
use crate::natural::parser::{Event, InvalidReason, Parser, ParserOptions};
use crate::natural::request::ResponsePlan;
use crate::natural::tools::ToolSet;
use crate::natural::validate::SchemaCache;

/// What every choice of one response shares.
#[derive(Clone)]
pub struct ReplySettings {
    pub provider: Arc<str>,
    pub tools: Arc<ToolSet>,
    pub parser: ParserOptions,
    pub on_invalid: OnInvalid,
    /// `parallel_tool_calls: false`: only the first call is a call.
    pub max_calls: Option<usize>,
    pub schemas: Arc<SchemaCache>,
}

impl ReplySettings {
    pub fn new(
        provider: &str,
        plan: &ResponsePlan,
        parser: ParserOptions,
        on_invalid: OnInvalid,
        schemas: Arc<SchemaCache>,
    ) -> Self {
        ReplySettings {
            provider: provider.into(),
            tools: plan.tools.clone(),
            parser,
            on_invalid,
            max_calls: (!plan.parallel_tool_calls).then_some(1),
            schemas,
        }
    }
}

/// A validated call, ready to emit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyCall {
    pub id: String,
    pub name: String,
    /// Compact JSON object text.
    pub arguments: String,
}

/// A block that could not become a call while `on_invalid` says to fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCall {
    pub tool: Option<String>,
    pub reason: String,
}

impl InvalidCall {
    pub fn message(&self) -> String {
        match &self.tool {
            Some(t) => format!(
                "The model wrote an invalid call to tool `{t}`: {}",
                self.reason
            ),
            None => format!("The model wrote an invalid tool call: {}", self.reason),
        }
    }
}

pub struct ReplyParser {
    settings: ReplySettings,
    parser: Parser,
    events: Vec<Event>,
    calls: Vec<ReadyCall>,
    /// When text started being held back, for the hold-time metric.
    holding_since: Option<Instant>,
    held_peak: usize,
}

impl ReplyParser {
    pub fn new(settings: ReplySettings) -> Self {
        let parser = Parser::new(settings.tools.names(), settings.parser.clone());
        ReplyParser {
            settings,
            parser,
            events: Vec::new(),
            calls: Vec::new(),
            holding_since: None,
            held_peak: 0,
        }
    }

    /// Feeds a content delta; appends the text to show now to `out`.
    pub fn feed(&mut self, text: &str, out: &mut String) -> Result<(), InvalidCall> {
        self.parser.feed(text, &mut self.events);
        self.note_hold();
        self.drain(out)
    }

    /// The message ended: appends the remaining text to `out` and returns the calls.
    pub fn finish(&mut self, out: &mut String) -> Result<Vec<ReadyCall>, InvalidCall> {
        self.parser.finish(&mut self.events);
        self.note_hold();
        self.drain(out)?;
        for call in &self.calls {
            metrics::counter!(m::TOOL_CALLS, "provider" => self.settings.provider.to_string(), "tool" => call.name.clone())
                .increment(1);
        }
        Ok(std::mem::take(&mut self.calls))
    }

    fn note_hold(&mut self) {
        let held = self.parser.held_bytes();
        match (held, self.holding_since) {
            (0, Some(since)) => {
                metrics::histogram!(m::HOLD_DURATION).record(since.elapsed().as_secs_f64());
                metrics::histogram!(m::HELD_BYTES).record(self.held_peak as f64);
                self.holding_since = None;
                self.held_peak = 0;
            }
            (0, None) => {}
            (n, since) => {
                if since.is_none() {
                    self.holding_since = Some(Instant::now());
                }
                self.held_peak = self.held_peak.max(n);
            }
        }
    }

    fn drain(&mut self, out: &mut String) -> Result<(), InvalidCall> {
        let mut result = Ok(());
        for event in self.events.drain(..) {
            if result.is_err() {
                break;
            }
            match event {
                Event::Text(t) => out.push_str(&t),
                Event::Call(call) => {
                    let tool = self.settings.tools.get(&call.name);
                    let checked = match tool {
                        Some(tool) => self.settings.schemas.check(tool, &call.arguments),
                        None => Err("not a declared tool".to_owned()),
                    };
                    match checked {
                        Err(reason) => {
                            count_invalid(&self.settings.provider, "schema");
                            result = reject(
                                self.settings.on_invalid,
                                Some(call.name),
                                format!("arguments do not match the schema: {reason}"),
                                &call.raw,
                                out,
                            );
                        }
                        Ok(())
                            if self
                                .settings
                                .max_calls
                                .is_some_and(|max| self.calls.len() >= max) =>
                        {
                            // parallel_tool_calls: false. The extra call stays visible as text.
                            count_invalid(&self.settings.provider, "extra_call");
                            out.push_str(&call.raw);
                        }
                        Ok(()) => self.calls.push(ReadyCall {
                            id: call_id(),
                            name: call.name,
                            arguments: serde_json::Value::Object(call.arguments).to_string(),
                        }),
                    }
                }
                Event::Invalid(block) => {
                    count_invalid(&self.settings.provider, reason_label(&block.reason));
                    result = reject(
                        self.settings.on_invalid,
                        block.name,
                        block.reason.to_string(),
                        &block.raw,
                        out,
                    );
                }
            }
        }
        self.events.clear();
        result
    }
}

/// `on_invalid = "text"` shows the block as written; otherwise the reply fails.
/// (`"fallback"` fails too until repair exists.)
fn reject(
    policy: OnInvalid,
    tool: Option<String>,
    reason: String,
    raw: &str,
    out: &mut String,
) -> Result<(), InvalidCall> {
    match policy {
        OnInvalid::Text => {
            out.push_str(raw);
            Ok(())
        }
        OnInvalid::Error | OnInvalid::Fallback => Err(InvalidCall { tool, reason }),
    }
}

fn count_invalid(provider: &str, reason: &'static str) {
    metrics::counter!(m::INVALID_BLOCKS, "provider" => provider.to_owned(), "reason" => reason)
        .increment(1);
}

fn reason_label(reason: &InvalidReason) -> &'static str {
    match reason {
        InvalidReason::BadJson(_) => "bad_json",
        InvalidReason::NotAnObject => "not_an_object",
        InvalidReason::Malformed(_) => "malformed",
        InvalidReason::Unclosed => "unclosed",
        InvalidReason::TooLarge => "too_large",
    }
}

/// `call_` plus 24 random alphanumerics, as OpenAI's ids look.
pub fn call_id() -> String {
    let mut id = String::with_capacity(29);
    id.push_str("call_");
    id.extend(
        rand::rng()
            .sample_iter(Alphanumeric)
            .take(24)
            .map(char::from),
    );
    id
}
