//! What one answer counts as, and the tallies per arm (pure: no IO).

use std::time::Duration;

use serde_json::Value;

use super::cases::{AgentCase, Case, arguments_match, mentions};
use crate::natural::validate::SchemaCache;

/// What the gateway answered to one prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The answer carried these calls (`name`, arguments as the model wrote them).
    Calls(Vec<(String, String)>),
    /// A plain answer without calls: its text.
    NoCall(String),
    /// The model wrote a call block the gateway refused (`invalid_tool_call`).
    Invalid(String),
    /// Any other failure: the status and the error's message.
    Failed(String),
}

impl Outcome {
    /// Reads a non-streaming chat answer.
    pub fn from_response(status: u16, body: &[u8]) -> Outcome {
        Self::read(status, body).0
    }

    /// Reads a non-streaming chat answer, keeping its message (which a loop
    /// sends back as the assistant turn).
    pub fn read(status: u16, body: &[u8]) -> (Outcome, Option<Value>) {
        let outcome = Self::classify(status, body);
        let message = match &outcome {
            Outcome::Calls(_) | Outcome::NoCall(_) => serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|mut v| v.pointer_mut("/choices/0/message").map(Value::take)),
            _ => None,
        };
        (outcome, message)
    }

    fn classify(status: u16, body: &[u8]) -> Outcome {
        let value: Option<Value> = serde_json::from_slice(body).ok();
        if status != 200 {
            let error = value.as_ref().and_then(|v| v.get("error"));
            let message = error
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
            let code = error.and_then(|e| e.get("code")).and_then(Value::as_str);
            return if code == Some("invalid_tool_call") {
                Outcome::Invalid(message)
            } else {
                Outcome::Failed(format!("{status}: {message}"))
            };
        }
        let Some(message) = value.as_ref().and_then(|v| v.pointer("/choices/0/message")) else {
            return Outcome::Failed("200 without choices[0].message".into());
        };
        let calls: Vec<(String, String)> = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let f = |k: &str| {
                    c.pointer(&format!("/function/{k}"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                (f("name"), f("arguments"))
            })
            .collect();
        if calls.is_empty() {
            let text = message.get("content").and_then(Value::as_str);
            Outcome::NoCall(text.unwrap_or_default().to_owned())
        } else {
            Outcome::Calls(calls)
        }
    }
}

/// One arm's counts over every case and run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub attempts: usize,
    /// Attempts whose case expects a call, and those expecting none.
    pub want_call: usize,
    pub want_none: usize,
    /// The expected tool with the expected values.
    pub expected: usize,
    /// The expected tool with arguments its schema accepts (values aside).
    pub valid_arguments: usize,
    /// Calls, none of them to the expected tool.
    pub wrong_tool: usize,
    /// A call was expected and the answer was plain text.
    pub no_call: usize,
    /// Answers refused as an invalid call block.
    pub invalid: usize,
    /// Calls where none was wanted.
    pub unwanted: usize,
    /// Prompts that wanted no call answered in text.
    pub quiet: usize,
    /// Other failures (upstream errors, timeouts).
    pub failed: usize,
    /// Loops tried: the expected tool was called and its result sent back.
    pub loops: usize,
    /// The answer to the result called no tool.
    pub closed: usize,
    /// ... and mentioned what the result said.
    pub used: usize,
    /// The answer to the result called a tool again.
    pub called_again: usize,
    /// The answer to the result failed (an error or a refused block).
    pub loop_failed: usize,
    pub latencies: Vec<Duration>,
    /// The first failure's message, to explain an arm that only failed.
    pub first_failure: Option<String>,
}

impl Tally {
    pub fn add(
        &mut self,
        case: &Case,
        outcome: &Outcome,
        latency: Duration,
        schemas: &SchemaCache,
    ) {
        self.attempts += 1;
        self.latencies.push(latency);
        match &case.expect {
            Some(_) => self.want_call += 1,
            None => self.want_none += 1,
        }
        match (outcome, &case.expect) {
            (Outcome::Failed(m), _) => {
                self.failed += 1;
                self.first_failure.get_or_insert_with(|| m.clone());
            }
            (Outcome::Invalid(_), _) => self.invalid += 1,
            (Outcome::NoCall(_), Some(_)) => self.no_call += 1,
            (Outcome::NoCall(_), None) => self.quiet += 1,
            (Outcome::Calls(_), None) => self.unwanted += 1,
            (Outcome::Calls(calls), Some(want)) => {
                let mut right_tool = false;
                let mut valid = false;
                let mut values = false;
                for (name, arguments) in calls.iter().filter(|(n, _)| *n == want.name) {
                    right_tool = true;
                    let Ok(Value::Object(arguments)) = serde_json::from_str::<Value>(arguments)
                    else {
                        continue;
                    };
                    let schema_ok = case
                        .set
                        .get(name)
                        .is_some_and(|tool| schemas.check(tool, &arguments).is_ok());
                    valid |= schema_ok;
                    values |= schema_ok && arguments_match(&want.arguments, &arguments);
                }
                self.wrong_tool += usize::from(!right_tool);
                self.valid_arguments += usize::from(valid);
                self.expected += usize::from(values);
            }
        }
    }

    /// The answer after the expected call's result was sent back.
    pub fn add_loop(&mut self, case: &Case, outcome: &Outcome) {
        self.loops += 1;
        match outcome {
            Outcome::NoCall(text) => {
                self.closed += 1;
                self.used += usize::from(mentions(text, &case.answer));
            }
            Outcome::Calls(_) => self.called_again += 1,
            Outcome::Invalid(_) | Outcome::Failed(_) => self.loop_failed += 1,
        }
    }

    /// Whether every attempt failed (an arm the upstream does not support).
    pub fn all_failed(&self) -> bool {
        self.attempts > 0 && self.failed == self.attempts
    }

    pub fn median_latency(&self) -> Option<Duration> {
        median(&self.latencies)
    }
}

/// The median of `latencies` (the upper one of an even count).
pub fn median(latencies: &[Duration]) -> Option<Duration> {
    let mut l = latencies.to_vec();
    l.sort_unstable();
    l.get(l.len() / 2).copied()
}

/// What an agent prompt's answer did.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOutcome {
    /// The answer's text, when it ended in text (no call left for the client).
    pub text: Option<String>,
    /// The gateway's calls, in order: name and arguments.
    pub calls: Vec<(String, String)>,
    /// The failure, when the request failed.
    pub failed: Option<String>,
}

impl AgentOutcome {
    /// Reads a non-streaming chat answer with `message.gateway_tool_calls`.
    pub fn from_response(status: u16, body: &[u8]) -> AgentOutcome {
        let failed = |why: String| AgentOutcome {
            text: None,
            calls: Vec::new(),
            failed: Some(why),
        };
        let (outcome, message) = Outcome::read(status, body);
        let text = match outcome {
            Outcome::NoCall(text) if !text.trim().is_empty() => Some(text),
            Outcome::NoCall(_) | Outcome::Calls(_) => None,
            Outcome::Invalid(why) | Outcome::Failed(why) => return failed(why),
        };
        let calls = message
            .as_ref()
            .and_then(|m| m.get("gateway_tool_calls"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let f = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
                (f("name").to_owned(), f("arguments").to_owned())
            })
            .collect();
        AgentOutcome {
            text,
            calls,
            failed: None,
        }
    }

    /// Two calls of one tool with the same arguments (compared as JSON).
    pub fn repeated_call(&self) -> bool {
        let parsed: Vec<(&str, Option<Value>)> = self
            .calls
            .iter()
            .map(|(n, a)| (n.as_str(), serde_json::from_str(a).ok()))
            .collect();
        parsed
            .iter()
            .enumerate()
            .any(|(i, a)| parsed[..i].iter().any(|b| a == b))
    }
}

/// One arm's counts over the agent prompts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentTally {
    pub attempts: usize,
    /// Answers that ended in text.
    pub text: usize,
    /// ... that mention what the tools returned.
    pub used: usize,
    /// Answers in which one tool was called twice with the same arguments.
    pub repeated: usize,
    /// Gateway calls over every answer.
    pub calls: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub latencies: Vec<Duration>,
}

impl AgentTally {
    pub fn add(&mut self, case: &AgentCase, outcome: &AgentOutcome, latency: Duration) {
        self.attempts += 1;
        self.latencies.push(latency);
        self.calls += outcome.calls.len();
        self.repeated += usize::from(outcome.repeated_call());
        if let Some(why) = &outcome.failed {
            self.failed += 1;
            self.first_failure.get_or_insert_with(|| why.clone());
        }
        if let Some(text) = &outcome.text {
            self.text += 1;
            self.used += usize::from(mentions(text, &case.answer));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::probe::cases::builtin;

    fn answer(calls: &[(&str, &str)]) -> Vec<u8> {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(n, a)| serde_json::json!({"type": "function", "function": {"name": n, "arguments": a}}))
            .collect();
        let message = if calls.is_empty() {
            serde_json::json!({"role": "assistant", "content": "hi"})
        } else {
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": calls})
        };
        serde_json::to_vec(&serde_json::json!({"choices": [{"message": message}]})).unwrap()
    }

    #[test]
    fn answers_are_classified() {
        assert_eq!(
            Outcome::from_response(200, &answer(&[])),
            Outcome::NoCall("hi".into())
        );
        assert_eq!(
            Outcome::from_response(200, &answer(&[("f", "{}")])),
            Outcome::Calls(vec![("f".into(), "{}".into())])
        );
        let invalid = br#"{"error":{"message":"bad block","code":"invalid_tool_call"}}"#;
        assert_eq!(
            Outcome::from_response(502, invalid),
            Outcome::Invalid("bad block".into())
        );
        let other = br#"{"error":{"message":"down","code":"upstream_error"}}"#;
        assert_eq!(
            Outcome::from_response(502, other),
            Outcome::Failed("502: down".into())
        );
        assert!(
            matches!(Outcome::from_response(500, b"oops"), Outcome::Failed(m) if m == "500: oops")
        );
    }

    #[test]
    fn tallies_tell_right_values_from_valid_arguments_and_wrong_tools() {
        let cases = builtin().client;
        let weather = &cases[0];
        let thermostat = &cases[3];
        let no_tool = &cases[4];
        let s = SchemaCache::new();
        let t = Duration::from_millis;
        let mut tally = Tally::default();
        let calls = |n: &str, a: &str| Outcome::Calls(vec![(n.into(), a.into())]);
        tally.add(
            weather,
            &calls("get_weather", r#"{"location":"paris"}"#),
            t(30),
            &s,
        );
        tally.add(
            weather,
            &calls("get_weather", r#"{"location":"Lyon"}"#),
            t(10),
            &s,
        );
        tally.add(
            weather,
            &calls("get_weather", r#"{"city":"Paris"}"#),
            t(20),
            &s,
        );
        tally.add(
            thermostat,
            &calls("get_weather", r#"{"location":"x"}"#),
            t(40),
            &s,
        );
        tally.add(
            thermostat,
            &calls("set_thermostat", r#"{"temperature":"21","unit":"celsius"}"#),
            t(50),
            &s,
        );
        tally.add(thermostat, &Outcome::NoCall(String::new()), t(60), &s);
        tally.add(
            no_tool,
            &calls("get_time", r#"{"timezone":"UTC"}"#),
            t(70),
            &s,
        );
        tally.add(no_tool, &Outcome::NoCall(String::new()), t(80), &s);
        tally.add(no_tool, &Outcome::Invalid("x".into()), t(90), &s);
        tally.add(weather, &Outcome::Failed("502: down".into()), t(100), &s);
        assert_eq!(tally.attempts, 10);
        assert_eq!((tally.want_call, tally.want_none), (7, 3));
        assert_eq!(tally.expected, 1);
        assert_eq!(tally.valid_arguments, 2);
        assert_eq!(tally.wrong_tool, 1);
        assert_eq!(tally.no_call, 1);
        assert_eq!(tally.unwanted, 1);
        assert_eq!(tally.invalid, 1);
        assert_eq!(tally.failed, 1);
        assert_eq!(tally.first_failure.as_deref(), Some("502: down"));
        assert_eq!(tally.median_latency(), Some(t(60)));
        assert!(!tally.all_failed());
    }
}
