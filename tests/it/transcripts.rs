//! Transcripts in SQLite: what an exchange records (request, text, gateway
//! calls as they happen, results, aggregates, usage), chat linking without
//! a header, redaction, `record`, the events endpoint live and replayed,
//! and the API without a store.

use crate::common;
use crate::conformance;

use std::time::Duration;

use bytes::Bytes;
use common::agent::{calls_sse, last_role, sse, text_sse};
use common::{Mock, Reply, TestConfig, TestGateway, get, post};
use serde_json::{Value, json};

fn demo_agent(store: &str) -> String {
    TestConfig::new()
        .raw(store)
        .demo("chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]")
        .toml()
}

fn sqlite_file(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolgate-store-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/t.db", dir.display())
}

/// The chat's messages once at least `count` are written (the writer is
/// asynchronous).
async fn messages(gw: &TestGateway, chat: &str, count: usize) -> Vec<Value> {
    for _ in 0..100 {
        let r = get(&gw.url(&format!("/toolgate/api/chats/{chat}"))).await;
        if r.status == 200 {
            let v = r.json();
            let m = v["messages"].as_array().unwrap().clone();
            if m.len() >= count {
                return m;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = get(&gw.url(&format!("/toolgate/api/chats/{chat}"))).await;
    panic!("chat {chat} never had {count} messages: {}", r.text());
}

async fn chats(gw: &TestGateway) -> Vec<Value> {
    let r = get(&gw.url("/toolgate/api/chats")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"].as_array().unwrap().clone()
}

fn kinds(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_gateway_tool_exchange_is_recorded_in_order() {
    let store = format!("[store]\nurl = \"{}\"\n", sqlite_file("order"));
    let gw = TestGateway::start(&demo_agent(&store)).await;
    let body = json!({"model": "demo", "stream": true,
        "messages": [{"role": "user", "content": "Ask the calculator: what is `6 * 7`?"}]});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 200);
    let chat = r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned();
    let _ = r.text();
    let m = messages(&gw, &chat, 7).await;
    let want = [
        ("user", "text"),
        ("assistant", "text"),
        ("assistant", "tools_call"),
        ("tool", "tool_result"),
        ("assistant", "tools_aggregate"),
        ("assistant", "text"),
        ("assistant", "usage"),
    ];
    assert_eq!(
        kinds(&m),
        want.map(|(a, b)| (a.to_owned(), b.to_owned())),
        "{m:#?}"
    );
    assert_eq!(m[0]["text"], "Ask the calculator: what is `6 * 7`?");
    assert_eq!(m[2]["toolCalls"][0]["name"], "calculator");
    assert_eq!(m[2]["toolCalls"][0]["server"], "builtin");
    assert_eq!(m[3]["result"], "42");
    assert_eq!(m[3]["toolCallId"], m[2]["toolCalls"][0]["id"]);
    assert_eq!(m[4]["toolResults"][0]["result"], "42");
    assert_eq!(m[5]["text"], "calculator returned: 42");
    assert!(m[6]["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let sequences: Vec<i64> = m
        .iter()
        .map(|m| m["sequenceNumber"].as_i64().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");

    let list = chats(&gw).await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], chat);
    assert_eq!(list[0]["tool_calls"], 1);
    assert_eq!(list[0]["provider"], "demo");
    assert_eq!(list[0]["title"], "Ask the calculator: what is `6 * 7`?");
    assert!(get(&gw.url("/readyz")).await.text().contains("store: up"));
}

/// A client tool loop sent without the header: the second and third turns
/// continue the first one's chat, and nothing is recorded twice.
#[tokio::test]
async fn turns_without_the_header_land_in_one_chat() {
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("It is sunny."))
        } else {
            sse(calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .provider("up", &upstream.url(), "[\"m\"]", "")
        .start()
        .await;
    let tools = json!([{"type": "function", "function": {"name": "GetWeather", "parameters": {"type": "object"}}}]);
    let mut history = vec![json!({"role": "user", "content": "Weather in Paris?"})];
    let mut ids = Vec::new();
    for turn in 0..3 {
        let body = json!({"model": "m", "stream": true, "messages": history, "tools": tools});
        let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
        ids.push(r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned());
        let s = conformance::check_stream(&r.body, &conformance::Expect::usage())
            .unwrap_or_else(|e| panic!("{e}"));
        let choice = s.choice();
        // The client sends back what it assembled, with its own spacing.
        if choice.calls.is_empty() {
            history.push(json!({"role": "assistant", "content": choice.content}));
            history.push(json!({"role": "user", "content": format!("And turn {turn}?")}));
        } else {
            let call = &choice.calls[0];
            history.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": "{ \"location\": \"Paris\" }"}}]}));
            history.push(json!({"role": "tool", "tool_call_id": call.id, "content": "21 C"}));
        }
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let list = chats(&gw).await;
    assert_eq!(list.len(), 1, "{list:#?}");
    let m = messages(&gw, &ids[0], 9).await;
    let users = m
        .iter()
        .filter(|m| m["role"] == "user" && m["kind"] == "text")
        .count();
    assert_eq!(users, 2, "each user message once: {m:#?}");
    let results = m.iter().filter(|m| m["kind"] == "tool_result").count();
    assert_eq!(results, 1, "{m:#?}");
}

/// Two conversations that start alike (the same question, the same reply):
/// on the chat door their call ids tell them apart when they have calls;
/// when nothing does, a follow-up continues the chat its request names, or
/// else the one that reached that state last, never a new chat; on the
/// Responses door `previous_response_id` names the exchange.
#[tokio::test]
async fn conversations_alike_continue_the_named_or_the_latest() {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let upstream = Mock::start(|r| {
        let last = common::agent::messages(r).last().cloned().unwrap();
        let text = last["content"].as_str().unwrap_or_default();
        if last["role"] == "tool" {
            sse(text_sse("It is sunny."))
        } else if text.starts_with("Weather") {
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let call = calls_sse(&[("GetWeather", r#"{"location":"Paris"}"#)])
                .replace("up_call_0", &format!("call_{n}"));
            sse(call)
        } else {
            sse(text_sse("Hello!"))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .provider("up", &upstream.url(), "[\"m\"]", "")
        .start()
        .await;
    let chat_of =
        |r: &common::Collected| r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned();
    let ask = |history: Value| {
        let url = gw.url("/v1/chat/completions");
        async move {
            let body = json!({"model": "m", "stream": true, "messages": history});
            let r = post(&url, &body.to_string()).await;
            assert_eq!(r.status, 200, "{}", r.text());
            r
        }
    };

    // The same question, the same reply; then each its own follow-up.
    let hi = json!({"role": "user", "content": "Hi"});
    let hello = json!({"role": "assistant", "content": "Hello!"});
    let a = chat_of(&ask(json!([hi])).await);
    let b = chat_of(&ask(json!([hi])).await);
    assert_ne!(a, b);
    let a2 = chat_of(&ask(json!([hi, hello, {"role": "user", "content": "A again"}])).await);
    let b2 = chat_of(&ask(json!([hi, hello, {"role": "user", "content": "B again"}])).await);
    assert!(a2 == b && b2 == b, "the latest, twice: {a} {b} {a2} {b2}");
    // Naming its chat, each continues its own.
    let named = {
        let body = json!({"model": "m", "stream": true, "messages": [hi, hello, {"role": "user", "content": "A named"}]});
        let request = http::Request::post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .header("x-toolgate-chat-id", &a)
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap();
        common::send(request).await
    };
    assert_eq!(chat_of(&named), a);
    let recorded = messages(&gw, &a, 5).await;
    let texts: Vec<&str> = recorded.iter().filter_map(|m| m["text"].as_str()).collect();
    assert_eq!(
        texts,
        ["Hi", "Hello!", "A named", "Hello!"],
        "nothing recorded twice"
    );
    let recorded = messages(&gw, &b, 6).await;
    let texts: Vec<&str> = recorded.iter().filter_map(|m| m["text"].as_str()).collect();
    assert_eq!(
        texts,
        ["Hi", "Hello!", "A again", "Hello!", "B again", "Hello!"],
        "each follow-up once, in the latest chat"
    );
    assert_eq!(chats(&gw).await.len(), 2, "no third chat");

    // The same question answered with a call: the call ids tell them apart.
    let weather = json!({"role": "user", "content": "Weather in Paris?"});
    let mut chats = Vec::new();
    let mut follow_ups = Vec::new();
    for _ in 0..2 {
        let r = ask(json!([weather])).await;
        chats.push(chat_of(&r));
        let s = conformance::check_stream(&r.body, &conformance::Expect::usage()).unwrap();
        let id = s.choice().calls[0].id.clone();
        follow_ups.push(json!([weather,
            {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": id, "content": "21 C"}]));
    }
    for (history, chat) in follow_ups.into_iter().zip(&chats).rev() {
        assert_eq!(&chat_of(&ask(history).await), chat);
    }

    // The Responses door: previous_response_id names the exchange.
    let mut kept = Vec::new();
    for _ in 0..2 {
        let r = post(
            &gw.url("/v1/responses"),
            &json!({"model": "m", "input": "Hi there"}).to_string(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        kept.push((r.json()["id"].as_str().unwrap().to_owned(), chat_of(&r)));
    }
    assert_ne!(kept[0].1, kept[1].1);
    for (id, chat) in kept.iter().rev() {
        let body = json!({"model": "m", "input": "And then?", "previous_response_id": id});
        let r = post(&gw.url("/v1/responses"), &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(&chat_of(&r), chat);
    }
}

#[tokio::test]
async fn redaction_record_and_the_header() {
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nredact = [\"$.messages[*].content\", \"$.messages[*].tool_calls[*].function.arguments\"]\n")
        .demo("chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"")
        .start()
        .await;
    // No tools: `record = "tools"` leaves it out.
    let plain = json!({"model": "demo", "messages": [{"role": "user", "content": "hello"}]});
    let r = post(&gw.url("/v1/chat/completions"), &plain.to_string()).await;
    assert!(r.headers.get("x-toolgate-chat-id").is_none());
    // With tools and the client's own chat id.
    let body = json!({"model": "demo", "messages": [{"role": "user", "content": "my secret: weather in Paris?"}],
        "tools": [common::seed_get_weather()]});
    let request = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-toolgate-chat-id", "support-ticket-7")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let r = common::send(request).await;
    assert_eq!(r.headers["x-toolgate-chat-id"], "support-ticket-7");
    let m = messages(&gw, "support-ticket-7", 3).await;
    let text = serde_json::to_string(&m).unwrap();
    assert!(
        !text.contains("secret") && !text.contains("Paris"),
        "{text}"
    );
    assert_eq!(m[0]["text"], "[redacted]");
    let call = m.iter().find(|m| m["kind"] == "tools_call").unwrap();
    assert_eq!(call["toolCalls"][0]["name"], "GetWeather");
    assert_eq!(call["toolCalls"][0]["arguments"], "[redacted]");
    assert_eq!(chats(&gw).await.len(), 1);
}

#[tokio::test]
async fn the_events_endpoint_replays_then_streams_a_call_as_it_runs() {
    let tool = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/plain".into())],
        pieces: vec![(
            Duration::from_millis(800),
            Bytes::from_static(b"<script>alert(1)</script> 21 C"),
        )],
    })
    .await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Done."))
        } else {
            sse(calls_sse(&[("Slow", "{}")]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[store]\nurl = \"sqlite::memory:\"\n[[http_tools]]\nname = \"Slow\"\nurl = \"http://{}/\"\n",
            tool.addr
        ))
        .provider(
            "up",
            &upstream.url(),
            "[\"m\"]",
            "[providers.tools]\ngateway_tools = [\"Slow\"]",
        )
        .start()
        .await;
    let chat = "live-chat";
    // The viewer is there before the answer starts.
    let events_url = gw.url(&format!("/toolgate/api/chats/{chat}/events"));
    let request = http::Request::get(events_url)
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let answer = {
        let url = gw.url("/v1/chat/completions");
        tokio::spawn(async move {
            let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "slow one"}]});
            let request = http::Request::post(url)
                .header("content-type", "application/json")
                .header("x-toolgate-chat-id", "live-chat")
                .body(http_body_util::Full::new(Bytes::from(body.to_string())))
                .unwrap();
            common::send(request).await
        })
    };
    let mut seen = String::new();
    let mut result_at = None;
    let mut call_at = None;
    let started = std::time::Instant::now();
    while !seen.contains("event: usage") {
        let frame = tokio::time::timeout(
            Duration::from_secs(10),
            http_body_util::BodyExt::frame(&mut body),
        )
        .await
        .expect("events keep coming")
        .unwrap()
        .unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
        if call_at.is_none() && seen.contains("event: tools_call_update") {
            call_at = Some(started.elapsed());
            // A viewer arriving now, while the call runs, is given what
            // the answer did so far (not in the database before it ends).
            let replay = replayed(&gw, chat).await;
            for name in ["event: text", "event: tools_call_update"] {
                assert!(replay.contains(name), "{name}: {replay}");
            }
            assert!(replay.contains("slow one"), "{replay}");
        }
        if result_at.is_none() && seen.contains("event: tool_result") {
            result_at = Some(started.elapsed());
        }
    }
    let answer = answer.await.unwrap();
    assert_eq!(answer.status, 200);
    // The call was shown while it ran, its result when it came.
    assert!(seen.find("tools_call_update").unwrap() < seen.find("tool_result").unwrap());
    assert!(result_at.unwrap() > call_at.unwrap());
    assert!(seen.contains("<script>alert(1)</script> 21 C"), "{seen}");

    // A viewer arriving later gets the same, replayed from the store.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let replay = replayed(&gw, chat).await;
    for name in [
        "event: text",
        "event: tools_call_update",
        "event: tool_result",
        "event: tools_aggregate",
        "event: usage",
    ] {
        assert!(replay.contains(name), "{name}: {replay}");
    }
}

/// What a viewer of `chat`'s events is given before `: replayed`.
async fn replayed(gw: &TestGateway, chat: &str) -> String {
    let request = http::Request::get(gw.url(&format!("/toolgate/api/chats/{chat}/events")))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    let mut body = response.into_body();
    let mut replay = String::new();
    while !replay.contains(": replayed") {
        let frame = tokio::time::timeout(
            Duration::from_secs(5),
            http_body_util::BodyExt::frame(&mut body),
        )
        .await
        .unwrap()
        .unwrap()
        .unwrap();
        if let Ok(data) = frame.into_data() {
            replay.push_str(&String::from_utf8_lossy(&data));
        }
    }
    replay
}

#[tokio::test]
async fn without_a_store_the_api_says_so() {
    let gw = TestConfig::new().demo("").start().await;
    let r = get(&gw.url("/toolgate/api/chats")).await;
    assert_eq!(r.status, 404);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("[store]")
    );
    let r = get(&gw.url("/v1/responses/resp_1")).await;
    assert_eq!(r.status, 404);
    let page = get(&gw.url("/toolgate/ui/")).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("toolgate transcripts"));
}

/// The page runs no inline script, is never framed, and no browser guesses
/// its files' types; the API's answers (errors too) are never cached.
#[tokio::test]
async fn the_page_and_the_api_send_strict_headers() {
    let store = format!("[store]\nurl = \"{}\"\n", sqlite_file("headers"));
    let gw = TestGateway::start(&demo_agent(&store)).await;
    let page = get(&gw.url("/toolgate/ui/")).await;
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        !page.text().contains("<script>") && !page.text().contains("<style>"),
        "{}",
        page.text()
    );
    for (path, kind) in [
        ("/toolgate/ui/", "text/html"),
        ("/toolgate/ui/transcripts.js", "text/javascript"),
        ("/toolgate/ui/transcripts.css", "text/css"),
    ] {
        let r = get(&gw.url(path)).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind),
            "{path}"
        );
        assert_eq!(r.headers["x-content-type-options"], "nosniff", "{path}");
    }
    assert_eq!(get(&gw.url("/toolgate/ui/other.js")).await.status, 404);
    for path in ["/toolgate/api/chats", "/toolgate/api/chats/no-such-chat"] {
        let r = get(&gw.url(path)).await;
        assert_eq!(r.headers["cache-control"], "no-store", "{path}");
        assert_eq!(r.headers["x-content-type-options"], "nosniff", "{path}");
    }
}

#[tokio::test]
async fn the_transcript_api_takes_admin_keys_when_they_are_set() {
    // SAFETY: the variable names are unique to this test.
    unsafe {
        std::env::set_var("TOOLGATE_TEST_TRANSCRIPT_CLIENT_KEYS", "client-key");
        std::env::set_var("TOOLGATE_TEST_TRANSCRIPT_ADMIN_KEYS", "admin-key");
    }
    let toml = format!(
        "[server.auth]\napi_keys_env = \"TOOLGATE_TEST_TRANSCRIPT_CLIENT_KEYS\"\nadmin_keys_env = \"TOOLGATE_TEST_TRANSCRIPT_ADMIN_KEYS\"\n{}",
        demo_agent("[store]\nurl = \"sqlite::memory:\"\n")
    );
    let gw = TestGateway::start(&toml).await;
    let call = |path: &str, key: &str| {
        http::Request::get(gw.url(path))
            .header("authorization", format!("Bearer {key}"))
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap()
    };
    // A client's key answers models and reads its own tenant's transcripts.
    assert_eq!(
        common::send(call("/v1/models", "client-key")).await.status,
        200
    );
    let r = common::send(call("/toolgate/api/chats", "client-key")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        common::send(call("/toolgate/api/chats", "no-key"))
            .await
            .status,
        401
    );
    assert_eq!(
        common::send(call("/toolgate/api/chats", "admin-key"))
            .await
            .status,
        200
    );
    // The admin key is not a client key.
    assert_eq!(
        common::send(call("/v1/models", "admin-key")).await.status,
        401
    );
}

/// A store that has taken no write yet is up once its migrations ran (it
/// said "down: connecting" until the first exchange).
#[tokio::test]
async fn an_idle_store_is_up_once_migrated() {
    let store = format!("[store]\nurl = \"{}\"\n", sqlite_file("idle"));
    let gw = TestGateway::start(&demo_agent(&store)).await;
    let mut text = String::new();
    for _ in 0..100 {
        text = get(&gw.url("/readyz")).await.text();
        if text.contains("store: up") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the idle store never shows up: {text}");
}

/// An answer that ends before its finish (here the client leaves while a
/// gateway call runs; shutdown's grace period ends a stream the same way)
/// is recorded as cut: the running call gets a cancelled result and an
/// `error` row closes the answer, never a transcript that reads as fine.
#[tokio::test]
async fn an_answer_cut_while_a_call_runs_is_recorded_as_cut() {
    let tool = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/plain".into())],
        pieces: vec![(Duration::from_secs(30), Bytes::from_static(b"late"))],
    })
    .await;
    let upstream = Mock::start(|_| sse(calls_sse(&[("Slow", "{}")]))).await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[store]\nurl = \"{}\"\n[[http_tools]]\nname = \"Slow\"\ndescription = \"slow\"\nurl = \"http://{}/\"\ntimeout_secs = 60\nparameters = {{ type = \"object\" }}\n",
            sqlite_file("cut"),
            tool.addr
        ))
        .agent(&upstream.url(), "passthrough", &["Slow"], "")
        .start()
        .await;
    let request = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(
            common::agent::stream_request(json!({})),
        )))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    let chat = response.headers()["x-toolgate-chat-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut body = response.into_body();
    common::read_until(&mut body, "in_progress").await;
    drop(body);
    let rows = messages(&gw, &chat, 5).await;
    let kinds = kinds(&rows);
    let result = rows
        .iter()
        .find(|m| m["kind"] == "tool_result")
        .unwrap_or_else(|| panic!("no result row: {kinds:?}"));
    assert_eq!(result["isError"], true, "{result}");
    let last = rows.last().unwrap();
    assert_eq!(last["kind"], "error", "{kinds:?}");
    assert_eq!(last["code"], "cut", "{last}");
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: std::path::PathBuf,
}

impl SmallDisk {
    /// `None` where this process may not mount (not root, no privilege).
    fn mount(name: &str, size: &str) -> Option<SmallDisk> {
        let dir = std::env::temp_dir().join(format!("toolgate-disk-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// Waits until `/readyz` holds `text`; what it said last.
async fn ready_says(gw: &TestGateway, text: &str) -> String {
    let mut said = String::new();
    for _ in 0..100 {
        said = get(&gw.url("/readyz")).await.text();
        if said.contains(text) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    said
}

/// A SQLite file toolgate may not write: the store is down and says why,
/// traffic is unaffected, and once the file is writable the store comes up
/// by itself and records. No shared-memory (`-shm`) file is ever made.
#[tokio::test]
async fn an_unwritable_sqlite_file_keeps_the_store_down_until_it_is_writable() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: run as root (toolgate runs as nobody against a file it may not write)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("toolgate-unwritable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = dir.join("t.db");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let config = demo_agent(&format!(
        "[store]\nurl = \"sqlite://{}\"\nrecord = \"all\"\n",
        path.display()
    ));
    let gw = common::binary::Binary::start_as(&config, &[], Some(65534));
    let ready = |text: &'static str| {
        let url = gw.url("/readyz");
        async move {
            let mut said = String::new();
            for _ in 0..300 {
                said = get(&url).await.text();
                if said.contains(text) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            said
        }
    };
    let said = ready("store: down").await;
    assert!(
        said.contains("store: down") && said.contains("readonly"),
        "{said}"
    );
    let ask = |text: &str| {
        let url = gw.url("/v1/chat/completions");
        let body = json!({"model": "demo", "messages": [{"role": "user", "content": text}]});
        async move {
            let r = post(&url, &body.to_string()).await;
            assert_eq!(r.status, 200, "traffic is unaffected: {}", r.text());
            r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned()
        }
    };
    ask("while unwritable").await;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let said = ready("store: up").await;
    assert!(said.contains("store: up"), "{said}");
    let chat = ask("once writable").await;
    let mut stored = Value::Null;
    for _ in 0..100 {
        stored = get(&gw.url(&format!("/toolgate/api/chats/{chat}")))
            .await
            .json();
        if stored["messages"].as_array().is_some_and(|m| !m.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stored["messages"][0]["text"], "once writable", "{stored}");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!files.iter().any(|f| f.ends_with("-shm")), "{files:?}");
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A SQLite file deleted while toolgate holds it is reported: `/readyz`
/// names it, and the store shows down.
#[tokio::test]
async fn a_deleted_sqlite_file_is_reported() {
    let dir = std::env::temp_dir().join(format!("toolgate-deleted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.db");
    let store = format!("[store]\nurl = \"sqlite://{}\"\n", path.display());
    let gw = TestGateway::start(&demo_agent(&store)).await;
    assert!(ready_says(&gw, "store: up").await.contains("store: up"));
    std::fs::remove_file(&path).unwrap();
    let said = ready_says(&gw, "was deleted").await;
    assert!(
        said.contains(&format!("the database file {} was deleted", path.display())),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// SQLite on a disk that fills up part-way through the writer's batches:
/// the failed batches are dropped (counted), the connection that failed is
/// not reused, and once space returns every later chat is stored and the
/// chat list reads the same every time.
#[tokio::test]
async fn sqlite_recovers_after_the_disk_was_full() {
    let Some(disk) = SmallDisk::mount("full", "8m") else {
        eprintln!("skipped: this process may not mount a tmpfs (run as root to test a full disk)");
        return;
    };
    let store = format!("[store]\nurl = \"sqlite://{}/t.db\"\n", disk.dir.display());
    let gw = TestGateway::start(&demo_agent(&store)).await;
    for _ in 0..100 {
        if get(&gw.url("/readyz")).await.text().contains("store: up") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Fill the disk in 100 KB files, then free about 600 KB of it.
    let mut fillers = Vec::new();
    for i in 0.. {
        let path = disk.dir.join(format!("filler-{i}"));
        if std::fs::write(&path, vec![0u8; 100 * 1024]).is_err() {
            let _ = std::fs::remove_file(&path);
            break;
        }
        fillers.push(path);
    }
    for path in fillers.drain(fillers.len().saturating_sub(6)..) {
        std::fs::remove_file(path).unwrap();
    }
    let padding = "x".repeat(20 * 1024);
    let ask = |title: String, padding: &str| {
        let url = gw.url("/v1/chat/completions");
        let body = json!({"model": "demo", "messages": [{"role": "user",
            "content": format!("{title}: ask the calculator: what is `2 * 3`? {padding}")}]});
        async move { post(&url, &body.to_string()).await }
    };
    for i in 0..70 {
        let r = ask(format!("early-{i}"), &padding).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // Space returns.
    for path in fillers.drain(..) {
        std::fs::remove_file(path).unwrap();
    }
    for i in 0..20 {
        let r = ask(format!("later-{i}"), "").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let later = |list: &Value| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["title"].as_str().unwrap_or("").starts_with("later-"))
            .count()
    };
    let mut list = Value::Null;
    for _ in 0..100 {
        list = get(&gw.url("/toolgate/api/chats?limit=500")).await.json();
        if list["data"].is_array() && later(&list) == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(later(&list), 20, "{list:#}");
    let counts: Vec<usize> = {
        let mut counts = Vec::new();
        for _ in 0..6 {
            let l = get(&gw.url("/toolgate/api/chats?limit=500")).await.json();
            counts.push(l["data"].as_array().map_or(0, Vec::len));
        }
        counts
    };
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
    assert!(
        get(&gw.url("/readyz")).await.text().contains("store: up"),
        "the store is up again"
    );
    drop(gw);
}

/// A model's invalid call with `on_invalid = "error"` is recorded the same
/// way whether the answer streamed or not, on the direct natural path and
/// on the gateway-tools path: the text the model wrote before the call,
/// then an `error` row with the code and the block as the model wrote it.
#[tokio::test]
async fn an_invalid_call_is_recorded_alike_streamed_or_whole() {
    const BEFORE: &str = "I'll use GetOrder for that.";
    const BLOCK: &str = "<GetOrder>\n```json\n{\"order\": 42}\n```\n</GetOrder>";
    let model = Mock::start(|r: &common::Recorded| {
        let said = format!("{BEFORE}\n{BLOCK}");
        if r.json()["stream"] == true {
            sse(text_sse(&said))
        } else {
            Reply::json(&common::upstream_completion(&said))
        }
    })
    .await;
    let tools = "[providers.tools]\nmode = \"natural\"\non_invalid = \"error\"\n";
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .provider("nat", &model.url(), "[\"nat\"]", tools)
        .provider(
            "agent",
            &model.url(),
            "[\"agent\"]",
            &format!("{tools}gateway_tools = [\"builtin:calculator\"]\n"),
        )
        .start()
        .await;
    let order = json!({"type": "function", "function": {"name": "GetOrder", "description": "An order",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}}});
    for model in ["nat", "agent"] {
        for stream in [true, false] {
            let chat = format!("invalid-{model}-{stream}");
            let body = json!({"model": model, "stream": stream, "tools": [order],
                "messages": [{"role": "user", "content": "Where is order 42?"}]});
            let request = http::Request::post(gw.url("/v1/chat/completions"))
                .header("content-type", "application/json")
                .header("x-toolgate-chat-id", &chat)
                .body(http_body_util::Full::new(Bytes::from(body.to_string())))
                .unwrap();
            let r = common::send(request).await;
            assert!(
                r.text().contains("invalid_tool_call"),
                "{chat}: {}",
                r.text()
            );
            if !stream {
                // The client of a whole answer gets the text in the error.
                assert_eq!(
                    r.json()["error"]["text"].as_str().map(str::trim),
                    Some(BEFORE),
                    "{chat}: {}",
                    r.text()
                );
            }
            let m = messages(&gw, &chat, 3).await;
            let said: Vec<&str> = m
                .iter()
                .filter(|m| m["role"] == "assistant" && m["kind"] == "text")
                .filter_map(|m| m["text"].as_str())
                .collect();
            assert_eq!(
                said.concat().trim(),
                BEFORE,
                "{chat}: the text before the call: {m:#?}"
            );
            let errors: Vec<&Value> = m.iter().filter(|m| m["kind"] == "error").collect();
            assert_eq!(errors.len(), 1, "{chat}: {m:#?}");
            assert_eq!(errors[0]["code"], "invalid_tool_call", "{chat}: {m:#?}");
            assert_eq!(
                errors[0]["raw"].as_str().map(str::trim),
                Some(BLOCK),
                "{chat}: the call as the model wrote it: {m:#?}"
            );
        }
    }
}

/// A search is its words, each found somewhere in the chat (title, prompts,
/// answers), in any order and any case; a quoted phrase is one word; in
/// SQLite and PostgreSQL alike. A chat's rows carry the request's id.
#[tokio::test]
async fn a_search_finds_every_word_in_any_order_in_sqlite_and_postgresql() {
    let pg = common::postgres::Postgres::start();
    let mock = Mock::start(|_: &common::Recorded| {
        Reply::json(&common::upstream_completion("Sprockets in stock."))
    })
    .await;
    for store in ["sqlite::memory:".to_owned(), pg.url()] {
        let gw = TestConfig::new()
            .up(&mock.url(), "")
            .raw(&format!("[store]\nurl = \"{store}\"\nrecord = \"all\"\n"))
            .start()
            .await;
        for text in [
            "Question number 42 about widgets",
            "Question number 7 about widgets",
            "Question number 42 about gadgets",
        ] {
            let body = json!({"model": "m", "messages": [{"role": "user", "content": text}]});
            let r = common::send(
                http::Request::post(gw.url("/v1/chat/completions"))
                    .header("content-type", "application/json")
                    .header("x-request-id", format!("req-{}", text.len()))
                    .body(http_body_util::Full::new(Bytes::from(body.to_string())))
                    .unwrap(),
            )
            .await;
            assert_eq!(r.status, 200);
        }
        let found = async |q: &str| -> Vec<String> {
            let url = gw.url(&format!("/toolgate/api/chats?q={}", urlencode(q)));
            for _ in 0..100 {
                let r = get(&url).await;
                assert_eq!(r.status, 200, "{}", r.text());
                let all = get(&gw.url("/toolgate/api/chats")).await.json();
                if all["data"].as_array().unwrap().len() == 3 {
                    let mut titles: Vec<String> = r.json()["data"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["title"].as_str().unwrap().to_owned())
                        .collect();
                    titles.sort();
                    return titles;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("{store}: the chats never landed");
        };
        let only_42 = ["Question number 42 about widgets".to_owned()];
        assert_eq!(found("widgets 42").await, only_42, "{store}");
        assert_eq!(found("42 WIDGETS").await, only_42, "{store}");
        assert_eq!(found("\"about widgets\" 42").await, only_42, "{store}");
        // A word of the answer counts as much as one of the question.
        assert_eq!(found("sprockets 42 widgets").await, only_42, "{store}");
        assert_eq!(found("widgets").await.len(), 2, "{store}");
        assert!(
            found("\"42 widgets\"").await.is_empty(),
            "{store}: a phrase is whole"
        );
        assert!(found("widgets 42 tuesday").await.is_empty(), "{store}");
        let many = get(&gw.url("/toolgate/api/chats?q=a+b+c+d+e+f+g+h+i")).await;
        assert_eq!(many.status, 400, "{}", many.text());

        let chats = chats(&gw).await;
        let chat = chats.iter().find(|c| c["title"] == only_42[0]).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let rows = messages(&gw, &chat, 2).await;
        assert!(
            rows.iter().all(|m| m["requestId"] == "req-32"),
            "{store}: {rows:?}"
        );
    }
}

fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            b' ' => "+".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
