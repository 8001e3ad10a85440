//! `on_ungrounded = "ask"`: a call whose string value the user never wrote
//! is asked about once, in the same request; the second answer decides. A
//! scripted model calls with an invented value, then (asked) answers text or
//! a grounded call; a grounded call passes with one upstream request.

use crate::common;
use crate::conformance;

use common::*;
use conformance::{Expect, check_completion, check_stream};
use serde_json::{Value, json};

const INVENTED: &str = "Sure.\n\n<GetWeather>\n{\"location\": \"example\"}\n</GetWeather>";
const GROUNDED: &str =
    "<GetWeather>\n{\"location\": \"Paris\", \"unit\": \"celsius\"}\n</GetWeather>";
const ASKED_TEXT: &str = "Which city do you mean?";

fn chat(stream: bool, question: &str) -> String {
    json!({
        "model": "m",
        "stream": stream,
        "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        "messages": [{"role": "user", "content": question}],
        "tools": [{"type": "function", "function": {
            "name": "GetWeather",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["location"]
            }
        }}],
    })
    .to_string()
}

/// Whether the request is the follow-up toolgate sends.
fn is_follow_up(request: &Value) -> bool {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "user" && m["content"].to_string().contains("I never wrote"))
}

/// The scripted model: `first` to a request, `asked` to the follow-up,
/// each whole or streamed as it is asked.
async fn model(first: &'static str, asked: &'static str) -> Mock {
    Mock::start(move |req| {
        let request = req.json();
        let reply = if is_follow_up(&request) { asked } else { first };
        if request["stream"] == true {
            let usage = json!({"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30});
            Reply::sse(
                &[&upstream_sse(&[reply], Some(&usage))],
                std::time::Duration::ZERO,
            )
        } else {
            Reply::json(&upstream_completion(reply))
        }
    })
    .await
}

async fn gateway(mock: &Mock, extra: &str) -> TestGateway {
    tools_gateway(mock, "natural", extra).await
}

/// A non-streamed answer to the user's `text`, which must be a `200` and a
/// conformant completion.
async fn completion(gw: &TestGateway, text: &str) -> Value {
    let r = post(&gw.url("/v1/chat/completions"), &chat(false, text)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    check_completion(&v).unwrap();
    v
}

#[tokio::test]
async fn an_ungrounded_call_is_asked_about_and_a_text_answer_stands() {
    let m = model(INVENTED, ASKED_TEXT).await;
    let gw = gateway(&m, "on_ungrounded = \"ask\"").await;

    let v = completion(&gw, "What's the weather like?").await;
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], ASKED_TEXT);
    assert!(message.get("tool_calls").is_none(), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["total_tokens"], 60, "both requests' usage: {v}");

    assert_eq!(m.count(), 2, "one follow-up");
    let requests = m.requests.lock().unwrap().clone();
    let (first, asked) = (requests[0].json(), requests[1].json());
    assert!(!is_follow_up(&first));
    assert!(is_follow_up(&asked));
    let messages = asked["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(first["messages"].as_array().unwrap().len() + 2, n);
    assert_eq!(
        messages[n - 2],
        json!({"role": "assistant", "content": INVENTED})
    );
    let follow_up = messages[n - 1]["content"].as_str().unwrap();
    assert!(
        follow_up.contains("`location` = \"example\" in your call of `GetWeather`"),
        "{follow_up}"
    );

    // Streamed: the upstream is asked whole, the client gets a stream.
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat(true, "What's the weather like?"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.choices[&0].content, ASKED_TEXT);
    assert!(s.choices[&0].calls.is_empty());
    assert_eq!(s.usage.as_ref().unwrap()["total_tokens"], 60);
    assert_eq!(m.count(), 4);
    for request in &m.requests.lock().unwrap()[2..] {
        let request = request.json();
        assert!(
            request.get("stream").is_none() && request.get("stream_options").is_none(),
            "{request}"
        );
    }
}

#[tokio::test]
async fn asked_again_a_call_is_emitted() {
    let m = model(INVENTED, GROUNDED).await;
    let gw = gateway(&m, "on_ungrounded = \"ask\"").await;
    for stream in [false, true] {
        let r = post(
            &gw.url("/v1/chat/completions"),
            &chat(stream, "Weather in Paris?"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let (name, arguments) = if stream {
            let s = check_stream(&r.body, &Expect::usage())
                .unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
            assert_eq!(s.choices[&0].finish_reason.as_deref(), Some("tool_calls"));
            let call = &s.choices[&0].calls[0];
            (call.name.clone(), call.arguments.clone())
        } else {
            let v = r.json();
            check_completion(&v).unwrap();
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
            let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
            (
                call["name"].as_str().unwrap().to_owned(),
                call["arguments"].as_str().unwrap().to_owned(),
            )
        };
        assert_eq!(name, "GetWeather");
        assert_eq!(
            serde_json::from_str::<Value>(&arguments).unwrap(),
            json!({"location": "Paris", "unit": "celsius"})
        );
    }
    assert_eq!(m.count(), 4, "one follow-up per client request");
}

#[tokio::test]
async fn a_grounded_call_passes_untouched_with_one_upstream_request() {
    let m = model(GROUNDED, ASKED_TEXT).await;
    let gw = gateway(&m, "on_ungrounded = \"ask\"").await;
    // The user wrote "paris" (case and spacing do not matter); "celsius" is
    // one of the schema's enum values.
    let v = completion(&gw, "Weather in   paris?").await;
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "GetWeather"
    );
    assert_eq!(v["usage"]["total_tokens"], 30);
    assert_eq!(m.count(), 1);
}

#[tokio::test]
async fn off_by_default_an_ungrounded_call_passes() {
    let m = model(INVENTED, ASKED_TEXT).await;
    let gw = gateway(&m, "").await;
    let v = completion(&gw, "What's the weather like?").await;
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"example\"}"
    );
    assert_eq!(m.count(), 1);
}
