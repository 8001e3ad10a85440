//! Repairing invalid calls with a fallback model (`on_invalid = "fallback"`):
//! a scripted model writes a broken call, a scripted fallback answers well,
//! badly, slowly or with a 500, streaming and not.

use crate::common;
use crate::conformance;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use conformance::{Expect, check_completion, check_stream};
use serde_json::{Value, json};

const BROKEN: &str =
    "Checking.\n\n<GetWeather>\n{\"city\": \"Paris\",}\n</GetWeather>\n\nOne moment.";

fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "GetWeather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]
        }
    }}])
}

fn chat(stream: bool, extra: Value) -> String {
    let mut req = json!({
        "model": "m",
        "stream": stream,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": tools(),
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            req[k] = v;
        }
    }
    req.to_string()
}

/// The scripted model: answers `reply`, streamed or whole.
async fn model(reply: &'static str) -> Mock {
    Mock::start(move |req| {
        if req.json()["stream"] == true {
            let pieces = char_pieces(reply, 7);
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            Reply::sse(&[&upstream_sse(&refs, None)], Duration::ZERO)
        } else {
            Reply::json(&upstream_completion(reply))
        }
    })
    .await
}

fn native_call(arguments: &str) -> Reply {
    Reply::json(
        &json!({
            "id": "fb-1", "object": "chat.completion", "created": 1, "model": "small",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "x", "type": "function", "function": {"name": "GetWeather", "arguments": arguments}}]
            }}]
        })
        .to_string(),
    )
}

async fn gateway(model: &Mock, fallback: &Mock, fallback_mode: &str, extra: &str) -> TestGateway {
    let timeout = if extra.contains("fallback_timeout_secs") {
        ""
    } else {
        "fallback_timeout_secs = 0.5\n"
    };
    TestConfig::new()
        .up(
            &model.url(),
            &format!(
                "[providers.tools]\nmode = \"natural\"\non_invalid = \"fallback\"\nfallback = \"fb/small\"\n{timeout}{extra}"
            ),
        )
        .provider(
            "fb",
            &fallback.url(),
            "[]",
            &format!("[providers.tools]\nmode = \"{fallback_mode}\""),
        )
        .start()
        .await
}

#[tokio::test]
async fn a_valid_repair_takes_the_broken_calls_place_streaming_and_not() {
    let m = model(BROKEN).await;
    let fb = Mock::start(|_| native_call("{\"location\": \"Paris\"}")).await;
    let gw = gateway(&m, &fb, "passthrough", "").await;

    let r = post(&gw.url("/v1/chat/completions"), &chat(true, json!({}))).await;
    let s =
        check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = &s.choices[&0];
    assert_eq!(
        choice.content, "Checking.\n\n\n\nOne moment.",
        "text around the block keeps flowing"
    );
    assert_eq!(choice.calls.len(), 1);
    assert_eq!(choice.calls[0].name, "GetWeather");
    assert_eq!(
        serde_json::from_str::<Value>(&choice.calls[0].arguments).unwrap(),
        json!({"location": "Paris"})
    );
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));

    // What the fallback was asked: native tools, the tool named, the contract,
    // the original text and the complaint.
    let asked = fb.last().json();
    assert_eq!(asked["model"], "small");
    assert_eq!(asked["tool_choice"]["function"]["name"], "GetWeather");
    assert_eq!(asked["tools"][0]["function"]["name"], "GetWeather");
    let prompt = asked["messages"].to_string();
    assert!(prompt.contains("## GetWeather"), "{prompt}");
    assert!(prompt.contains("city"), "original text is shown: {prompt}");
    assert!(
        prompt.contains("invalid JSON"),
        "the complaint is shown: {prompt}"
    );

    let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    check_completion(&v).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"Paris\"}"
    );

    let metrics = get(&gw.url("/metrics")).await.text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("toolgate_repairs_total{") && l.contains("outcome=\"success\"")),
        "{metrics}"
    );
    assert!(metrics.contains("toolgate_repair_attempts_total"));
    assert!(metrics.contains("toolgate_repair_duration_seconds_bucket"));
}

#[tokio::test]
async fn repaired_call_keeps_its_index_before_a_valid_one() {
    let m = model("A <GetWeather>{\"city\": 1}</GetWeather> B <GetWeather>{\"location\": \"Rome\"}</GetWeather> C").await;
    let fb = Mock::start(|_| native_call("{\"location\": \"Paris\"}")).await;
    let gw = gateway(&m, &fb, "passthrough", "").await;
    let r = post(&gw.url("/v1/chat/completions"), &chat(true, json!({}))).await;
    let s =
        check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let calls = &s.choices[&0].calls;
    assert_eq!(calls.len(), 2);
    assert!(
        calls[0].arguments.contains("Paris"),
        "repaired call first: {calls:?}"
    );
    assert!(calls[1].arguments.contains("Rome"));
}

#[tokio::test]
async fn failed_repairs_fail_clearly() {
    let invalid = Mock::start(|_| native_call("{\"city\": \"Paris\"}")).await;
    let hanging = Mock::start(|_| Reply::Hang).await;
    let broken = Mock::start(|_| Reply::Full {
        status: 500,
        headers: vec![],
        body: Bytes::from_static(b"boom"),
    })
    .await;
    for (fb, why) in [
        (&invalid, "do not match the schema"),
        (&hanging, "did not answer within"),
        (&broken, "HTTP 500"),
    ] {
        let m = model(BROKEN).await;
        let gw = gateway(&m, fb, "passthrough", "fallback_attempts = 2").await;
        let r = post(&gw.url("/v1/chat/completions"), &chat(true, json!({}))).await;
        let s = check_stream(
            &r.body,
            &Expect {
                allow_error: true,
                ..Expect::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
        assert!(
            s.error.is_some(),
            "an error event ends the stream: {}",
            r.text()
        );
        let text = r.text();
        assert!(
            text.contains("GetWeather")
                && text.contains("repair by fb/small failed")
                && text.contains(why),
            "{text}"
        );

        let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
        assert_eq!(r.status, 502, "{}", r.text());
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("GetWeather")
                && message.contains("repair by fb/small failed")
                && message.contains(why),
            "{message}"
        );
        assert_eq!(fb.count(), 4, "two attempts per request");
    }
}

#[tokio::test]
async fn a_required_call_the_model_never_wrote_is_asked_of_the_fallback() {
    let m = model("I am not sure what to do.").await;
    let fb = Mock::start(|_| native_call("{\"location\": \"Oslo\"}")).await;
    let gw = gateway(&m, &fb, "passthrough", "").await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat(true, json!({"tool_choice": "required"})),
    )
    .await;
    let s =
        check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.choices[&0].content, "I am not sure what to do.");
    assert_eq!(s.choices[&0].calls.len(), 1);
    assert!(
        fb.last().json()["messages"]
            .to_string()
            .contains("I am not sure what to do.")
    );
    // With tool_choice auto, no call is no problem: the fallback is not asked.
    let before = fb.count();
    let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
    assert_eq!(r.json()["choices"][0]["finish_reason"], "stop");
    assert_eq!(fb.count(), before);
}

#[tokio::test]
async fn a_non_native_fallback_is_asked_for_json_text() {
    let m = model(BROKEN).await;
    let fb = Mock::start(|_| {
        Reply::json(&upstream_completion(
            "```json\n{\"location\": \"Lima\"}\n```",
        ))
    })
    .await;
    let gw = gateway(&m, &fb, "natural", "").await;
    let v = post(&gw.url("/v1/chat/completions"), &chat(false, json!({})))
        .await
        .json();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"Lima\"}"
    );
    let asked = fb.last().json();
    assert_eq!(asked["response_format"]["type"], "json_object");
    assert!(asked.get("tools").is_none());
}

#[tokio::test]
async fn a_slow_repair_keeps_the_stream_alive() {
    let m = model(BROKEN).await;
    let answer = native_call("{\"location\": \"Paris\"}");
    let Reply::Full { body, .. } = answer else {
        unreachable!()
    };
    let fb = Mock::start(move |_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        // Two halves, each within the 2 s idle timeout, 3.4 s in all.
        pieces: vec![
            (Duration::from_millis(1700), body.slice(..10)),
            (Duration::from_millis(1700), body.slice(10..)),
        ],
    })
    .await;
    let gw = gateway(&m, &fb, "passthrough", "fallback_timeout_secs = 10").await;
    let r = post(&gw.url("/v1/chat/completions"), &chat(true, json!({}))).await;
    let s =
        check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert!(r.text().contains(": keep-alive\n\n"), "{}", r.text());
    assert_eq!(s.choices[&0].calls.len(), 1);
}

/// The scripted model with one choice per reply: streamed choice by choice
/// in pieces (all of one choice, then the next), or whole.
async fn model_choices(replies: &'static [&'static str]) -> Mock {
    Mock::start(move |req| {
        if req.json()["stream"] == true {
            let mut sse = String::new();
            for (i, reply) in replies.iter().enumerate() {
                let mut chunks = vec![upstream_chunk(
                    json!([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
                )];
                for piece in char_pieces(reply, 7) {
                    chunks.push(upstream_chunk(
                        json!([{"index": i, "delta": {"content": piece}, "finish_reason": null}]),
                    ));
                }
                chunks.push(upstream_chunk(
                    json!([{"index": i, "delta": {}, "finish_reason": "stop"}]),
                ));
                for c in chunks {
                    sse.push_str(&format!("data: {c}\n\n"));
                }
            }
            sse.push_str("data: [DONE]\n\n");
            Reply::sse(&[&sse], Duration::ZERO)
        } else {
            let mut completion: Value = serde_json::from_str(&upstream_completion("")).unwrap();
            completion["choices"] = replies
                .iter()
                .enumerate()
                .map(|(i, r)| json!({"index": i, "message": {"role": "assistant", "content": r}, "finish_reason": "stop"}))
                .collect();
            Reply::json(&completion.to_string())
        }
    })
    .await
}

const TWO_BROKEN: &str =
    "A <GetWeather>{\"city\": 1}</GetWeather> B <GetWeather>{\"town\": 2}</GetWeather> C";

#[tokio::test]
async fn fallback_max_calls_caps_the_repairs_of_a_whole_response() {
    // Two choices with two broken calls each: four repairs.
    let m = model_choices(&[TWO_BROKEN, TWO_BROKEN]).await;
    let fb = Mock::start(|_| native_call("{\"location\": \"Paris\"}")).await;

    // A budget of four covers them: exactly four fallback calls, all repaired.
    let gw = gateway(&m, &fb, "passthrough", "fallback_max_calls = 4").await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat(false, json!({"n": 2})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    for i in 0..2 {
        assert_eq!(
            v["choices"][i]["message"]["tool_calls"]
                .as_array()
                .map(Vec::len),
            Some(2),
            "{v}"
        );
    }
    assert_eq!(fb.count(), 4);

    // Three is shared by both choices: the fourth broken call is not repaired,
    // it follows on_invalid ("fallback" fails as "error" does), and the
    // message says why. Never more than three fallback calls.
    for stream in [false, true] {
        let before = fb.count();
        let gw = gateway(&m, &fb, "passthrough", "fallback_max_calls = 3").await;
        let r = post(
            &gw.url("/v1/chat/completions"),
            &chat(stream, json!({"n": 2})),
        )
        .await;
        let text = r.text();
        if stream {
            let s = check_stream(
                &r.body,
                &Expect {
                    allow_error: true,
                    ..Expect::default()
                },
            )
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert!(s.error.is_some(), "{text}");
        } else {
            assert_eq!(r.status, 502, "{text}");
        }
        assert!(text.contains("fallback_max_calls"), "{text}");
        assert!(fb.count() - before <= 3, "stream {stream}: {}", fb.count());
    }

    // Zero asks for no repair at all.
    let before = fb.count();
    let gw = gateway(&m, &fb, "passthrough", "fallback_max_calls = 0").await;
    let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(fb.count(), before);
}

#[tokio::test]
async fn a_non_streaming_responses_repairs_run_at_once() {
    // Three broken calls over two choices; the fallback answers nothing until
    // all three requests are in, which only happens if they run at once.
    let m = model_choices(&[TWO_BROKEN, "<GetWeather>{\"city\": 3}</GetWeather>"]).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let fb = Mock::start(move |_| {
        Reply::Gated(
            gate.clone(),
            Box::new(native_call("{\"location\": \"Paris\"}")),
        )
    })
    .await;
    let gw = gateway(&m, &fb, "passthrough", "fallback_timeout_secs = 60").await;
    let answer = tokio::spawn(post(
        gw.url("/v1/chat/completions").leak(),
        chat(false, json!({"n": 2})).leak(),
    ));
    // Bounded only so a regression (repairs one after another) fails
    // instead of hanging; not a timing target.
    let all_in = async {
        while fb.count() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), all_in)
        .await
        .unwrap_or_else(|_| panic!("only {} of 3 repairs were asked for at once", fb.count()));
    open.send(true).unwrap();
    let r = answer.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        v["choices"][1]["message"]["tool_calls"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(fb.count(), 3);
}

#[tokio::test]
async fn a_fallback_that_never_answers_fails_a_non_streaming_response_once() {
    // A fallback that never answers: every repair starts at once (three
    // requests, each retried once) and the answer is the on_invalid error
    // within one repair's time (0.4 s; the response's deadline is 1.4 s).
    let m = model_choices(&[TWO_BROKEN, "<GetWeather>{\"city\": 3}</GetWeather>"]).await;
    let fb = Mock::start(|_| Reply::Hang).await;
    let gw = gateway(
        &m,
        &fb,
        "passthrough",
        "fallback_timeout_secs = 0.2\nfallback_attempts = 2",
    )
    .await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat(false, json!({"n": 2})),
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.text());
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("GetWeather"), "{message}");
    // Three repairs, each at most two attempts.
    assert!((3..=6).contains(&fb.count()), "{}", fb.count());
}

#[tokio::test]
async fn a_repair_in_one_choice_does_not_hold_back_another_choices_text() {
    use http_body_util::{BodyExt, Full};
    // Choice 0 (streamed first) needs a repair; choice 1 is prose. The
    // fallback answers only once the client has read choice 1's text.
    let m = model_choices(&[BROKEN, "Choice one speaks freely."]).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let fb = Mock::start(move |_| {
        Reply::Gated(
            gate.clone(),
            Box::new(native_call("{\"location\": \"Paris\"}")),
        )
    })
    .await;
    let gw = gateway(&m, &fb, "passthrough", "fallback_timeout_secs = 60").await;
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(chat(true, json!({"n": 2})))))
        .unwrap();
    let mut body = client().request(req).await.unwrap().into_body();
    let mut read = Vec::new();
    // Reads until choice 1 has ended; bounded only so a
    // regression fails instead of hanging (not a timing target).
    let until_text = async {
        // Choice 1's finish: choice 0's cannot come before its repair.
        while !String::from_utf8_lossy(&read).contains("\"finish_reason\":\"stop\"") {
            let Some(frame) = body.frame().await else {
                panic!("stream ended early: {}", String::from_utf8_lossy(&read));
            };
            let frame = frame.unwrap();
            read.extend_from_slice(&frame.into_data().unwrap_or_default());
        }
    };
    tokio::time::timeout(Duration::from_secs(20), until_text)
        .await
        .expect("choice 1's text arrives while choice 0's repair waits");
    assert_eq!(fb.count(), 1, "the repair was asked for");
    assert!(
        !String::from_utf8_lossy(&read).contains("tool_calls"),
        "choice 0's call is not out yet"
    );
    open.send(true).unwrap();
    read.extend_from_slice(&body.collect().await.unwrap().to_bytes());
    let s = check_stream(&read, &Expect::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&read)));
    assert_eq!(s.choices[&0].calls.len(), 1);
    assert_eq!(s.choices[&1].content, "Choice one speaks freely.");
    assert_eq!(s.choices[&1].finish_reason.as_deref(), Some("stop"));
}
