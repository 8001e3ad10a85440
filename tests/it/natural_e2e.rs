//! Natural mode end to end: a scripted upstream model writes natural-text
//! calls, the real gateway turns them into native `tool_calls`, and every
//! streamed body goes through the conformance checker (tests/it/conformance).

use crate::common;
use crate::conformance;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use conformance::{Expect, StreamSummary, check_completion, check_stream};
use serde_json::{Value, json};

/// Seed 000's weather example, as the model writes it.
const SEED_REPLY: &str = "I'll get the weather for San Francisco today in Fahrenheit.\n\n<GetWeather>\n```json\n{\n  \"location\": \"San Francisco, CA\",\n  \"unit\": \"fahrenheit\"\n}\n```\n</GetWeather>";
const SEED_TEXT: &str = "I'll get the weather for San Francisco today in Fahrenheit.";

/// Multibyte text around a call, for the split tests.
const UNICODE_REPLY: &str = "Je vérifie la météo à Montréal 🌦️ tout de suite… 👍\n\n<GetWeather>\n```json\n{\"location\": \"Montréal, QC\", \"unit\": \"celsius\"}\n```\n</GetWeather>\n\nÇa arrive 🚀";

/// A chat request offering both seed tools; `extra` fields are merged in
/// (a `null` removes the field).
fn chat(stream: bool, extra: Value) -> String {
    let mut req = json!({
        "model": UP_MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What's the weather like in San Francisco today?"}
        ],
        "tools": [seed_get_weather(), seed_book_restaurant()],
        "stream": stream,
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            if v.is_null() {
                req.as_object_mut().unwrap().remove(&k);
            } else {
                req[k] = v;
            }
        }
    }
    req.to_string()
}

/// An upstream answering `reply`: streamed in pieces of `piece_chars`
/// characters when the request streams, else as one completion.
async fn model(reply: &str, piece_chars: usize, usage: Option<Value>) -> Mock {
    let reply = reply.to_owned();
    Mock::start(move |req| {
        if req.json()["stream"] == true {
            let pieces = char_pieces(&reply, piece_chars);
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            let body = upstream_sse(&refs, usage.as_ref());
            Reply::sse(&[&body], Duration::ZERO)
        } else {
            Reply::json(&upstream_completion(&reply))
        }
    })
    .await
}

async fn stream(gw: &TestGateway, body: &str, opts: &Expect) -> (Collected, StreamSummary) {
    let r = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let summary = check_stream(&r.body, opts)
        .unwrap_or_else(|e| panic!("non-conformant stream: {e}\n{}", r.text()));
    (r, summary)
}

async fn complete(gw: &TestGateway, body: &str) -> Value {
    let r = post(&gw.url("/v1/chat/completions"), body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    check_completion(&v).unwrap_or_else(|e| panic!("non-conformant completion: {e}\n{v:#}"));
    v
}

/// The `data:` JSON payloads of a stream (not `[DONE]`).
fn chunks(body: &[u8]) -> Vec<Value> {
    std::str::from_utf8(body)
        .unwrap()
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn is_call_id(id: &str) -> bool {
    id.strip_prefix("call_")
        .is_some_and(|rest| rest.len() == 24 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[tokio::test]
async fn seed_weather_example_streams_one_native_call() {
    let mock = model(SEED_REPLY, 7, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let (r, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert_eq!(c.content.trim_end(), SEED_TEXT, "{}", r.text());
    assert!(
        !c.content.contains("GetWeather"),
        "the block is not content"
    );
    assert_eq!(c.calls.len(), 1);
    assert_eq!(c.calls[0].name, "GetWeather");
    assert_eq!(
        c.calls[0].args(),
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
    assert!(is_call_id(&c.calls[0].id), "call id {:?}", c.calls[0].id);
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(s.id.as_deref(), Some(UP_ID));
    assert_eq!(s.created, Some(UP_CREATED));
    assert_eq!(s.model.as_deref(), Some(UP_MODEL));
    for chunk in chunks(&r.body) {
        assert_eq!(chunk["system_fingerprint"], UP_FINGERPRINT, "{chunk}");
    }
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
}

#[tokio::test]
async fn one_char_pieces_give_the_same_summary() {
    for reply in [SEED_REPLY, UNICODE_REPLY] {
        let coarse = model(reply, 9, None).await;
        let fine = model(reply, 1, None).await;
        let (gw1, gw2) = (
            tools_gateway(&coarse, "natural", "").await,
            tools_gateway(&fine, "natural", "").await,
        );
        let (_, a) = stream(&gw1, &chat(true, json!({})), &Expect::default()).await;
        let (_, b) = stream(&gw2, &chat(true, json!({})), &Expect::default()).await;
        assert_eq!(a.without_ids(), b.without_ids());
        assert_eq!(a.choice().calls.len(), 1);
    }
}

/// The upstream's SSE bytes cut at every byte offset (two TCP writes each,
/// including cuts inside `é` and emoji), and once byte by byte: the client
/// sees the same message every time.
#[tokio::test]
async fn byte_splits_anywhere_give_the_same_summary() {
    let pieces = char_pieces(UNICODE_REPLY, 40);
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let sse: Arc<Vec<u8>> = Arc::new(upstream_sse(&refs, None).into_bytes());
    let body = sse.clone();
    let mock = Mock::start(move |req| {
        let cuts: Vec<usize> = match &req.json()["x_cut"] {
            Value::Number(n) => vec![n.as_u64().unwrap() as usize],
            // "every": each byte its own piece.
            _ => (1..body.len()).collect(),
        };
        let delay = if cuts.len() == 1 {
            Duration::from_millis(2)
        } else {
            Duration::ZERO
        };
        raw_sse_reply(&body, &cuts, delay)
    })
    .await;
    let gw = Arc::new(tools_gateway(&mock, "natural", "").await);

    let whole = model(UNICODE_REPLY, 40, None).await;
    let gw_whole = tools_gateway(&whole, "natural", "").await;
    let (_, expected) = stream(&gw_whole, &chat(true, json!({})), &Expect::default()).await;
    let expected = expected.without_ids();
    let c = expected.choice();
    assert!(c.content.contains("météo à Montréal 🌦️"), "{c:?}");
    assert!(c.content.contains("Ça arrive 🚀"), "{c:?}");
    assert_eq!(
        c.calls[0].args(),
        json!({"location": "Montréal, QC", "unit": "celsius"})
    );

    let (_, bytewise) = stream(
        &gw,
        &chat(true, json!({"x_cut": "every"})),
        &Expect::default(),
    )
    .await;
    assert_eq!(bytewise.without_ids(), expected, "byte by byte");

    let offsets: Vec<usize> = (1..sse.len()).collect();
    let mut set = tokio::task::JoinSet::new();
    let sem = Arc::new(tokio::sync::Semaphore::new(12));
    for cut in offsets {
        let (gw, sem) = (gw.clone(), sem.clone());
        set.spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            let r = post(
                &gw.url("/v1/chat/completions"),
                &chat(true, json!({"x_cut": cut})),
            )
            .await;
            let s = check_stream(&r.body, &Expect::default())
                .unwrap_or_else(|e| panic!("cut at {cut}: {e}\n{}", r.text()));
            (cut, s.without_ids())
        });
    }
    let mut n = 0;
    while let Some(res) = set.join_next().await {
        let (cut, s) = res.unwrap();
        assert_eq!(s, expected, "cut at byte {cut}");
        n += 1;
    }
    assert_eq!(n, sse.len() - 1);
    assert_eq!(mock.count(), sse.len());
}

#[tokio::test]
async fn two_calls_with_text_between_and_after() {
    let reply = "Let me check the weather first.\n\n<GetWeather>\n```json\n{\"location\": \"Paris, France\", \"unit\": \"celsius\"}\n```\n</GetWeather>\n\nAnd now the table.\n\n<BookRestaurant>\n```json\n{\"restaurantName\": \"Chez Paul\", \"date\": \"2025-05-15\", \"time\": \"19:00\", \"numberOfPeople\": 4}\n```\n</BookRestaurant>\n\nDone with both.";
    let mock = model(reply, 6, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let (r, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert_eq!(c.calls.len(), 2, "{}", r.text());
    assert_eq!(c.calls[0].name, "GetWeather");
    assert_eq!(
        c.calls[0].args(),
        json!({"location": "Paris, France", "unit": "celsius"})
    );
    assert_eq!(c.calls[1].name, "BookRestaurant");
    assert_eq!(
        c.calls[1].args(),
        json!({"restaurantName": "Chez Paul", "date": "2025-05-15", "time": "19:00", "numberOfPeople": 4})
    );
    assert_ne!(c.calls[0].id, c.calls[1].id);
    let before = c.content.find("Let me check the weather first.").unwrap();
    let between = c.content.find("And now the table.").unwrap();
    let after = c.content.find("Done with both.").unwrap();
    assert!(before < between && between < after, "{:?}", c.content);
    assert!(!c.content.contains("```"), "{:?}", c.content);
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
    // Explicit tool-call indexes on the wire: 0 then 1.
    let indexes: Vec<u64> = chunks(&r.body)
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/index")?.as_u64())
        .collect();
    assert!(indexes.windows(2).all(|w| w[0] <= w[1]), "{indexes:?}");
    assert_eq!(indexes.first(), Some(&0));
    assert_eq!(indexes.last(), Some(&1));

    // The same reply, not streamed.
    let v = complete(&gw, &chat(false, json!({}))).await;
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["tool_calls"].as_array().unwrap().len(), 2);
    let content = msg["content"].as_str().unwrap();
    assert!(content.contains("And now the table.") && content.contains("Done with both."));
}

#[tokio::test]
async fn non_streaming_completion_gets_native_calls() {
    let mock = model(SEED_REPLY, 7, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let v = complete(&gw, &chat(false, json!({}))).await;
    assert_eq!(v["id"], UP_ID);
    assert_eq!(v["model"], UP_MODEL);
    assert_eq!(v["usage"]["total_tokens"], 30, "usage kept");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let msg = &choice["message"];
    assert_eq!(msg["role"], "assistant");
    assert_eq!(msg["content"].as_str().unwrap().trim_end(), SEED_TEXT);
    let calls = msg["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "GetWeather");
    assert!(is_call_id(calls[0]["id"].as_str().unwrap()));
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
}

#[tokio::test]
async fn non_streaming_content_is_null_when_only_whitespace_remains() {
    let reply = "\n \n<GetWeather>\n```json\n{\"location\": \"Oslo\"}\n```\n</GetWeather>\n\t\n";
    let mock = model(reply, 7, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let v = complete(&gw, &chat(false, json!({}))).await;
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], Value::Null, "{v:#}");
    assert_eq!(
        msg["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"Oslo\"}"
    );
    // Streamed, the same reply is still conformant.
    let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    assert_eq!(s.choice().content.trim(), "");
    assert_eq!(s.choice().calls.len(), 1);
}

#[tokio::test]
async fn usage_chunk_only_when_asked_and_last() {
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33});
    let mock = model(SEED_REPLY, 7, Some(usage.clone())).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let asked = chat(true, json!({"stream_options": {"include_usage": true}}));
    let (r, s) = stream(&gw, &asked, &Expect::usage()).await;
    assert_eq!(s.usage, Some(usage));
    let all = chunks(&r.body);
    assert_eq!(all.last().unwrap()["choices"], json!([]));
    assert_eq!(s.choice().calls.len(), 1);
    // Not asked: no usage chunk even though the upstream sends one
    // (Expect::default() rejects any usage).
    let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    assert_eq!(s.usage, None);
    assert_eq!(s.choice().calls.len(), 1);
}

#[tokio::test]
async fn upstream_gets_contracts_instead_of_tools() {
    let mock = model(SEED_REPLY, 7, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let req = chat(
        true,
        json!({"tool_choice": "auto", "temperature": 0.25, "x_vendor": {"top_k": 40}}),
    );
    stream(&gw, &req, &Expect::default()).await;
    let seen = mock.last().json();
    assert!(seen.get("tools").is_none(), "{seen:#}");
    assert!(seen.get("tool_choice").is_none(), "{seen:#}");
    assert_eq!(seen["temperature"], 0.25);
    assert_eq!(seen["x_vendor"], json!({"top_k": 40}));
    assert_eq!(seen["stream"], true);
    assert_eq!(seen["model"], UP_MODEL);
    let messages = seen["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.contains("## GetWeather"), "{system}");
    assert!(system.contains("## BookRestaurant"), "{system}");
    let contracts = system.find("## GetWeather").unwrap();
    let own = system.find("Be brief.").unwrap();
    assert!(
        contracts < own,
        "the contracts come before the client's prompt"
    );
    assert!(system.ends_with("Be brief."), "{system}");
    assert_eq!(
        messages[1]["content"],
        "What's the weather like in San Francisco today?"
    );
}

#[tokio::test]
async fn tool_choice_none_passes_the_reply_through_unparsed() {
    let mock = model(SEED_REPLY, 7, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let (_, s) = stream(
        &gw,
        &chat(true, json!({"tool_choice": "none"})),
        &Expect::default(),
    )
    .await;
    let c = s.choice();
    assert_eq!(c.content, SEED_REPLY);
    assert!(c.calls.is_empty());
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    let seen = mock.last().json();
    assert!(seen.get("tools").is_none() && seen.get("tool_choice").is_none());
    let v = complete(&gw, &chat(false, json!({"tool_choice": "none"}))).await;
    assert_eq!(v["choices"][0]["message"]["content"], SEED_REPLY);
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
}

const BAD_JSON_REPLY: &str =
    "Checking.\n\n<GetWeather>\n```json\n{\"location\": Paris}\n```\n</GetWeather>";
const SCHEMA_VIOLATION_REPLY: &str =
    "Checking.\n\n<GetWeather>\n```json\n{\"city\": \"Paris\"}\n```\n</GetWeather>";

async fn assert_invalid_is_an_error(reply: &str) {
    let mock = model(reply, 5, None).await;
    let gw = tools_gateway(&mock, "natural", "on_invalid = \"error\"").await;
    let (r, s) = stream(&gw, &chat(true, json!({})), &Expect::error()).await;
    let error = s
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("no error event: {}", r.text()));
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("GetWeather"), "{message}");
    assert!(s.choices.values().all(|c| c.calls.is_empty()));

    let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let v = r.json();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("GetWeather"), "{message}");
    assert!(v["error"]["type"].is_string(), "{v}");
    assert!(
        v["error"]["code"].is_string() || v["error"]["code"].is_null(),
        "{v}"
    );
}

async fn assert_invalid_is_text(reply: &str, raw_block: &str) {
    let mock = model(reply, 5, None).await;
    let gw = tools_gateway(&mock, "natural", "on_invalid = \"text\"").await;
    let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert!(c.calls.is_empty(), "{c:?}");
    assert!(c.content.contains(raw_block), "{:?}", c.content);
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    let v = complete(&gw, &chat(false, json!({}))).await;
    assert_eq!(v["choices"][0]["message"]["content"], reply);
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
}

#[tokio::test]
async fn invalid_json_block_with_on_invalid_error_fails_the_reply() {
    assert_invalid_is_an_error(BAD_JSON_REPLY).await;
}

#[tokio::test]
async fn invalid_json_block_with_on_invalid_text_stays_content() {
    assert_invalid_is_text(
        BAD_JSON_REPLY,
        "<GetWeather>\n```json\n{\"location\": Paris}",
    )
    .await;
}

#[tokio::test]
async fn schema_violation_is_invalid() {
    assert_invalid_is_an_error(SCHEMA_VIOLATION_REPLY).await;
    assert_invalid_is_text(SCHEMA_VIOLATION_REPLY, "{\"city\": \"Paris\"}").await;
}

/// An answer the upstream stopped at its token limit inside a call (a model
/// repeating calls until `max_tokens`): the calls it finished are calls, the
/// one it was still writing stays text, and the reply is not an error. The
/// same unclosed block in an answer that stopped on its own is invalid.
#[tokio::test]
async fn a_call_cut_by_the_token_limit_stays_text() {
    let reply = "<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>\n<GetWeather>\n```json\n{\"location\": \"Pa";
    for finish in ["length", "stop"] {
        let mock = Mock::start(move |req| {
            if req.json()["stream"] == true {
                let body = upstream_sse(
                    &char_pieces(reply, 7)
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>(),
                    None,
                )
                .replace(
                    "\"finish_reason\":\"stop\"",
                    &format!("\"finish_reason\":\"{finish}\""),
                );
                Reply::sse(&[&body], Duration::ZERO)
            } else {
                let mut v: Value = serde_json::from_str(&upstream_completion(reply)).unwrap();
                v["choices"][0]["finish_reason"] = json!(finish);
                Reply::json(&v.to_string())
            }
        })
        .await;
        let gw = tools_gateway(&mock, "natural", "on_invalid = \"error\"").await;
        let cut = "<GetWeather>\n```json\n{\"location\": \"Pa";
        if finish == "stop" {
            let r = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
            assert_eq!(r.status, 502, "{}", r.text());
            continue;
        }
        let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
        let c = s.choice();
        assert_eq!(c.calls.len(), 1, "{c:?}");
        assert_eq!(c.calls[0].args()["location"], "Paris");
        assert!(c.content.ends_with(cut), "{:?}", c.content);
        let v = complete(&gw, &chat(false, json!({}))).await;
        let message = &v["choices"][0]["message"];
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 1, "{v:#}");
        assert!(message["content"].as_str().unwrap().ends_with(cut), "{v:#}");
    }
}

#[tokio::test]
async fn parallel_tool_calls_false_keeps_only_the_first_call() {
    let reply = "Two cities.\n\n<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>\n<GetWeather>\n```json\n{\"location\": \"Rome\"}\n```\n</GetWeather>";
    let mock = model(reply, 8, None).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let req = chat(true, json!({"parallel_tool_calls": false}));
    let (_, s) = stream(&gw, &req, &Expect::default()).await;
    let c = s.choice();
    assert_eq!(c.calls.len(), 1, "{c:?}");
    assert_eq!(c.calls[0].args(), json!({"location": "Paris"}));
    assert!(!c.content.contains("Paris"), "{:?}", c.content);
    let seen = mock.last().json();
    assert!(seen.get("parallel_tool_calls").is_none());
    assert!(
        seen["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("at most one call")
    );
    let v = complete(&gw, &chat(false, json!({"parallel_tool_calls": false}))).await;
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn tool_call_syntax() {
    let reply = "On it.\n<tool_call name=\"GetWeather\">\n{\"location\": \"Lyon\", \"unit\": \"celsius\"}\n</tool_call>";
    let mock = model(reply, 4, None).await;
    let gw = tools_gateway(&mock, "natural", "syntax = \"tool_call\"").await;
    let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert_eq!(c.content.trim_end(), "On it.");
    assert_eq!(c.calls.len(), 1);
    assert_eq!(c.calls[0].name, "GetWeather");
    assert_eq!(
        c.calls[0].args(),
        json!({"location": "Lyon", "unit": "celsius"})
    );
    let system = mock.last().json()["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("<tool_call name="), "{system}");
}

#[tokio::test]
async fn bracket_syntax_shows_the_description_and_hides_the_json() {
    let reply = "Sure. [Checking the weather in Nice]{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Nice\"}}";
    let mock = model(reply, 3, None).await;
    let gw = tools_gateway(&mock, "natural", "syntax = \"bracket\"").await;
    let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    let c = s.choice();
    assert!(
        c.content.contains("[Checking the weather in Nice]"),
        "{:?}",
        c.content
    );
    assert!(!c.content.contains("arguments"), "{:?}", c.content);
    assert!(!c.content.contains('{'), "{:?}", c.content);
    assert_eq!(c.calls.len(), 1);
    assert_eq!(c.calls[0].name, "GetWeather");
    assert_eq!(c.calls[0].args(), json!({"location": "Nice"}));
    let v = complete(&gw, &chat(false, json!({}))).await;
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "GetWeather"
    );
}

fn demo_request(stream: bool, messages: Value) -> String {
    json!({"model": "demo", "stream": stream, "messages": messages, "tools": [seed_get_weather()]})
        .to_string()
}

#[tokio::test]
async fn embedded_demo_model_calls_the_tool_and_answers_its_result() {
    let gw = TestGateway::start(toolgate::config::EMBEDDED_DEFAULT).await;
    let ask = json!([{"role": "user", "content": "What's the weather like in Paris?"}]);

    let (_, s) = stream(&gw, &demo_request(true, ask.clone()), &Expect::default()).await;
    let c = s.choice();
    assert_eq!(c.calls.len(), 1, "{c:?}");
    assert_eq!(c.calls[0].name, "GetWeather");
    assert!(
        c.calls[0]
            .args()
            .get("location")
            .is_some_and(Value::is_string)
    );
    assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));

    let v = complete(&gw, &demo_request(false, ask.clone())).await;
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "GetWeather", "{v:#}");

    let mut history = ask.as_array().unwrap().clone();
    history.push(json!({"role": "assistant", "content": null, "tool_calls": [call.clone()]}));
    history.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "18°C and sunny"}));
    let v = complete(&gw, &demo_request(false, Value::Array(history.clone()))).await;
    let msg = &v["choices"][0]["message"];
    assert!(msg.get("tool_calls").is_none(), "{v:#}");
    let text = msg["content"].as_str().unwrap();
    assert!(text.contains("18°C and sunny"), "{text}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    let (_, s) = stream(
        &gw,
        &demo_request(true, Value::Array(history)),
        &Expect::default(),
    )
    .await;
    let c = s.choice();
    assert!(c.calls.is_empty(), "{c:?}");
    assert!(c.content.contains("18°C and sunny"), "{:?}", c.content);
    assert_eq!(c.finish_reason.as_deref(), Some("stop"));
}

/// The checker can fail: a hand-made stream that repeats a call id.
#[test]
fn checker_rejects_a_broken_emitter() {
    let head = |choices: Value| json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices});
    let call = |i: usize| {
        head(
            json!([{"index": 0, "finish_reason": null, "delta": {"tool_calls": [
            {"index": i, "id": "call_same", "type": "function",
             "function": {"name": "GetWeather", "arguments": "{\"location\":\"Paris\"}"}}]}}]),
        )
    };
    let chunks = [
        head(
            json!([{"index": 0, "finish_reason": null, "delta": {"role": "assistant", "content": "Hi"}}]),
        ),
        call(0),
        call(1),
        head(json!([{"index": 0, "finish_reason": "tool_calls", "delta": {}}])),
    ];
    let mut body = String::new();
    for c in &chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    let err = check_stream(body.as_bytes(), &Expect::default()).unwrap_err();
    assert!(err.contains("not unique"), "{err}");
    // Without the repeat it passes.
    let fixed = body.replacen("call_same", "call_other", 1);
    check_stream(fixed.as_bytes(), &Expect::default()).unwrap();
}

/// A valid SSE event may spread its data over several `data:` lines; the
/// client must still get one-line frames.
#[tokio::test]
async fn multi_line_upstream_events_are_reframed() {
    let pieces = char_pieces(SEED_REPLY, 7);
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let sse = upstream_sse(&refs, None);
    // Pretty-print every chunk over several data lines.
    let mut multi = String::new();
    for event in sse.split("\n\n").filter(|e| !e.is_empty()) {
        let data = event.strip_prefix("data: ").unwrap();
        let data = match serde_json::from_str::<Value>(data) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap(),
            Err(_) => data.to_owned(),
        };
        for line in data.lines() {
            multi.push_str("data: ");
            multi.push_str(line);
            multi.push('\n');
        }
        multi.push('\n');
    }
    let mock = Mock::start(move |_| Reply::sse(&[&multi], Duration::ZERO)).await;
    let gw = tools_gateway(&mock, "natural", "").await;
    let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
    assert_eq!(s.choice().content.trim_end(), SEED_TEXT);
    assert_eq!(s.choice().calls.len(), 1);
}

/// The upstream's own error event ends the client's stream: nothing but
/// `[DONE]` may follow it (rule 15), even when the upstream body just ends.
#[tokio::test]
async fn upstream_error_event_ends_the_stream() {
    let mut failures = Vec::new();
    for tail in ["", "data: [DONE]\n\n"] {
        let head = upstream_sse(&["Let me see. "], None);
        // Keep only the role chunk and the content chunk.
        let kept: Vec<&str> = head.split("\n\n").take(2).collect();
        let body = format!(
            "{}\n\ndata: {{\"error\":{{\"message\":\"overloaded\",\"type\":\"server_error\",\"code\":null}}}}\n\n{tail}",
            kept.join("\n\n")
        );
        let mock = Mock::start(move |_| Reply::sse(&[&body], Duration::ZERO)).await;
        let gw = tools_gateway(&mock, "natural", "").await;
        let r = post(&gw.url("/v1/chat/completions"), &chat(true, json!({}))).await;
        match check_stream(&r.body, &Expect::error()) {
            Ok(s) => assert_eq!(s.error.unwrap()["message"], "overloaded"),
            Err(e) => failures.push(format!("tail {tail:?}: {e}\n{}", r.text())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n----\n"));
}

#[tokio::test]
async fn legacy_functions_get_a_function_call_not_tool_calls() {
    // Two calls written: legacy has no parallel calls, so the first is the
    // call and the second stays text.
    let reply = format!("{SEED_REPLY}\n\n<GetWeather>\n{{\"location\": \"Oslo\"}}\n</GetWeather>");
    let m = model(Box::leak(reply.into_boxed_str()), 5, None).await;
    let gw = tools_gateway(&m, "natural", "").await;
    let functions = json!([
        seed_get_weather()["function"],
        seed_book_restaurant()["function"]
    ]);
    let legacy = json!({"tools": null, "functions": functions});

    let (r, s) = stream(&gw, &chat(true, legacy.clone()), &Expect::default()).await;
    let choice = s.choice();
    assert!(choice.calls.is_empty(), "{}", r.text());
    let call = choice
        .function_call
        .as_ref()
        .expect("a function_call delta");
    assert_eq!(call.name, "GetWeather");
    assert_eq!(call.args()["location"], "San Francisco, CA");
    assert_eq!(choice.finish_reason.as_deref(), Some("function_call"));
    assert!(!r.text().contains("tool_calls"), "{}", r.text());

    let v = complete(&gw, &chat(false, legacy)).await;
    let message = &v["choices"][0]["message"];
    assert!(message.get("tool_calls").is_none(), "{v}");
    assert_eq!(message["function_call"]["name"], "GetWeather");
    let args: Value =
        serde_json::from_str(message["function_call"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["location"], "San Francisco, CA");
    assert_eq!(v["choices"][0]["finish_reason"], "function_call");
    assert!(message["content"].as_str().unwrap().contains("Oslo"), "{v}");
}

/// A passthrough provider with `rescue_text_calls`, in front of `mock`.
async fn rescuing(mock: &Mock, extra: &str) -> TestGateway {
    tools_gateway(
        mock,
        "passthrough",
        &format!("rescue_text_calls = true\n{extra}"),
    )
    .await
}

/// What Qwen2.5-Coder writes with native tools declared: the call as a
/// fenced JSON object in the text. Rescue makes it a native call, streamed
/// and whole; the request goes upstream with its tools, untouched.
#[tokio::test]
async fn rescue_turns_a_call_written_as_text_into_a_native_call() {
    let reply = "```json\n{\n  \"name\": \"GetWeather\",\n  \"arguments\": {\n    \"location\": \"San Francisco, CA\",\n    \"unit\": \"fahrenheit\"\n  }\n}\n```";
    let mock = model(reply, 3, None).await;
    let gw = rescuing(&mock, "").await;
    let body = chat(true, json!({}));
    let (_, s) = stream(&gw, &body, &Expect::default()).await;
    let choice = s.choice();
    assert_eq!(choice.content, "", "nothing but the call was written");
    assert_eq!(choice.calls.len(), 1);
    assert_eq!(choice.calls[0].name, "GetWeather");
    assert_eq!(
        choice.calls[0].args(),
        json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
    );
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    let whole = complete(&gw, &chat(false, json!({}))).await;
    let message = &whole["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(message["tool_calls"][0]["function"]["name"], "GetWeather");
    assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls");
    // The upstream got the request as the client sent it.
    let sent = mock.requests.lock().unwrap()[0].json();
    assert_eq!(sent, serde_json::from_str::<Value>(&body).unwrap());

    // Hermes-style `<tool_call>` and a natural syntax are read too.
    for reply in [
        "<tool_call>\n{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
        "Let me check.\n[Checking]{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}",
    ] {
        let mock = model(reply, 5, None).await;
        let gw = rescuing(&mock, "").await;
        let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
        assert_eq!(s.choice().calls.len(), 1, "{reply}");
        assert_eq!(s.choice().calls[0].args(), json!({"location": "Paris"}));
    }
}

/// Anything that is not one clear call to a declared tool passes through:
/// a whole answer byte for byte, a stream's text unchanged; a request
/// without tools is never read.
#[tokio::test]
async fn rescue_passes_everything_else_through() {
    for reply in [
        "Paris is sunny.",
        "```json\n{\"name\": \"Teleport\", \"arguments\": {}}\n```",
        "```json\n{\"name\": \"GetWeather\", \"arguments\": {\"location\": 3}}\n```",
        "Use {\"name\": \"GetWeather\"} like this.",
        "```python\nprint('hi')\n```",
    ] {
        let upstream = upstream_completion(reply);
        let mock = model(reply, 4, None).await;
        let gw = rescuing(&mock, "").await;
        let whole = post(&gw.url("/v1/chat/completions"), &chat(false, json!({}))).await;
        assert_eq!(whole.status, 200);
        assert_eq!(whole.text(), upstream, "byte for byte: {reply}");
        let (_, s) = stream(&gw, &chat(true, json!({})), &Expect::default()).await;
        assert_eq!(s.choice().content, reply);
        assert!(s.choice().calls.is_empty(), "{reply}");
        assert_eq!(s.choice().finish_reason.as_deref(), Some("stop"));
    }
    // No tools declared: the upstream's stream itself.
    let mock = model("```json\n{\"name\": \"GetWeather\"}\n```", 4, None).await;
    let gw = rescuing(&mock, "").await;
    let plain = post(
        &gw.url("/v1/chat/completions"),
        &chat(true, json!({"tools": null})),
    )
    .await;
    let direct = post(
        &format!("{}/v1/chat/completions", mock.url()),
        &chat(true, json!({"tools": null})),
    )
    .await;
    assert_eq!(plain.body, direct.body);
}

/// A native-tools provider with gateway tools runs the calls its model
/// writes as text: rescue applies to the gateway's own loop.
#[tokio::test]
async fn rescue_feeds_the_gateway_tool_loop() {
    let mock = Mock::start(|req| {
        let body = req.json();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        let text = if last["role"] == "tool" {
            format!("The calculator says {}.", last["content"].as_str().unwrap())
        } else {
            "```json\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"17 * 23 + 4\"}}\n```"
                .to_owned()
        };
        let pieces = char_pieces(&text, 7);
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        Reply::sse(&[&upstream_sse(&refs, None)], Duration::ZERO)
    })
    .await;
    let gw = rescuing(&mock, "gateway_tools = [\"builtin:calculator\"]").await;
    let body = json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": "What is 17 * 23 + 4?"}]})
    .to_string();
    let (_, s) = stream(&gw, &body, &Expect::default()).await;
    assert_eq!(s.choice().content, "The calculator says 395.");
    assert_eq!(s.choice().gateway.len(), 1);
    assert!(s.choice().calls.is_empty());
    assert_eq!(mock.requests.lock().unwrap().len(), 2);
}

#[test]
fn rescue_is_refused_outside_passthrough() {
    for (mode, api) in [
        ("natural", "chat"),
        ("to_natural", "chat"),
        ("passthrough", "responses"),
    ] {
        let toml = format!(
            "[[providers]]\nname = \"p\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"*\"]\napi = \"{api}\"\n[providers.tools]\nmode = \"{mode}\"\nrescue_text_calls = true\n"
        );
        let err = toolgate::config::Config::from_toml(&toml).unwrap_err();
        assert!(
            err.to_string().contains("rescue_text_calls"),
            "{mode}/{api}: {err}"
        );
    }
}
