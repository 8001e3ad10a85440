//! The gateway's tool loop, sans-IO: one client request, several model
//! rounds (seed 003's two-phase answer, seed 004's call lifecycle).
//!
//! Each round's [`Event`]s go in. Text is passed on at once; a call to a
//! gateway tool is reported (`in_progress`) and handed out to be executed;
//! a call to one of the client's tools is kept for the end. Results come
//! back in any order and are reported as they arrive. When the round is
//! over and every result is in:
//!
//! * the client's calls, if any, go out with `finish_reason: "tool_calls"`
//!   (the gateway's own steps are kept for the client's follow-up);
//! * otherwise, if the gateway ran tools, the round's assistant turn and its
//!   results join the history and the model is asked again; the round that
//!   reaches `max_rounds` is sent with tools withheld, so it ends in text;
//! * otherwise the answer ends with the model's own finish reason.
//!
//! One answer comes out: one start, one finish, usage summed over rounds.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::exchange::{Call, Event, GatewayCall, GatewayStatus, Usage};
use crate::natural::reply::call_id;
use crate::to_natural::RenderOptions;
use crate::tools::executor::Outcome;
use crate::tools::steps::Steps;
use crate::tools::{GatewayTool, Offer};

/// What the loop asks of its driver.
#[derive(Debug)]
pub enum Action {
    /// Pass on to the client.
    Emit(Event),
    /// Run this call; report with [`Rounds::on_result`] under `id`.
    Execute {
        id: String,
        tool: Arc<GatewayTool>,
        arguments: String,
    },
}

/// How a round ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Send [`Rounds::body`] again: the model continues.
    Continue,
    /// The answer is over.
    Done,
}

enum Slot {
    Gateway { call: Call, report: GatewayCall },
    Client(Call),
}

pub struct Rounds {
    request: Map<String, Value>,
    offer: Offer,
    max_rounds: u32,
    round: u32,
    /// to_natural: the client's calls are written as text.
    as_text: Option<RenderOptions>,
    started: bool,
    /// Some text went out (a call written as text then follows a blank line).
    wrote_text: bool,
    next_index: usize,
    text: String,
    slots: Vec<Slot>,
    finish: Option<String>,
    usage: Option<Usage>,
    /// Messages the gateway added to the history (earlier rounds).
    added: Vec<Value>,
    /// Set when the answer ends with client calls after gateway steps:
    /// the client's call ids, and the steps to restore on its follow-up.
    steps: Option<(Vec<String>, Steps)>,
}

impl Rounds {
    /// `request` is the Chat Completions request of the first round, with
    /// the gateway's tools already declared in it.
    pub fn new(
        request: Map<String, Value>,
        offer: Offer,
        max_rounds: u32,
        as_text: Option<RenderOptions>,
    ) -> Self {
        Rounds {
            request,
            offer,
            max_rounds,
            round: 1,
            as_text,
            started: false,
            wrote_text: false,
            next_index: 0,
            text: String::new(),
            slots: Vec::new(),
            finish: None,
            usage: None,
            added: Vec::new(),
            steps: None,
        }
    }

    /// The gateway tools offered.
    pub fn offer(&self) -> &Offer {
        &self.offer
    }

    /// The current round, from 1.
    pub fn round(&self) -> u32 {
        self.round
    }

    /// The body of the current round's upstream request.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&self.request).unwrap_or_default()
    }

    /// Whether this round is sent with tools withheld.
    fn last(&self) -> bool {
        self.round >= self.max_rounds
    }

    /// Gateway calls still running.
    pub fn running(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| {
                matches!(s, Slot::Gateway { report, .. } if report.status == GatewayStatus::InProgress)
            })
            .count()
    }

    /// The client's call ids and the steps to put back when it follows up (see `steps`).
    pub fn take_steps(&mut self) -> Option<(Vec<String>, Steps)> {
        self.steps.take()
    }

    pub fn on_event(&mut self, event: Event, out: &mut Vec<Action>) {
        match event {
            Event::Start(meta) => {
                if !self.started {
                    self.started = true;
                    out.push(Action::Emit(Event::Start(meta)));
                }
            }
            Event::Text(text) => {
                self.wrote_text |= !text.is_empty();
                self.text.push_str(&text);
                out.push(Action::Emit(Event::Text(text)));
            }
            Event::Reasoning(text) => out.push(Action::Emit(Event::Reasoning(text))),
            Event::Call(mut call) => {
                // Ids must be unique over all rounds; upstreams reuse theirs.
                call.id = call_id();
                match self.offer.get(&call.name).cloned() {
                    None => self.slots.push(Slot::Client(call)),
                    Some(tool) => self.gateway_call(call, tool, out),
                }
            }
            Event::Gateway(_) => {}
            Event::Finish(reason) => self.finish = Some(reason),
            Event::Usage(u) => self.usage.get_or_insert_with(Usage::default).add(&u),
        }
    }

    fn gateway_call(&mut self, call: Call, tool: Arc<GatewayTool>, out: &mut Vec<Action>) {
        let mut report = GatewayCall {
            index: self.next_index,
            id: call.id.clone(),
            name: call.name.clone(),
            server: tool.server().to_owned(),
            arguments: call.arguments.clone(),
            status: GatewayStatus::InProgress,
            output: None,
            error: None,
        };
        self.next_index += 1;
        out.push(Action::Emit(Event::Gateway(report.clone())));
        if self.last() {
            // Tools were withheld; a call made anyway cannot be followed up.
            report.status = GatewayStatus::Failed;
            report.error = Some(format!(
                "not run: the answer reached max_rounds ({})",
                self.max_rounds
            ));
            out.push(Action::Emit(Event::Gateway(report.clone())));
        } else {
            out.push(Action::Execute {
                id: call.id.clone(),
                tool,
                arguments: call.arguments.clone(),
            });
        }
        self.slots.push(Slot::Gateway { call, report });
    }

    /// A call's result arrived.
    pub fn on_result(&mut self, id: &str, outcome: Outcome, out: &mut Vec<Action>) {
        for slot in &mut self.slots {
            if let Slot::Gateway { report, .. } = slot
                && report.id == id
                && report.status == GatewayStatus::InProgress
            {
                match outcome {
                    Outcome::Completed(text) => {
                        report.status = GatewayStatus::Completed;
                        report.output = Some(text);
                    }
                    Outcome::Failed(error) => {
                        report.status = GatewayStatus::Failed;
                        report.error = Some(error);
                    }
                }
                out.push(Action::Emit(Event::Gateway(report.clone())));
                return;
            }
        }
    }

    /// The round's upstream answer is over and [`Rounds::running`] is 0.
    pub fn end_round(&mut self, out: &mut Vec<Action>) -> Next {
        let slots = std::mem::take(&mut self.slots);
        let text = std::mem::take(&mut self.text);
        let finish = self.finish.take();
        let gateway: Vec<(Call, GatewayCall)> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Gateway { call, report } => Some((call.clone(), report.clone())),
                Slot::Client(_) => None,
            })
            .collect();
        let client: Vec<Call> = slots
            .into_iter()
            .filter_map(|s| match s {
                Slot::Client(call) => Some(call),
                Slot::Gateway { .. } => None,
            })
            .collect();
        let turn = assistant_turn(&text, &gateway);
        if !client.is_empty() {
            if !gateway.is_empty() || !self.added.is_empty() {
                let ids = client.iter().map(|c| c.id.clone()).collect();
                let steps = Steps {
                    earlier: std::mem::take(&mut self.added),
                    text,
                    calls: gateway.iter().map(|(c, _)| tool_call(c)).collect(),
                    results: turn.into_iter().skip(1).collect(),
                };
                self.steps = Some((ids, steps));
            }
            self.emit_client_calls(client, out);
            self.emit_usage(out);
            return Next::Done;
        }
        if !gateway.is_empty() && !self.last() {
            self.added.extend(turn.iter().cloned());
            if let Some(Value::Array(messages)) = self.request.get_mut("messages") {
                messages.extend(turn);
            }
            self.round += 1;
            self.prepare_round();
            return Next::Continue;
        }
        out.push(Action::Emit(Event::Finish(
            finish.unwrap_or_else(|| "stop".into()),
        )));
        self.emit_usage(out);
        Next::Done
    }

    /// The request of a continuation round: a required or named tool choice
    /// was satisfied by the gateway's calls; the last round gets no tools.
    fn prepare_round(&mut self) {
        let forced = match self.request.get("tool_choice") {
            Some(Value::String(s)) => s == "required",
            Some(Value::Object(_)) => true,
            _ => false,
        };
        if forced {
            self.request.insert("tool_choice".into(), json!("auto"));
        }
        if self.last() {
            self.request.insert("tool_choice".into(), json!("none"));
            self.request.remove("parallel_tool_calls");
        }
    }

    fn emit_client_calls(&mut self, calls: Vec<Call>, out: &mut Vec<Action>) {
        match &self.as_text {
            None => {
                for call in calls {
                    out.push(Action::Emit(Event::Call(call)));
                }
                out.push(Action::Emit(Event::Finish("tool_calls".into())));
            }
            Some(render) => {
                let mut text = String::new();
                for (i, call) in calls.iter().enumerate() {
                    if i > 0 {
                        text.push('\n');
                        text.push_str(&render.separator);
                        text.push('\n');
                    } else if self.wrote_text {
                        text.push_str("\n\n");
                    }
                    render.write_call(&call.name, &call.arguments, &mut text);
                }
                out.push(Action::Emit(Event::Text(text)));
                out.push(Action::Emit(Event::Finish("stop".into())));
            }
        }
    }

    fn emit_usage(&mut self, out: &mut Vec<Action>) {
        if let Some(usage) = self.usage.take() {
            out.push(Action::Emit(Event::Usage(usage)));
        }
    }
}

/// The round's assistant message with the gateway's calls, then one `tool`
/// message per call with its result (what the model sees next round).
fn assistant_turn(text: &str, gateway: &[(Call, GatewayCall)]) -> Vec<Value> {
    if gateway.is_empty() {
        return Vec::new();
    }
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_owned())
    };
    let mut turn = vec![json!({
        "role": "assistant",
        "content": content,
        "tool_calls": gateway.iter().map(|(c, _)| tool_call(c)).collect::<Vec<_>>(),
    })];
    for (call, report) in gateway {
        let result = match (&report.output, &report.error) {
            (Some(output), _) => output.clone(),
            (None, Some(error)) => format!("Error: {error}"),
            (None, None) => "Error: no result".to_owned(),
        };
        turn.push(json!({"role": "tool", "tool_call_id": call.id, "content": result}));
    }
    turn
}

fn tool_call(call: &Call) -> Value {
    json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}})
}
