//! to_natural mode: native calls rendered as text (streamed and whole), a
//! natural-text history parsed back into native messages, and round trips
//! between the two, property-tested.

use crate::common;
use crate::conformance;

use std::time::Duration;

use bytes::BytesMut;
use common::*;
use conformance::{Expect, check_stream};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate::natural::parser::{Event, Parser, ParserOptions};
use toolgate::natural::syntax::Syntax;
use toolgate::sse::transform::Transform;
use toolgate::to_natural::RenderOptions;
use toolgate::to_natural::history::{self, HistoryOptions};
use toolgate::to_natural::stream::StreamRenderer;

/// A call as (name, arguments).
type NamedArgs = (String, Map<String, Value>);

fn options(syntax: Syntax) -> RenderOptions {
    RenderOptions {
        syntax,
        pretty: true,
        separator: "---".into(),
    }
}

/// An upstream chunk with one choice.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    upstream_chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]))
        .to_string()
}

fn call_start(index: u64, id: &str, name: &str) -> Value {
    json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]})
}

fn call_args(index: u64, fragment: &str) -> Value {
    json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
}

/// Runs upstream event payloads through a renderer; returns the client body.
fn render(events: &[String], syntax: Syntax) -> String {
    let mut r = StreamRenderer::new(options(syntax), true);
    let mut out = BytesMut::new();
    for e in events {
        r.on_event(e.as_bytes(), &mut out);
    }
    r.on_event(b"[DONE]", &mut out);
    String::from_utf8(out.to_vec()).unwrap()
}

fn content_of(body: &str) -> (String, String) {
    let s =
        check_stream(body.as_bytes(), &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let c = &s.choices[&0];
    assert!(c.calls.is_empty(), "no native calls may remain");
    (
        c.content.clone(),
        c.finish_reason.clone().unwrap_or_default(),
    )
}

fn parse(text: &str, syntax: Syntax, names: &[&str]) -> (String, Vec<NamedArgs>) {
    let mut p = Parser::new(
        names.iter().copied(),
        ParserOptions {
            syntax,
            ..ParserOptions::default()
        },
    );
    let mut events = Vec::new();
    p.feed(text, &mut events);
    p.finish(&mut events);
    let mut content = String::new();
    let mut calls = Vec::new();
    for e in events {
        match e {
            Event::Text(t) => content.push_str(&t),
            Event::Call(c) => calls.push((c.name, c.arguments)),
            Event::Invalid(b) => panic!("invalid block {:?}: {}", b.raw, b.reason),
        }
    }
    (content, calls)
}

#[test]
fn one_call_streams_as_a_tool_call_block() {
    let events = vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        chunk(call_start(0, "call_a", "GetWeather"), None),
        chunk(call_args(0, "{\"location\": "), None),
        chunk(call_args(0, "\"Paris\"}"), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let body = render(&events, Syntax::ToolCall);
    let (content, finish) = content_of(&body);
    assert_eq!(
        content,
        "<tool_call name=\"GetWeather\">\n{\n  \"location\": \"Paris\"\n}\n</tool_call>"
    );
    assert_eq!(finish, "stop");
    // The opening tag goes out in the chunk that named the call.
    let second: Value = serde_json::from_str(
        body.split("\n\n")
            .nth(1)
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        second["choices"][0]["delta"]["content"],
        "<tool_call name=\"GetWeather\">\n"
    );
    // Upstream identity is kept.
    assert!(body.contains(UP_ID) && body.contains(UP_FINGERPRINT));
}

/// The chunks of an SSE body, parsed.
fn chunks_of(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[test]
fn borrowed_and_general_paths_write_the_same_chunks() {
    // Single-line chunks of the common shape take the borrowed path; the same
    // chunks pretty-printed over several lines must take the general one.
    // Both must write the same chunks, the upstream's own fields included.
    let mut events = vec![
        chunk(json!({"role": "assistant", "content": "Checking. "}), None),
        chunk(json!({"content": "Both cities."}), None),
        chunk(call_start(0, "call_a", "GetWeather"), None),
        chunk(call_start(1, "call_b", "GetTime"), None),
        chunk(call_args(1, "{\"zone\": \"CET\"}"), None),
        chunk(call_args(0, "{\"location\": "), None),
        chunk(call_args(0, "\"Par\\u00eds\"}"), None),
        chunk(
            json!({"content": null, "tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
            None,
        ),
    ];
    // An extra field, written with an escape the general path would decode:
    // seeing it as written proves the borrowed path copied the fields.
    let mut with_extra: Value = serde_json::from_str(&events[2]).unwrap();
    with_extra["created"] = json!(1_800_000_000u64);
    events[2] = with_extra
        .to_string()
        .replacen('{', r#"{"obfuscation":"x\u0031","#, 1);
    events.push(chunk(json!({}), Some("tool_calls")));
    let multi_line: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string_pretty(&serde_json::from_str::<Value>(e).unwrap()).unwrap())
        .collect();
    let fast = render(&events, Syntax::Tag);
    let general = render(&multi_line, Syntax::Tag);
    assert_eq!(chunks_of(&fast), chunks_of(&general), "{fast}\n{general}");
    assert_eq!(content_of(&fast), content_of(&general));
    assert!(fast.contains(r#""obfuscation":"x\u0031""#) && fast.contains("1800000000"));
    assert!(general.contains(r#""obfuscation":"x1""#));
    // Arguments are JSON text: their escapes are kept as the model wrote them.
    assert!(content_of(&fast).0.contains(r#""Par\u00eds""#), "{fast}");
}

#[test]
fn text_then_parallel_calls_in_one_char_fragments() {
    let args0 = "{\"location\":\"Paris\",\"unit\":\"celsius\"}";
    let args1 = "{\"restaurantName\":\"Chez Paul\",\"numberOfPeople\":4}";
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "Let me check."}),
        None,
    )];
    events.push(chunk(call_start(0, "c0", "GetWeather"), None));
    events.extend(
        args0
            .chars()
            .map(|c| chunk(call_args(0, &c.to_string()), None)),
    );
    events.push(chunk(call_start(1, "c1", "BookRestaurant"), None));
    events.extend(
        args1
            .chars()
            .map(|c| chunk(call_args(1, &c.to_string()), None)),
    );
    events.push(chunk(json!({}), Some("tool_calls")));
    let (content, _) = content_of(&render(&events, Syntax::ToolCall));
    let whole = format!(
        "Let me check.\n\n<tool_call name=\"GetWeather\">\n{}\n</tool_call>\n---\n<tool_call name=\"BookRestaurant\">\n{}\n</tool_call>",
        serde_json::to_string_pretty(&serde_json::from_str::<Value>(args0).unwrap()).unwrap(),
        serde_json::to_string_pretty(&serde_json::from_str::<Value>(args1).unwrap()).unwrap(),
    );
    assert_eq!(content, whole);
}

#[test]
fn interleaved_indexes_are_written_one_after_another() {
    let events = vec![
        chunk(call_start(0, "c0", "A"), None),
        chunk(call_start(1, "c1", "B"), None),
        chunk(call_args(1, "{\"b\":"), None),
        chunk(call_args(0, "{\"a\":"), None),
        chunk(call_args(1, "2}"), None),
        chunk(call_args(0, "1}"), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (content, _) = content_of(&render(&events, Syntax::Tag));
    let (_, calls) = parse(&content, Syntax::Tag, &["A", "B"]);
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].0.as_str(), Value::Object(calls[0].1.clone())),
        ("A", json!({"a": 1}))
    );
    assert_eq!(
        (calls[1].0.as_str(), Value::Object(calls[1].1.clone())),
        ("B", json!({"b": 2}))
    );
}

#[test]
fn no_argument_calls_usage_and_plain_text() {
    let mut usage = upstream_chunk(json!([]));
    usage["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7});
    let events = vec![
        chunk(call_start(0, "c0", "Ping"), None),
        chunk(json!({}), Some("tool_calls")),
        usage.to_string(),
    ];
    let body = render(&events, Syntax::ToolCall);
    let s = check_stream(body.as_bytes(), &Expect::usage()).unwrap();
    assert_eq!(
        s.choices[&0].content,
        "<tool_call name=\"Ping\">\n{}\n</tool_call>"
    );
    assert_eq!(s.usage.unwrap()["total_tokens"], 7);
    // A reply without calls passes through as text with its finish reason.
    let body = render(
        &[
            chunk(json!({"role": "assistant", "content": "Hi"}), None),
            chunk(json!({}), Some("length")),
        ],
        Syntax::Tag,
    );
    assert_eq!(content_of(&body), ("Hi".to_owned(), "length".to_owned()));
}

#[tokio::test]
async fn through_the_gateway_streaming_and_not() {
    let stream_body = {
        let mut s = String::new();
        for e in [
            chunk(json!({"role": "assistant", "content": "Checking."}), None),
            chunk(call_start(0, "c0", "GetWeather"), None),
            chunk(call_args(0, "{\"location\":\"Paris\"}"), None),
            chunk(json!({}), Some("tool_calls")),
        ] {
            s.push_str(&format!("data: {e}\n\n"));
        }
        s.push_str("data: [DONE]\n\n");
        s
    };
    let completion = json!({
        "id": UP_ID, "object": "chat.completion", "created": UP_CREATED, "model": UP_MODEL,
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null, "message": {
            "role": "assistant", "content": "Checking.",
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\":\"Paris\"}"}}]
        }}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    })
    .to_string();
    let mock = Mock::start(move |req| {
        if req.json()["stream"] == true {
            Reply::sse(&[&stream_body], Duration::ZERO)
        } else {
            Reply::json(&completion)
        }
    })
    .await;
    let gw = tools_gateway(&mock, "to_natural", "").await;
    let tools = json!([{"type": "function", "function": {"name": "GetWeather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]);
    let request = |stream: bool| {
        json!({"model": "m", "stream": stream, "tools": tools, "messages": [{"role": "user", "content": "hi"}]}).to_string()
    };
    let expected = "Checking.\n\n<tool_call name=\"GetWeather\">\n{\n  \"location\": \"Paris\"\n}\n</tool_call>";

    let r = post(&gw.url("/v1/chat/completions"), &request(true)).await;
    assert_eq!(
        content_of(&r.text()),
        (expected.to_owned(), "stop".to_owned())
    );
    assert_eq!(
        mock.last().json()["tools"],
        tools,
        "tools go upstream natively"
    );

    let v = post(&gw.url("/v1/chat/completions"), &request(false))
        .await
        .json();
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["content"], expected);
    assert!(choice["message"].get("tool_calls").is_none());
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(v["usage"]["total_tokens"], 3);
}

fn tools_body(messages: Value) -> Vec<u8> {
    json!({
        "model": "m",
        "tools": [
            {"type": "function", "function": {"name": "GetWeather", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "BookRestaurant", "parameters": {"type": "object"}}}
        ],
        "messages": messages,
    })
    .to_string()
    .into_bytes()
}

fn rewrite_history(messages: Value) -> Vec<Value> {
    let opts = HistoryOptions {
        syntax: Syntax::ToolCall,
        max_tool_result_chars: 100,
    };
    let out = history::rewrite(&tools_body(messages), &opts)
        .unwrap()
        .expect("rewritten");
    let v: Value = serde_json::from_slice(&out).unwrap();
    v["messages"].as_array().unwrap().clone()
}

#[test]
fn natural_history_becomes_native_messages() {
    let messages = rewrite_history(json!([
        {"role": "user", "content": "Weather in Paris and a table?"},
        {"role": "assistant", "content": "Sure.\n\n<tool_call name=\"GetWeather\">\n{\"location\": \"Paris\"}\n</tool_call>\n---\n<tool_call name=\"BookRestaurant\">\n{\"restaurantName\": \"Chez Paul\"}\n</tool_call>"},
        {"role": "user", "content": "<tool_response name=\"BookRestaurant\">\nbooked\n</tool_response>\n---\n<tool_response name=\"GetWeather\">\n{\"temp\": 21}\n</tool_response>\nThanks!"}
    ]));
    assert_eq!(messages.len(), 5, "{messages:#?}");
    assert_eq!(messages[1]["content"], "Sure.");
    let calls = messages[1]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["function"]["name"], "GetWeather");
    assert_eq!(
        calls[0]["function"]["arguments"],
        "{\"location\":\"Paris\"}"
    );
    // Responses pair with their calls by name, whatever their order.
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], calls[1]["id"]);
    assert_eq!(messages[2]["content"], "booked");
    assert_eq!(messages[3]["tool_call_id"], calls[0]["id"]);
    assert_eq!(messages[4], json!({"role": "user", "content": "Thanks!"}));
}

#[test]
fn consolidated_messages_and_undeclared_names() {
    let messages = rewrite_history(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Looking.\n<tool_call name=\"GetWeather\">\n{\"location\": \"Oslo\"}\n</tool_call>\n<tool_response name=\"GetWeather\">\nsnow\n</tool_response>\nIt snows. <tool_call name=\"Unknown\">{}</tool_call>"}
    ]));
    assert_eq!(messages.len(), 4, "{messages:#?}");
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "GetWeather"
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["content"], "snow");
    assert_eq!(messages[3]["role"], "assistant");
    assert_eq!(
        messages[3]["content"], "It snows. <tool_call name=\"Unknown\">{}</tool_call>",
        "undeclared names stay text"
    );
    // A history without natural calls is left alone (forwarded byte for byte).
    let opts = HistoryOptions {
        syntax: Syntax::ToolCall,
        max_tool_result_chars: 100,
    };
    assert!(
        history::rewrite(
            &tools_body(json!([{"role": "user", "content": "plain"}])),
            &opts
        )
        .unwrap()
        .is_none()
    );
}

/// A first turn holds no block: it is forwarded without a parse, yet its
/// declarations are still checked, and a block written with JSON escapes,
/// or in bracket syntax, is still found.
#[test]
fn histories_are_read_only_when_they_can_hold_a_block() {
    let opts = |syntax| HistoryOptions {
        syntax,
        max_tool_result_chars: 100,
    };
    let plain = br#"{"model":"m","tools":[{"type":"function","function":{"name":"GetWeather"}}],"messages":[{"role":"user","content":"[1, 2] hi"}]}"#;
    assert!(
        history::rewrite(plain, &opts(Syntax::Tag))
            .unwrap()
            .is_none()
    );
    let broken = br#"{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"}]}"#;
    assert!(
        history::rewrite(broken, &opts(Syntax::Tag)).is_err(),
        "a tool without a function is refused"
    );
    let escaped = br#"{"model":"m","tools":[{"type":"function","function":{"name":"GetWeather"}}],"messages":[{"role":"assistant","content":"\u003cGetWeather>\n{\"location\": \"Oslo\"}\n\u003c/GetWeather>"}]}"#;
    let bracket = br#"{"model":"m","tools":[{"type":"function","function":{"name":"GetWeather"}}],"messages":[{"role":"assistant","content":"[Calling GetWeather]{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Oslo\"}}"}]}"#;
    for (body, syntax) in [(&escaped[..], Syntax::Tag), (&bracket[..], Syntax::Bracket)] {
        let out = history::rewrite(body, &opts(syntax))
            .unwrap()
            .expect("found");
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["messages"][0]["tool_calls"][0]["function"]["name"],
            "GetWeather"
        );
    }
}

#[test]
fn long_tool_responses_are_truncated_visibly() {
    let long = "x".repeat(150);
    let messages = rewrite_history(json!([
        {"role": "assistant", "content": "<tool_call name=\"GetWeather\">\n{}\n</tool_call>"},
        {"role": "user", "content": format!("<tool_response name=\"GetWeather\">\n{long}\n</tool_response>")}
    ]));
    let content = messages[1]["content"].as_str().unwrap();
    assert!(
        content.starts_with(&"x".repeat(100)) && content.ends_with("[... truncated 50 characters]"),
        "{content}"
    );
}

fn arb_args() -> impl Strategy<Value = Map<String, Value>> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z <>{}\\[\\]\"\\\\:,`é😀/-]{0,12}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z]{1,6}", value, 0..5).prop_map(|m| m.into_iter().collect())
}

fn arb_calls() -> impl Strategy<Value = Vec<NamedArgs>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["GetWeather", "BookRestaurant", "Ping"])
                .prop_map(str::to_owned),
            arb_args(),
        ),
        1..4,
    )
}

fn arb_syntax() -> impl Strategy<Value = Syntax> {
    prop::sample::select(vec![Syntax::Tag, Syntax::ToolCall, Syntax::Bracket])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// native → natural (streamed in random fragments, indexes interleaved) → native.
    #[test]
    fn native_to_natural_to_native_keeps_the_calls(calls in arb_calls(), syntax in arb_syntax(), pretty in any::<bool>(), cut in 1usize..9) {
        let mut events = vec![chunk(json!({"role": "assistant", "content": "Text first."}), None)];
        for (i, (name, _)) in calls.iter().enumerate() {
            events.push(chunk(call_start(i as u64, &format!("c{i}"), name), None));
        }
        // Fragments of every call, round-robin: indexes interleave.
        let raws: Vec<Vec<char>> = calls.iter().map(|(_, a)| Value::Object(a.clone()).to_string().chars().collect()).collect();
        let mut offset = 0;
        while raws.iter().any(|r| offset < r.len()) {
            for (i, raw) in raws.iter().enumerate() {
                if offset < raw.len() {
                    let piece: String = raw[offset..(offset + cut).min(raw.len())].iter().collect();
                    events.push(chunk(call_args(i as u64, &piece), None));
                }
            }
            offset += cut;
        }
        events.push(chunk(json!({}), Some("tool_calls")));
        let mut r = StreamRenderer::new(RenderOptions { syntax, pretty, separator: "---".into() }, true);
        let mut out = BytesMut::new();
        for e in &events {
            r.on_event(e.as_bytes(), &mut out);
        }
        r.on_event(b"[DONE]", &mut out);
        let body = String::from_utf8(out.to_vec()).unwrap();
        let summary = check_stream(body.as_bytes(), &Expect::default()).map_err(|e| TestCaseError::fail(format!("{e}\n{body}")))?;
        let (_, parsed) = parse(&summary.choices[&0].content, syntax, &["GetWeather", "BookRestaurant", "Ping"]);
        prop_assert_eq!(parsed, calls);
    }

    /// natural history → native messages → natural text → the same calls.
    #[test]
    fn natural_to_native_to_natural_keeps_the_calls(calls in arb_calls(), syntax in arb_syntax()) {
        let names = ["GetWeather", "BookRestaurant", "Ping"];
        let opts = RenderOptions { syntax, pretty: true, separator: "---".into() };
        let mut text = String::from("Before.");
        for (i, (name, args)) in calls.iter().enumerate() {
            text.push_str(if i == 0 { "\n\n" } else { "\n---\n" });
            opts.write_call(name, &Value::Object(args.clone()).to_string(), &mut text);
        }
        let body = json!({
            "model": "m",
            "tools": names.iter().map(|n| json!({"type": "function", "function": {"name": n}})).collect::<Vec<_>>(),
            "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": text}],
        }).to_string();
        let native = history::rewrite(body.as_bytes(), &HistoryOptions { syntax, max_tool_result_chars: 1000 }).unwrap().expect("calls found");
        let native: Value = serde_json::from_slice(&native).unwrap();
        let message = &native["messages"][1];
        // Bracket calls show their `[description]` as content by design.
        if syntax != Syntax::Bracket {
            prop_assert_eq!(&message["content"], &json!("Before."));
        }
        // Back to natural text, as the client direction renders a completion.
        let mut again = String::new();
        for (i, call) in message["tool_calls"].as_array().unwrap().iter().enumerate() {
            if i > 0 { again.push_str("\n---\n"); }
            opts.write_call(call["function"]["name"].as_str().unwrap(), call["function"]["arguments"].as_str().unwrap(), &mut again);
        }
        let (_, parsed) = parse(&again, syntax, &names);
        prop_assert_eq!(parsed, calls);
    }
}

// ---- upstream-driven buffers (issue 15) ------------------------------------

/// The payloads of a client body, in order.
fn payloads(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

fn assert_ends_with_too_large(body: &str) {
    let events = payloads(body);
    let [.., error, done] = events.as_slice() else {
        panic!("{body}");
    };
    assert_eq!(done, "[DONE]");
    let error: Value = serde_json::from_str(error).unwrap();
    assert_eq!(
        error["error"]["code"], "upstream_stream_too_large",
        "{error}"
    );
}

#[test]
fn too_many_choice_indexes_end_the_stream_with_an_error() {
    let events: Vec<String> = (0..1_000)
        .map(|i| {
            upstream_chunk(json!([{"index": i, "delta": {"content": "x"}, "finish_reason": null}]))
                .to_string()
        })
        .collect();
    let mut r = StreamRenderer::new(options(Syntax::ToolCall), true);
    let mut out = BytesMut::new();
    for e in &events {
        r.on_event(e.as_bytes(), &mut out);
    }
    assert!(r.is_ended());
    let body = String::from_utf8(out.to_vec()).unwrap();
    // Choices up to the cap were served; the next one ended the stream.
    assert_eq!(body.matches("\"content\":\"x\"").count(), 128);
    assert_ends_with_too_large(&body);
}

#[test]
fn arguments_held_past_the_cap_end_the_stream_with_an_error() {
    // A call whose name never completes can't be written: its arguments wait.
    let fragment = "a".repeat(1024 * 1024);
    let mut events = vec![chunk(
        json!({"tool_calls": [{"index": 1, "function": {"arguments": ""}}]}),
        None,
    )];
    events.extend((0..20).map(|_| chunk(call_args(1, &fragment), None)));
    let mut r = StreamRenderer::new(options(Syntax::ToolCall), true);
    let mut out = BytesMut::new();
    for e in &events {
        r.on_event(e.as_bytes(), &mut out);
    }
    assert!(r.is_ended());
    assert_ends_with_too_large(std::str::from_utf8(&out).unwrap());
}
