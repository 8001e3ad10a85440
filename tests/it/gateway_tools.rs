//! Gateway-side tools end to end: the gateway executes HTTP and built-in
//! tools itself, streams their results as `gateway_tool_calls`, and lets
//! the model continue in the same answer (seeds 003 and 004). Upstreams and
//! tool servers are loopback mocks; every stream goes through the
//! conformance checker.

use crate::common;
use crate::conformance;

use std::time::Duration;

use bytes::Bytes;
use common::agent::{calls_sse, last_role, messages, sse, stream_request, text_sse};
use common::binary::Binary;
use common::{Mock, Reply, TestConfig, TestGateway, post};
use conformance::{Expect, check_completion, check_stream};
use serde_json::json;

/// A tool server answering `text` after `delay`.
async fn tool_server(status: u16, text: &'static str, delay: Duration) -> Mock {
    Mock::start(move |_| Reply::Stream {
        status,
        headers: vec![("content-type", "text/plain".into())],
        pieces: vec![(delay, Bytes::from_static(text.as_bytes()))],
    })
    .await
}

fn http_tool(name: &str, url: &str, timeout: f64) -> String {
    format!(
        "[[http_tools]]\nname = \"{name}\"\ndescription = \"{name} tool\"\nurl = \"{url}\"\ntimeout_secs = {timeout}\nparameters = {{ type = \"object\", properties = {{ location = {{ type = \"string\" }} }} }}\n"
    )
}

#[tokio::test]
async fn a_builtin_tool_runs_and_the_demo_model_continues_in_one_stream() {
    let gw = TestConfig::new()
        .demo("chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]")
        .start()
        .await;
    let body = json!({"model": "demo", "stream": true,
        "messages": [{"role": "user", "content": "What is `(2 + 3) * 7`?"}]});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s =
        check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.gateway.len(), 1, "{}", r.text());
    assert_eq!(choice.gateway[0]["name"], "calculator");
    assert_eq!(choice.gateway[0]["status"], "completed");
    assert_eq!(choice.gateway[0]["output"], "35");
    assert!(
        choice.calls.is_empty(),
        "a gateway call is never a tool_calls delta"
    );
    assert!(
        choice.content.ends_with("calculator returned: 35"),
        "{}",
        choice.content
    );
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn an_http_tool_result_goes_back_to_the_model_and_usage_is_summed() {
    let tool = tool_server(200, "sunny, 21 C", Duration::ZERO).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("It is sunny in Paris."))
        } else {
            sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool(
            "GetWeather",
            &format!("http://{}/weather", tool.addr),
            5.0,
        ))
        .agent(&upstream.url(), "passthrough", &["GetWeather"], "")
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.content, "It is sunny in Paris.");
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
    assert_eq!(choice.gateway[0]["output"], "sunny, 21 C");
    assert_eq!(choice.gateway[0]["arguments"], r#"{"location":"Paris"}"#);
    assert_eq!(choice.gateway[0]["server"], "http");
    assert_eq!(
        s.usage.as_ref().unwrap()["total_tokens"],
        30,
        "two rounds summed"
    );

    assert_eq!(tool.last().json(), json!({"location": "Paris"}));
    assert_eq!(upstream.count(), 2);
    let first = upstream.requests.lock().unwrap()[0].json();
    assert_eq!(first["tools"][0]["function"]["name"], "GetWeather");
    assert_eq!(first["stream"], true);
    let second = messages(&upstream.last());
    let id = choice.gateway[0]["id"].as_str().unwrap();
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["tool_calls"][0]["id"], id);
    assert_eq!(second[1]["tool_calls"][0]["function"]["name"], "GetWeather");
    assert_eq!(
        second[2],
        json!({"role": "tool", "tool_call_id": id, "content": "sunny, 21 C"})
    );
}

#[tokio::test]
async fn non_streaming_answers_carry_the_calls_on_the_message() {
    let tool = tool_server(200, "sunny", Duration::ZERO).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Sunny."))
        } else {
            sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool(
            "GetWeather",
            &format!("http://{}/w", tool.addr),
            5.0,
        ))
        .agent(&upstream.url(), "passthrough", &["GetWeather"], "")
        .start()
        .await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Weather?"}]});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    check_completion(&v).unwrap_or_else(|e| panic!("{e}: {v}"));
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], "Sunny.");
    assert_eq!(message["gateway_tool_calls"][0]["status"], "completed");
    assert_eq!(message["gateway_tool_calls"][0]["output"], "sunny");
    assert!(message.get("tool_calls").is_none());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["total_tokens"], 30);
}

#[tokio::test]
async fn parallel_results_arrive_in_completion_order_and_the_model_waits_for_all() {
    let slow = tool_server(200, "slow result", Duration::from_millis(800)).await;
    let fast = tool_server(200, "fast result", Duration::ZERO).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Both done."))
        } else {
            sse(calls_sse(&[("Slow", "{}"), ("Fast", "{}")]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool("Slow", &format!("http://{}/", slow.addr), 5.0))
        .raw(&http_tool("Fast", &format!("http://{}/", fast.addr), 5.0))
        .agent(&upstream.url(), "passthrough", &["Slow", "Fast"], "")
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    // Reports in the order they happened: both started, the fast one done first.
    let text = r.text();
    let order: Vec<(&str, &str)> = [
        ("Slow", "in_progress"),
        ("Fast", "in_progress"),
        ("Fast", "completed"),
        ("Slow", "completed"),
    ]
    .into_iter()
    .collect();
    let mut at = 0;
    for (name, status) in &order {
        let needle = format!("\"name\":\"{name}\",\"server\":\"http\"");
        let found = text[at..]
            .match_indices(&needle)
            .map(|(i, _)| at + i)
            .find(|&i| text[i..].split("\n\n").next().unwrap().contains(status))
            .unwrap_or_else(|| panic!("{name} {status} after byte {at}:\n{text}"));
        at = found + 1;
    }
    assert_eq!(s.choice().content, "Both done.");
    let second = messages(&upstream.last());
    let results: Vec<&str> = second
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        results,
        ["slow result", "fast result"],
        "results in call order"
    );
}

#[tokio::test]
async fn tool_failures_and_timeouts_are_results_the_model_sees() {
    let broken = tool_server(500, "boom", Duration::ZERO).await;
    let hanging = tool_server(200, "too late", Duration::from_secs(5)).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Sorry, the tools failed."))
        } else {
            sse(calls_sse(&[("Broken", "{}"), ("Hanging", "{}")]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool(
            "Broken",
            &format!("http://{}/", broken.addr),
            5.0,
        ))
        .raw(&http_tool(
            "Hanging",
            &format!("http://{}/", hanging.addr),
            0.3,
        ))
        .agent(&upstream.url(), "passthrough", &["Broken", "Hanging"], "")
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let g = &s.choice().gateway;
    assert_eq!(g[0]["status"], "failed");
    assert_eq!(g[0]["error"], "the tool answered HTTP 500: boom");
    assert_eq!(g[1]["status"], "failed");
    assert_eq!(g[1]["error"], "timed out after 0.3s");
    assert_eq!(s.choice().content, "Sorry, the tools failed.");
    let second = messages(&upstream.last());
    assert_eq!(
        second[2]["content"],
        "Error: the tool answered HTTP 500: boom"
    );
    assert_eq!(second[3]["content"], "Error: timed out after 0.3s");
}

#[tokio::test]
async fn the_round_reaching_max_rounds_is_sent_without_tools() {
    let tool = tool_server(200, "again", Duration::ZERO).await;
    // A model that calls the tool whenever it may.
    let upstream = Mock::start(|r| {
        if r.json()["tool_choice"] == "none" {
            sse(text_sse("Giving up on tools."))
        } else {
            sse(calls_sse(&[("Loop", "{}")]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool("Loop", &format!("http://{}/", tool.addr), 5.0))
        .agent(&upstream.url(), "passthrough", &["Loop"], "max_rounds = 3")
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(upstream.count(), 3);
    assert_eq!(s.choice().gateway.len(), 2);
    assert_eq!(s.choice().content, "Giving up on tools.");
    assert_eq!(s.usage.as_ref().unwrap()["total_tokens"], 45);
    let requests = upstream.requests.lock().unwrap();
    assert!(requests[0].json().get("tool_choice").is_none());
    assert_eq!(requests[2].json()["tool_choice"], "none");
}

#[tokio::test]
async fn a_client_tool_named_like_a_gateway_tool_is_refused() {
    let upstream = Mock::start(|_| sse(text_sse("never"))).await;
    let gw = TestConfig::new()
        .agent(&upstream.url(), "passthrough", &["builtin:clock"], "")
        .start()
        .await;
    let body =
        stream_request(json!({"tools": [{"type": "function", "function": {"name": "clock"}}]}));
    let r = post(&gw.url("/v1/chat/completions"), &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "tools[0].function.name");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`clock`")
    );
    assert_eq!(upstream.count(), 0);
}

#[tokio::test]
async fn client_calls_end_the_answer_and_the_follow_up_restores_the_gateway_steps() {
    let tool = tool_server(200, "sunny", Duration::ZERO).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Done."))
        } else {
            sse(calls_sse(&[
                ("GetWeather", r#"{"location":"Paris"}"#),
                ("Notify", r#"{"text":"hi"}"#),
            ]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool(
            "GetWeather",
            &format!("http://{}/", tool.addr),
            5.0,
        ))
        .agent(&upstream.url(), "passthrough", &["GetWeather"], "")
        .start()
        .await;
    let notify = json!({"type": "function", "function": {"name": "Notify", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}});
    let r = post(
        &gw.url("/v1/chat/completions"),
        &stream_request(json!({"tools": [notify]})),
    )
    .await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(choice.calls.len(), 1);
    assert_eq!(choice.calls[0].name, "Notify");
    assert_eq!(choice.gateway[0]["status"], "completed");
    let gateway_id = choice.gateway[0]["id"].as_str().unwrap().to_owned();
    let client_id = choice.calls[0].id.clone();

    // The client comes back with its own result, as an SDK would send it.
    let follow_up = json!({"model": "m", "stream": true, "tools": [notify], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": client_id, "type": "function", "function": {"name": "Notify", "arguments": "{\"text\":\"hi\"}"}}]},
        {"role": "tool", "tool_call_id": client_id, "content": "notified"}
    ]});
    let r = post(&gw.url("/v1/chat/completions"), &follow_up.to_string()).await;
    check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let seen = messages(&upstream.last());
    let roles: Vec<&str> = seen.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
    let ids: Vec<&str> = seen[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [gateway_id.as_str(), client_id.as_str()]);
    assert_eq!(seen[2]["tool_call_id"], gateway_id.as_str());
    assert_eq!(seen[2]["content"], "sunny");
    assert_eq!(seen[3]["tool_call_id"], client_id.as_str());
}

#[tokio::test]
async fn with_a_store_the_follow_up_finds_the_steps_on_another_replica() {
    let tool = tool_server(200, "sunny", Duration::ZERO).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Done."))
        } else {
            sse(calls_sse(&[
                ("GetWeather", r#"{"location":"Paris"}"#),
                ("Notify", r#"{"text":"hi"}"#),
            ]))
        }
    })
    .await;
    // Two replicas sharing one database (PostgreSQL: a SQLite file is one
    // replica's).
    let pg = common::postgres::Postgres::start();
    let config = TestConfig::new()
        .raw(&format!(
            "[store]\nurl = \"{}\"\n{}",
            pg.url(),
            http_tool("GetWeather", &format!("http://{}/", tool.addr), 5.0)
        ))
        .agent(&upstream.url(), "passthrough", &["GetWeather"], "")
        .toml();
    let a = TestGateway::start(&config).await;
    let b = TestGateway::start(&config).await;
    let notify = json!({"type": "function", "function": {"name": "Notify", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}});
    let r = post(
        &a.url("/v1/chat/completions"),
        &stream_request(json!({"tools": [notify]})),
    )
    .await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let gateway_id = s.choice().gateway[0]["id"].as_str().unwrap().to_owned();
    let client_id = s.choice().calls[0].id.clone();
    let follow_up = json!({"model": "m", "stream": true, "tools": [notify], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": client_id, "type": "function", "function": {"name": "Notify", "arguments": "{\"text\":\"hi\"}"}}]},
        {"role": "tool", "tool_call_id": client_id, "content": "notified"}
    ]});
    // The steps are written off the request path: the follow-up on the other
    // replica finds them once the writer has run.
    let mut seen = Vec::new();
    for _ in 0..50 {
        let r = post(&b.url("/v1/chat/completions"), &follow_up.to_string()).await;
        check_stream(&r.body, &Expect::default()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
        seen = messages(&upstream.last());
        if seen.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let roles: Vec<&str> = seen.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
    assert_eq!(seen[1]["tool_calls"][0]["id"], gateway_id.as_str());
    assert_eq!(seen[2]["tool_call_id"], gateway_id.as_str());
    assert_eq!(seen[2]["content"], "sunny");
    assert_eq!(seen[3]["tool_call_id"], client_id.as_str());
}

#[tokio::test]
async fn in_natural_mode_a_gateway_call_runs_while_the_model_writes_on() {
    let tool = tool_server(200, "sunny", Duration::ZERO).await;
    let (pieces, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let piped = std::sync::Mutex::new(Some(rx));
    // The first round is piped by the test; the second (natural mode: the
    // result comes back as text) continues.
    let upstream = Mock::start(move |_| match piped.lock().unwrap().take() {
        Some(rx) => Reply::Piped(rx),
        None => sse(text_sse("It is sunny.")),
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool(
            "GetWeather",
            &format!("http://{}/", tool.addr),
            5.0,
        ))
        .agent(&upstream.url(), "natural", &["GetWeather"], "")
        .start()
        .await;
    let chunk = |text: &str| {
        let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
        Bytes::from(format!("data: {c}\n\n"))
    };
    let url = gw.url("/v1/chat/completions");
    let answer = tokio::spawn(async move { post(&url, &stream_request(json!({}))).await });
    // The model writes its call, then keeps writing.
    pieces
        .send(chunk(
            "Checking.\n<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>\n",
        ))
        .await
        .unwrap();
    pieces.send(chunk("Still writing")).await.unwrap();
    // The tool is called while the model's turn is still open.
    for _ in 0..400 {
        if tool.count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        tool.count(),
        1,
        "the call ran before the model's turn ended"
    );
    pieces.send(chunk(" and done.")).await.unwrap();
    let end = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    pieces
        .send(Bytes::from(format!("data: {end}\n\ndata: [DONE]\n\n")))
        .await
        .unwrap();
    drop(pieces);
    let r = answer.await.unwrap();
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.gateway[0]["status"], "completed");
    assert!(
        choice.content.contains("Still writing and done."),
        "{}",
        choice.content
    );
    assert!(
        choice.content.ends_with("It is sunny."),
        "{}",
        choice.content
    );
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn to_natural_writes_client_calls_as_text_and_runs_gateway_calls() {
    let tool = tool_server(200, "sunny", Duration::ZERO).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(calls_sse(&[("Notify", r#"{"text":"sunny"}"#)]))
        } else {
            sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool(
            "GetWeather",
            &format!("http://{}/", tool.addr),
            5.0,
        ))
        .agent(
            &upstream.url(),
            "to_natural",
            &["GetWeather"],
            "pretty = false",
        )
        .start()
        .await;
    let notify = json!({"type": "function", "function": {"name": "Notify"}});
    let r = post(
        &gw.url("/v1/chat/completions"),
        &stream_request(json!({"tools": [notify]})),
    )
    .await;
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert!(choice.calls.is_empty());
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
    assert_eq!(choice.gateway[0]["output"], "sunny");
    assert_eq!(
        choice.content,
        "<tool_call name=\"Notify\">\n{\"text\":\"sunny\"}\n</tool_call>"
    );
}

/// A tool server that is down takes only its own tools away: a provider
/// that offers other gateway tools too answers with them (before: `503`
/// for every request while one server was down). A provider whose only
/// tools are down answers `503 tool_server_unavailable` saying that its
/// requests are refused (before: "wait until it is back") and never the
/// server's stderr or paths, which are logged.
#[tokio::test]
async fn a_tool_server_that_is_down_takes_only_its_own_tools_away() {
    let dir = std::env::temp_dir().join(format!("toolgate-ghost-{}", std::process::id()));
    let missing = dir.join("missing_mcp.py");
    let ghost = format!(
        "[[mcp_servers]]\nname = \"ghost\"\ncommand = [{}, {}]\n",
        serde_json::to_string(&common::installed::python().display().to_string()).unwrap(),
        serde_json::to_string(&missing.display().to_string()).unwrap(),
    );
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("forty-two"))
        } else {
            sse(calls_sse(&[("calculator", r#"{"expression":"6 * 7"}"#)]))
        }
    })
    .await;
    let config = TestConfig::new().raw(&ghost).agent(
        &upstream.url(),
        "passthrough",
        &["ghost", "builtin:calculator"],
        "",
    );
    let gw = config.start().await;
    gw.gateway
        .tools()
        .mcp()
        .settled(Duration::from_secs(20))
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    assert_eq!(s.choice().gateway[0]["name"], "calculator");
    assert_eq!(s.choice().gateway[0]["output"], "42");
    assert_eq!(s.choice().content, "forty-two");
    let declared: Vec<String> = upstream.last().json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(declared, ["calculator"]);
    drop(gw);

    let upstream = Mock::start(|_| sse(text_sse("never"))).await;
    let config =
        TestConfig::new()
            .raw(&ghost)
            .agent(&upstream.url(), "passthrough", &["ghost"], "");
    let gw = config.start().await;
    gw.gateway
        .tools()
        .mcp()
        .settled(Duration::from_secs(20))
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    let v = r.json();
    assert_eq!(v["error"]["code"], "tool_server_unavailable");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("tool server `ghost` is down"), "{message}");
    assert!(message.contains("refused"), "{message}");
    assert!(!message.contains("wait until"), "{message}");
    assert!(
        !message.contains("missing_mcp")
            && !message.contains("stderr")
            && !message.contains(&*dir.to_string_lossy()),
        "the server's stderr and paths stay in the log: {message}"
    );
    assert_eq!(
        upstream.count(),
        0,
        "the model is never called with none of its gateway tools"
    );
    // The gateway still serves (other providers, passthrough traffic): the
    // server is named, not waited for.
    let ready = common::get(&gw.url("/readyz")).await;
    assert_eq!(ready.status, 200);
    assert!(
        ready.text().contains("tool server ghost: down"),
        "{}",
        ready.text()
    );
    drop(gw);
    // `server.readiness = "strict"` takes the replica out while it is down.
    let gw = config.server("readiness = \"strict\"").start().await;
    gw.gateway
        .tools()
        .mcp()
        .settled(Duration::from_secs(20))
        .await;
    let ready = common::get(&gw.url("/readyz")).await;
    assert_eq!(ready.status, 503);
    assert!(ready.text().contains("ghost"), "{}", ready.text());
}

/// A client leaving cancels the running tool's request, and the call is
/// counted as cancelled: the in-flight gauge goes back to 0. The real binary,
/// so its metrics are its own.
#[tokio::test]
async fn a_client_that_leaves_cancels_the_running_tools() {
    let tool = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/plain".into())],
        pieces: (0..600)
            .map(|_| (Duration::from_millis(100), Bytes::from_static(b".")))
            .collect(),
    })
    .await;
    let upstream = Mock::start(|_| sse(calls_sse(&[("Slow", "{}")]))).await;
    let config = TestConfig::new()
        .raw(&http_tool("Slow", &format!("http://{}/", tool.addr), 60.0))
        .agent(&upstream.url(), "passthrough", &["Slow"], "")
        .toml();
    let gw = Binary::start(&config, &[]);
    let request = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(stream_request(
            json!({}),
        ))))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    let mut body = response.into_body();
    // Read until the call is reported running, then hang up.
    common::read_until(&mut body, "in_progress").await;
    // The call is reported as it is handed to its task, which may not have
    // started yet (the answer and the connection share a task).
    let mut running = String::new();
    for _ in 0..100 {
        running = common::get(&gw.url("/metrics")).await.text();
        if running.contains("toolgate_gateway_tools_in_flight 1\n") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        running.contains("toolgate_gateway_tools_in_flight 1\n"),
        "{running}"
    );
    // The call is reported running before its request reaches the tool
    // server; leaving before that cancels a request the server never sees
    // (the test then waited for nothing, about one run in five).
    for _ in 0..100 {
        if tool.count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(tool.count(), 1, "the tool's request reached its server");
    let cancelled = tool.stream_cancelled.notified();
    drop(body);
    // The tool server notices the cancelled request at its next write: it
    // writes a byte every 100 ms.
    tokio::time::timeout(Duration::from_secs(10), cancelled)
        .await
        .expect("the tool's request is cancelled when the client leaves");
    let wanted = [
        "toolgate_gateway_tools_in_flight 0\n",
        "toolgate_gateway_tool_calls_total{tool=\"Slow\",server=\"http\",outcome=\"cancelled\",route=\"model\"} 1\n",
    ];
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = common::get(&gw.url("/metrics")).await.text();
        if wanted.iter().all(|w| metrics.contains(w)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for w in wanted {
        assert!(metrics.contains(w), "{w}{metrics}");
    }
}

#[tokio::test]
async fn a_long_tool_call_keeps_the_stream_alive() {
    let tool = tool_server(200, "slow but sure", Duration::from_millis(3600)).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Done."))
        } else {
            sse(calls_sse(&[("Slow", "{}")]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&http_tool("Slow", &format!("http://{}/", tool.addr), 10.0))
        .agent(&upstream.url(), "passthrough", &["Slow"], "")
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let text = r.text();
    check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let comment = text
        .find(": keep-alive")
        .expect("a keep-alive while the tool runs");
    let started = text.find("in_progress").unwrap();
    let done = text.find("\"completed\"").unwrap();
    assert!(started < comment && comment < done, "{text}");
}
