//! The gateway's tool loop, sans-IO: one client request, several model
//! rounds (a two-phase answer: the gateway's calls and their results, then
//! the model's answer; every call reported through its lifecycle).
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
//! A gateway call identical to one already answered in this answer (same
//! tool, same arguments as JSON) is not run again: it gets the first
//! result, and the model is told it repeated itself and should answer with
//! it. A round that only repeated itself is a loop: the next round is sent
//! with the tools withheld, as the last one is, so the answer ends in text.
//! (A small model that calls again after every result would otherwise run
//! the tool until `max_rounds`.)
//!
//! One answer comes out: one start, one finish, usage summed over rounds.

use std::sync::Arc;

use serde_json::Value;

use crate::exchange::call_id;
use crate::exchange::request::{Message, Request, Tool, ToolChoice};
use crate::exchange::{Call, Event, GatewayCall, GatewayStatus, Usage};
use crate::to_natural::RenderOptions;
use crate::tools::executor::Outcome;
use crate::tools::search::{self, Catalog};
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
    Gateway {
        call: Call,
        report: GatewayCall,
        /// Answered from an identical earlier call, not run.
        repeat: bool,
    },
    Client(Call),
}

/// A gateway call answered earlier in this answer.
struct Answered {
    name: String,
    arguments: Option<Value>,
    output: String,
}

/// What the model reads after a repeated call's result.
const REPEAT_NOTE: &str = "(You already made this exact call, and this is its result again: the tool was not run a second time. Do not call it again; answer with this result.)";

pub struct Rounds {
    request: Request,
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
    added: Vec<Message>,
    /// Set when the answer ends with client calls after gateway steps:
    /// the client's call ids, and the steps to restore on its follow-up.
    steps: Option<(Vec<String>, Steps)>,
    /// Gateway calls that completed, for telling a repeat (bounded by
    /// `max_rounds` times the calls one round may make).
    answered: Vec<Answered>,
    /// A round made only repeated calls: the tools are withheld from here on.
    looping: bool,
    /// `tool_search`: the tools found by `search_tools` calls, answered here.
    search: Option<Catalog>,
    /// Tools found this round, declared from the next one on.
    found: Vec<Tool>,
}

impl Rounds {
    /// `request` is the Chat Completions request of the first round, with
    /// the gateway's tools already declared in it.
    pub fn new(
        request: Request,
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
            answered: Vec::new(),
            looping: false,
            search: None,
            found: Vec::new(),
        }
    }

    /// With `tool_search`: `search_tools` calls are answered from `catalog`.
    pub fn with_search(mut self, catalog: Option<Catalog>) -> Self {
        self.search = catalog;
        self
    }

    /// The gateway tools offered.
    pub fn offer(&self) -> &Offer {
        &self.offer
    }

    /// The current round, from 1.
    pub fn round(&self) -> u32 {
        self.round
    }

    /// The current round's upstream request.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Whether this round is sent with tools withheld: it reached
    /// `max_rounds`, or the model was looping.
    fn last(&self) -> bool {
        self.round >= self.max_rounds || self.looping
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
                    None if call.name == search::SEARCH_TOOL && self.search.is_some() => {
                        self.search_call(call, out);
                    }
                    None if self.offer.is_withheld(&call.name) => {
                        let why =
                            format!("the tool {} is not available to this API key", call.name);
                        self.refused_call(call, "withheld", why, out);
                    }
                    None if let Some(absent) = self.offer.absent(&call.name) => {
                        let server = absent.server.clone();
                        let why = format!("the {}: the tool cannot run now", absent.describe());
                        self.refused_call(call, &server, why, out);
                    }
                    None => self.slots.push(Slot::Client(call)),
                    Some(tool) => self.gateway_call(call, tool, out),
                }
            }
            Event::Gateway(_) => {}
            Event::Finish(reason) => self.finish = Some(reason),
            Event::Usage(u) => self.usage.get_or_insert_with(Usage::default).add(&u),
        }
    }

    /// A call to one of the provider's tools that this key may not use, or
    /// whose server is down: it is not run (and never goes to the client),
    /// and the model is told `why` as its result.
    /// Reported begun, then failed, as every gateway call is.
    fn refused_call(&mut self, call: Call, server: &str, why: String, out: &mut Vec<Action>) {
        let mut report = self.begin_call(&call, server, out);
        report.status = GatewayStatus::Failed;
        report.error = Some(why);
        out.push(Action::Emit(Event::Gateway(report.clone())));
        self.slots.push(Slot::Gateway {
            call,
            report,
            repeat: false,
        });
    }

    /// A `search_tools` call, answered at once from the catalog; what it
    /// found is declared from the next round on.
    fn search_call(&mut self, call: Call, out: &mut Vec<Action>) {
        let mut report = self.begin_call(&call, "search", out);
        let arguments = serde_json::from_str::<Value>(&call.arguments).ok();
        let repeat = self.earlier(&call.name, arguments.as_ref()).is_some();
        match self.search.as_ref().map(|c| c.answer(&call.arguments)) {
            Some(Ok((text, hits))) => {
                for tool in hits {
                    let name = tool.name();
                    match self.request.tools.iter_mut().find(|t| t.name() == name) {
                        // Declared unlisted (natural mode): listed from now on.
                        Some(declared) => search::catalog::mark(declared, false),
                        None if !self.found.iter().any(|t| t.name() == name) => {
                            self.found.push(tool.clone());
                        }
                        None => {}
                    }
                }
                self.answered.push(Answered {
                    name: call.name.clone(),
                    arguments,
                    output: text.clone(),
                });
                report.status = GatewayStatus::Completed;
                report.output = Some(text);
            }
            Some(Err(error)) => {
                report.status = GatewayStatus::Failed;
                report.error = Some(error);
            }
            None => {
                report.status = GatewayStatus::Failed;
                report.error = Some("tool search is off".to_owned());
            }
        }
        out.push(Action::Emit(Event::Gateway(report.clone())));
        self.slots.push(Slot::Gateway {
            call,
            report,
            repeat,
        });
    }

    /// A call the gateway answers, reported `in_progress` under the next index.
    fn begin_call(&mut self, call: &Call, server: &str, out: &mut Vec<Action>) -> GatewayCall {
        let report = GatewayCall {
            index: self.next_index,
            id: call.id.clone(),
            name: call.name.clone(),
            server: server.to_owned(),
            arguments: call.arguments.clone(),
            status: GatewayStatus::InProgress,
            output: None,
            error: None,
        };
        self.next_index += 1;
        out.push(Action::Emit(Event::Gateway(report.clone())));
        report
    }

    /// The earlier call of this answer with the same tool and arguments.
    fn earlier(&self, name: &str, arguments: Option<&Value>) -> Option<&Answered> {
        self.answered
            .iter()
            .find(|a| a.name == name && a.arguments.is_some() && a.arguments.as_ref() == arguments)
    }

    fn gateway_call(&mut self, call: Call, tool: Arc<GatewayTool>, out: &mut Vec<Action>) {
        let mut report = self.begin_call(&call, tool.server(), out);
        let arguments = serde_json::from_str::<Value>(&call.arguments).ok();
        if let Some(earlier) = self.earlier(&call.name, arguments.as_ref()) {
            report.status = GatewayStatus::Completed;
            report.output = Some(earlier.output.clone());
            out.push(Action::Emit(Event::Gateway(report.clone())));
            self.slots.push(Slot::Gateway {
                call,
                report,
                repeat: true,
            });
            return;
        }
        if self.last() {
            // Tools were withheld; a call made anyway cannot be followed up.
            report.status = GatewayStatus::Failed;
            report.error = Some(if self.looping {
                "not run: the tools were withheld after the model repeated its calls".to_owned()
            } else {
                format!(
                    "not run: the answer reached max_rounds ({})",
                    self.max_rounds
                )
            });
            out.push(Action::Emit(Event::Gateway(report.clone())));
        } else {
            out.push(Action::Execute {
                id: call.id.clone(),
                tool,
                arguments: call.arguments.clone(),
            });
        }
        self.slots.push(Slot::Gateway {
            call,
            report,
            repeat: false,
        });
    }

    /// A call's result arrived.
    pub fn on_result(&mut self, id: &str, outcome: Outcome, out: &mut Vec<Action>) {
        for slot in &mut self.slots {
            if let Slot::Gateway { call, report, .. } = slot
                && report.id == id
                && report.status == GatewayStatus::InProgress
            {
                match outcome {
                    Outcome::Completed(text) => {
                        self.answered.push(Answered {
                            name: call.name.clone(),
                            arguments: serde_json::from_str(&call.arguments).ok(),
                            output: text.clone(),
                        });
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
        let gateway: Vec<(Call, GatewayCall, bool)> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Gateway {
                    call,
                    report,
                    repeat,
                } => Some((call.clone(), report.clone(), *repeat)),
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
                    calls: gateway.iter().map(|(c, _, _)| c.clone()).collect(),
                    results: turn.into_iter().skip(1).collect(),
                };
                self.steps = Some((ids, steps));
            }
            self.emit_client_calls(client, out);
            self.emit_usage(out);
            return Next::Done;
        }
        if !gateway.is_empty() && !self.last() {
            self.looping = gateway.iter().all(|(_, _, repeat)| *repeat);
            self.added.extend(turn.iter().cloned());
            self.request.messages.extend(turn);
            self.request.tools.append(&mut self.found);
            self.round += 1;
            self.prepare_round();
            return Next::Continue;
        }
        // No call of the client's goes out here: a finish that says there
        // are some (the model called a tool in the round sent without
        // tools) would promise what the client never gets.
        let finish = match finish {
            Some(reason) if reason != "tool_calls" && reason != "function_call" => reason,
            _ => "stop".to_owned(),
        };
        out.push(Action::Emit(Event::Finish(finish)));
        self.emit_usage(out);
        Next::Done
    }

    /// The request of a continuation round: a required or named tool choice
    /// was satisfied by the gateway's calls; the last round gets no tools.
    fn prepare_round(&mut self) {
        let forced = match &self.request.tool_choice {
            Some(ToolChoice::Required | ToolChoice::Function(_)) => true,
            // `allowed_tools` in `required` mode, or any other object.
            Some(ToolChoice::Other(choice)) => choice.is_object(),
            Some(ToolChoice::Auto | ToolChoice::None) | None => false,
        };
        if forced {
            self.request.tool_choice = Some(ToolChoice::Auto);
        }
        if self.last() {
            self.request.tool_choice = Some(ToolChoice::None);
            self.request.parallel_tool_calls = None;
        }
    }

    fn emit_client_calls(&self, calls: Vec<Call>, out: &mut Vec<Action>) {
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
/// message per call with its result (what the model sees next round; a
/// repeated call's result says so).
fn assistant_turn(text: &str, gateway: &[(Call, GatewayCall, bool)]) -> Vec<Message> {
    if gateway.is_empty() {
        return Vec::new();
    }
    let calls = gateway.iter().map(|(c, _, _)| c.clone()).collect();
    let mut turn = vec![Message::assistant(text, calls)];
    for (call, report, repeat) in gateway {
        let result = match (&report.output, &report.error) {
            (Some(output), _) if *repeat => format!("{output}\n\n{REPEAT_NOTE}"),
            (Some(output), _) => output.clone(),
            (None, Some(error)) => format!("Error: {error}"),
            (None, None) => "Error: no result".to_owned(),
        };
        turn.push(Message::tool_result(&call.id, result));
    }
    turn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolKind;
    use crate::tools::builtin::Builtin;
    use serde_json::json;

    fn calculator() -> Offer {
        let tool = GatewayTool::new(
            "calculator".into(),
            String::new(),
            Builtin::Calculator.parameters(),
            ToolKind::Builtin(Builtin::Calculator),
        );
        Offer {
            tools: vec![Arc::new(tool)],
            withheld: vec!["clock".into()],
            unavailable: Vec::new(),
        }
    }

    /// A loop over `request` (a JSON object) offering the calculator.
    fn rounds_for(request: Value, max_rounds: u32) -> Rounds {
        let Value::Object(request) = request else {
            panic!("a request is an object")
        };
        Rounds::new(
            Request::from_chat(request).unwrap(),
            calculator(),
            max_rounds,
            None,
        )
    }

    fn call(arguments: &str) -> Event {
        Event::Call(Call {
            id: "up".into(),
            name: "calculator".into(),
            arguments: arguments.into(),
        })
    }

    /// Runs one round of `events`; the ids handed out to execute.
    fn round(rounds: &mut Rounds, events: Vec<Event>, out: &mut Vec<Action>) -> Vec<String> {
        let start = out.len();
        for event in events {
            rounds.on_event(event, out);
        }
        out[start..]
            .iter()
            .filter_map(|a| match a {
                Action::Execute { id, .. } => Some(id.clone()),
                Action::Emit(_) => None,
            })
            .collect()
    }

    #[test]
    fn an_identical_call_gets_the_first_result_without_running_again() {
        let request = json!({"messages": [{"role": "user", "content": "17 * 23 + 4?"}]});
        let mut rounds = rounds_for(request, 8);
        let mut out = Vec::new();
        let ran = round(
            &mut rounds,
            vec![call(r#"{"expression": "17*23+4"}"#)],
            &mut out,
        );
        assert_eq!(ran.len(), 1);
        rounds.on_result(&ran[0], Outcome::Completed("395".into()), &mut out);
        assert_eq!(rounds.end_round(&mut out), Next::Continue);

        // The same call again (other spacing, same JSON) and a new one.
        let ran = round(
            &mut rounds,
            vec![
                call(r#"{ "expression":"17*23+4" }"#),
                call(r#"{"expression": "395 / 5"}"#),
            ],
            &mut out,
        );
        assert_eq!(ran.len(), 1, "only the new call runs");
        let repeated: Vec<&GatewayCall> = out
            .iter()
            .filter_map(|a| match a {
                Action::Emit(Event::Gateway(g)) if g.index == 1 => Some(g),
                _ => None,
            })
            .collect();
        assert_eq!(repeated.len(), 2, "reported in progress, then completed");
        assert_eq!(repeated[1].status, GatewayStatus::Completed);
        assert_eq!(repeated[1].output.as_deref(), Some("395"));
        rounds.on_result(&ran[0], Outcome::Completed("79".into()), &mut out);
        assert_eq!(rounds.end_round(&mut out), Next::Continue);

        // The model reads the first result again, told it repeated itself.
        let body: Value = serde_json::from_slice(&rounds.request().to_chat_body()).unwrap();
        let results: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0], "395");
        assert!(
            results[1].starts_with("395\n\n") && results[1].contains("not run a second time"),
            "{}",
            results[1]
        );
        assert_eq!(results[2], "79");
        assert_ne!(
            body["tool_choice"], "none",
            "a new call was made: tools stay"
        );

        // A round of repeats only: the next is sent without tools.
        let ran = round(
            &mut rounds,
            vec![call(r#"{"expression": "395 / 5"}"#)],
            &mut out,
        );
        assert!(ran.is_empty());
        assert_eq!(rounds.end_round(&mut out), Next::Continue);
        let body: Value = serde_json::from_slice(&rounds.request().to_chat_body()).unwrap();
        assert_eq!(body["tool_choice"], "none", "the loop is broken");
    }

    #[test]
    fn a_call_to_a_withheld_tool_is_refused_and_the_model_told() {
        let mut rounds = rounds_for(json!({"messages": []}), 8);
        let mut out = Vec::new();
        let clock = Event::Call(Call {
            id: "up".into(),
            name: "clock".into(),
            arguments: "{}".into(),
        });
        assert!(
            round(&mut rounds, vec![clock], &mut out).is_empty(),
            "never run"
        );
        assert_eq!(
            rounds.end_round(&mut out),
            Next::Continue,
            "not the client's call"
        );
        let body: Value = serde_json::from_slice(&rounds.request().to_chat_body()).unwrap();
        let result = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(result["role"], "tool");
        assert!(
            result["content"]
                .as_str()
                .unwrap()
                .contains("not available to this API key"),
            "{result}"
        );
    }

    /// A call to a tool of a server that is down (the model read it in an
    /// earlier turn) is not handed to the client: it fails, and the model
    /// reads that the server is down. A client tool of that name is the
    /// client's.
    #[test]
    fn a_call_to_a_down_servers_tool_is_refused_unless_the_client_declares_it() {
        let ghost = Event::Call(Call {
            id: "up".into(),
            name: "lookup".into(),
            arguments: "{}".into(),
        });
        let offer = || Offer {
            unavailable: vec![crate::tools::Absent {
                server: "ghost".into(),
                starting: false,
                retry_in: None,
                tools: Arc::from(vec!["lookup".to_owned()]),
            }],
            ..calculator()
        };
        let Value::Object(request) = json!({"messages": []}) else {
            unreachable!()
        };
        let mut rounds = Rounds::new(Request::from_chat(request).unwrap(), offer(), 8, None);
        let mut out = Vec::new();
        assert!(round(&mut rounds, vec![ghost.clone()], &mut out).is_empty());
        assert_eq!(rounds.end_round(&mut out), Next::Continue);
        let body: Value = serde_json::from_slice(&rounds.request().to_chat_body()).unwrap();
        let result = body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(result["role"], "tool");
        assert_eq!(
            result["content"],
            "Error: the tool server `ghost` is down: the tool cannot run now"
        );

        let Value::Object(request) = json!({"messages": [], "tools": [{"type": "function", "function": {"name": "lookup"}}]})
        else {
            unreachable!()
        };
        let request = Request::from_chat(request).unwrap();
        let offer = offer().beside(request.tools.iter().filter_map(Tool::name));
        let mut rounds = Rounds::new(request, offer, 8, None);
        let mut out = Vec::new();
        assert!(round(&mut rounds, vec![ghost], &mut out).is_empty());
        assert_eq!(rounds.end_round(&mut out), Next::Done, "the client's call");
    }

    /// A withheld tool does not exist for the key: when the client declares
    /// a tool of that name, the call is the client's.
    #[test]
    fn a_call_to_a_client_tool_named_like_a_withheld_one_goes_to_the_client() {
        let request =
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "clock"}}]});
        let Value::Object(request) = request else {
            unreachable!()
        };
        let request = Request::from_chat(request).unwrap();
        let offer = calculator().beside(request.tools.iter().filter_map(Tool::name));
        let mut rounds = Rounds::new(request, offer, 8, None);
        let mut out = Vec::new();
        let clock = Event::Call(Call {
            id: "up".into(),
            name: "clock".into(),
            arguments: "{}".into(),
        });
        assert!(round(&mut rounds, vec![clock], &mut out).is_empty());
        assert_eq!(rounds.end_round(&mut out), Next::Done);
        assert!(
            !out.iter()
                .any(|a| matches!(a, Action::Emit(Event::Gateway(_)))),
            "{out:?}"
        );
        let calls: Vec<&str> = out
            .iter()
            .filter_map(|a| match a {
                Action::Emit(Event::Call(c)) => Some(c.name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(calls, ["clock"]);
    }

    /// The round sent without tools still wrote a call: it is not run, and
    /// the answer ends `stop`, not `tool_calls` with no calls.
    #[test]
    fn the_last_round_ends_in_stop_whatever_the_model_wrote() {
        let mut rounds = rounds_for(json!({"messages": []}), 1);
        let mut out = Vec::new();
        let ran = round(
            &mut rounds,
            vec![
                call(r#"{"expression": "1+1"}"#),
                Event::Finish("tool_calls".into()),
            ],
            &mut out,
        );
        assert!(ran.is_empty(), "tools were withheld: nothing runs");
        assert_eq!(rounds.end_round(&mut out), Next::Done);
        let finish: Vec<&str> = out
            .iter()
            .filter_map(|a| match a {
                Action::Emit(Event::Finish(f)) => Some(f.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(finish, ["stop"]);
    }

    #[test]
    fn a_failed_call_may_be_tried_again() {
        let mut rounds = rounds_for(json!({"messages": []}), 8);
        let mut out = Vec::new();
        let ran = round(
            &mut rounds,
            vec![call(r#"{"expression": "1/0"}"#)],
            &mut out,
        );
        rounds.on_result(&ran[0], Outcome::Failed("timed out".into()), &mut out);
        rounds.end_round(&mut out);
        let ran = round(
            &mut rounds,
            vec![call(r#"{"expression": "1/0"}"#)],
            &mut out,
        );
        assert_eq!(ran.len(), 1, "only results are reused, not failures");
    }

    /// Results may come back at any point of the round (a fast tool ends
    /// before the model's next words): wherever they arrive, the next
    /// round's request is the same, and so is what the client is told.
    #[test]
    fn results_at_every_point_of_a_round_give_the_same_next_round() {
        let events = || {
            vec![
                Event::Text("Working it out.".into()),
                Event::Call(Call {
                    id: "a".into(),
                    name: "calculator".into(),
                    arguments: r#"{"expression": "1+1"}"#.into(),
                }),
                Event::Text(" And:".into()),
                Event::Call(Call {
                    id: "b".into(),
                    name: "calculator".into(),
                    arguments: r#"{"expression": "2*3"}"#.into(),
                }),
                Event::Finish("tool_calls".into()),
            ]
        };
        let outcomes = ["2", "6"];
        let mut seen: Option<(Vec<u8>, Vec<Event>)> = None;
        let n = events().len();
        // Each result is given back after event `at[i]` (once it was handed out).
        for first in 0..=n {
            for second in 0..=n {
                let mut rounds = rounds_for(
                    json!({"messages": [{"role": "user", "content": "sums"}]}),
                    8,
                );
                let mut out = Vec::new();
                let mut ids: Vec<String> = Vec::new();
                let mut given = [false, false];
                for (i, event) in events().into_iter().enumerate() {
                    rounds.on_event(event, &mut out);
                    for action in &out {
                        if let Action::Execute { id, .. } = action
                            && !ids.contains(id)
                        {
                            ids.push(id.clone());
                        }
                    }
                    for (k, at) in [first, second].into_iter().enumerate() {
                        if at <= i && ids.len() > k && !given[k] {
                            given[k] = true;
                            rounds.on_result(
                                &ids[k].clone(),
                                Outcome::Completed(outcomes[k].into()),
                                &mut out,
                            );
                        }
                    }
                }
                for k in 0..2 {
                    if !given[k] {
                        rounds.on_result(
                            &ids[k].clone(),
                            Outcome::Completed(outcomes[k].into()),
                            &mut out,
                        );
                    }
                }
                assert_eq!(rounds.end_round(&mut out), Next::Continue);
                // Call ids are random: each is named by its order.
                let name = |text: &str| {
                    ids.iter().enumerate().fold(text.to_owned(), |t, (k, id)| {
                        t.replace(id.as_str(), &format!("id{k}"))
                    })
                };
                let body =
                    name(&String::from_utf8(rounds.request().to_chat_body()).unwrap()).into_bytes();
                for action in &mut out {
                    if let Action::Emit(Event::Gateway(g)) = action {
                        g.id = name(&g.id);
                    }
                }
                // What the client is told, in order, but for when each
                // call's completion is reported.
                let mut told: Vec<Event> = out
                    .into_iter()
                    .filter_map(|a| match a {
                        Action::Emit(e) => Some(e),
                        Action::Execute { .. } => None,
                    })
                    .collect();
                let completed: Vec<Event> = told
                    .iter()
                    .filter(
                        |e| matches!(e, Event::Gateway(g) if g.status == GatewayStatus::Completed),
                    )
                    .cloned()
                    .collect();
                told.retain(
                    |e| !matches!(e, Event::Gateway(g) if g.status == GatewayStatus::Completed),
                );
                let mut completed = completed;
                completed.sort_by_key(|e| match e {
                    Event::Gateway(g) => g.index,
                    _ => 0,
                });
                told.extend(completed);
                match &seen {
                    None => seen = Some((body, told)),
                    Some((b, t)) => {
                        assert_eq!(
                            String::from_utf8_lossy(b),
                            String::from_utf8_lossy(&body),
                            "results after events {first} and {second}"
                        );
                        assert_eq!(t, &told, "results after events {first} and {second}");
                    }
                }
            }
        }
        let (body, _) = seen.unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        let results: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(results, ["2", "6"], "results in the calls' order");
    }
}
