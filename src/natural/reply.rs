//! One choice of a model's reply, turned from natural text into content and
//! validated native calls. Shared by the streaming and non-streaming paths so
//! both make exactly the same decisions.
//!
//! Sans-IO: text in, text and calls out. Calls are held until the message
//! ends (clients expect content before calls, conformance rules 11-12).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::exchange::call_id;

#[cfg(test)]
use crate::config::DEFAULT_MAX_REPAIRS;
use crate::config::OnInvalid;
use crate::metrics as m;
use crate::natural::parser::{Event, InvalidReason, Parser, ParserOptions};
use crate::natural::policy::Choice;
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
    /// `parallel_tool_calls: false` or legacy `functions`: only the first call is a call.
    pub max_calls: Option<usize>,
    /// Calls are written as the legacy `function_call` (the request declared `functions`).
    pub legacy_functions: bool,
    /// `tool_choice` required a call (`"required"` or a named function).
    pub call_required: bool,
    /// Invalid blocks become repair requests (`on_invalid = "fallback"` with a fallback configured).
    pub repair: bool,
    /// Repairs the response may still ask for, shared by all its choices
    /// (the clones of one `ReplySettings`); once spent, later invalid blocks
    /// are rejected as if no fallback were configured. Each repair is a paid call.
    pub repairs_left: Arc<RepairBudget>,
    /// The budget `repairs_left` started with (`fallback_max_calls`), for messages.
    pub max_repairs: usize,
    /// Calls are written as soon as they are ready, text may follow them:
    /// for toolgate's own reading of a round (gateway tools start early),
    /// never for a client, who expects content before calls.
    pub early_calls: bool,
    pub schemas: Arc<SchemaCache>,
    /// The request's span (when traces are on): parsed calls and invalid
    /// blocks become its events.
    pub trace: Option<crate::telemetry::Context>,
}

/// A count of repairs left, taken one at a time by any choice of a response.
#[derive(Debug)]
pub struct RepairBudget(AtomicUsize);

impl RepairBudget {
    pub fn new(repairs: usize) -> Self {
        RepairBudget(AtomicUsize::new(repairs))
    }

    /// Takes one repair; `false` once none are left.
    pub fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

impl ReplySettings {
    /// Settings for one response; `max_repairs` is the response's repair
    /// budget (`0` without a fallback model).
    pub fn new(
        provider: &str,
        plan: &ResponsePlan,
        parser: ParserOptions,
        on_invalid: OnInvalid,
        max_repairs: usize,
        schemas: Arc<SchemaCache>,
    ) -> Self {
        ReplySettings {
            provider: provider.into(),
            tools: plan.tools.clone(),
            parser,
            on_invalid,
            max_calls: (!plan.parallel_tool_calls || plan.legacy_functions).then_some(1),
            legacy_functions: plan.legacy_functions,
            call_required: matches!(plan.choice, Choice::Required | Choice::Named(_)),
            repair: max_repairs > 0 && on_invalid == OnInvalid::Fallback,
            repairs_left: Arc::new(RepairBudget::new(max_repairs)),
            max_repairs,
            early_calls: false,
            schemas,
            trace: crate::telemetry::scope::trace(),
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
    /// What the model wrote, when a block of text was read.
    pub raw: Option<String>,
}

impl InvalidCall {
    /// The error the client and the transcript get.
    pub fn error(&self) -> crate::error::GatewayError {
        crate::error::GatewayError::InvalidToolCall {
            message: self.message(),
            raw: self.raw.clone(),
            text: None,
        }
    }

    /// The error of a whole answer, whose `text` (what the model wrote
    /// besides the block) its client does not get: the transcript keeps it.
    pub fn error_in_whole(&self, text: &str) -> crate::error::GatewayError {
        crate::error::GatewayError::InvalidToolCall {
            message: self.message(),
            raw: self.raw.clone(),
            text: Some(text.to_owned()),
        }
    }

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

/// A broken call (or a missing required one) for the fallback model to rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairRequest {
    /// Identifies the call's slot within its choice.
    pub id: u32,
    /// The tool concerned; `None` when a required call is missing and several tools were offered.
    pub tool: Option<String>,
    /// What the model wrote: the broken block, or its whole message when no call was written.
    pub original: String,
    /// The parser's or validator's complaint.
    pub error: String,
}

/// A call slot in message order; repairs keep their place (and so their index).
enum Slot {
    Ready(ReadyCall),
    Pending(u32),
    Failed(InvalidCall),
}

pub struct ReplyParser {
    settings: ReplySettings,
    parser: Parser,
    events: Vec<Event>,
    slots: Vec<Slot>,
    /// Slots already handed out by `take_ready`.
    taken: usize,
    repairs: Vec<RepairRequest>,
    next_repair: u32,
    /// The whole message so far, kept only when a missing required call may need repair.
    transcript: Option<String>,
    /// When text started being held back, for the hold-time metric.
    holding_since: Option<Instant>,
    held_peak: usize,
    /// The upstream stopped the message at its token limit.
    cut_short: bool,
}

impl ReplyParser {
    pub fn new(settings: ReplySettings) -> Self {
        let parser = Parser::new(settings.tools.names(), settings.parser.clone());
        let transcript = (settings.repair && settings.call_required).then(String::new);
        ReplyParser {
            settings,
            parser,
            events: Vec::new(),
            slots: Vec::new(),
            taken: 0,
            repairs: Vec::new(),
            next_repair: 0,
            transcript,
            holding_since: None,
            held_peak: 0,
            cut_short: false,
        }
    }

    /// The upstream ended the message at its token limit (`finish_reason:
    /// "length"`): a call still open then was cut, not written wrong, and
    /// stays text instead of following `on_invalid`. Call before
    /// [`ReplyParser::finish_text`].
    pub fn cut_short(&mut self) {
        self.cut_short = true;
    }

    /// Feeds a content delta; appends the text to show now to `out`.
    pub fn feed(&mut self, text: &str, out: &mut String) -> Result<(), InvalidCall> {
        if let Some(t) = &mut self.transcript {
            t.push_str(text);
        }
        self.parser.feed(text, &mut self.events);
        self.note_hold();
        self.drain(out)
    }

    /// The message ended: appends the remaining text to `out`. When a call
    /// was required and none was written, asks for a repair.
    pub fn finish_text(&mut self, out: &mut String) -> Result<(), InvalidCall> {
        self.parser.finish(&mut self.events);
        self.note_hold();
        self.drain(out)?;
        if self.settings.call_required
            && self.settings.repair
            && self.slots.is_empty()
            && self.settings.repairs_left.take()
        {
            let tool = match self.settings.tools.tools.as_slice() {
                [only] => Some(only.name.clone()),
                _ => None,
            };
            let original = self.transcript.take().unwrap_or_default();
            self.request_repair(
                tool,
                original,
                "a tool call was required, but the model wrote none".to_owned(),
            );
        }
        Ok(())
    }

    /// Repair requests made since the last call.
    pub fn take_repairs(&mut self) -> Vec<RepairRequest> {
        std::mem::take(&mut self.repairs)
    }

    /// Whether some slot still waits for its repair.
    pub fn is_waiting(&self) -> bool {
        self.slots.iter().any(|s| matches!(s, Slot::Pending(_)))
    }

    /// Fills a repair slot with the fallback model's call, or its failure.
    pub fn resolve(
        &mut self,
        id: u32,
        result: Result<(String, serde_json::Map<String, serde_json::Value>), InvalidCall>,
    ) {
        for slot in &mut self.slots {
            if matches!(slot, Slot::Pending(p) if *p == id) {
                *slot = match result {
                    Ok((name, args)) => Slot::Ready(ReadyCall {
                        id: call_id(),
                        name,
                        arguments: serde_json::Value::Object(args).to_string(),
                    }),
                    Err(e) => Slot::Failed(e),
                };
                return;
            }
        }
    }

    /// The calls ready so far that no earlier slot holds back (one waiting
    /// for its repair keeps its place), not handed out before.
    pub fn take_ready(&mut self) -> Vec<ReadyCall> {
        let mut calls = Vec::new();
        while let Some(Slot::Ready(call)) = self.slots.get(self.taken) {
            calls.push(call.clone());
            self.taken += 1;
        }
        self.count(&calls);
        calls
    }

    fn count(&self, calls: &[ReadyCall]) {
        for call in calls {
            metrics::counter!(m::TOOL_CALLS, "provider" => self.settings.provider.to_string(), "tool" => m::tool_label(&call.name))
                .increment(1);
            if let Some(cx) = &self.settings.trace {
                crate::telemetry::genai::event(
                    cx,
                    "toolgate.natural.tool_call",
                    vec![opentelemetry::KeyValue::new(
                        crate::telemetry::genai::TOOL_NAME,
                        call.name.clone(),
                    )],
                );
            }
        }
    }

    /// The calls not handed out yet, in message order, once nothing is waiting.
    pub fn take_calls(&mut self) -> Result<Vec<ReadyCall>, InvalidCall> {
        let mut calls = Vec::with_capacity(self.slots.len());
        let taken = std::mem::take(&mut self.taken);
        for slot in self.slots.drain(..).skip(taken) {
            match slot {
                Slot::Ready(call) => calls.push(call),
                Slot::Failed(e) => return Err(e),
                Slot::Pending(_) => {
                    return Err(InvalidCall {
                        tool: None,
                        reason: "a repair did not finish".into(),
                        raw: None,
                    });
                }
            }
        }
        self.count(&calls);
        Ok(calls)
    }

    /// `finish_text` then `take_calls`, for callers without a fallback model.
    pub fn finish(&mut self, out: &mut String) -> Result<Vec<ReadyCall>, InvalidCall> {
        self.finish_text(out)?;
        self.take_calls()
    }

    fn request_repair(&mut self, tool: Option<String>, original: String, error: String) {
        let id = self.next_repair;
        self.next_repair += 1;
        self.slots.push(Slot::Pending(id));
        self.repairs.push(RepairRequest {
            id,
            tool,
            original,
            error,
        });
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
        let mut events = std::mem::take(&mut self.events);
        let mut result = Ok(());
        for event in events.drain(..) {
            if result.is_err() {
                break;
            }
            match event {
                Event::Text(t) => out.push_str(&t),
                Event::Call(call) => {
                    let checked = match self.settings.tools.get(&call.name) {
                        Some(tool) => self.settings.schemas.check(tool, &call.arguments),
                        None => Err("not a declared tool".to_owned()),
                    };
                    match checked {
                        Err(reason) => {
                            count_invalid(&self.settings, "schema");
                            let reason = format!("arguments do not match the schema: {reason}");
                            result = self.invalid(Some(call.name), reason, call.raw, out);
                        }
                        Ok(())
                            if self
                                .settings
                                .max_calls
                                .is_some_and(|max| self.slots.len() >= max) =>
                        {
                            // parallel_tool_calls: false. The extra call stays visible as text.
                            count_invalid(&self.settings, "extra_call");
                            out.push_str(&call.raw);
                        }
                        Ok(()) => self.slots.push(Slot::Ready(ReadyCall {
                            id: call_id(),
                            name: call.name,
                            arguments: serde_json::Value::Object(call.arguments).to_string(),
                        })),
                    }
                }
                Event::Invalid(block)
                    if self.cut_short && block.reason == InvalidReason::Unclosed =>
                {
                    count_invalid(&self.settings, "cut_short");
                    out.push_str(&block.raw);
                }
                Event::Invalid(block) => {
                    count_invalid(&self.settings, reason_label(&block.reason));
                    result = self.invalid(block.name, block.reason.to_string(), block.raw, out);
                }
            }
        }
        self.events = events;
        result
    }

    /// Applies `on_invalid` to a block that could not become a call.
    fn invalid(
        &mut self,
        tool: Option<String>,
        reason: String,
        raw: String,
        out: &mut String,
    ) -> Result<(), InvalidCall> {
        if !self.settings.repair
            || self
                .settings
                .max_calls
                .is_some_and(|max| self.slots.len() >= max)
        {
            return reject(self.settings.on_invalid, tool, reason, &raw, out);
        }
        if !self.settings.repairs_left.take() {
            let reason = format!(
                "{reason} (not repaired: this response already asked the fallback model for \
                 {} repairs, the `fallback_max_calls` limit)",
                self.settings.max_repairs
            );
            return reject(self.settings.on_invalid, tool, reason, &raw, out);
        }
        self.request_repair(tool, raw, reason);
        Ok(())
    }
}

/// `on_invalid = "text"` shows the block as written; otherwise the reply fails
/// (`"fallback"` only reaches here when no repair can be asked for).
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
        OnInvalid::Error | OnInvalid::Fallback => Err(InvalidCall {
            tool,
            reason,
            raw: Some(raw.to_owned()),
        }),
    }
}

fn count_invalid(settings: &ReplySettings, reason: &'static str) {
    metrics::counter!(m::INVALID_BLOCKS, "provider" => settings.provider.to_string(), "reason" => reason)
        .increment(1);
    if let Some(cx) = &settings.trace {
        crate::telemetry::genai::event(
            cx,
            "toolgate.natural.invalid_block",
            vec![opentelemetry::KeyValue::new("toolgate.reason", reason)],
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natural::tools::Tool;

    fn settings(max_repairs: usize) -> ReplySettings {
        let tools = ToolSet::from_tools(vec![Tool {
            name: "T".into(),
            description: None,
            parameters: None,
            strict: false,
            unlisted: false,
        }]);
        let plan = ResponsePlan {
            tools: Arc::new(tools),
            choice: Choice::Auto,
            parallel_tool_calls: true,
            include_usage: false,
            legacy_functions: false,
            conversation: None,
        };
        ReplySettings::new(
            "p",
            &plan,
            ParserOptions::default(),
            OnInvalid::Fallback,
            max_repairs,
            Arc::new(SchemaCache::new()),
        )
    }

    const BROKEN: &str = "<T>\n```json\nnot json\n```\n</T>\n\n";

    #[test]
    fn repairs_stop_at_the_cap_and_later_blocks_take_on_invalid() {
        let mut reply = ReplyParser::new(settings(DEFAULT_MAX_REPAIRS));
        let mut out = String::new();
        // Ten broken blocks (not JSON): only the first three are repairs.
        let mut result = Ok(());
        for _ in 0..10 {
            result = result.and(reply.feed(BROKEN, &mut out));
        }
        let _ = reply.finish_text(&mut out);
        assert_eq!(reply.take_repairs().len(), DEFAULT_MAX_REPAIRS);
        assert!(result.is_err(), "the fourth block is rejected");
    }

    #[test]
    fn the_repair_budget_is_shared_by_the_choices_of_a_response() {
        let settings = settings(3);
        let mut repairs = 0;
        let mut rejected = 0;
        for _choice in 0..2 {
            let mut reply = ReplyParser::new(settings.clone());
            let mut out = String::new();
            for _ in 0..2 {
                if reply.feed(BROKEN, &mut out).is_err() {
                    rejected += 1;
                }
            }
            repairs += reply.take_repairs().len();
        }
        assert_eq!((repairs, rejected), (3, 1));
    }

    #[test]
    fn a_zero_budget_asks_for_no_repair() {
        let mut reply = ReplyParser::new(settings(0));
        let mut out = String::new();
        assert!(reply.feed(BROKEN, &mut out).is_err());
        assert!(reply.take_repairs().is_empty());
    }
}
