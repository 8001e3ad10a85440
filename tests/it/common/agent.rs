//! Scripted models for gateway-tool tests: native-call and text streams as
//! an upstream sends them, a provider offering gateway tools, and what the
//! upstream was sent back.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Recorded, Reply};

pub const USAGE: &str = r#"{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}"#;

pub fn chunk(choices: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices})
    )
}

/// An upstream stream making native calls `(name, arguments)`, one per index.
pub fn calls_sse(calls: &[(&str, &str)]) -> String {
    text_then_calls_sse("", calls)
}

/// An upstream stream writing `text`, then making native calls.
pub fn text_then_calls_sse(text: &str, calls: &[(&str, &str)]) -> String {
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::from(text)
    };
    let mut out = chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": null}]),
    );
    for (i, (name, args)) in calls.iter().enumerate() {
        out.push_str(&chunk(json!([{"index": 0, "delta": {"tool_calls": [{"index": i, "id": format!("up_call_{i}"), "type": "function", "function": {"name": name, "arguments": ""}}]}, "finish_reason": null}])));
        out.push_str(&chunk(json!([{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": args}}]}, "finish_reason": null}])));
    }
    out.push_str(&chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
    ));
    out.push_str(&format!(
        "data: {{\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{USAGE}}}\n\n"
    ));
    out.push_str("data: [DONE]\n\n");
    out
}

pub fn text_sse(text: &str) -> String {
    let usage: Value = serde_json::from_str(USAGE).unwrap();
    super::upstream_sse(&[text], Some(&usage))
}

pub fn sse(body: String) -> Reply {
    Reply::sse(&[&body], Duration::ZERO)
}

pub fn messages(r: &Recorded) -> Vec<Value> {
    r.json()["messages"].as_array().unwrap().clone()
}

pub fn last_role(r: &Recorded) -> String {
    messages(r).last().unwrap()["role"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub fn provider(url: &str, mode: &str, tools: &[&str], extra: &str) -> String {
    let list: Vec<String> = tools.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[[providers]]\nname = \"up\"\nbase_url = \"{url}\"\nmodels = [\"m\"]\n[providers.tools]\nmode = \"{mode}\"\ngateway_tools = [{}]\n{extra}\n",
        list.join(", ")
    )
}

pub fn stream_request(extra: Value) -> String {
    let mut body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body.to_string()
}
