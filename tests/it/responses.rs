//! `/v1/responses` in front of Chat Completions providers: the request is
//! translated, answered in every tool mode (and with gateway tools), and
//! written back as a Responses stream or response object. Every stream goes
//! through the conformance checker's Responses rules (23-24).

use crate::common;
use crate::conformance;

use std::time::Duration;

use common::agent::{calls_sse, chunk, sse, text_sse};
use common::{Mock, Reply, TestConfig, TestGateway, demo_gateway, post};
use conformance::responses::check_responses;
use serde_json::{Value, json};

const WEATHER: &str = r#"{"type": "function", "name": "GetWeather", "description": "Weather now", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}"#;

fn weather() -> Value {
    serde_json::from_str(WEATHER).unwrap()
}

fn upstream(url: &str, mode: &str, extra: &str) -> String {
    TestConfig::new()
        .provider(
            "up",
            url,
            "[\"m\"]",
            &format!("{extra}\n[providers.tools]\nmode = \"{mode}\""),
        )
        .toml()
}

#[tokio::test]
async fn natural_mode_streams_a_function_call_item() {
    let gw = demo_gateway().await;
    let body = json!({"model": "demo", "stream": true, "input": "What is the weather in Paris?",
        "tools": [weather()], "instructions": "Be brief."});
    let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_responses(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.status, "completed");
    assert_eq!(s.calls.len(), 1, "{}", r.text());
    assert_eq!(s.calls[0].name, "GetWeather");
    assert!(s.calls[0].id.starts_with("call_"));
    assert!(s.calls[0].args()["location"].is_string());
    assert_eq!(s.text, "I'll use GetWeather for that.\n\n");
    assert_eq!(s.response["instructions"], "Be brief.");
    assert_eq!(s.response["tools"][0]["name"], "GetWeather");
    assert!(s.response["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn gateway_tools_are_mcp_call_items_after_their_listing() {
    let gw = demo_gateway().await;
    let body = json!({"model": "demo-agent", "stream": true,
        "input": "Ask the calculator: what is `(2 + 3) * 7`?"});
    let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
    let s = check_responses(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let output = s.response["output"].as_array().unwrap();
    let types: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["mcp_list_tools", "message", "mcp_call", "message"]);
    assert_eq!(output[0]["server_label"], "builtin");
    let listed: Vec<&str> = output[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["clock", "calculator"]);
    assert_eq!(s.gateway.len(), 1);
    assert_eq!(s.gateway[0]["name"], "calculator");
    assert_eq!(s.gateway[0]["output"], "35");
    assert_eq!(s.gateway[0]["status"], "completed");
    assert!(s.text.ends_with("calculator returned: 35"), "{}", s.text);
    assert!(s.calls.is_empty());

    // The same answer, not streamed, is the same response object.
    let body =
        json!({"model": "demo-agent", "input": "Ask the calculator: what is `(2 + 3) * 7`?"});
    let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    let types: Vec<&str> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["mcp_list_tools", "message", "mcp_call", "message"]);
    assert_eq!(v["output"][2]["output"], "35");
}

#[tokio::test]
async fn the_chat_upstream_gets_the_translated_history_and_native_calls_come_back() {
    let mock = Mock::start(|_| sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))).await;
    let gw = TestGateway::start(&upstream(&mock.url(), "passthrough", "")).await;
    let body = json!({"model": "m", "stream": true, "tools": [weather()], "max_output_tokens": 99,
    "input": [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c0", "name": "GetWeather", "arguments": "{\"location\":\"Rome\"}"},
        {"type": "function_call_output", "call_id": "c0", "output": "hot"},
        {"role": "user", "content": [{"type": "input_text", "text": "And Paris?"}]},
    ]});
    let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
    let s = check_responses(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.calls.len(), 1);
    assert!(s.calls[0].id.starts_with("call_"), "{:?}", s.calls);
    assert_eq!(s.calls[0].args(), json!({"location": "Paris"}));
    assert_eq!(s.response["usage"]["total_tokens"], 15);
    assert_eq!(s.response["max_output_tokens"], 99);

    let sent = mock.last();
    assert!(sent.uri.ends_with("/chat/completions"), "{}", sent.uri);
    let sent = sent.json();
    assert_eq!(sent["max_tokens"], 99);
    assert_eq!(sent["tools"][0]["function"]["name"], "GetWeather", "{sent}");
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\":\"Rome\"}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "hot"},
            {"role": "user", "content": [{"type": "text", "text": "And Paris?"}]},
        ])
    );
}

#[tokio::test]
async fn to_natural_writes_calls_into_the_message_text() {
    let mock = Mock::start(|_| sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))).await;
    let gw = TestGateway::start(&upstream(&mock.url(), "to_natural", "")).await;
    let body =
        json!({"model": "m", "stream": true, "tools": [weather()], "input": "Weather in Paris?"});
    let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
    let s = check_responses(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert!(s.calls.is_empty());
    assert!(
        s.text.contains(
            "<tool_call name=\"GetWeather\">\n{\n  \"location\": \"Paris\"\n}\n</tool_call>"
        ),
        "{}",
        s.text
    );
}

#[tokio::test]
async fn a_length_finish_is_an_incomplete_response() {
    let mut body = chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": "Once upon"}, "finish_reason": null}]),
    );
    body.push_str(&chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": "length"}]),
    ));
    body.push_str("data: [DONE]\n\n");
    let mock = Mock::start(move |_| Reply::sse(&[&body], Duration::ZERO)).await;
    let gw = TestGateway::start(&upstream(&mock.url(), "passthrough", "")).await;
    let request = json!({"model": "m", "stream": true, "input": "A story", "max_output_tokens": 2});
    let r = post(&gw.url("/v1/responses"), &request.to_string()).await;
    let s = check_responses(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.status, "incomplete");
    assert_eq!(
        s.response["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(s.text, "Once upon");
}

#[tokio::test]
async fn what_cannot_be_served_is_a_400_naming_the_field() {
    let mock = Mock::start(|_| sse(text_sse("never"))).await;
    let gw = TestGateway::start(&upstream(&mock.url(), "natural", "")).await;
    let cases = [
        (
            json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "file_search"}]}),
            "tools[0].type",
        ),
        (json!({"model": "m", "input": 7}), "input"),
        // Wrong types are refused, never read as the default.
        (
            json!({"model": "m", "input": "x", "stream": "yes"}),
            "stream",
        ),
        (json!({"model": "m", "input": "x", "store": "no"}), "store"),
        (
            json!({"model": "m", "input": "x", "metadata": 0}),
            "metadata",
        ),
        (
            json!({"model": "m", "input": "x", "max_output_tokens": "10"}),
            "max_output_tokens",
        ),
    ];
    for (body, param) in cases {
        let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["param"], param, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    assert_eq!(mock.count(), 0);
}

#[tokio::test]
async fn a_responses_provider_gets_the_request_untouched() {
    let answer =
        json!({"id": "resp_up", "object": "response", "status": "completed", "output": []});
    let reply = answer.to_string();
    let mock = Mock::start(move |_| Reply::json(&reply)).await;
    let gw = TestGateway::start(&upstream(&mock.url(), "passthrough", "api = \"responses\"")).await;
    let body = r#"{"model": "m",   "input": "hi", "previous_response_id": "resp_0"}"#;
    let r = post(&gw.url("/v1/responses"), body).await;
    assert_eq!(r.json(), answer);
    let sent = mock.last();
    assert!(sent.uri.ends_with("/responses"), "{}", sent.uri);
    assert_eq!(&sent.body[..], body.as_bytes());
}

/// What a Responses upstream streams: `text`, then one function call item
/// per `(name, arguments)`, then `response.completed` with usage.
fn responses_sse(text: &str, calls: &[(&str, &str)]) -> String {
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": "resp_up", "model": "m", "created_at": 9, "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_up"}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_up", "output_index": 0, "delta": text}),
    ];
    for (i, (name, args)) in calls.iter().enumerate() {
        let id = format!("fc_up_{i}");
        events.push(json!({"type": "response.output_item.added", "output_index": i + 1,
            "item": {"type": "function_call", "id": id, "call_id": format!("call_up_{i}"), "name": name, "arguments": ""}}));
        events.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": i + 1, "delta": args}));
    }
    events.push(
        json!({"type": "response.completed", "response": {"status": "completed",
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}}),
    );
    events
        .iter()
        .enumerate()
        .map(|(n, e)| {
            let mut e = e.clone();
            e["sequence_number"] = json!(n);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn chat_requests_reach_a_responses_provider_translated() {
    let mock = Mock::start(|_| {
        Reply::sse(
            &[&responses_sse(
                "Checking.",
                &[("GetWeather", r#"{"location":"Paris"}"#)],
            )],
            Duration::ZERO,
        )
    })
    .await;
    let gw = TestGateway::start(&upstream(&mock.url(), "passthrough", "api = \"responses\"")).await;
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Brief."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "GetWeather", "parameters": {"type": "object"}}}]});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    let s = conformance::check_stream(&r.body, &conformance::Expect::usage())
        .unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.content, "Checking.");
    assert_eq!(choice.calls[0].name, "GetWeather");
    assert_eq!(choice.calls[0].args(), json!({"location": "Paris"}));
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(s.usage.as_ref().unwrap()["total_tokens"], 15);

    let sent = mock.last();
    assert!(sent.uri.ends_with("/responses"), "{}", sent.uri);
    let sent = sent.json();
    assert_eq!(
        sent["input"],
        json!([
            {"type": "message", "role": "system", "content": "Brief."},
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
        ])
    );
    assert_eq!(sent["tools"][0]["name"], "GetWeather");
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["store"], false);

    // A chat field the Responses API lacks is named, and nothing is sent.
    let before = mock.count();
    let body =
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["\n"]});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "stop");
    assert_eq!(mock.count(), before);
}

#[tokio::test]
async fn a_responses_provider_with_gateway_tools_continues_after_the_tool() {
    let mock = Mock::start(|r| {
        let input = r.json()["input"].clone();
        let answered = input
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["type"] == "function_call_output");
        let body = if answered {
            responses_sse("It is 35.", &[])
        } else {
            responses_sse("", &[("calculator", r#"{"expression":"5*7"}"#)])
        };
        Reply::sse(&[&body], Duration::ZERO)
    })
    .await;
    let config = format!(
        "{}gateway_tools = [\"builtin:calculator\"]\n",
        upstream(&mock.url(), "passthrough", "api = \"responses\"")
    );
    let gw = TestGateway::start(&config).await;
    let body = json!({"model": "m", "stream": true, "input": "5 times 7?"});
    let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
    let s = check_responses(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.gateway[0]["output"], "35");
    assert_eq!(s.text, "It is 35.");
    assert_eq!(s.response["usage"]["total_tokens"], 30, "two rounds summed");
    assert_eq!(mock.count(), 2);
    let second = mock.last().json();
    let items = second["input"].as_array().unwrap();
    assert_eq!(items[1]["type"], "function_call");
    assert_eq!(items[1]["name"], "calculator");
    assert_eq!(items[2]["type"], "function_call_output");
    assert_eq!(items[2]["output"], "35");
}

#[tokio::test]
async fn previous_response_id_continues_a_stored_conversation() {
    let mock = Mock::start(|r| {
        let messages = r.json()["messages"].as_array().unwrap().clone();
        if messages.last().unwrap()["role"] == "tool" {
            sse(text_sse("Sunny in Paris."))
        } else {
            sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))
        }
    })
    .await;
    let config = upstream(&mock.url(), "passthrough", "").replace(
        "[[providers]]",
        "[store]\nurl = \"sqlite::memory:\"\n[[providers]]",
    );
    let gw = TestGateway::start(&config).await;
    let first = json!({"model": "m", "input": "Weather in Paris?", "instructions": "Be brief.", "tools": [weather()]});
    let r = post(&gw.url("/v1/responses"), &first.to_string()).await;
    let first = r.json();
    assert_eq!(first["store"], true);
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    let id = first["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Only the new item is sent; the gateway restores the rest.
    let second = json!({"model": "m", "previous_response_id": id, "tools": [weather()],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "21 C"}]});
    let r = post(&gw.url("/v1/responses"), &second.to_string()).await;
    let v = r.json();
    assert_eq!(v["previous_response_id"], id, "{v}");
    assert_eq!(v["output"][0]["content"][0]["text"], "Sunny in Paris.");
    let sent = mock.last().json();
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // New instructions are not carried over: none were sent this time.
    assert_eq!(roles, ["user", "assistant", "tool"], "{sent}");
    assert_eq!(sent["messages"][1]["tool_calls"][0]["id"], call["call_id"]);

    // Stored responses can be read and deleted.
    let got = common::get(&gw.url(&format!("/v1/responses/{id}"))).await;
    assert_eq!(got.json()["id"], id);
    let request = http::Request::delete(gw.url(&format!("/v1/responses/{id}")))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(common::send(request).await.json()["deleted"], true);
    assert_eq!(
        common::get(&gw.url(&format!("/v1/responses/{id}")))
            .await
            .status,
        404
    );
    let unknown = json!({"model": "m", "previous_response_id": "resp_nope", "input": "x"});
    let r = post(&gw.url("/v1/responses"), &unknown.to_string()).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "previous_response_id");
}

/// A client continuing at once reads its own writes: the stored response is
/// found the moment the answer has been read (streamed or whole), and a
/// delete sent at once is not overtaken by the response's own write.
#[tokio::test]
async fn a_response_is_continued_read_and_deleted_the_moment_it_is_answered() {
    let mock = Mock::start(|_| sse(text_sse("Noted."))).await;
    let dir = std::env::temp_dir().join(format!("toolgate-ryw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = upstream(&mock.url(), "passthrough", "").replace(
        "[[providers]]",
        &format!(
            "[store]\nurl = \"sqlite://{}/t.db\"\n[[providers]]",
            dir.display()
        ),
    );
    let gw = TestGateway::start(&config).await;
    let url = gw.url("/v1/responses");
    let mut missed = Vec::new();
    for i in 0..20 {
        let stream = i % 2 == 0;
        let first = json!({"model": "m", "input": format!("note {i}"), "stream": stream});
        let r = post(&url, &first.to_string()).await;
        let id = if stream {
            check_responses(&r.body).unwrap().response["id"].clone()
        } else {
            r.json()["id"].clone()
        };
        let id = id.as_str().unwrap().to_owned();
        let next = json!({"model": "m", "input": "and then?", "previous_response_id": id});
        let r = post(&url, &next.to_string()).await;
        if r.status != 200 {
            missed.push(format!("continue {i}: {}", r.text()));
        }
        let got = common::get(&gw.url(&format!("/v1/responses/{id}"))).await;
        if got.status != 200 {
            missed.push(format!("get {i}: {}", got.text()));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));

    let r = post(
        &url,
        &json!({"model": "m", "input": "forget me"}).to_string(),
    )
    .await;
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let request = http::Request::delete(gw.url(&format!("/v1/responses/{id}")))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(common::send(request).await.json()["deleted"], true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = common::get(&gw.url(&format!("/v1/responses/{id}"))).await;
    assert_eq!(got.status, 404, "the delete stands: {}", got.text());
}
