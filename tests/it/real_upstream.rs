//! toolgate in front of a real model server: llama.cpp's `llama-server` with
//! SmolLM2-135M-Instruct or Qwen2.5-Coder-0.5B-Instruct, started by
//! tests/real_upstream.sh, which sets `TOOLGATE_REAL_UPSTREAM_URL` and
//! `TOOLGATE_REAL_MODEL` (`smollm2`, `qwen`). Without the URL every test
//! returns at once (the default test command does not build llama.cpp).
//!
//! Most tests assert what holds whatever the model writes: streams clients
//! accept, the server's own fields untouched, a call it does write coming
//! out native and valid, and a client leaving stopping the generation.
//! Qwen, which follows tool instructions, is also held to the whole loop:
//! a call, its result, an answer that uses it (temperature 0).

use crate::common;
use crate::conformance;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Collected, TestGateway};
use conformance::{Expect, check_completion, check_stream};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// The model under test, as the suffix of the model names sent.
fn real_model() -> String {
    std::env::var("TOOLGATE_REAL_MODEL").unwrap_or_else(|_| "smollm2".into())
}

/// The model name that routes to `provider`.
fn model(provider: &str) -> String {
    format!("{provider}-{}", real_model())
}

fn upstream() -> Option<String> {
    let url = std::env::var("TOOLGATE_REAL_UPSTREAM_URL").ok();
    if url.is_none() {
        eprintln!(
            "skipped: TOOLGATE_REAL_UPSTREAM_URL is not set (tests/real_upstream.sh sets it)"
        );
    }
    url
}

/// One provider per way of handling tools, all on the same llama-server.
async fn gateway(url: &str) -> TestGateway {
    let provider = |name: &str, tools: &str| {
        format!(
            "[[providers]]\nname = \"{name}\"\nbase_url = \"{url}/v1\"\nmodels = [\"{name}-*\"]\n\
             [providers.tools]\n{tools}\n"
        )
    };
    let toml = [
        "[server]\nlisten = \"127.0.0.1:0\"\nfirst_byte_timeout_secs = 120\nstream_idle_timeout_secs = 60\nshutdown_grace_secs = 5\n".to_owned(),
        provider("pass", "mode = \"passthrough\""),
        provider("tag", "mode = \"natural\"\nsyntax = \"tag\""),
        provider("tool_call", "mode = \"natural\"\nsyntax = \"tool_call\""),
        provider("bracket", "mode = \"natural\"\nsyntax = \"bracket\""),
        provider("ctag", "mode = \"natural\"\nsyntax = \"tag\"\nconstrain = \"gbnf\""),
        provider(
            "ctool_call",
            "mode = \"natural\"\nsyntax = \"tool_call\"\nconstrain = \"gbnf\"",
        ),
        provider(
            "cbracket",
            "mode = \"natural\"\nsyntax = \"bracket\"\nconstrain = \"gbnf\"",
        ),
        provider("text", "mode = \"to_natural\""),
        provider(
            "agent",
            "mode = \"passthrough\"\ngateway_tools = [\"builtin:clock\"]\nmax_rounds = 2",
        ),
        provider("rescue", "mode = \"passthrough\"\nrescue_text_calls = true"),
        provider(
            "bagent",
            "mode = \"natural\"\nsyntax = \"bracket\"\ngateway_tools = [\"builtin:calculator\"]",
        ),
        provider(
            "ragent",
            "mode = \"passthrough\"\nrescue_text_calls = true\ngateway_tools = [\"builtin:calculator\"]",
        ),
    ]
    .concat();
    TestGateway::start(&toml).await
}

/// The natural-mode providers: each syntax, then each constrained.
const NATURAL: [&str; 6] = [
    "tag",
    "tool_call",
    "bracket",
    "ctag",
    "ctool_call",
    "cbracket",
];

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
    }})
}

fn chat(model: &str, prompt: &str, extra: Value) -> String {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 96,
        "temperature": 0,
        "seed": 7,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body.to_string()
}

/// A POST read to its end; a small CPU model on a busy machine can take
/// longer than the harness's 20 s.
async fn post(url: &str, body: &str) -> Collected {
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
        .unwrap();
    let read = async {
        let response = common::client()
            .request(request)
            .await
            .expect("request sent");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body read").to_bytes();
        Collected {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    };
    tokio::time::timeout(Duration::from_secs(300), read)
        .await
        .expect("an answer within 300 s")
}

fn ok(reply: &Collected) -> &Collected {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply
}

#[tokio::test]
async fn passthrough_keeps_llama_cpp_fields_whole_and_streamed() {
    let Some(url) = upstream() else { return };
    let gw = gateway(&url).await;

    let whole = post(
        &gw.url("/v1/chat/completions"),
        &chat(&model("pass"), "Say hi.", json!({})),
    )
    .await;
    let v = ok(&whole).json();
    check_completion(&v).unwrap();
    assert!(
        v["timings"]["predicted_n"].as_u64().is_some(),
        "llama.cpp's timings pass through: {v:#}"
    );
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{v:#}"
    );

    let streamed = post(
        &gw.url("/v1/chat/completions"),
        &chat(
            &model("pass"),
            "Say hi.",
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
    )
    .await;
    let summary = check_stream(&ok(&streamed).body, &Expect::usage()).unwrap();
    assert!(!summary.choice().content.is_empty());
    assert!(
        summary.usage.as_ref().unwrap()["completion_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        streamed.text().contains("\"timings\""),
        "timings pass through in the stream"
    );
}

/// Whatever the model writes in each syntax, streamed or not, clients accept
/// the answer; a call it writes comes out as a native call whose arguments
/// are JSON (validated against the schema by the gateway).
#[tokio::test]
async fn natural_mode_in_every_syntax_gives_answers_clients_accept() {
    let Some(url) = upstream() else { return };
    let gw = gateway(&url).await;
    let prompts = [
        "What is the weather in Paris?",
        "Call get_weather for Berlin.",
        "Say hello.",
    ];
    let mut calls = 0;
    for syntax in NATURAL {
        for prompt in prompts {
            let tools = json!({"tools": [weather_tool()]});
            let whole = post(
                &gw.url("/v1/chat/completions"),
                &chat(&model(syntax), prompt, tools.clone()),
            )
            .await;
            // A block the model botched is the gateway's `invalid_tool_call`
            // error (on_invalid = "error"); anything else must be a good answer.
            if whole.status != 200 {
                assert_eq!(
                    whole.json()["error"]["code"],
                    "invalid_tool_call",
                    "{syntax}: {}",
                    whole.text()
                );
                continue;
            }
            let v = whole.json();
            check_completion(&v).unwrap_or_else(|e| panic!("{syntax} {prompt:?}: {e}\n{v:#}"));
            for call in v["choices"][0]["message"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                calls += 1;
                assert_eq!(call["function"]["name"], "get_weather");
                let args: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                assert!(args["location"].is_string(), "{args}");
            }

            let mut body: Value =
                serde_json::from_str(&chat(&model(syntax), prompt, tools)).unwrap();
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
            let streamed = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
            assert_eq!(streamed.status, 200, "{}", streamed.text());
            let expect = Expect {
                include_usage: true,
                allow_error: true,
            };
            let s = check_stream(&streamed.body, &expect)
                .unwrap_or_else(|e| panic!("{syntax} {prompt:?}: {e}\n{}", streamed.text()));
            if let Some(error) = &s.error {
                assert_eq!(
                    error["error"]["code"], "invalid_tool_call",
                    "{syntax}: {error}"
                );
            }
            for call in &s.choice().calls {
                calls += 1;
                assert_eq!(call.name, "get_weather");
                assert!(call.args()["location"].is_string());
            }
        }
    }
    eprintln!("natural mode: the model wrote {calls} valid call(s) in 36 answers");
}

/// `constrain = "gbnf"` on the real server, in every syntax: the grammar is
/// read (a grammar llama.cpp cannot parse is a 400, which fails here), a
/// required call is always a valid call of a declared tool, streamed or not,
/// with what the schema allows; a prompt that needs no tool is answered.
#[tokio::test]
async fn constrained_calls_are_valid_calls_in_every_syntax() {
    let Some(url) = upstream() else { return };
    let gw = gateway(&url).await;
    let time_tool = json!({"type": "function", "function": {
        "name": "get_time",
        "description": "Get the current time in a time zone.",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "enum": ["Europe/Paris", "Asia/Tokyo", "America/New_York"]}
        }, "required": ["timezone"]}
    }});
    for syntax in ["ctag", "ctool_call", "cbracket"] {
        for stream in [false, true] {
            let mut body: Value = serde_json::from_str(&chat(
                &model(syntax),
                "What time is it in Tokyo?",
                json!({"tools": [weather_tool(), time_tool.clone()], "tool_choice": "required", "max_tokens": 128}),
            ))
            .unwrap();
            body["stream"] = json!(stream);
            let reply = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
            let calls = if stream {
                assert_eq!(reply.status, 200, "{syntax}: {}", reply.text());
                let s = check_stream(&reply.body, &Expect::default()).unwrap_or_else(|e| {
                    panic!(
                        "{syntax}: {e}
{}",
                        reply.text()
                    )
                });
                s.choice()
                    .calls
                    .iter()
                    .map(|c| (c.name.clone(), c.args()))
                    .collect::<Vec<_>>()
            } else {
                let v = ok(&reply).json();
                check_completion(&v).unwrap();
                v["choices"][0]["message"]["tool_calls"]
                    .as_array()
                    .unwrap_or_else(|| panic!("{syntax}: required is a call: {v:#}"))
                    .iter()
                    .map(|c| {
                        let args = c["function"]["arguments"].as_str().unwrap();
                        (
                            c["function"]["name"].as_str().unwrap().to_owned(),
                            serde_json::from_str(args).unwrap(),
                        )
                    })
                    .collect()
            };
            assert!(!calls.is_empty(), "{syntax}: required is a call");
            for (name, args) in &calls {
                match name.as_str() {
                    "get_time" => assert!(
                        ["Europe/Paris", "Asia/Tokyo", "America/New_York"]
                            .contains(&args["timezone"].as_str().unwrap()),
                        "{syntax}: {args}"
                    ),
                    "get_weather" => assert!(args["location"].is_string(), "{syntax}: {args}"),
                    other => panic!("{syntax}: a tool no one declared: {other}"),
                }
            }
        }
        let quiet = post(
            &gw.url("/v1/chat/completions"),
            &chat(
                &model(syntax),
                "Say hello.",
                json!({"tools": [weather_tool()]}),
            ),
        )
        .await;
        let v = ok(&quiet).json();
        check_completion(&v).unwrap();
    }
}

/// to_natural with llama.cpp's own tool support (`--jinja` and a tool-capable
/// ChatML template): whatever the server returns, the client gets text only;
/// a native call the server returned is written in the tool_call syntax, and
/// that text parses back into a valid call. (llama.cpp's `required` grammar
/// lets the model write text first without end, so a call is not certain.)
#[tokio::test]
async fn to_natural_turns_llama_cpp_native_calls_into_text() {
    let Some(url) = upstream() else { return };
    let gw = gateway(&url).await;
    let tools = json!([weather_tool()]);
    let mut written = 0;
    for prompt in ["Weather in Paris?", "Call get_weather with location Paris."] {
        let extra = json!({"tools": tools, "tool_choice": "required", "max_tokens": 160});
        let whole = post(
            &gw.url("/v1/chat/completions"),
            &chat(&model("text"), prompt, extra.clone()),
        )
        .await;
        let v = ok(&whole).json();
        check_completion(&v).unwrap();
        let message = &v["choices"][0]["message"];
        assert!(
            message.get("tool_calls").is_none_or(Value::is_null),
            "{v:#}"
        );
        written += calls_in(message["content"].as_str().unwrap(), &tools);

        let mut body: Value = serde_json::from_str(&chat(&model("text"), prompt, extra)).unwrap();
        body["stream"] = json!(true);
        let streamed = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
        let s = check_stream(&ok(&streamed).body, &Expect::default()).unwrap();
        assert!(s.choice().calls.is_empty());
        assert_ne!(s.choice().finish_reason.as_deref(), Some("tool_calls"));
        written += calls_in(&s.choice().content, &tools);
    }
    eprintln!("to_natural: {written} native call(s) came back as text in 4 answers");
}

/// The calls `text` holds in the tool_call syntax; each must be valid.
fn calls_in(text: &str, tools: &Value) -> usize {
    let parsed = toolgate::commands::parse(
        tools.to_string().as_bytes(),
        toolgate::natural::syntax::Syntax::ToolCall,
        text,
    )
    .unwrap();
    let parsed: Value = serde_json::from_str(&parsed).unwrap();
    assert_eq!(
        parsed["invalid"],
        json!([]),
        "a rendered call parses back: {text}"
    );
    parsed["tool_calls"].as_array().unwrap().len()
}

/// A gateway tool the client never declared: llama.cpp's native tool
/// calling picks `clock`, toolgate runs it and the model answers in the same
/// stream; the stream is one answer whatever the model chose.
#[tokio::test]
async fn a_gateway_tool_runs_against_the_real_model() {
    let Some(url) = upstream() else { return };
    let gw = gateway(&url).await;
    let body = chat(
        &model("agent"),
        "What time is it now? Use the clock tool.",
        json!({"stream": true, "max_tokens": 64}),
    );
    let streamed = post(&gw.url("/v1/chat/completions"), &body).await;
    let s = check_stream(&ok(&streamed).body, &Expect::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", streamed.text()));
    assert!(
        s.choice().calls.is_empty(),
        "a gateway call never reaches the client as its own"
    );
    let finish = s.choice().finish_reason.as_deref();
    assert!(
        matches!(finish, Some("stop" | "length")),
        "one answer, ended by the model: {finish:?}"
    );
    let ran = s.choice().gateway.len();
    eprintln!("gateway tool: the model called the clock {ran} time(s)");
    let metrics = common::get(&gw.url("/metrics")).await.text();
    let executed = metrics.lines().any(|l| {
        l.starts_with("toolgate_gateway_tool_calls_total")
            && l.contains("clock")
            && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0)
    });
    assert_eq!(
        executed,
        ran > 0,
        "metrics agree with the stream:\n{metrics}"
    );
}

/// A client that leaves mid-generation stops the generation on the server:
/// toolgate closes the upstream connection, and llama.cpp cancels the task.
#[tokio::test]
async fn a_client_leaving_stops_the_generation() {
    let Some(url) = upstream() else { return };
    let gw = gateway(&url).await;
    for model in [model("pass"), model("tag")] {
        // ~3000 tokens: about 20 s of generation at this model's speed.
        let body = json!({
            "model": model, "stream": true, "max_tokens": 3000, "ignore_eos": true,
            "messages": [{"role": "user", "content": "Count from 1 to 5000, one number per line."}],
            "tools": [weather_tool()],
        });
        let request = hyper::Request::post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = common::client().request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        // Read until the model is generating, then hang up.
        let mut seen = 0;
        while seen < 200 {
            let frame = body.frame().await.unwrap().unwrap();
            seen += frame.data_ref().map_or(0, Bytes::len);
        }
        assert!(busy(&url).await, "{model}: the server is generating");
        let left = Instant::now();
        drop(body);
        while busy(&url).await {
            assert!(
                left.elapsed() < Duration::from_secs(8),
                "{model}: still generating 8 s after the client left"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "{model}: generation stopped {:?} after the client left",
            left.elapsed()
        );
    }
}

/// Whether a slot of the server is processing a task (`GET /slots`).
async fn busy(url: &str) -> bool {
    let slots = common::get(&format!("{url}/slots")).await;
    assert_eq!(slots.status, 200, "{}", slots.text());
    slots
        .json()
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["is_processing"] == true)
}

/// Qwen2.5-Coder-0.5B through natural mode in every syntax, constrained
/// or not: the call, its result
/// sent back as the SDKs do, and an answer that uses it without calling
/// again. Through rescue (its native answer is a fenced JSON object): the
/// call comes back native (the model's own template, which toolgate leaves
/// alone, does not close its loop). And a gateway tool's loop, in both,
/// ending in an answer that uses its result.
#[tokio::test]
async fn the_tool_loop_closes_on_qwen() {
    let Some(url) = upstream() else { return };
    if real_model() != "qwen" {
        eprintln!("skipped: the loop is held to Qwen2.5-Coder only");
        return;
    }
    let gw = gateway(&url).await;
    let prompt = "What is the weather in Paris right now?";
    for provider in NATURAL.into_iter().chain(["rescue"]) {
        let first = post(
            &gw.url("/v1/chat/completions"),
            &chat(&model(provider), prompt, json!({"tools": [weather_tool()]})),
        )
        .await;
        let v = ok(&first).json();
        check_completion(&v).unwrap();
        let message = v["choices"][0]["message"].clone();
        let call = &message["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather", "{provider}: {v:#}");
        if provider == "rescue" {
            continue;
        }
        let follow_up = json!({
            "model": model(provider), "temperature": 0, "max_tokens": 96,
            "tools": [weather_tool()],
            "messages": [
                {"role": "user", "content": prompt},
                message,
                {"role": "tool", "tool_call_id": call["id"], "content": "{\"location\": \"Paris\", \"temperature_c\": 14, \"conditions\": \"light rain\"}"},
            ],
        });
        let answer = post(&gw.url("/v1/chat/completions"), &follow_up.to_string()).await;
        let v = ok(&answer).json();
        let message = &v["choices"][0]["message"];
        assert!(
            message.get("tool_calls").is_none_or(Value::is_null),
            "{provider}: the loop closes: {v:#}"
        );
        let text = message["content"].as_str().unwrap().to_lowercase();
        assert!(
            text.contains("14") || text.contains("rain"),
            "{provider}: the answer uses the result: {text}"
        );
    }
    for provider in ["bagent", "ragent"] {
        let reply = post(
            &gw.url("/v1/chat/completions"),
            &chat(
                &model(provider),
                "What is 17 * 23 + 4?",
                json!({"max_tokens": 128}),
            ),
        )
        .await;
        let v = ok(&reply).json();
        let message = &v["choices"][0]["message"];
        let calls = message["gateway_tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!calls.is_empty(), "{provider}: the calculator ran: {v:#}");
        assert!(
            message["content"].as_str().unwrap().contains("395"),
            "{provider}: {v:#}"
        );
    }
}
