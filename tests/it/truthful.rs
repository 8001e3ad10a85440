//! What the tools and records say is what runs: `toolgate render` prints
//! the body the upstream really receives (held to a mock's received body
//! for every mode), a request that failed over is one exchange in one
//! chat, and an invalid model call is reported as one, to the client and
//! in the transcript alike.

use crate::common;

use std::time::{Duration, Instant};

use common::agent::{sse, text_sse};
use common::{Mock, Recorded, Reply, TestConfig};
use serde_json::{Value, json};
use toolgate::config::Config;

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "GetWeather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}})
}

/// A model that answers every request with plain text.
async fn texting_model() -> Mock {
    Mock::start(|_: &Recorded| sse(text_sse("It is sunny."))).await
}

/// `toolgate render`'s body for `request` at `path`, rendered from `toml`.
async fn rendered(toml: &str, provider: &str, path: &str, request: &Value) -> bytes::Bytes {
    let (toml, provider, path, request) = (
        toml.to_owned(),
        provider.to_owned(),
        path.to_owned(),
        request.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        let config = Config::from_toml(&toml).unwrap();
        let what = toolgate::commands::Render {
            provider: &provider,
            path: &path,
            request: request.as_bytes(),
            wait: Duration::from_secs(10),
        };
        toolgate::commands::render(&config, &what)
            .unwrap_or_else(|e| panic!("render: {e}"))
            .body
    })
    .await
    .unwrap()
}

/// For each tool mode, with and without gateway tools, at each door:
/// what `render` prints is, byte for byte, what the upstream received for
/// the same request.
#[tokio::test]
async fn render_prints_exactly_what_the_upstream_receives() {
    let history = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "GetWeather", "arguments": "{\"location\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]);
    let chat = json!({"model": "m", "messages": history, "tools": [weather_tool()]});
    let streamed =
        json!({"model": "m", "stream": true, "messages": history, "tools": [weather_tool()]});
    let responses = json!({"model": "m", "input": "Weather in Paris?", "tools": [
        {"type": "function", "name": "GetWeather", "parameters": weather_tool()["function"]["parameters"]}]});
    let messages = json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "GetWeather", "input_schema": weather_tool()["function"]["parameters"]}]});
    let cases: Vec<(&str, &str, &str, &Value)> = vec![
        ("mode = \"passthrough\"", "", "/v1/chat/completions", &chat),
        ("mode = \"natural\"", "", "/v1/chat/completions", &chat),
        ("mode = \"natural\"", "", "/v1/chat/completions", &streamed),
        ("mode = \"to_natural\"", "", "/v1/chat/completions", &chat),
        (
            "mode = \"natural\"",
            "gateway_tools = [\"builtin:calculator\"]",
            "/v1/chat/completions",
            &chat,
        ),
        (
            "mode = \"passthrough\"",
            "gateway_tools = [\"builtin:calculator\"]",
            "/v1/chat/completions",
            &streamed,
        ),
        ("mode = \"natural\"", "", "/v1/responses", &responses),
        (
            "mode = \"natural\"",
            "gateway_tools = [\"builtin:clock\"]",
            "/v1/messages",
            &messages,
        ),
    ];
    for (mode, gateway, path, request) in cases {
        let model = texting_model().await;
        let toml = TestConfig::new()
            .provider(
                "up",
                &model.url(),
                "[\"m\"]",
                &format!("[providers.tools]\n{mode}\n{gateway}\n"),
            )
            .toml();
        let gw = common::TestGateway::start(&toml).await;
        let answered = common::post(&gw.url(path), &request.to_string()).await;
        assert_eq!(
            answered.status,
            200,
            "{mode} {gateway} {path}: {}",
            answered.text()
        );
        let received = model.requests.lock().unwrap()[0].body.clone();
        let shown = rendered(&toml, "up", path, request).await;
        assert_eq!(
            String::from_utf8_lossy(&shown),
            String::from_utf8_lossy(&received),
            "{mode} {gateway} {path}"
        );
        if !gateway.is_empty() {
            // The gateway's own tools are declared (as contracts in natural
            // mode), and streaming with usage is asked of the upstream.
            let text = String::from_utf8_lossy(&shown);
            let tool = if gateway.contains("clock") {
                "clock"
            } else {
                "calculator"
            };
            assert!(text.contains(tool), "{text}");
            assert!(text.contains("\"include_usage\":true"), "{text}");
        }
    }
}

/// The embedded `demo-agent` (natural mode, gateway tools): its contracts,
/// gateway tools among them, are in what render prints.
#[tokio::test]
async fn render_shows_the_embedded_agents_contracts() {
    let request = json!({"model": "demo-agent", "messages": [{"role": "user", "content": "What time is it?"}]});
    let body = rendered(
        toolgate::config::EMBEDDED_DEFAULT,
        "demo-agent",
        "/v1/chat/completions",
        &request,
    )
    .await;
    let sent: Value = serde_json::from_slice(&body).unwrap();
    let system = sent["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.contains("## "), "no contracts: {sent}");
    assert_eq!(sent["stream"], true, "{sent}");
}

/// A transcript list entry's chat and its messages, once `n` chats exist.
async fn only_chat(gw: &common::TestGateway) -> (Value, Vec<Value>) {
    let listed = common::chats_listed(&gw.url(""), 1).await;
    let chats = listed["data"].as_array().unwrap().clone();
    assert_eq!(chats.len(), 1, "one request, one chat: {listed}");
    let id = chats[0]["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let chat = common::get(&gw.url(&format!("/toolgate/api/chats/{id}")))
            .await
            .json();
        let messages = chat["messages"].as_array().cloned().unwrap_or_default();
        if messages.len() >= 2 || Instant::now() > deadline {
            return (chat["chat"].clone(), messages);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A request the first provider refuses (503, its attempts spent) and the
/// second answers is one exchange in one chat, recorded under the provider
/// that answered, with no `cut` row; streamed and whole, on the direct path
/// and the gateway-tools path.
#[tokio::test]
async fn a_request_that_failed_over_is_one_exchange_in_one_chat() {
    for (gateway, stream) in [
        ("", false),
        ("", true),
        ("gateway_tools = [\"builtin:calculator\"]", false),
        ("gateway_tools = [\"builtin:calculator\"]", true),
    ] {
        let down = Mock::start(|_: &Recorded| Reply::Full {
            status: 503,
            headers: vec![("content-type", "application/json".into())],
            body: bytes::Bytes::from_static(br#"{"error":{"message":"overloaded"}}"#),
        })
        .await;
        let up = texting_model().await;
        let gw = TestConfig::new()
            .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
            .provider(
                "first",
                &down.url(),
                "[\"m\"]",
                &format!("failover = [\"second\"]\n[providers.retry]\nattempts = 1\non = [\"503\"]\n[providers.tools]\n{gateway}\n"),
            )
            .provider("second", &up.url(), "[\"m\"]", &format!("[providers.tools]\n{gateway}\n"))
            .start()
            .await;
        let body = json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "Hello?"}]});
        let r = common::post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("It is sunny."), "{}", r.text());
        let (chat, messages) = only_chat(&gw).await;
        assert_eq!(
            chat["provider"], "second",
            "{gateway} stream={stream}: {chat}"
        );
        let kinds: Vec<&str> = messages.iter().filter_map(|m| m["kind"].as_str()).collect();
        assert!(
            !kinds.contains(&"error"),
            "{gateway} stream={stream}: {messages:?}"
        );
        assert_eq!(
            messages.iter().filter(|m| m["text"] == "Hello?").count(),
            1,
            "{messages:?}"
        );
    }
}

/// When no provider answers, the request is still one chat, whose error
/// row says what the client got (not that the answer was cut).
#[tokio::test]
async fn a_request_no_provider_answered_is_recorded_with_its_error() {
    let down = || {
        Mock::start(|_: &Recorded| Reply::Full {
            status: 503,
            headers: vec![("content-type", "application/json".into())],
            body: bytes::Bytes::from_static(br#"{"error":{"message":"overloaded"}}"#),
        })
    };
    let (one, two) = (down().await, down().await);
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .provider(
            "first",
            &one.url(),
            "[\"m\"]",
            "failover = [\"second\"]\n[providers.retry]\nattempts = 1\non = [\"503\"]\n",
        )
        .provider(
            "second",
            &two.url(),
            "[\"m\"]",
            "[providers.retry]\nattempts = 1\n",
        )
        .start()
        .await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Hello?"}]});
    let r = common::post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 503);
    let (_, messages) = only_chat(&gw).await;
    let errors: Vec<&Value> = messages.iter().filter(|m| m["kind"] == "error").collect();
    assert_eq!(errors.len(), 1, "{messages:?}");
    assert_eq!(errors[0]["code"], "upstream_status", "{messages:?}");
    assert!(
        errors[0]["text"].as_str().unwrap().contains("503"),
        "{messages:?}"
    );
}

/// A model's invalid call on a provider with gateway tools and
/// `on_invalid = "error"`: the client is told `invalid_tool_call`, not an
/// upstream failure, and the transcript says the same.
#[tokio::test]
async fn an_invalid_model_call_is_reported_as_one() {
    let model = Mock::start(|_: &Recorded| {
        sse(text_sse(
            "<GetWeather>\n```json\n{\"location\": 42}\n```\n</GetWeather>",
        ))
    })
    .await;
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .provider(
            "up",
            &model.url(),
            "[\"m\"]",
            "[providers.tools]\nmode = \"natural\"\non_invalid = \"error\"\ngateway_tools = [\"builtin:calculator\"]\n",
        )
        .start()
        .await;
    for stream in [false, true] {
        let body = json!({"model": "m", "stream": stream, "tools": [weather_tool()],
            "messages": [{"role": "user", "content": "Weather in Paris?"}]});
        let r = common::post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
        let text = r.text();
        assert!(
            text.contains("\"code\":\"invalid_tool_call\""),
            "stream={stream}: {text}"
        );
        assert!(
            !text.contains("\"code\":\"upstream_error\""),
            "stream={stream}: {text}"
        );
        assert!(
            !text.contains("The upstream failed"),
            "stream={stream}: {text}"
        );
        if !stream {
            assert_eq!(r.status, 502);
        }
    }
}

/// An invalid model call is named on the request's one log line, streamed
/// or whole, on the direct natural path and the gateway-tools path: the
/// line carries `code="invalid_tool_call"` and the request id, and no other
/// line speaks of it.
#[tokio::test]
async fn the_log_line_names_an_invalid_call() {
    let model = Mock::start(|r: &Recorded| {
        let said = "I'll use GetWeather for that.\n<GetWeather>\n```json\n{\"location\": 42}\n```\n</GetWeather>";
        if r.json()["stream"] == true {
            sse(text_sse(said))
        } else {
            Reply::json(&common::upstream_completion(said))
        }
    })
    .await;
    let tools = "[providers.tools]\nmode = \"natural\"\non_invalid = \"error\"\n";
    let config = TestConfig::new()
        .provider("nat", &model.url(), "[\"nat\"]", tools)
        .provider(
            "agent",
            &model.url(),
            "[\"agent\"]",
            &format!("{tools}gateway_tools = [\"builtin:calculator\"]\n"),
        )
        .toml();
    let gw = common::binary::Binary::start(&config, &[("TOOLGATE_LOG", "info")]);
    let mut asked = Vec::new();
    for model in ["nat", "agent"] {
        for stream in [false, true] {
            let id = format!("req-{model}-{stream}");
            let body = json!({"model": model, "stream": stream, "tools": [weather_tool()],
                "messages": [{"role": "user", "content": "Weather in Paris?"}]});
            let request = http::Request::post(gw.url("/v1/chat/completions"))
                .header("content-type", "application/json")
                .header("x-request-id", &id)
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    body.to_string(),
                )))
                .unwrap();
            let r = common::send(request).await;
            assert!(r.text().contains("invalid_tool_call"), "{id}: {}", r.text());
            asked.push((id, if stream { 200 } else { 502 }));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = gw.log.lock().unwrap().clone();
        let lines = |id: &str| -> Vec<String> {
            log.iter()
                .filter(|l| l.contains(&format!("request_id=\"{id}\"")))
                .cloned()
                .collect()
        };
        if asked.iter().all(|(id, _)| !lines(id).is_empty()) {
            for (id, status) in &asked {
                let lines = lines(id);
                assert_eq!(lines.len(), 1, "one line per request: {lines:#?}");
                let line = &lines[0];
                assert!(line.contains("toolgate::request"), "{line}");
                assert!(line.contains(&format!(" status={status} ")), "{line}");
                assert!(line.contains(" code=\"invalid_tool_call\""), "{line}");
            }
            let others: Vec<&String> = log
                .iter()
                .filter(|l| l.contains("invalid_tool_call") && !l.contains("request_id="))
                .collect();
            assert!(
                others.is_empty(),
                "a line without the request id: {others:#?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "{log:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The request line's `attempts` counts the attempts of the request's
/// upstream call, not the rounds of a gateway-tools answer: a whole
/// (non-streamed) answer on the Responses and Messages doors, whose rounds
/// all run before the response head, says 1.
#[tokio::test]
async fn the_log_counts_attempts_not_rounds() {
    let gw = common::binary::Binary::start(
        "[[providers]]\nname = \"agent\"\nmodels = [\"agent\"]\n[providers.demo]\nchunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]\n",
        &[("TOOLGATE_LOG", "info")],
    );
    let ask = "Ask the calculator: what is `6 * 7`?";
    for (path, body) in [
        ("/v1/responses", json!({"model": "agent", "input": ask})),
        (
            "/v1/messages",
            json!({"model": "agent", "max_tokens": 256, "messages": [{"role": "user", "content": ask}]}),
        ),
    ] {
        let r = common::post(&gw.url(path), &body.to_string()).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert!(
            r.text().contains("42"),
            "{path}: two rounds ran: {}",
            r.text()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines: Vec<String> = gw
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("toolgate::request") && l.contains("provider=\"agent\""))
            .cloned()
            .collect();
        if lines.len() == 2 {
            for line in &lines {
                assert!(line.contains(" attempts=1 "), "{line}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "{lines:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
