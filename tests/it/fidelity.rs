//! Tool-call fidelity: every upstream stream of the recorded corpus
//! (tests/corpus, written from the servers' documented formats) through
//! every door (chat, Responses, Messages) and every mode (passthrough,
//! passthrough with gateway tools, to_natural, natural where the stream has
//! no native calls), streamed and whole. Each answer goes through its door's
//! conformance checker, and what a client assembles from it must be what
//! the upstream said: the text, each call with its whole arguments, the
//! finish, or, for a stream that failed, an error in the door's own shape.
//! The official SDKs read the same cells (tests/clients/python/fidelity.py).

use crate::common;
use crate::conformance;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use common::{Collected, Mock, Recorded, Reply, TestConfig, TestGateway, post};
use conformance::messages::check_messages;
use conformance::responses::check_responses;
use conformance::{Expect, check_completion, check_stream};
use serde_json::{Value, json};

fn corpus_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus"))
}

/// One file of the corpus and what a correct reader ends with.
#[derive(Debug, Clone)]
struct Recording {
    stem: String,
    stream: bool,
    api: String,
    text: String,
    calls: Vec<(String, Option<Value>)>,
    finish: Option<String>,
    failure: Option<String>,
}

fn corpus() -> Vec<Recording> {
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(corpus_dir().join("manifest.json")).expect("tests/corpus/manifest.json"),
    )
    .unwrap();
    manifest
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let file = entry["file"].as_str().unwrap();
            let expect = &entry["expect"];
            Recording {
                stem: file.rsplit_once('.').unwrap().0.to_owned(),
                stream: entry["stream"] == true,
                api: entry["api"].as_str().unwrap().to_owned(),
                text: expect["text"].as_str().unwrap_or_default().to_owned(),
                calls: expect["calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let args = Some(c["arguments"].clone()).filter(|a| !a.is_null());
                        (c["name"].as_str().unwrap().to_owned(), args)
                    })
                    .collect(),
                finish: expect["finish_reason"].as_str().map(str::to_owned),
                failure: expect["failure"].as_str().map(str::to_owned),
            }
        })
        .collect()
}

/// The upstream: the corpus file named by the requested model, as it is.
async fn recorded_upstream() -> Mock {
    Mock::start(|r: &Recorded| {
        let model = r.json()["model"].as_str().unwrap_or_default().to_owned();
        let dir = corpus_dir();
        let streamed = r.json()["stream"] == true;
        if let Ok(body) = std::fs::read(dir.join(format!("{model}.sse")))
            .map_err(drop)
            .and_then(|b| if streamed { Ok(b) } else { Err(()) })
        {
            return Reply::Stream {
                status: 200,
                headers: vec![("content-type", "text/event-stream".into())],
                pieces: vec![(std::time::Duration::ZERO, Bytes::from(body))],
            };
        }
        match std::fs::read(dir.join(format!("{model}.json"))) {
            Ok(body) => Reply::json(&String::from_utf8(body).unwrap()),
            Err(_) => Reply::Full {
                status: 404,
                headers: vec![],
                body: Bytes::from_static(b"no such recording"),
            },
        }
    })
    .await
}

/// Passthrough, passthrough with a gateway tool the recordings never call,
/// to_natural, natural.
const MODES: [&str; 4] = ["pt", "gw", "tn", "nat"];

fn config(upstream: &str) -> String {
    TestConfig::new()
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
            "[providers.tools]\nmode = \"to_natural\"",
        )
        .provider(
            "nat",
            upstream,
            "[]",
            "[providers.tools]\nmode = \"natural\"",
        )
        .toml()
}

/// The tools every request declares: every tool the corpus calls.
fn tools() -> Value {
    let names = ["get_weather", "get_time", "get_server_status", "write_file"];
    let extra: Vec<Value> = names
        .iter()
        .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}))
        .collect();
    Value::Array(extra)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Door {
    Chat,
    Responses,
    Messages,
}

/// One cell of the matrix.
#[derive(Debug, Clone)]
struct Cell {
    recording: Recording,
    door: Door,
    mode: &'static str,
    stream: bool,
}

impl Cell {
    fn name(&self) -> String {
        format!(
            "{} {:?} {} {}",
            self.recording.stem,
            self.door,
            self.mode,
            if self.stream { "streamed" } else { "whole" }
        )
    }

    /// Passthrough on the chat door: the answer is the upstream's bytes,
    /// whatever they hold, so that is what the cell checks.
    fn verbatim(&self) -> bool {
        self.door == Door::Chat && self.mode == "pt"
    }

    fn recording_path(&self) -> std::path::PathBuf {
        let ext = if self.recording.stream { "sse" } else { "json" };
        corpus_dir().join(format!("{}.{ext}", self.recording.stem))
    }

    fn model(&self) -> String {
        format!("{}/{}", self.mode, self.recording.stem)
    }

    fn request(&self) -> (&'static str, Value) {
        let prompt = "Go.";
        match self.door {
            Door::Chat => (
                "/v1/chat/completions",
                json!({"model": self.model(), "stream": self.stream, "tools": tools(),
                       "messages": [{"role": "user", "content": prompt}]}),
            ),
            Door::Responses => {
                let tools: Vec<Value> = tools()
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| json!({"type": "function", "name": t["function"]["name"], "parameters": {"type": "object"}}))
                    .collect();
                (
                    "/v1/responses",
                    json!({"model": self.model(), "stream": self.stream, "tools": tools, "input": prompt}),
                )
            }
            Door::Messages => {
                let tools: Vec<Value> = tools()
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| json!({"name": t["function"]["name"], "input_schema": {"type": "object"}}))
                    .collect();
                (
                    "/v1/messages",
                    json!({"model": self.model(), "stream": self.stream, "max_tokens": 256, "tools": tools,
                           "messages": [{"role": "user", "content": prompt}]}),
                )
            }
        }
    }
}

/// Every cell that applies: a recording streams only to a streamed request
/// upstream (the translated doors and gateway tools always stream upstream;
/// the direct chat paths stream when the client does), and a whole
/// completion only to a whole one. Natural mode reads text, so it takes the
/// recordings without native calls.
fn cells(recordings: &[Recording]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for r in recordings.iter().filter(|r| r.api == "chat") {
        for door in [Door::Chat, Door::Responses, Door::Messages] {
            for mode in MODES {
                if mode == "nat" && !r.calls.is_empty() {
                    continue;
                }
                let answer_path = door != Door::Chat || mode == "gw";
                for stream in [true, false] {
                    let upstream_streams = answer_path || stream;
                    if upstream_streams == r.stream {
                        cells.push(Cell {
                            recording: r.clone(),
                            door,
                            mode,
                            stream,
                        });
                    }
                }
            }
        }
    }
    cells
}

/// What a client ends with.
#[derive(Debug, Default, Clone, PartialEq)]
struct Outcome {
    text: String,
    calls: Vec<(String, String)>,
    /// In Chat Completions terms.
    finish: Option<String>,
    failed: bool,
}

fn read(cell: &Cell, reply: &Collected) -> Result<Outcome, String> {
    let failed = |why: &str| Outcome {
        failed: true,
        text: why.to_owned(),
        ..Outcome::default()
    };
    if !reply.status.is_success() {
        // A whole answer that failed: the door's error shape.
        let v: Value =
            serde_json::from_slice(&reply.body).map_err(|e| format!("error body: {e}"))?;
        let shaped = match cell.door {
            Door::Messages => v["type"] == "error" && v["error"]["type"].is_string(),
            _ => v["error"]["message"].is_string(),
        };
        return if shaped {
            Ok(failed("status"))
        } else {
            Err(format!("an error not in the door's shape: {v}"))
        };
    }
    match (cell.door, cell.stream) {
        // A passthrough stream is the upstream's, byte for byte: a cut one
        // ends without `[DONE]` and without a finish, which a client sees.
        (Door::Chat, true) if !reply.body.ends_with(b"data: [DONE]\n\n") => Ok(failed("cut")),
        (Door::Chat, true) => {
            let s = check_stream(
                &reply.body,
                &Expect {
                    include_usage: false,
                    allow_error: true,
                },
            )?;
            if s.error.is_some() {
                return Ok(failed("event"));
            }
            let c = s.choice();
            Ok(Outcome {
                text: c.content.clone(),
                calls: c
                    .calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect(),
                finish: c.finish_reason.clone(),
                failed: false,
            })
        }
        (Door::Chat, false) => {
            let v: Value = serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
            check_completion(&v)?;
            let m = &v["choices"][0]["message"];
            Ok(Outcome {
                text: m["content"].as_str().unwrap_or_default().to_owned(),
                calls: m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let f = &c["function"];
                        (
                            f["name"].as_str().unwrap().to_owned(),
                            f["arguments"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect(),
                finish: v["choices"][0]["finish_reason"].as_str().map(str::to_owned),
                failed: false,
            })
        }
        (Door::Responses, true) => {
            let s = check_responses(&reply.body)?;
            if s.status == "failed" {
                return Ok(failed("response.failed"));
            }
            let finish = match s.status.as_str() {
                "incomplete" => "length",
                _ if !s.calls.is_empty() => "tool_calls",
                _ => "stop",
            };
            Ok(Outcome {
                text: s.text.clone(),
                calls: s
                    .calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect(),
                finish: Some(finish.to_owned()),
                failed: false,
            })
        }
        (Door::Responses, false) => {
            let v: Value = serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
            responses_object(&v)
        }
        (Door::Messages, true) => {
            let s = check_messages(&reply.body)?;
            if s.error.is_some() {
                return Ok(failed("error event"));
            }
            messages_object(&s.message)
        }
        (Door::Messages, false) => {
            let v: Value = serde_json::from_slice(&reply.body).map_err(|e| e.to_string())?;
            messages_object(&v)
        }
    }
}

fn responses_object(v: &Value) -> Result<Outcome, String> {
    if v["object"] != "response" {
        return Err(format!("not a response object: {v}"));
    }
    let mut out = Outcome::default();
    for item in v["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    out.text.push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("function_call") => out.calls.push((
                item["name"].as_str().unwrap_or_default().to_owned(),
                item["arguments"]
                    .as_str()
                    .ok_or("function_call arguments are not a string")?
                    .to_owned(),
            )),
            _ => {}
        }
    }
    out.finish = Some(
        match v["status"].as_str() {
            Some("incomplete") => "length",
            Some("completed") if !out.calls.is_empty() => "tool_calls",
            Some("completed") => "stop",
            other => return Err(format!("status {other:?}")),
        }
        .to_owned(),
    );
    Ok(out)
}

fn messages_object(v: &Value) -> Result<Outcome, String> {
    if v["type"] != "message" {
        return Err(format!("not a message: {v}"));
    }
    let mut out = Outcome::default();
    for block in v["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => out
                .text
                .push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                if !block["input"].is_object() {
                    return Err(format!("a tool_use input that is not an object: {block}"));
                }
                out.calls.push((
                    block["name"].as_str().unwrap_or_default().to_owned(),
                    block["input"].to_string(),
                ));
            }
            _ => {}
        }
    }
    out.finish = Some(
        match v["stop_reason"].as_str() {
            Some("tool_use") => "tool_calls",
            Some("max_tokens") => "length",
            Some("end_turn" | "stop_sequence") => "stop",
            other => return Err(format!("stop_reason {other:?}")),
        }
        .to_owned(),
    );
    Ok(out)
}

/// What the client of `cell` must end with, from the recording.
fn judge(cell: &Cell, got: &Outcome) -> Result<(), String> {
    let r = &cell.recording;
    if r.failure.is_some() {
        return if got.failed {
            Ok(())
        } else {
            Err(format!(
                "a {} upstream reached the client as a finished answer: {got:?}",
                r.failure.as_deref().unwrap()
            ))
        };
    }
    if got.failed {
        return Err(format!("failed: {}", got.text));
    }
    let cut_call = r.calls.iter().any(|(_, args)| args.is_none());
    if cell.mode == "tn" {
        // to_natural: calls are text, the answer ends `stop` (or `length`).
        if !got.calls.is_empty() {
            return Err(format!(
                "native calls reached a to_natural client: {:?}",
                got.calls
            ));
        }
        if !got.text.starts_with(&r.text) {
            return Err(format!(
                "text {:?} does not start with {:?}",
                got.text, r.text
            ));
        }
        for (name, _) in r.calls.iter().filter(|_| !cut_call) {
            if !got.text.contains(&format!("<tool_call name=\"{name}\">")) {
                return Err(format!(
                    "the call {name} is not in the text: {:?}",
                    got.text
                ));
            }
        }
        let want = if r.finish.as_deref() == Some("length") {
            "length"
        } else {
            "stop"
        };
        return if got.finish.as_deref() == Some(want) {
            Ok(())
        } else {
            Err(format!("finish {:?}, want {want}", got.finish))
        };
    }
    if got.text != r.text {
        return Err(format!("text {:?}, want {:?}", got.text, r.text));
    }
    if cut_call {
        // A call cut by `length` is never a complete call; the answer says `length`.
        return if got.finish.as_deref() == Some("length") {
            Ok(())
        } else {
            Err(format!("finish {:?}, want length", got.finish))
        };
    }
    let names: Vec<&str> = got.calls.iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<&str> = r.calls.iter().map(|(n, _)| n.as_str()).collect();
    if names != want {
        return Err(format!("calls {names:?}, want {want:?}"));
    }
    for ((name, args), (_, expected)) in got.calls.iter().zip(&r.calls) {
        let parsed: Value = serde_json::from_str(args)
            .map_err(|e| format!("{name}: arguments {args:?} are not JSON ({e})"))?;
        if Some(&parsed) != expected.as_ref() {
            return Err(format!("{name}: arguments {parsed}, want {expected:?}"));
        }
    }
    let want = r.finish.clone().or_else(|| Some("stop".into()));
    if got.finish != want {
        return Err(format!("finish {:?}, want {want:?}", got.finish));
    }
    Ok(())
}

#[tokio::test]
async fn every_recorded_stream_through_every_door_and_mode() {
    let recordings = corpus();
    assert!(recordings.len() >= 20, "the corpus is there");
    let upstream = recorded_upstream().await;
    let gw = TestGateway::start(&config(&upstream.url())).await;
    let cells = cells(&recordings);
    let mut failures = String::new();
    let mut per_door: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for cell in &cells {
        let (path, body) = cell.request();
        let reply = post(&gw.url(path), &body.to_string()).await;
        let verdict = if cell.verbatim() {
            let recorded = std::fs::read(cell.recording_path()).unwrap();
            if reply.body == recorded {
                Ok(())
            } else {
                Err(format!(
                    "passthrough changed the upstream's bytes: {:?}",
                    String::from_utf8_lossy(&reply.body)
                ))
            }
        } else {
            read(cell, &reply).and_then(|got| judge(cell, &got))
        };
        let tally = per_door.entry(format!("{:?}", cell.door)).or_default();
        tally.0 += 1;
        if let Err(why) = verdict {
            tally.1 += 1;
            let _ = writeln!(failures, "{}: {why}", cell.name());
        }
    }
    eprintln!(
        "matrix: {} cells; per door (cells, failed): {per_door:?}",
        cells.len()
    );
    assert!(failures.is_empty(), "{failures}");

    // The official SDKs read the same cells.
    let python = common::installed::python();
    let script = common::installed::clients_dir().join("python/fidelity.py");
    let listed: Vec<Value> = cells
        .iter()
        .map(|c| {
            let (path, body) = c.request();
            json!({"name": c.name(), "door": format!("{:?}", c.door), "path": path, "body": body,
                   "stream": c.stream})
        })
        .collect();
    let input = std::env::temp_dir().join(format!("toolgate-fidelity-{}.json", std::process::id()));
    std::fs::write(&input, serde_json::to_vec(&listed).unwrap()).unwrap();
    let base = gw.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(&input)
            .env("CLIENT_TESTS_BASE_URL", base)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut sdk_failures = String::new();
    for (cell, result) in cells.iter().zip(&results) {
        let got = Outcome {
            text: result["text"].as_str().unwrap_or_default().to_owned(),
            calls: result["calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c[0].as_str().unwrap().to_owned(),
                        c[1].as_str().unwrap().to_owned(),
                    )
                })
                .collect(),
            finish: result["finish"].as_str().map(str::to_owned),
            failed: result["failed"] == true,
        };
        let verdict = if cell.verbatim() {
            // The upstream's own bytes: the SDK reads them as the upstream
            // wrote them (`""` arguments, a cut call) without raising.
            let r = &cell.recording;
            if got.failed != r.failure.is_some() || (!got.failed && got.text != r.text) {
                Err(format!("the SDK read {got:?}"))
            } else {
                Ok(())
            }
        } else {
            judge(cell, &got)
        };
        if let Err(why) = verdict {
            let _ = writeln!(sdk_failures, "{} (SDK): {why}; {result}", cell.name());
        }
    }
    assert!(sdk_failures.is_empty(), "{sdk_failures}");
}

/// The one recording in Anthropic's own format goes through an
/// `api = "anthropic"` provider untouched, byte for byte.
#[tokio::test]
async fn anthropics_own_stream_passes_through_untouched() {
    let upstream = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: vec![(
            std::time::Duration::ZERO,
            Bytes::from(std::fs::read(corpus_dir().join("anthropic_text_tool_use.sse")).unwrap()),
        )],
    })
    .await;
    let gw = TestConfig::new()
        .provider(
            "claude",
            &upstream.url(),
            "[\"claude-*\"]",
            "api = \"anthropic\"",
        )
        .start()
        .await;
    let body = json!({"model": "claude-x", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let reply = post(&gw.url("/v1/messages"), &body.to_string()).await;
    assert_eq!(reply.status, 200);
    let recorded = std::fs::read(corpus_dir().join("anthropic_text_tool_use.sse")).unwrap();
    assert_eq!(reply.body, Bytes::from(recorded));
    let s = check_messages(&reply.body).unwrap();
    assert_eq!(s.calls.len(), 1);
}

/// The corpus checks itself: every file parses, the manifest lists every
/// file, and a small reference reader written apart from toolgate ends with
/// each recording's `expect`.
#[test]
fn the_corpus_agrees_with_its_manifest() {
    let out = Command::new(common::installed::python())
        .arg(corpus_dir().join("check.py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
