//! Answers for the door encoders' property tests: what an answer holds
//! (reasoning and text over two rounds, gateway calls between them, the
//! client's calls, the finish, the usage), and its `Event`s, whole or with
//! each text cut at chosen points, in the order the tool loop emits them.

use proptest::prelude::*;
use serde_json::Value;

use crate::exchange::{Call, Event, GatewayCall, GatewayStatus, Meta, Usage};

/// One answer, before it is cut into events.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Reasoning of the round before the gateway calls and of the one after.
    pub reasoning: [String; 2],
    /// Text of the same two rounds (after each round's reasoning).
    pub text: [String; 2],
    /// Gateway calls: name, arguments, and the result or the error.
    pub gateway: Vec<(String, String, Result<String, String>)>,
    /// The client's calls: name and arguments.
    pub calls: Vec<(String, String)>,
    /// The finish reason.
    pub finish: String,
    /// The token counts, when the upstream gave them.
    pub usage: Option<Usage>,
}

/// Text with what encoders escape: quotes, backslashes, control
/// characters, multi-byte characters, braces.
fn text() -> impl Strategy<Value = String> {
    "[a-z \"\\\\\n\t\u{1}é日🎉{}<>]{0,20}"
}

/// A JSON object's text.
fn arguments() -> impl Strategy<Value = String> {
    proptest::collection::btree_map("[a-z]{1,4}", text(), 0..3)
        .prop_map(|m| serde_json::to_string(&m).unwrap_or_default())
}

/// Any answer, and the points to cut each of its four texts at.
pub fn answer() -> impl Strategy<Value = (Answer, Vec<Vec<usize>>)> {
    let gateway = proptest::collection::vec(
        (
            "[a-z_]{1,8}",
            arguments(),
            prop_oneof![text().prop_map(Ok), text().prop_map(Err)],
        ),
        0..3,
    );
    let calls = proptest::collection::vec(("[a-z_]{1,8}", arguments()), 0..3);
    let usage = proptest::option::of((0u64..1000, 0u64..1000).prop_map(|(p, c)| Usage {
        prompt_tokens: p,
        completion_tokens: c,
        total_tokens: p + c,
    }));
    (
        [text(), text()],
        [text(), text()],
        gateway,
        calls,
        any::<bool>(),
        usage,
        proptest::collection::vec(proptest::collection::vec(0usize..32, 0..5), 4),
    )
        .prop_map(|(reasoning, text, gateway, calls, length, usage, cuts)| {
            let finish = match (calls.is_empty(), length) {
                (false, _) => "tool_calls",
                (true, true) => "length",
                (true, false) => "stop",
            };
            let answer = Answer {
                reasoning,
                text,
                gateway,
                calls,
                finish: finish.to_owned(),
                usage,
            };
            (answer, cuts)
        })
}

/// `text` cut at `cuts` (char positions, taken modulo its length; a
/// position twice gives an empty piece).
pub fn cut(text: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for to in at.into_iter().chain([chars.len()]) {
        out.push(chars[from..to].iter().collect());
        from = to;
    }
    out
}

/// [`cut`] without the empty pieces: upstream decoders never hand one out.
fn pieces(text: &str, cuts: &[usize]) -> Vec<String> {
    let mut out = cut(text, cuts);
    out.retain(|p| !p.is_empty());
    out
}

impl Answer {
    /// The answer's events, each text cut at its `cuts` (none: whole).
    pub fn events(&self, cuts: &[Vec<usize>]) -> Vec<Event> {
        let cut = |i: usize| cuts.get(i).map_or(&[][..], Vec::as_slice);
        let mut events = vec![Event::Start(Meta::default())];
        let round = |events: &mut Vec<Event>, r: usize| {
            for p in pieces(&self.reasoning[r], cut(2 * r)) {
                events.push(Event::Reasoning(p));
            }
            for p in pieces(&self.text[r], cut(2 * r + 1)) {
                events.push(Event::Text(p));
            }
        };
        round(&mut events, 0);
        let report = |index: usize, status: GatewayStatus| {
            let (name, arguments, result) = &self.gateway[index];
            GatewayCall {
                index,
                id: format!("call_gw{index}"),
                name: name.clone(),
                server: "builtin".into(),
                arguments: arguments.clone(),
                status,
                output: result
                    .as_ref()
                    .ok()
                    .filter(|_| status != GatewayStatus::InProgress)
                    .cloned(),
                error: result
                    .as_ref()
                    .err()
                    .filter(|_| status != GatewayStatus::InProgress)
                    .cloned(),
            }
        };
        for i in 0..self.gateway.len() {
            events.push(Event::Gateway(report(i, GatewayStatus::InProgress)));
        }
        for (i, (_, _, result)) in self.gateway.iter().enumerate() {
            let status = match result {
                Ok(_) => GatewayStatus::Completed,
                Err(_) => GatewayStatus::Failed,
            };
            events.push(Event::Gateway(report(i, status)));
        }
        round(&mut events, 1);
        for (i, (name, arguments)) in self.calls.iter().enumerate() {
            events.push(Event::Call(Call {
                id: format!("call_c{i}"),
                name: name.clone(),
                arguments: arguments.clone(),
            }));
        }
        events.push(Event::Finish(self.finish.clone()));
        if let Some(usage) = self.usage {
            events.push(Event::Usage(usage));
        }
        events
    }
}

/// `value` with what each encoder makes up afresh (ids of its own, the
/// creation time) blanked, so two encoders' objects compare.
pub fn without_made_up(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match k.as_str() {
                    "id" | "item_id" | "created_at" => (k.clone(), Value::Null),
                    _ => (k.clone(), without_made_up(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_made_up).collect()),
        other => other.clone(),
    }
}

/// Appends `text` to the string at `field` (null counts as empty), as SDKs
/// add up a stream's deltas.
pub fn append(field: &mut Value, text: &str) {
    let had = field.as_str().unwrap_or("");
    *field = Value::String(format!("{had}{text}"));
}
