//! The python syntax end to end: a scripted upstream model writes a Python
//! list of calls, the real gateway turns it into native `tool_calls` as it
//! streams, every body goes through the conformance checker, and the
//! request side writes the instructions, history and grammar in the same
//! syntax.

use crate::common;
use crate::conformance;

use std::time::Duration;

use common::*;
use conformance::{Expect, StreamSummary, check_completion, check_stream};
use serde_json::{Value, json};

const TWO_CALLS: &str = "I'll check the weather and book the table.\n[GetWeather(location=\"Paris, France\", unit='celsius'), BookRestaurant(restaurantName=\"Chez \\\"Paul\\\"\", date=\"2025-05-15\", time=\"19:00\", numberOfPeople=4)]\nBoth are on their way.";

fn chat(stream: bool, extra: Value) -> String {
    let mut req = json!({
        "model": UP_MODEL,
        "messages": [{"role": "user", "content": "Weather in Paris, and a table at Chez Paul."}],
        "tools": [seed_get_weather(), seed_book_restaurant()],
        "stream": stream,
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            req[k] = v;
        }
    }
    req.to_string()
}

async fn model(reply: &str, piece_chars: usize) -> Mock {
    let reply = reply.to_owned();
    Mock::start(move |req| {
        if req.json()["stream"] == true {
            let pieces = char_pieces(&reply, piece_chars);
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            Reply::sse(&[&upstream_sse(&refs, None)], Duration::ZERO)
        } else {
            Reply::json(&upstream_completion(&reply))
        }
    })
    .await
}

async fn python_gateway(mock: &Mock, extra: &str) -> TestGateway {
    tools_gateway(mock, "natural", &format!("syntax = \"python\"\n{extra}")).await
}

async fn stream(gw: &TestGateway, body: &str, expect: &Expect) -> StreamSummary {
    let r = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    check_stream(&r.body, expect)
        .unwrap_or_else(|e| panic!("non-conformant stream: {e}\n{}", r.text()))
}

#[tokio::test]
async fn a_python_list_streams_as_native_calls_in_any_pieces() {
    let mut first: Option<StreamSummary> = None;
    for piece in [1, 3, 7, 400] {
        let mock = model(TWO_CALLS, piece).await;
        let gw = python_gateway(&mock, "").await;
        let s = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
        let c = s.choice();
        assert_eq!(c.calls.len(), 2, "pieces of {piece}: {c:?}");
        assert_eq!(c.calls[0].name, "GetWeather");
        assert_eq!(
            c.calls[0].args(),
            json!({"location": "Paris, France", "unit": "celsius"})
        );
        assert_eq!(c.calls[1].name, "BookRestaurant");
        assert_eq!(
            c.calls[1].args(),
            json!({"restaurantName": "Chez \"Paul\"", "date": "2025-05-15", "time": "19:00", "numberOfPeople": 4})
        );
        assert_eq!(
            c.content,
            "I'll check the weather and book the table.\n\nBoth are on their way."
        );
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        let s = s.without_ids();
        match &first {
            None => first = Some(s),
            Some(first) => assert_eq!(&s, first, "pieces of {piece}"),
        }
        // The instructions ask for the list, with each tool's example.
        let system = mock.last().json()["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            system.contains(
                "[ToolName(parameter=\"first value\"), ToolName(parameter=\"second value\")]"
            ),
            "{system}"
        );
        assert!(
            system.contains("[GetWeather(location=\"San Francisco, CA\", unit=\"celsius\")]"),
            "{system}"
        );
    }

    let mock = model(TWO_CALLS, 5).await;
    let gw = python_gateway(&mock, "").await;
    let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
    let v = r.json();
    check_completion(&v).unwrap_or_else(|e| panic!("{e}\n{v:#}"));
    let message = &v["choices"][0]["message"];
    assert_eq!(message["tool_calls"].as_array().unwrap().len(), 2, "{v:#}");
    assert_eq!(
        message["tool_calls"][1]["function"]["name"],
        "BookRestaurant"
    );
}

/// Brackets in prose, code and links are not calls: the answer is the
/// model's text, byte for byte.
#[tokio::test]
async fn brackets_that_are_no_call_list_stay_text() {
    let reply = "See [1] and [the docs](https://example.com/a_[b]).\n\n```python\nxs = [GetWeather, 2][0]\n```\n[GetTime(zone=\"UTC\")] is not a tool here.";
    let mock = model(reply, 2).await;
    let gw = python_gateway(&mock, "").await;
    let s = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert!(c.calls.is_empty(), "{c:?}");
    assert_eq!(c.content, reply);
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
}

/// A call the schema refuses, and one that is no Python literal, fail the
/// reply under `on_invalid = "error"` (the error names the tool and holds
/// what the model wrote); under `on_invalid = "text"` they are shown as
/// written.
#[tokio::test]
async fn a_malformed_or_invalid_python_call_is_an_invalid_call() {
    for (reply, raw, says) in [
        (
            "Checking.\n[GetWeather(city=\"Paris\")]",
            "[GetWeather(city=\"Paris\")]",
            "schema",
        ),
        (
            "Checking.\n[GetWeather(location=Paris)]",
            "[GetWeather(location=Paris)]",
            "not a name",
        ),
    ] {
        let mock = model(reply, 4).await;
        let gw = python_gateway(&mock, "on_invalid = \"error\"").await;
        let s = stream(&gw, &chat(true, json!({})), &Expect::error()).await;
        let error = s.error.as_ref().expect("an error event");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("GetWeather") && message.contains(says),
            "{message}"
        );
        let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
        assert_eq!(r.status, 502, "{}", r.text());
        assert!(r.text().contains("GetWeather"), "{}", r.text());

        let mock = model(reply, 4).await;
        let gw = python_gateway(&mock, "on_invalid = \"text\"").await;
        let s = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
        let c = s.choice();
        assert!(c.calls.is_empty(), "{c:?}");
        assert!(c.content.ends_with(raw), "{:?}", c.content);
    }
}

/// A call the model wrote as a Python list is repaired by the fallback
/// model like any other syntax's.
#[tokio::test]
async fn a_broken_python_call_goes_to_the_fallback_model() {
    let fallback =
        Mock::start(|_| Reply::json(&fallback_weather_call(r#"{"location": "Paris"}"#, 5, 3)))
            .await;
    let mock = model("On it. [GetWeather(location=Paris)]", 3).await;
    let gw = TestConfig::new()
        .up(
            &mock.url(),
            "[providers.tools]\nmode = \"natural\"\nsyntax = \"python\"\non_invalid = \"fallback\"\nfallback = \"small/small\"\n",
        )
        .provider("small", &fallback.url(), "[\"small\"]", "")
        .start()
        .await;
    let s = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert_eq!(c.calls.len(), 1, "{c:?}");
    assert_eq!(c.calls[0].args(), json!({"location": "Paris"}));
    let asked = fallback.last().json().to_string();
    assert!(asked.contains("GetWeather(location=Paris)"), "{asked}");
}

/// The calls of an assistant message go back to the model as one list,
/// in the syntax it was asked to write.
#[tokio::test]
async fn history_is_written_back_as_one_python_list() {
    let mock = model("Done.", 10).await;
    let gw = python_gateway(&mock, "").await;
    let body = json!({
        "model": UP_MODEL,
        "tools": [seed_get_weather(), seed_book_restaurant()],
        "messages": [
            {"role": "user", "content": "Weather in Paris and a table."},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\": \"Paris\", \"unit\": null}"}},
                {"id": "b", "type": "function", "function": {"name": "BookRestaurant", "arguments": "{\"restaurantName\": \"Chez Paul\", \"numberOfPeople\": 4, \"vip\": true}"}}
            ]},
            {"role": "tool", "tool_call_id": "a", "content": "18 degrees"},
            {"role": "tool", "tool_call_id": "b", "content": "booked"}
        ]
    });
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = mock.last().json();
    let assistant = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the assistant turn")["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        assistant,
        "Checking.\n\n[GetWeather(location=\"Paris\", unit=None), BookRestaurant(restaurantName=\"Chez Paul\", numberOfPeople=4, vip=True)]"
    );
}

/// `constrain = "gbnf"`: the grammar is lazy, triggered by a list's
/// opening bracket and a declared name, and its calls are keyword calls.
#[tokio::test]
async fn a_constrained_python_request_carries_the_list_grammar() {
    let mock = model("[GetWeather(location=\"Oslo\")]", 4).await;
    let gw = python_gateway(&mock, "constrain = \"gbnf\"").await;
    let s = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    assert_eq!(s.choice().calls.len(), 1);
    let sent = mock.last().json();
    assert_eq!(sent["grammar_lazy"], true);
    let triggers: Vec<&str> = sent["grammar_triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["value"].as_str().unwrap())
        .collect();
    assert_eq!(triggers, ["[GetWeather(", "[BookRestaurant("]);
    let grammar = sent["grammar"].as_str().unwrap();
    assert!(grammar.contains(r#""GetWeather(""#), "{grammar}");
    assert!(grammar.contains(r#""location=""#), "{grammar}");
    assert!(
        grammar.contains(r#"py-bool ::= "True" | "False""#),
        "{grammar}"
    );
}

#[test]
fn to_natural_refuses_the_python_syntax() {
    let toml = TestConfig::new()
        .up(
            "http://127.0.0.1:9",
            "[providers.tools]\nmode = \"to_natural\"\nsyntax = \"python\"\n",
        )
        .toml();
    let err = toolgate::config::Config::from_toml(&toml).expect_err("refused");
    assert!(
        err.to_string().contains(
            "\"python\" is a natural-mode syntax; to_natural writes tag, tool_call or bracket"
        ),
        "{err}"
    );
}

/// `toolgate parse --syntax python` and `toolgate render` with a python
/// provider, offline through the real binary.
#[test]
fn the_binary_parses_and_renders_the_python_syntax() {
    use crate::common::binary::run_with_input;
    use std::process::Command;
    const BIN: &str = env!("CARGO_BIN_EXE_toolgate");
    let dir = std::env::temp_dir().join(format!("toolgate-python-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        json!([seed_get_weather(), seed_book_restaurant()]).to_string(),
    )
    .unwrap();
    let run = |args: &[&str], input: &str| {
        let out = run_with_input(Command::new(BIN).args(args), input.as_bytes());
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let parsed = run(
        &[
            "parse",
            "--syntax",
            "python",
            "--tools",
            tools.to_str().unwrap(),
        ],
        TWO_CALLS,
    );
    let calls = parsed["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{parsed:#}");
    assert_eq!(
        calls[0]["function"]["arguments"],
        "{\"location\":\"Paris, France\",\"unit\":\"celsius\"}"
    );
    assert_eq!(calls[1]["function"]["name"], "BookRestaurant");

    let config = dir.join("python.toml");
    std::fs::write(
        &config,
        "[[providers]]\nname = \"local\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"m\"]\n[providers.tools]\nmode = \"natural\"\nsyntax = \"python\"\n",
    )
    .unwrap();
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [seed_get_weather()]});
    let rendered = run(
        &[
            "render",
            "--config",
            config.to_str().unwrap(),
            "--provider",
            "local",
        ],
        &request.to_string(),
    );
    let system = rendered["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("Example:\n[GetWeather(location=\"San Francisco, CA\", unit=\"celsius\")]"),
        "{system}"
    );
}
