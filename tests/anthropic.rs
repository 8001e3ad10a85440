//! `/v1/messages` in front of Chat Completions providers: the Anthropic
//! request is translated, answered in every tool mode (the embedded demo's
//! natural-mode model and gateway tools), and written back as Anthropic's
//! event stream or message. Every stream passes the conformance checker's
//! Messages rules.

mod common;
mod conformance;

use common::{TestGateway, post};
use conformance::messages::check_messages;
use serde_json::{Value, json};

fn weather() -> Value {
    json!({"name": "GetWeather", "description": "Weather now",
        "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}})
}

async fn demo() -> TestGateway {
    TestGateway::start(toolgate::config::EMBEDDED_DEFAULT).await
}

fn ask() -> Value {
    json!({"model": "demo", "max_tokens": 256, "system": "Be brief.",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [weather()]})
}

#[tokio::test]
async fn natural_mode_streams_a_tool_use_block_and_the_loop_ends() {
    let gw = demo().await;
    let mut body = ask();
    body["stream"] = json!(true);
    let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_messages(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.message["stop_reason"], "tool_use", "{}", r.text());
    assert_eq!(s.calls.len(), 1, "{}", r.text());
    assert_eq!(s.calls[0].name, "GetWeather");
    assert!(s.calls[0].id.starts_with("toolu_"));
    assert!(s.calls[0].args()["location"].is_string());
    assert!(s.message["usage"]["input_tokens"].as_u64().unwrap() > 0);

    // The client runs the tool and sends its result back: the answer ends.
    let mut next = ask();
    next["stream"] = json!(true);
    let history = next["messages"].as_array_mut().unwrap();
    history.push(json!({"role": "assistant", "content": s.message["content"]}));
    history.push(json!({"role": "user", "content": [{"type": "tool_result",
        "tool_use_id": s.calls[0].id, "content": "Sunny, 24 °C"}]}));
    let r = post(&gw.url("/v1/messages"), &next.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_messages(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.message["stop_reason"], "end_turn", "{}", r.text());
    assert!(s.calls.is_empty());
    assert!(!s.text.is_empty());
}

#[tokio::test]
async fn natural_mode_message_object() {
    let gw = demo().await;
    let r = post(&gw.url("/v1/messages"), &ask().to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = r.json();
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert_eq!(m["model"], "demo");
    assert_eq!(m["stop_reason"], "tool_use");
    let content = m["content"].as_array().unwrap();
    let call = content
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool_use block");
    assert!(call["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(call["name"], "GetWeather");
    assert!(call["input"]["location"].is_string(), "{m}");
    assert!(m["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn gateway_tools_are_mcp_blocks() {
    let gw = demo().await;
    let body = json!({"model": "demo-agent", "max_tokens": 256, "stream": true,
        "messages": [{"role": "user", "content": "Ask the calculator: what is `(2 + 3) * 7`?"}]});
    let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
    let s = check_messages(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let types: Vec<&str> = s.message["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"mcp_tool_use"), "{types:?}");
    assert!(types.contains(&"mcp_tool_result"), "{types:?}");
    let result = s.message["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "mcp_tool_result")
        .unwrap();
    assert_eq!(result["content"][0]["text"], "35");
    assert!(s.text.ends_with("calculator returned: 35"), "{}", s.text);
    assert_eq!(s.message["stop_reason"], "end_turn");
}

#[tokio::test]
async fn errors_take_anthropic_shape() {
    let gw = demo().await;
    let mut body = ask();
    body["container"] = json!("c1");
    let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("container"),
        "{e}"
    );

    let mut body = ask();
    body["model"] = json!("no-such-model");
    let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");

    let r = post(&gw.url("/v1/messages/count_tokens"), &ask().to_string()).await;
    assert_eq!(r.status, 501);
    assert_eq!(r.json()["type"], "error");
}
