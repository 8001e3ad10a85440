//! The round trip: for every door (chat, Responses, Messages) and every mode
//! (passthrough, passthrough with a gateway tool, to_natural, natural),
//! streamed and whole, an agent loop that sends back exactly what it
//! received, as the SDKs do, runs to the end. Every turn of one loop lands
//! in one transcript chat, and a gateway tool's step, which the client
//! never saw as a call of its own, is back in the history the model reads.

use crate::common;
use crate::conformance;

use std::sync::{Arc, Mutex};

use common::agent::{calls_sse, sse, text_sse};
use common::{Collected, Mock, Recorded, Reply, TestConfig, TestGateway, chats_listed, post};
use conformance::messages::check_messages;
use conformance::responses::check_responses;
use conformance::{Expect, check_completion, check_stream};
use serde_json::{Value, json};

const RESULT: &str = "21 C and sunny";
const ANSWER: &str = "It is 21 C and sunny in Paris.";
const CALL: &str = "<tool_call name=\"get_weather\">";

/// The model: a native one (passthrough, gateway tools, to_natural) calls
/// the gateway's clock first when it is offered, then the client's
/// `get_weather`, and answers once the weather is in the history; a
/// natural one writes the same call as text. Whole requests get whole
/// completions.
fn model(r: &Recorded) -> Reply {
    let request = r.json();
    let natural = request["model"] == "natural";
    let streamed = request["stream"] == true;
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let called: Vec<String> = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["function"]["name"].as_str().map(str::to_owned))
        .collect();
    let answered = messages.iter().any(|m| {
        let text = m["content"].to_string();
        text.contains(RESULT) && (natural || m["role"] == "tool")
    });
    let offered = |name: &str| {
        request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["function"]["name"] == name)
    };
    if answered {
        return reply(streamed, ANSWER, &[]);
    }
    if natural {
        return reply(
            streamed,
            &format!("{CALL}\n{{\"city\": \"Paris\"}}\n</tool_call>"),
            &[],
        );
    }
    if offered("clock") && !called.iter().any(|n| n == "clock") {
        return reply(streamed, "", &[("clock", "{}")]);
    }
    reply(streamed, "", &[("get_weather", r#"{"city":"Paris"}"#)])
}

fn reply(streamed: bool, text: &str, calls: &[(&str, &str)]) -> Reply {
    match (streamed, calls.is_empty()) {
        (true, true) => sse(text_sse(text)),
        (true, false) => sse(calls_sse(calls)),
        (false, _) => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("up_call_{i}"), "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
            let message = if tool_calls.is_empty() {
                json!({"role": "assistant", "content": text})
            } else {
                json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
            };
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            Reply::json(
                &json!({"id": "up-1", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
                .to_string(),
            )
        }
    }
}

const MODES: [&str; 4] = ["pt", "gw", "tn", "nat"];

fn config(upstream: &str, store: &str) -> String {
    TestConfig::new()
        .raw(&format!("[store]\nurl = \"{store}\"\n"))
        .provider(
            "pt",
            upstream,
            "[]",
            "[providers.tools]\nmode = \"passthrough\"",
        )
        .provider(
            "gw",
            upstream,
            "[]",
            "[providers.tools]\nmode = \"passthrough\"\ngateway_tools = [\"builtin:clock\"]",
        )
        .provider(
            "tn",
            upstream,
            "[]",
            "[providers.tools]\nmode = \"to_natural\"\nsyntax = \"tool_call\"",
        )
        .provider(
            "nat",
            upstream,
            "[]",
            "[providers.tools]\nmode = \"natural\"\nsyntax = \"tool_call\"",
        )
        .toml()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    Chat,
    Responses,
    Messages,
}

/// What one turn brought back: the calls the client must run `(id, name)`,
/// the final text, and what goes back into the history as received.
struct Turn {
    calls: Vec<(String, String)>,
    text: String,
    echo: Vec<Value>,
}

/// One agent loop's conversation in its door's request shape.
struct Agent {
    door: Door,
    mode: &'static str,
    stream: bool,
    history: Vec<Value>,
}

impl Agent {
    fn new(door: Door, mode: &'static str, stream: bool) -> Agent {
        Agent {
            door,
            mode,
            stream,
            // Each run asks in its own words: two conversations alike to
            // the last character cannot be told apart, and a follow-up
            // then continues the latest of them (see alike_chats.rs).
            history: vec![
                json!({"role": "user", "content": format!("Weather in Paris? ({door:?} {mode}, stream: {stream})")}),
            ],
        }
    }

    fn model(&self) -> String {
        let upstream = if self.mode == "nat" {
            "natural"
        } else {
            "native"
        };
        format!("{}/{upstream}", self.mode)
    }

    fn request(&self) -> (&'static str, Value) {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let description = "Current weather in a city.";
        match self.door {
            Door::Chat => (
                "/v1/chat/completions",
                json!({"model": self.model(), "stream": self.stream, "messages": self.history,
                       "stream_options": if self.stream { json!({"include_usage": true}) } else { Value::Null },
                       "tools": [{"type": "function", "function": {"name": "get_weather", "description": description, "parameters": schema}}]}),
            ),
            Door::Responses => (
                "/v1/responses",
                json!({"model": self.model(), "stream": self.stream, "input": self.history,
                       "tools": [{"type": "function", "name": "get_weather", "description": description, "parameters": schema}]}),
            ),
            Door::Messages => (
                "/v1/messages",
                json!({"model": self.model(), "stream": self.stream, "max_tokens": 256, "messages": self.history,
                       "tools": [{"name": "get_weather", "description": description, "input_schema": schema}]}),
            ),
        }
    }

    /// Reads an answer the way the door's SDK assembles it.
    fn read(&self, reply: &Collected) -> Result<Turn, String> {
        if reply.status != 200 {
            return Err(format!("status {}: {}", reply.status, reply.text()));
        }
        match self.door {
            Door::Chat => {
                let message = if self.stream {
                    let s = check_stream(
                        &reply.body,
                        &Expect {
                            include_usage: true,
                            allow_error: false,
                        },
                    )?;
                    let c = s.choice();
                    let calls: Vec<Value> = c
                        .calls
                        .iter()
                        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect();
                    let mut m = json!({"role": "assistant", "content": c.content});
                    if !calls.is_empty() {
                        m["tool_calls"] = Value::Array(calls);
                    }
                    m
                } else {
                    let v = reply.json();
                    check_completion(&v)?;
                    v["choices"][0]["message"].clone()
                };
                let calls = message["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        (
                            c["id"].as_str().unwrap().to_owned(),
                            c["function"]["name"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect();
                Ok(Turn {
                    calls,
                    text: message["content"].as_str().unwrap_or_default().to_owned(),
                    echo: vec![message],
                })
            }
            Door::Responses => {
                let response = if self.stream {
                    check_responses(&reply.body)?.response
                } else {
                    reply.json()
                };
                let output = response["output"].as_array().cloned().unwrap_or_default();
                let text = output
                    .iter()
                    .filter(|i| i["type"] == "message")
                    .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
                    .filter_map(|p| p["text"].as_str().map(str::to_owned))
                    .collect();
                Ok(Turn {
                    calls: calls_in(&output, "function_call", "call_id"),
                    text,
                    echo: output,
                })
            }
            Door::Messages => {
                let message = if self.stream {
                    check_messages(&reply.body)?.message
                } else {
                    reply.json()
                };
                let content = message["content"].as_array().cloned().unwrap_or_default();
                let text = content
                    .iter()
                    .filter_map(|b| b["text"].as_str().map(str::to_owned))
                    .collect();
                Ok(Turn {
                    calls: calls_in(&content, "tool_use", "id"),
                    text,
                    echo: vec![json!({"role": "assistant", "content": content})],
                })
            }
        }
    }

    /// The answer goes back as received, then the client's results: native
    /// results for native calls, a `<tool_response>` block for a call that
    /// came as text (to_natural).
    fn send_back(&mut self, turn: Turn) {
        self.history.extend(turn.echo);
        for (id, name) in &turn.calls {
            assert_eq!(name, "get_weather", "the client only runs its own tool");
            self.history.push(match self.door {
                Door::Chat => json!({"role": "tool", "tool_call_id": id, "content": RESULT}),
                Door::Responses => json!({"type": "function_call_output", "call_id": id, "output": RESULT}),
                Door::Messages => json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": RESULT}]}),
            });
        }
        if turn.text.contains(CALL) {
            self.history.push(json!({"role": "user",
                "content": format!("<tool_response name=\"get_weather\">\n{RESULT}\n</tool_response>")}));
        }
    }
}

/// The `(id, name)` of each item of type `kind`, its id under `id`.
fn calls_in(items: &[Value], kind: &str, id: &str) -> Vec<(String, String)> {
    items
        .iter()
        .filter(|i| i["type"] == kind)
        .map(|i| {
            (
                i[id].as_str().unwrap().to_owned(),
                i["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Runs one loop to its end; the chat id every turn's answer named.
async fn run(
    gw: &TestGateway,
    door: Door,
    mode: &'static str,
    stream: bool,
) -> Result<String, String> {
    let mut agent = Agent::new(door, mode, stream);
    let mut chats = Vec::new();
    for _ in 0..4 {
        let (path, body) = agent.request();
        let reply = post(&gw.url(path), &body.to_string()).await;
        chats.push(
            reply
                .headers
                .get("x-toolgate-chat-id")
                .map(|v| v.to_str().unwrap().to_owned()),
        );
        let turn = agent.read(&reply)?;
        let asked = !turn.calls.is_empty() || turn.text.contains(CALL);
        if !asked {
            if turn.text != ANSWER {
                return Err(format!("the loop ended with {:?}", turn.text));
            }
            if chats.len() != 2 {
                return Err(format!("{} turns, want 2", chats.len()));
            }
            let first = chats[0].clone().ok_or("the answer names no chat")?;
            if chats.iter().any(|c| c.as_deref() != Some(&first)) {
                return Err(format!("the turns landed in chats {chats:?}"));
            }
            return Ok(first);
        }
        agent.send_back(turn);
    }
    Err(format!(
        "no answer after 4 turns: {:#}",
        json!(agent.history)
    ))
}

/// The history the model read last holds the gateway's clock step once:
/// its call, then its result, before the client's call.
fn holds_the_clock_step(upstream: &Value) -> Result<(), String> {
    let messages = upstream["messages"].as_array().ok_or("no messages")?;
    let called = |m: &Value, name: &str| {
        m["tool_calls"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["function"]["name"] == name))
    };
    if messages.iter().filter(|m| called(m, "clock")).count() != 1 {
        return Err(format!(
            "the clock step is not there exactly once: {upstream:#}"
        ));
    }
    let clock = messages.iter().position(|m| called(m, "clock"));
    let weather = messages.iter().position(|m| called(m, "get_weather"));
    match (clock, weather) {
        (Some(c), Some(w)) if c < w && messages[c + 1]["role"] == "tool" => Ok(()),
        _ => Err(format!("the clock step is not restored: {upstream:#}")),
    }
}

#[tokio::test]
async fn every_door_and_mode_runs_an_agent_loop_to_the_end_in_one_chat() {
    let upstream_log: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = upstream_log.clone();
    let upstream = Mock::start(move |r: &Recorded| {
        log.lock().unwrap().push(r.json());
        model(r)
    })
    .await;
    let dir = std::env::temp_dir().join(format!("toolgate-round-trip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite://{}/t.db", dir.display());
    let gw = TestGateway::start(&config(&upstream.url(), &store)).await;

    let mut failures = Vec::new();
    let mut chats = Vec::new();
    for door in [Door::Chat, Door::Responses, Door::Messages] {
        for mode in MODES {
            for stream in [true, false] {
                let name = format!(
                    "{door:?} {mode} {}",
                    if stream { "streamed" } else { "whole" }
                );
                upstream_log.lock().unwrap().clear();
                let mut outcome = run(&gw, door, mode, stream).await;
                if mode == "gw"
                    && outcome.is_ok()
                    && let Some(last) = upstream_log.lock().unwrap().last()
                {
                    outcome = holds_the_clock_step(last).and(outcome);
                }
                match outcome {
                    Ok(chat) => chats.push(chat),
                    Err(why) => failures.push(format!("{name}: {why}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let mut distinct = chats.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        chats.len(),
        "each loop is a chat of its own: {chats:?}"
    );
    let listed = chats_listed(&gw.url(""), chats.len()).await;
    assert_eq!(
        listed["data"].as_array().map(Vec::len),
        Some(chats.len()),
        "{listed:#}"
    );
}
