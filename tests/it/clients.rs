//! Real OpenAI client libraries pointed at toolgate: async-openai (Rust, in
//! process), the official `openai` Python package and the official `openai`
//! npm package (each a script under tests/clients, spawned with the gateway's
//! base URL). Upstreams are scripted mocks or the built-in demo model; all
//! traffic stays on loopback.
//!
//! The Python and Node tests need what `bash tests/run.sh` installs: a venv
//! (`CLIENT_TESTS_PYTHON`, its python) and the npm project
//! (`CLIENT_TESTS_NODE_DIR`). When the variables are unset, the default
//! locations under tests/clients are used if they are installed; otherwise the
//! tests fail and say to run `bash tests/run.sh`. They never pass silently.

use crate::common;
use crate::conformance;

use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionMessageToolCalls, ChatCompletionResponseStream, CreateChatCompletionRequest,
    CreateChatCompletionResponse, CreateChatCompletionStreamResponse, FinishReason,
};
use common::installed::{clients_dir, node_dir, python};
use common::*;
use conformance::{Expect, check_stream};
use serde_json::{Value, json};

/// Seed 000's weather example, as a natural-text model writes it.
const SEED_REPLY: &str = "I'll get the weather for San Francisco today in Fahrenheit.\n\n<GetWeather>\n```json\n{\n  \"location\": \"San Francisco, CA\",\n  \"unit\": \"fahrenheit\"\n}\n```\n</GetWeather>";
const SEED_TEXT: &str = "I'll get the weather for San Francisco today in Fahrenheit.";

/// Two calls in one reply.
const TWO_CALLS_REPLY: &str = "Let me do both.\n\n<GetWeather>\n```json\n{\"location\": \"Paris\", \"unit\": \"celsius\"}\n```\n</GetWeather>\n\n<BookRestaurant>\n```json\n{\"restaurantName\": \"Chez Léon\", \"date\": \"2025-05-15\", \"time\": \"19:00\", \"numberOfPeople\": 4}\n```\n</BookRestaurant>";

/// What a script run may take at most (Python's import of `openai` alone is
/// about a second).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------
// Gateways and upstreams

/// A natural-mode model whose every reply is `reply`: streamed in pieces of 5
/// characters, or as one completion.
async fn natural_model(reply: &'static str) -> Mock {
    Mock::start(move |req| {
        if req.json()["stream"] == true {
            let pieces = char_pieces(reply, 5);
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            Reply::sse(&[&upstream_sse(&refs, None)], Duration::ZERO)
        } else {
            Reply::json(&upstream_completion(reply))
        }
    })
    .await
}

fn base_url(gw: &TestGateway) -> String {
    gw.url("/v1")
}

// ---------------------------------------------------------------------------
// Rust: async-openai

fn rust_client(gw: &TestGateway) -> Client<OpenAIConfig> {
    // reqwest is built with `rustls-no-provider` (no aws-lc-rs): use ring,
    // which toolgate already uses. Only loopback http is spoken anyway.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(base_url(gw))
            .with_api_key("unused-by-toolgate-tests"),
    )
}

fn rust_request(model: &str, tools: Vec<Value>) -> CreateChatCompletionRequest {
    serde_json::from_value(json!({
        "model": model,
        "messages": [{"role": "user", "content": "What's the weather like in San Francisco today?"}],
        "tools": tools,
    }))
    .expect("a typed request")
}

async fn next_chunk(
    stream: &mut ChatCompletionResponseStream,
) -> Option<Result<CreateChatCompletionStreamResponse, OpenAIError>> {
    std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *stream), cx)).await
}

/// A streamed reply as async-openai's typed chunks assemble it.
#[derive(Debug, Default)]
struct Assembled {
    content: String,
    /// (id, name, arguments) by call index.
    calls: Vec<(String, String, String)>,
    finish: Option<FinishReason>,
}

async fn rust_stream(
    client: &Client<OpenAIConfig>,
    req: CreateChatCompletionRequest,
) -> Result<Assembled, OpenAIError> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(20), client.chat().create_stream(req))
            .await
            .expect("stream opened within 20 s")?;
    let mut out = Assembled::default();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), next_chunk(&mut stream))
        .await
        .expect("a chunk within 20 s")
    {
        for choice in chunk?.choices {
            assert_eq!(choice.index, 0);
            if let Some(c) = choice.delta.content {
                out.content.push_str(&c);
            }
            for tc in choice.delta.tool_calls.unwrap_or_default() {
                let i = tc.index as usize;
                if i == out.calls.len() {
                    let f = tc.function.clone().unwrap_or_default();
                    out.calls.push((
                        tc.id.clone().expect("a call starts with its id"),
                        f.name.expect("a call starts with its name"),
                        String::new(),
                    ));
                } else {
                    assert_eq!(i + 1, out.calls.len(), "calls arrive in index order");
                    assert!(tc.id.is_none(), "id only in a call's first delta");
                }
                if let Some(args) = tc.function.and_then(|f| f.arguments) {
                    out.calls[i].2.push_str(&args);
                }
            }
            if let Some(f) = choice.finish_reason {
                out.finish = Some(f);
            }
        }
    }
    Ok(out)
}

fn function_calls(resp: &CreateChatCompletionResponse) -> Vec<(String, String, Value)> {
    resp.choices[0]
        .message
        .tool_calls
        .iter()
        .flatten()
        .map(|c| match c {
            ChatCompletionMessageToolCalls::Function(f) => (
                f.id.clone(),
                f.function.name.clone(),
                serde_json::from_str(&f.function.arguments).expect("arguments are JSON"),
            ),
            other => panic!("not a function call: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn rust_async_openai_non_streaming_tool_call() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let client = rust_client(&gw);
    let resp = client
        .chat()
        .create(rust_request(
            UP_MODEL,
            vec![seed_get_weather(), seed_book_restaurant()],
        ))
        .await
        .expect("a typed chat.completion");
    assert_eq!(resp.id, UP_ID);
    assert_eq!(resp.model, UP_MODEL);
    let choice = &resp.choices[0];
    assert_eq!(choice.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        choice.message.content.as_deref().map(str::trim),
        Some(SEED_TEXT)
    );
    let calls = function_calls(&resp);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].0.starts_with("call_"), "{}", calls[0].0);
    assert_eq!(calls[0].1, "GetWeather");
    assert_eq!(
        calls[0].2,
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
}

#[tokio::test]
async fn rust_async_openai_streams_two_tool_calls() {
    let mock = natural_model(TWO_CALLS_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let client = rust_client(&gw);
    let out = rust_stream(
        &client,
        rust_request(UP_MODEL, vec![seed_get_weather(), seed_book_restaurant()]),
    )
    .await
    .expect("a well-formed typed stream");
    assert_eq!(out.content.trim(), "Let me do both.");
    assert_eq!(out.finish, Some(FinishReason::ToolCalls));
    let names: Vec<&str> = out.calls.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(names, ["GetWeather", "BookRestaurant"]);
    assert_ne!(out.calls[0].0, out.calls[1].0, "distinct call ids");
    let args: Vec<Value> = out
        .calls
        .iter()
        .map(|c| serde_json::from_str(&c.2).expect("arguments are JSON"))
        .collect();
    assert_eq!(args[0], json!({"location": "Paris", "unit": "celsius"}));
    assert_eq!(
        args[1],
        json!({"restaurantName": "Chez Léon", "date": "2025-05-15", "time": "19:00", "numberOfPeople": 4})
    );
}

/// A whole tool loop with typed messages: the assistant's typed tool call goes
/// back into the history with a `tool` result; the demo model answers.
#[tokio::test]
async fn rust_async_openai_tool_loop_against_the_demo_model() {
    let gw = demo_gateway().await;
    let client = rust_client(&gw);
    let first = client
        .chat()
        .create(rust_request("demo", vec![seed_get_weather()]))
        .await
        .expect("first turn");
    assert_eq!(
        first.choices[0].finish_reason,
        Some(FinishReason::ToolCalls)
    );
    let calls = function_calls(&first);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "GetWeather");
    let location = calls[0].2["location"].as_str().expect("a location string");
    let mut history = serde_json::to_value(rust_request("demo", vec![seed_get_weather()])).unwrap();
    // The typed assistant message, serialized as async-openai sends it.
    let assistant = serde_json::to_value(&first.choices[0].message).unwrap();
    let messages = history["messages"].as_array_mut().unwrap();
    messages.push(assistant);
    messages.push(json!({"role": "tool", "tool_call_id": calls[0].0,
                         "content": format!("18 C in {location}")}));
    let second: CreateChatCompletionRequest = serde_json::from_value(history).unwrap();
    let out = rust_stream(&client, second).await.expect("second turn");
    assert_eq!(out.finish, Some(FinishReason::Stop));
    assert!(out.calls.is_empty(), "{out:?}");
    assert_eq!(
        out.content,
        format!("GetWeather returned: 18 C in {location}")
    );
}

/// to_natural: the demo model (native tools) behind the `demo-text` provider;
/// the client sees its call as a `<tool_call>` block in plain content, and
/// sends its history back as text.
#[tokio::test]
async fn rust_async_openai_to_natural_round_trip_with_the_demo_model() {
    let gw = demo_gateway().await;
    let client = rust_client(&gw);
    let first = client
        .chat()
        .create(rust_request("demo-text", vec![seed_get_weather()]))
        .await
        .expect("non-streaming to_natural reply");
    let message = &first.choices[0].message;
    assert_eq!(first.choices[0].finish_reason, Some(FinishReason::Stop));
    assert!(
        message.tool_calls.as_ref().is_none_or(Vec::is_empty),
        "{message:?}"
    );
    let content = message.content.clone().expect("text content");
    assert!(
        content.contains("<tool_call name=\"GetWeather\">\n{"),
        "{content}"
    );
    assert!(content.trim_end().ends_with("</tool_call>"), "{content}");

    let streamed = rust_stream(&client, rust_request("demo-text", vec![seed_get_weather()]))
        .await
        .expect("streamed to_natural reply");
    assert_eq!(streamed.finish, Some(FinishReason::Stop));
    assert!(streamed.calls.is_empty());
    assert_eq!(
        streamed.content, content,
        "streaming and non-streaming render the same text"
    );

    // The natural-text history goes back; toolgate makes it native again.
    let mut history =
        serde_json::to_value(rust_request("demo-text", vec![seed_get_weather()])).unwrap();
    let messages = history["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": "<tool_response name=\"GetWeather\">\n18 C\n</tool_response>"}));
    let second: CreateChatCompletionRequest = serde_json::from_value(history).unwrap();
    let answer = client.chat().create(second).await.expect("second turn");
    assert_eq!(
        answer.choices[0].message.content.as_deref(),
        Some("GetWeather returned: 18 C"),
        "the demo saw a native tool result"
    );
}

// ---------------------------------------------------------------------------
// Python and Node: installed by tests/run.sh, spawned here

/// A finished script run.
#[derive(Debug)]
struct Run {
    ok: bool,
    /// The `RESULT` JSON line, if the script got that far.
    result: Option<Value>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The result of a run that must have succeeded.
    fn success(&self) -> &Value {
        assert!(self.ok, "the client script failed:\n{self}");
        self.result
            .as_ref()
            .unwrap_or_else(|| panic!("no RESULT line:\n{self}"))
    }

    /// The output of a run that must have failed.
    fn failure(&self) -> &str {
        assert!(!self.ok, "the client script passed, but must fail:\n{self}");
        &self.stderr
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--- stdout\n{}--- stderr\n{}---",
            self.stdout, self.stderr
        )
    }
}

async fn run_script(program: &Path, script: &Path, scenario: &str, url: &str, model: &str) -> Run {
    let dir = script.parent().unwrap();
    let started = Instant::now();
    let child = tokio::process::Command::new(program)
        .arg(script)
        .arg(scenario)
        .current_dir(dir)
        .env("CLIENT_TESTS_BASE_URL", url)
        .env("CLIENT_TESTS_MODEL", model)
        // Loopback only: no proxy may take the request elsewhere.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("all_proxy")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let out = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {scenario} took over {SCRIPT_TIMEOUT:?}",
                script.display()
            )
        })
        .expect("script output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|j| {
            serde_json::from_str(j).unwrap_or_else(|e| panic!("RESULT is not JSON ({e}): {j}"))
        });
    eprintln!(
        "{} {scenario}: exit {:?} in {:.1?}",
        script.file_name().unwrap().to_string_lossy(),
        out.status.code(),
        started.elapsed()
    );
    Run {
        ok: out.status.success(),
        result,
        stdout,
        stderr,
    }
}

async fn python_run(scenario: &str, url: &str, model: &str) -> Run {
    let script = clients_dir().join("python/clients.py");
    run_script(&python(), &script, scenario, url, model).await
}

async fn node_run(scenario: &str, url: &str, model: &str) -> Run {
    let script = node_dir().join("clients.mjs");
    let node = std::env::var_os("CLIENT_TESTS_NODE").unwrap_or_else(|| "node".into());
    run_script(Path::new(&node), &script, scenario, url, model).await
}

/// The seed call as every client must assemble it.
fn assert_seed_call(result: &Value) {
    let calls = result["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 1, "{result:#}");
    assert_eq!(calls[0]["name"], "GetWeather");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    let args: Value = serde_json::from_str(calls[0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
    assert_eq!(result["finish_reason"], "tool_calls", "{result:#}");
    assert_eq!(
        result["content"].as_str().map(str::trim),
        Some(SEED_TEXT),
        "{result:#}"
    );
}

#[tokio::test]
async fn python_create_stream_accumulates_tool_call_deltas() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let run = python_run("create_stream", &base_url(&gw), UP_MODEL).await;
    let r = run.success();
    assert_seed_call(r);
    assert!(r["chunks"].as_u64().unwrap() > 3, "{r:#}");
}

#[tokio::test]
async fn python_stream_helper_get_final_completion() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let run = python_run("stream_helper", &base_url(&gw), UP_MODEL).await;
    let r = run.success();
    assert_seed_call(r);
    let events = r["events"].as_array().unwrap();
    assert!(
        events.contains(&json!("tool_calls.function.arguments.done")),
        "{r:#}"
    );
}

#[tokio::test]
async fn python_tool_loop_against_the_demo_model() {
    let gw = demo_gateway().await;
    let run = python_run("tool_loop", &base_url(&gw), "demo").await;
    let r = run.success();
    assert_eq!(r["call"]["name"], "GetWeather", "{r:#}");
    let location = r["call"]["arguments"]["location"].as_str().unwrap();
    assert_eq!(r["result"], format!("21 C and sunny in {location}"));
    assert_eq!(
        r["answer"],
        format!("GetWeather returned: {}", r["result"].as_str().unwrap())
    );
}

/// What both SDKs saw of the demo agent's calculator call.
fn assert_gateway_answer(r: &Value) {
    assert_eq!(r["finish_reason"], "stop", "{r:#}");
    assert!(
        r["content"]
            .as_str()
            .unwrap()
            .ends_with("calculator returned: 35"),
        "{r:#}"
    );
    let reported = r["gateway_tool_calls"].as_array().unwrap();
    let statuses: Vec<&str> = reported
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"], "{r:#}");
    assert_eq!(reported[1]["output"], "35");
}

#[tokio::test]
async fn python_and_node_read_an_answer_that_used_gateway_tools() {
    let gw = demo_gateway().await;
    let python = python_run("gateway_tools", &base_url(&gw), "demo-agent").await;
    assert_gateway_answer(python.success());
    let node = node_run("gateway_tools", &base_url(&gw), "demo-agent").await;
    assert_gateway_answer(node.success());
}

#[tokio::test]
async fn rust_async_openai_reads_an_answer_that_used_gateway_tools() {
    let gw = demo_gateway().await;
    let request: CreateChatCompletionRequest = serde_json::from_value(json!({
        "model": "demo-agent",
        "messages": [{"role": "user", "content": "Ask the calculator: what is `(2 + 3) * 7`?"}],
    }))
    .unwrap();
    let out = rust_stream(&rust_client(&gw), request)
        .await
        .expect("typed chunks");
    assert_eq!(out.finish, Some(FinishReason::Stop));
    assert!(out.calls.is_empty(), "{out:?}");
    assert!(out.content.ends_with("calculator returned: 35"), "{out:?}");
}

/// The Responses API through a natural-mode provider: the SDKs' stream
/// helpers (which check the event order) assemble the demo model's call.
#[tokio::test]
async fn python_and_node_stream_responses_with_a_function_call() {
    let gw = demo_gateway().await;
    for run in [
        python_run("responses_stream", &base_url(&gw), "demo").await,
        node_run("responses_stream", &base_url(&gw), "demo").await,
    ] {
        let r = run.success();
        assert_eq!(r["status"], "completed", "{r:#}");
        assert_eq!(r["calls"][0]["name"], "GetWeather", "{r:#}");
        assert_eq!(r["text"], "I'll use GetWeather for that.\n\n", "{r:#}");
        let events = r["events"].as_array().unwrap();
        for kind in [
            "response.created",
            "response.output_text.delta",
            "response.function_call_arguments.done",
            "response.completed",
        ] {
            assert!(events.contains(&json!(kind)), "{kind}: {r:#}");
        }
    }
}

#[tokio::test]
async fn python_reads_gateway_tools_as_mcp_call_items() {
    let gw = demo_gateway().await;
    let run = python_run("responses_gateway", &base_url(&gw), "demo-agent").await;
    let r = run.success();
    assert_eq!(
        r["items"],
        json!(["mcp_list_tools", "message", "mcp_call", "message"]),
        "{r:#}"
    );
    assert_eq!(
        r["mcp_call"],
        json!({"name": "calculator", "server_label": "builtin", "output": "35"})
    );
}

/// Seed 004's linking: three turns from the Python SDK, no chat header, are
/// one chat in the transcript (the embedded config records tool exchanges).
#[tokio::test]
async fn python_three_turns_are_one_recorded_chat() {
    let gw = demo_gateway().await;
    let run = python_run("three_turns", &base_url(&gw), "demo").await;
    let r = run.success();
    let chats: Vec<&str> = r["chats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().expect("every answer names its chat"))
        .collect();
    assert_eq!(chats.len(), 3);
    assert!(chats.iter().all(|c| *c == chats[0]), "{chats:?}");
    let list = chats_listed(&gw.url(""), 1).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list:#}");
    assert_eq!(list["data"][0]["id"], chats[0]);
}

/// The OpenAI Agents SDK runs an agent with a function tool, over the
/// Responses API, through the natural-mode demo provider, to the end of its
/// loop (once with `Runner.run`, once streamed).
#[tokio::test]
async fn python_agents_sdk_runs_a_tool_loop_to_the_end() {
    let gw = demo_gateway().await;
    let run = python_run("agents_loop", &base_url(&gw), "demo").await;
    let r = run.success();
    assert_eq!(r["invocations"].as_array().unwrap().len(), 2, "{r:#}");
    let location = r["invocations"][0].as_str().unwrap();
    let answer = format!("get_weather returned: 21 C and sunny in {location}");
    assert_eq!(r["final_output"], answer, "{r:#}");
    assert_eq!(
        r["streamed_output"]
            .as_str()
            .map(|s| s.starts_with("get_weather returned: 21 C and sunny in ")),
        Some(true),
        "{r:#}"
    );
    assert_eq!(
        r["items"],
        json!([
            "message_output_item",
            "tool_call_item",
            "tool_call_output_item",
            "message_output_item"
        ])
    );
}

#[tokio::test]
async fn node_stream_helper_final_chat_completion() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let run = node_run("stream_helper", &base_url(&gw), UP_MODEL).await;
    let r = run.success();
    assert_seed_call(r);
    assert!(
        r["events"]
            .as_array()
            .unwrap()
            .contains(&json!("tool_calls.function.arguments.done")),
        "{r:#}"
    );
}

#[tokio::test]
async fn node_run_tools_with_a_local_function() {
    let gw = demo_gateway().await;
    for scenario in ["run_tools", "run_tools_stream"] {
        let run = node_run(scenario, &base_url(&gw), "demo").await;
        let r = run.success();
        assert_eq!(r["invocations"].as_array().unwrap().len(), 1, "{r:#}");
        let location = r["invocations"][0]["location"].as_str().unwrap();
        let result = format!("21 C and sunny in {location}");
        assert_eq!(r["tool_result"], result, "{r:#}");
        assert_eq!(
            r["answer"],
            format!("GetWeather returned: {result}"),
            "{r:#}"
        );
        assert_eq!(
            r["roles"],
            json!(["user", "assistant", "tool", "assistant"])
        );
    }
}

// ---------------------------------------------------------------------------
// A broken emitter: the tests above can fail

/// A stream with one fault, replayed byte for byte by a passthrough provider
/// (so toolgate's rewriter is not involved).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    RepeatedCallId,
    MissingToolCallIndex,
    ContentAfterCall,
}

fn broken_sse(fault: Fault) -> String {
    let chunk = |delta: Value, finish: Value| {
        upstream_chunk(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
        )
    };
    let start = |index: u64, id: &str, name: &str| {
        chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        )
    };
    let args = |index: Option<u64>, args: &str| {
        let mut entry = json!({"function": {"arguments": args}});
        if let Some(i) = index {
            entry["index"] = json!(i);
        }
        chunk(json!({"tool_calls": [entry]}), Value::Null)
    };
    let weather_args = r#"{"location":"San Francisco, CA","unit":"fahrenheit"}"#;
    let book_args = r#"{"restaurantName":"Chez Léon","numberOfPeople":4}"#;
    let second_id = if fault == Fault::RepeatedCallId {
        "call_aaaaaaaaaaaaaaaaaaaaaaaa"
    } else {
        "call_bbbbbbbbbbbbbbbbbbbbbbbb"
    };
    let mut chunks = vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": SEED_TEXT}), Value::Null),
        start(0, "call_aaaaaaaaaaaaaaaaaaaaaaaa", "GetWeather"),
        args(
            (fault != Fault::MissingToolCallIndex).then_some(0),
            weather_args,
        ),
    ];
    if fault == Fault::ContentAfterCall {
        chunks.push(chunk(json!({"content": " And a late word."}), Value::Null));
    }
    chunks.push(start(1, second_id, "BookRestaurant"));
    chunks.push(args(Some(1), book_args));
    chunks.push(chunk(json!({}), json!("tool_calls")));
    let mut out = String::new();
    for c in chunks {
        out.push_str(&format!("data: {c}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// A passthrough gateway over a mock that replays the faulty stream named by
/// the request's model (`broken-0`, `broken-1`, ...).
async fn broken_gateway() -> (Mock, TestGateway) {
    let mock = Mock::start(|req| {
        let model = req.json()["model"].as_str().unwrap_or_default().to_owned();
        let fault = match model.as_str() {
            "broken-0" => Fault::RepeatedCallId,
            "broken-1" => Fault::MissingToolCallIndex,
            _ => Fault::ContentAfterCall,
        };
        Reply::sse(&[&broken_sse(fault)], Duration::ZERO)
    })
    .await;
    let gw = TestConfig::new()
        .provider("raw", &mock.url(), "[\"broken-*\"]", "")
        .start()
        .await;
    (mock, gw)
}

fn broken_model(fault: Fault) -> &'static str {
    match fault {
        Fault::RepeatedCallId => "broken-0",
        Fault::MissingToolCallIndex => "broken-1",
        Fault::ContentAfterCall => "broken-2",
    }
}

/// Each fault fails the conformance checker, and fails at least one real
/// client: the SDKs' own accumulators where they check (a missing index), and
/// otherwise the checks a careful caller makes on what the SDK assembled.
#[tokio::test]
async fn a_broken_emitter_fails_the_checker_and_real_clients() {
    let (_mock, gw) = broken_gateway().await;
    let url = base_url(&gw);
    let rust = rust_client(&gw);
    for (fault, rule) in [
        (Fault::RepeatedCallId, "not unique"),
        (Fault::MissingToolCallIndex, "rule 6"),
        (Fault::ContentAfterCall, "rule 12"),
    ] {
        let model = broken_model(fault);
        let body = json!({"model": model, "stream": true,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [seed_get_weather(), seed_book_restaurant()]});
        let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.text(),
            broken_sse(fault),
            "passthrough replays it byte for byte"
        );
        let err = check_stream(&r.body, &Expect::default())
            .expect_err(&format!("{fault:?}: the checker must reject it"));
        assert!(err.contains(rule), "{fault:?}: {err}");

        let py_helper = python_run("stream_helper", &url, model).await;
        let py_create = python_run("create_stream", &url, model).await;
        let node_helper = node_run("stream_helper", &url, model).await;
        let rust_out = rust_stream(&rust, rust_request(model, vec![seed_get_weather()])).await;
        match fault {
            Fault::MissingToolCallIndex => {
                // The SDKs' own accumulators reject it.
                let e = py_helper.failure();
                assert!(
                    e.contains("RuntimeError: Expected list delta entry to have an `index` key"),
                    "{py_helper}"
                );
                let e = rust_out.expect_err("async-openai must reject a call delta without index");
                assert!(matches!(e, OpenAIError::JSONDeserialize(..)), "{e:?}");
                assert!(e.to_string().contains("index"), "{e}");
                // Python's raw chunks carry `index=None`, which the caller's
                // accumulation rejects.
                assert!(
                    py_create
                        .failure()
                        .contains("tool call delta without index"),
                    "{py_create}"
                );
                // Node's helper does not check: it files the arguments under
                // the key `undefined` and hands back GetWeather with "" as
                // its arguments, which the caller's JSON.parse rejects.
                assert!(
                    node_helper
                        .failure()
                        .contains(r#"arguments of GetWeather are not JSON: """#),
                    "{node_helper}"
                );
            }
            Fault::RepeatedCallId => {
                for run in [&py_helper, &py_create, &node_helper] {
                    assert!(run.failure().contains("repeated call id"), "{run}");
                }
                let out = rust_out.expect("async-openai accepts it");
                assert_eq!(out.calls[0].0, out.calls[1].0);
            }
            Fault::ContentAfterCall => {
                assert!(
                    py_create.failure().contains("after a tool call"),
                    "{py_create}"
                );
                // The helpers glue the late text onto the content silently.
                let r = py_helper.success();
                assert!(
                    r["content"].as_str().unwrap().ends_with("late word."),
                    "{r:#}"
                );
                let r = node_helper.success();
                assert!(
                    r["content"].as_str().unwrap().ends_with("late word."),
                    "{r:#}"
                );
                rust_out.expect("async-openai accepts it");
            }
        }
    }
}

/// The same clients accept toolgate's own rewrite of a reply with two calls,
/// so the failures above come from the faults, not from the harness.
#[tokio::test]
async fn the_same_clients_accept_toolgates_rewrite_of_two_calls() {
    let mock = natural_model(TWO_CALLS_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let url = base_url(&gw);
    let body = json!({"model": UP_MODEL, "stream": true,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [seed_get_weather(), seed_book_restaurant()]});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    let s = check_stream(&r.body, &Expect::default()).expect("conformant");
    assert_eq!(s.choice().calls.len(), 2);
    for run in [
        python_run("stream_helper", &url, UP_MODEL).await,
        python_run("create_stream", &url, UP_MODEL).await,
        node_run("stream_helper", &url, UP_MODEL).await,
    ] {
        let r = run.success();
        let names: Vec<&str> = r["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["GetWeather", "BookRestaurant"], "{r:#}");
        assert_eq!(r["finish_reason"], "tool_calls");
    }
}

// ---------------------------------------------------------------------------
// The official `anthropic` Python SDK against /v1/messages

/// The seed call, as the Anthropic SDK reads it from a natural-mode model.
fn assert_anthropic_seed_call(r: &Value) {
    assert_eq!(r["stop_reason"], "tool_use", "{r:#}");
    let calls = r["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{r:#}");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(calls[0]["name"], "GetWeather");
    assert_eq!(
        calls[0]["input"],
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
}

#[tokio::test]
async fn python_anthropic_messages_create_with_tools_through_the_mock() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let run = python_run("anthropic_create", &base_url(&gw), UP_MODEL).await;
    let r = run.success();
    assert_anthropic_seed_call(r);
}

#[tokio::test]
async fn python_anthropic_messages_stream_final_message() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let run = python_run("anthropic_stream", &base_url(&gw), UP_MODEL).await;
    let r = run.success();
    assert_anthropic_seed_call(r);
    assert_eq!(r["text"].as_str().map(str::trim), Some(SEED_TEXT), "{r:#}");
    let events: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"message_start"), "{events:?}");
    assert_eq!(events.last(), Some(&"message_stop"), "{events:?}");
    assert!(events.contains(&"input_json"), "{events:?}");
}

#[tokio::test]
async fn python_anthropic_tool_loop_against_the_demo_model() {
    let gw = demo_gateway().await;
    let run = python_run("anthropic_tool_loop", &base_url(&gw), "demo").await;
    let r = run.success();
    assert_eq!(r["call"]["name"], "GetWeather", "{r:#}");
    let location = r["call"]["arguments"]["location"].as_str().unwrap();
    assert_eq!(r["result"], format!("21 C and sunny in {location}"));
    assert_eq!(
        r["answer"],
        format!("GetWeather returned: {}", r["result"].as_str().unwrap())
    );
}

#[tokio::test]
async fn node_anthropic_streams_a_tool_call() {
    let mock = natural_model(SEED_REPLY).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let run = node_run("anthropic_stream", &base_url(&gw), UP_MODEL).await;
    let r = run.success();
    assert_anthropic_seed_call(r);
    assert_eq!(r["text"].as_str().map(str::trim), Some(SEED_TEXT), "{r:#}");
    let events: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"message_start"), "{events:?}");
    assert_eq!(events.last(), Some(&"message_stop"), "{events:?}");
    assert!(events.contains(&"content_block_delta"), "{events:?}");
}

/// A key's requests per minute through the official SDKs: the OpenAI SDK
/// reads the `429` and its retry waits what `Retry-After` says; the
/// Anthropic SDK reads the Messages door's `rate_limit_error`.
#[tokio::test]
async fn python_sdks_read_a_429_and_the_retry_honours_retry_after() {
    // SAFETY: this test's own variable, set to the same value each time.
    unsafe { std::env::set_var("LIMITS_TEST_SDK", "sdk-key") };
    let mock = Mock::start(|_| Reply::json(&upstream_completion("hello"))).await;
    // 30 a minute: a burst of 30, then one every 2 s.
    let gw = TestConfig::new()
        .server(
            "[server.auth]\n[[server.auth.keys]]\nname = \"sdk\"\nkey_env = \"LIMITS_TEST_SDK\"\n\
             [server.auth.keys.limits]\nrequests_per_minute = 30\n",
        )
        .up(&mock.url(), "")
        .start()
        .await;
    let run = python_run("rate_limited", &base_url(&gw), "m").await;
    let r = run.success();
    assert_eq!(r["admitted"], 30, "{r:#}");
    assert_eq!(r["status"], 429);
    assert_eq!(r["code"], "rate_limit_exceeded");
    assert_eq!(r["type"], "rate_limit_exceeded");
    assert_eq!(r["retry_after"], "2");
    assert_eq!(r["limit"], "30");
    assert_eq!(r["remaining"], "0");
    let waited = r["waited"].as_f64().unwrap();
    assert!(
        waited >= 1.5,
        "the retry came before Retry-After: {waited} s"
    );
    assert_eq!(r["anthropic"]["type"], "error", "{r:#}");
    assert_eq!(r["anthropic"]["error"]["type"], "rate_limit_error");
}
