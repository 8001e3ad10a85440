//! `/v1/messages` in front of Chat Completions providers: the Anthropic
//! request is translated, answered in every tool mode (the embedded demo's
//! natural-mode model and gateway tools), and written back as Anthropic's
//! event stream or message. Every stream passes the conformance checker's
//! Messages rules.

use crate::common;
use crate::conformance;

use bytes::Bytes;
use common::{Mock, Reply, TestGateway, demo_gateway, post, provider_toml, send};
use conformance::messages::check_messages;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};

fn weather() -> Value {
    json!({"name": "GetWeather", "description": "Weather now",
        "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}})
}

fn ask() -> Value {
    json!({"model": "demo", "max_tokens": 256, "system": "Be brief.",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [weather()]})
}

#[tokio::test]
async fn natural_mode_streams_a_tool_use_block_and_the_loop_ends() {
    let gw = demo_gateway().await;
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
    let gw = demo_gateway().await;
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
    let gw = demo_gateway().await;
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
    let gw = demo_gateway().await;
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

    // count_tokens: a tokenizer-free estimate, never a 501.
    let r = post(&gw.url("/v1/messages/count_tokens"), &ask().to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let tokens = r.json()["input_tokens"].as_u64().unwrap();
    let longer = {
        let mut body = ask();
        body["messages"][0]["content"] = json!("x".repeat(4000));
        post(&gw.url("/v1/messages/count_tokens"), &body.to_string())
            .await
            .json()["input_tokens"]
            .as_u64()
            .unwrap()
    };
    assert!(
        tokens >= 1 && longer >= 1000 && longer > tokens,
        "{tokens} {longer}"
    );
    // Wrong types are refused in the same shape, never read as a default.
    for (field, value) in [
        ("max_tokens", json!(0)),
        ("max_tokens", json!("10")),
        ("messages", json!([])),
        ("stream", json!("yes")),
    ] {
        let mut body = ask();
        body[field] = value.clone();
        let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
        assert_eq!(r.status, 400, "{field}: {value}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["type"], "invalid_request_error");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{field}`")), "{e}");
    }
}

#[tokio::test]
async fn x_api_key_is_the_inbound_key_and_never_forwarded() {
    // SAFETY: the variable name is unique to this test.
    unsafe { std::env::set_var("TOOLGATE_TEST_ANTHROPIC_KEYS", "key-one") };
    let mock = Mock::start(|_| {
        Reply::json(
            r#"{"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
              "tool_calls": [{"id": "call_x1", "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\":\"Oslo\"}"}}]},
              "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}"#,
        )
    })
    .await;
    let toml = format!(
        "[server.auth]\napi_keys_env = \"TOOLGATE_TEST_ANTHROPIC_KEYS\"\n{}",
        provider_toml("up", &mock.url(), "[\"m\"]", "")
    );
    let gw = TestGateway::start(&toml).await;
    let mut body = ask();
    body["model"] = json!("m");
    body["metadata"] = json!({"user_id": "u-7"});
    let with = |key: Option<&str>| {
        let mut b =
            Request::post(gw.url("/v1/messages")).header("content-type", "application/json");
        if let Some(k) = key {
            b = b.header("x-api-key", k);
        }
        b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
    };
    let r = send(with(Some("nope"))).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    assert_eq!(mock.count(), 0);

    let r = send(with(Some("key-one"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = mock.last();
    assert!(
        seen.headers.get("x-api-key").is_none(),
        "the inbound key must not go upstream"
    );
    let sent: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(sent["user"], "u-7");
    assert_eq!(sent["max_tokens"], 256);
    assert_eq!(
        sent["tools"][0]["function"]["parameters"],
        weather()["input_schema"]
    );
    let mut content = r.json()["content"].clone();
    let id = content[0]["id"].take();
    assert!(id.as_str().unwrap().starts_with("toolu_"), "{id}");
    assert_eq!(
        content,
        json!([{"type": "tool_use", "id": null, "name": "GetWeather", "input": {"location": "Oslo"}}])
    );
    assert_eq!(r.json()["stop_reason"], "tool_use");
    assert_eq!(
        r.json()["usage"],
        json!({"input_tokens": 11, "output_tokens": 4})
    );
}

#[tokio::test]
async fn an_anthropic_provider_gets_messages_untouched_with_its_key_as_x_api_key() {
    // SAFETY: the variable name is unique to this test.
    unsafe { std::env::set_var("TOOLGATE_TEST_ANTHROPIC_UPSTREAM_KEY", "sk-ant-up") };
    let mock = Mock::start(|_| {
        Reply::json(r#"{"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-x", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": null, "usage": {"input_tokens": 3, "output_tokens": 1}}"#)
    })
    .await;
    let toml = provider_toml(
        "claude",
        &mock.url(),
        "[\"claude-x\"]",
        "api = \"anthropic\"\napi_key_env = \"TOOLGATE_TEST_ANTHROPIC_UPSTREAM_KEY\"",
    );
    let gw = TestGateway::start(&toml).await;
    // Fields toolgate could not translate pass untouched to Anthropic itself.
    let body = json!({"model": "claude-x", "max_tokens": 5, "container": "c1",
        "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["id"], "msg_up");
    let seen = mock.last();
    assert_eq!(seen.uri, "/v1/messages");
    assert_eq!(seen.json(), body);
    assert_eq!(seen.headers["x-api-key"], "sk-ant-up");
    assert!(seen.headers.get("authorization").is_none());

    let chat = json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw.url("/v1/chat/completions"), &chat.to_string()).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("api = \\\"anthropic\\\""), "{}", r.text());
    assert_eq!(mock.count(), 1);
}

#[test]
fn an_anthropic_provider_takes_no_tool_mode_but_passthrough() {
    let toml = provider_toml(
        "claude",
        "http://127.0.0.1:9",
        "[\"claude-x\"]",
        "api = \"anthropic\"\n[providers.tools]\nmode = \"natural\"",
    );
    let e = toolgate::config::Config::from_toml(&toml).unwrap_err();
    assert!(e.to_string().contains("api"), "{e}");
}

#[tokio::test]
async fn an_unreachable_upstream_is_an_api_error() {
    let toml = provider_toml("up", "http://127.0.0.1:9", "[\"m\"]", "");
    let gw = TestGateway::start(&toml).await;
    let mut body = ask();
    body["model"] = json!("m");
    body["stream"] = json!(true);
    let r = post(&gw.url("/v1/messages"), &body.to_string()).await;
    // The upstream fails before the answer starts: a status, not a stream.
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "api_error");
}
