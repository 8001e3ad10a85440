//! `tool_search`: a provider whose request may call more tools than its
//! threshold offers `search_tools` instead, answers the model's searches
//! itself and declares what was found from the next round on, in native
//! and natural mode, over gateway tools and over a client's own 200 tools;
//! `[mcp_gateway] tool_search` does the same for MCP clients. The models
//! are scripted mocks; every stream goes through the conformance checker.

use crate::common;
use crate::conformance;

use bytes::Bytes;
use common::agent::{calls_sse, messages, sse, stream_request, text_sse};
use common::{Mock, Recorded, Reply, TestConfig, post};
use conformance::{Expect, check_stream};
use serde_json::{Value, json};

/// Twenty-four HTTP tools about records and `GetWeather`, all at `url`.
fn http_tools(url: &str) -> (String, Vec<String>) {
    let mut toml = String::new();
    let mut names = Vec::new();
    for i in 0..24 {
        names.push(format!("Record{i}"));
        toml.push_str(&format!(
            "[[http_tools]]\nname = \"Record{i}\"\ndescription = \"Reads field {i} of a customer record\"\nurl = \"{url}\"\n\
             parameters = {{ type = \"object\", properties = {{ record_id = {{ type = \"string\" }} }} }}\n"
        ));
    }
    names.push("GetWeather".into());
    toml.push_str(&format!(
        "[[http_tools]]\nname = \"GetWeather\"\ndescription = \"Current weather and temperature for a city\"\nurl = \"{url}\"\n\
         parameters = {{ type = \"object\", properties = {{ location = {{ type = \"string\" }} }}, required = [\"location\"] }}\n"
    ));
    (toml, names)
}

async fn weather_server() -> Mock {
    Mock::start(|_| Reply::Full {
        status: 200,
        headers: vec![("content-type", "text/plain".into())],
        body: Bytes::from_static(b"sunny, 21 C"),
    })
    .await
}

/// The names a chat request declares in `tools`.
fn declared(r: &Recorded) -> Vec<String> {
    r.json()["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The system prompt natural mode wrote into a request.
fn system(r: &Recorded) -> String {
    messages(r)
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn native_mode_searches_the_gateway_tools_then_calls_what_it_found() {
    let weather = weather_server().await;
    let (tools, names) = http_tools(&weather.url());
    // Round 1 searches, round 2 calls what it found, round 3 answers.
    let upstream = Mock::start(|r| match messages(r).len() {
        1 => sse(calls_sse(&[(
            "search_tools",
            r#"{"query": "weather in a city"}"#,
        )])),
        3 => sse(calls_sse(&[("GetWeather", r#"{"location": "Paris"}"#)])),
        _ => sse(text_sse("It is sunny in Paris.")),
    })
    .await;
    let list: Vec<&str> = names.iter().map(String::as_str).collect();
    let gw = TestConfig::new()
        .raw(&tools)
        .agent(
            &upstream.url(),
            "passthrough",
            &list,
            "tool_search = true\ntool_search_threshold = 10",
        )
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.content, "It is sunny in Paris.");
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
    assert_eq!(choice.gateway.len(), 2, "{}", r.text());
    assert_eq!(choice.gateway[0]["name"], "search_tools");
    assert_eq!(choice.gateway[0]["server"], "search");
    assert_eq!(choice.gateway[0]["status"], "completed");
    let found: Value = serde_json::from_str(choice.gateway[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(found["tools"][0]["name"], "GetWeather", "{found}");
    assert_eq!(choice.gateway[1]["name"], "GetWeather");
    assert_eq!(choice.gateway[1]["output"], "sunny, 21 C");
    assert_eq!(weather.last().json(), json!({"location": "Paris"}));

    let sent = upstream.requests.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    assert_eq!(
        declared(&sent[0]),
        ["search_tools"],
        "25 tools wait to be found"
    );
    let second = declared(&sent[1]);
    assert!(second.contains(&"GetWeather".to_owned()), "{second:?}");
    assert!(
        second.len() <= 1 + 5,
        "only what the search found is declared: {second:?}"
    );
    assert_eq!(declared(&sent[2]), second, "found tools stay declared");
}

/// A client's own tools: `tool_0` … `tool_199` about records, and
/// `get_weather` among them.
fn client_tools() -> Vec<Value> {
    let mut tools: Vec<Value> = (0..200)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"),
                "description": format!("Looks up customer record field number {i} in the CRM"),
                "parameters": {"type": "object", "properties": {"record_id": {"type": "string"}}}}})
        })
        .collect();
    tools.insert(
        117,
        json!({"type": "function", "function": {"name": "get_weather",
            "description": "Current weather and temperature for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
    );
    tools
}

fn tag_call(name: &str, arguments: &str) -> String {
    format!("<{name}>\n```json\n{arguments}\n```\n</{name}>\n")
}

#[tokio::test]
async fn natural_mode_searches_a_clients_own_200_tools_and_hands_back_a_native_call() {
    // A search, then a call of the client's tool it found.
    let upstream = Mock::start(|r| {
        let last = messages(r).last().unwrap()["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if last.contains("get_weather") {
            sse(text_sse(&tag_call("get_weather", r#"{"city": "Paris"}"#)))
        } else {
            sse(text_sse(&tag_call(
                "search_tools",
                r#"{"query": "weather"}"#,
            )))
        }
    })
    .await;
    let gw = TestConfig::new()
        .agent(&upstream.url(), "natural", &[], "tool_search = true")
        .raw(&format!(
            "[[providers]]\nname = \"whole\"\nbase_url = \"{}\"\nmodels = [\"whole\"]\n[providers.tools]\nmode = \"natural\"\n",
            upstream.url()
        ))
        .start()
        .await;
    let tools = client_tools();
    let r = post(
        &gw.url("/v1/chat/completions"),
        &stream_request(json!({"tools": tools})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(choice.calls.len(), 1, "{}", r.text());
    assert_eq!(choice.calls[0].name, "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(&choice.calls[0].arguments).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(choice.gateway[0]["name"], "search_tools");

    let sent = upstream.requests.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    let first = system(&sent[0]);
    assert!(first.contains("search_tools"), "{first}");
    assert!(
        !first.contains("tool_150") && !first.contains("get_weather"),
        "the model reads no contract of the 201 tools: {first}"
    );
    let second = system(&sent[1]);
    assert!(second.contains("get_weather"), "{second}");
    assert!(!second.contains("tool_150"), "{second}");

    // The same request to a provider without search: every contract.
    let mut whole =
        serde_json::from_str::<Value>(&stream_request(json!({"tools": tools}))).unwrap();
    whole["model"] = json!("whole");
    let r = post(&gw.url("/v1/chat/completions"), &whole.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let all = upstream.last();
    assert!(system(&all).contains("tool_150"));
    let (with, without) = (sent[0].body.len(), all.body.len());
    eprintln!(
        "tool search, 201 client tools, natural mode: first request {with} bytes with search, {without} without ({:.1}x smaller)",
        without as f64 / with as f64
    );
    assert!(with * 10 < without, "{with} vs {without}");

    // The follow-up: the found tool is declared from the start.
    let id = choice.calls[0].id.clone();
    let follow_up = json!({"model": "m", "stream": true, "tools": tools, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": id, "content": "sunny"}
    ]});
    let r = post(&gw.url("/v1/chat/completions"), &follow_up.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let prompt = system(&upstream.last());
    // The search step is put back before the client's call.
    let turns: Vec<Value> = messages(&upstream.last())
        .into_iter()
        .filter(|m| m["role"] != "system")
        .collect();
    let history = serde_json::to_string(&turns).unwrap();
    assert!(history.contains("search_tools"), "{history}");
    assert!(prompt.contains("get_weather"), "{prompt}");
    assert!(prompt.contains("search_tools"), "{prompt}");
    assert!(!prompt.contains("tool_150"), "{prompt}");
}

#[tokio::test]
async fn under_the_threshold_every_tool_is_declared_and_search_tools_is_a_reserved_name() {
    let upstream = Mock::start(|_| sse(text_sse("Hello."))).await;
    let gw = TestConfig::new()
        .agent(
            &upstream.url(),
            "passthrough",
            &["builtin:calculator"],
            "tool_search = true",
        )
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(declared(&upstream.last()), ["calculator"]);

    let mine = json!([{"type": "function", "function": {"name": "search_tools", "parameters": {"type": "object"}}}]);
    let r = post(
        &gw.url("/v1/chat/completions"),
        &stream_request(json!({"tools": mine})),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("search_tools"), "{}", r.text());
}

#[tokio::test]
async fn the_mcp_door_offers_search_and_runs_what_was_found() {
    const KEY: (&str, &str) = ("TOOL_SEARCH_MCP_KEY", "search-key");
    // SAFETY: this test's own variable, always set to the same value.
    unsafe { std::env::set_var(KEY.0, KEY.1) };
    let weather = weather_server().await;
    let (tools, _) = http_tools(&weather.url());
    let gw = TestConfig::new()
        .server(&format!(
            "[server.auth]\n[[server.auth.keys]]\nname = \"a\"\nkey_env = \"{}\"\n",
            KEY.0
        ))
        .raw(&format!("{tools}[mcp_gateway]\ntool_search = true\n"))
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    let url = gw.url("/mcp");
    let rpc = |message: Value| {
        let url = url.clone();
        async move {
            let r = common::send(
                http::Request::post(&url)
                    .header("authorization", format!("Bearer {}", KEY.1))
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", "2025-06-18")
                    .body(http_body_util::Full::new(Bytes::from(message.to_string())))
                    .unwrap(),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text());
            serde_json::from_str::<Value>(&r.text()).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
        }
    };
    let listed = rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    let listed = listed["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["name"], "search_tools");
    assert_eq!(listed[0]["inputSchema"]["required"], json!(["query"]));

    let searched = rpc(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {"query": "temperature in a city", "limit": 3}}}))
    .await;
    let text = searched["result"]["content"][0]["text"].as_str().unwrap();
    let found: Value = serde_json::from_str(text).unwrap();
    assert_eq!(found["tools"][0]["name"], "GetWeather", "{found}");
    assert_eq!(
        found["tools"][0]["inputSchema"]["required"],
        json!(["location"])
    );
    assert!(found["tools"].as_array().unwrap().len() <= 3);

    let called = rpc(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "GetWeather", "arguments": {"location": "Oslo"}}}))
    .await;
    assert_eq!(
        called["result"]["content"][0]["text"], "sunny, 21 C",
        "{called}"
    );
    assert_eq!(weather.last().json(), json!({"location": "Oslo"}));

    let bad = rpc(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {}}}))
    .await;
    assert_eq!(bad["result"]["isError"], true, "{bad}");
}

#[tokio::test]
async fn natural_mode_reads_a_call_to_a_waiting_tool_the_model_named_without_searching() {
    // A model that guesses the tool's name instead of searching.
    let upstream =
        Mock::start(|_| sse(text_sse(&tag_call("get_weather", r#"{"city": "Oslo"}"#)))).await;
    let gw = TestConfig::new()
        .agent(&upstream.url(), "natural", &[], "tool_search = true")
        .start()
        .await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        &stream_request(json!({"tools": client_tools()})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = check_stream(&r.body, &Expect::usage()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let choice = s.choice();
    assert_eq!(choice.calls.len(), 1, "{}", r.text());
    assert_eq!(choice.calls[0].name, "get_weather");
    assert!(choice.gateway.is_empty());
    let sent = upstream.last();
    assert!(
        sent.json().get("tools").is_none(),
        "natural mode sends no tools"
    );
    assert!(
        !system(&sent).contains("get_weather"),
        "and no contract of it"
    );
    assert!(!String::from_utf8_lossy(&sent.body).contains("toolgate_unlisted"));
}

/// A session of the official Python MCP SDK with `tool_search` on
/// (`python/mcp_search_client.py`): what it listed, found, called, listed
/// again, and every warning it logged.
pub(crate) async fn python_search_session(
    url: &str,
    key: &str,
    query: &str,
    arguments: Value,
    direct: Option<(&str, Value)>,
) -> Value {
    let mut command = tokio::process::Command::new(common::installed::python());
    command
        .arg(common::installed::clients_dir().join("python/mcp_search_client.py"))
        .args([url, key, query, &arguments.to_string()])
        .env("NO_PROXY", "127.0.0.1,localhost");
    if let Some((name, arguments)) = direct {
        command.args([name, &arguments.to_string()]);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
        .await
        .expect("the MCP session ends within 60 s")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "no RESULT: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).unwrap()
}

/// The official Python SDK checks each call's result against the tool's
/// listed output schema, and re-lists to find it: a tool found with
/// `search_tools` (or called by a name known otherwise) is listed from
/// then on for the key, so the call works without "Tool X not listed by
/// server, cannot validate any structured content" (logged on every call
/// before), and the key's change streams hear `list_changed`.
#[tokio::test]
async fn the_python_sdk_calls_what_it_found_without_a_warning() {
    const KEY: (&str, &str) = ("TOOL_SEARCH_SDK_KEY", "search-sdk-key");
    const OTHER: (&str, &str) = ("TOOL_SEARCH_SDK_OTHER", "search-sdk-other");
    for (var, key) in [KEY, OTHER] {
        // SAFETY: this test's own variables, always set to the same values.
        unsafe { std::env::set_var(var, key) };
    }
    let weather = weather_server().await;
    let (tools, _) = http_tools(&weather.url());
    let gw = TestConfig::new()
        .server(&format!(
            "[server.auth]\n[[server.auth.keys]]\nname = \"a\"\nkey_env = \"{}\"\n[[server.auth.keys]]\nname = \"b\"\nkey_env = \"{}\"\n",
            KEY.0, OTHER.0
        ))
        .raw(&format!("{tools}[mcp_gateway]\ntool_search = true\n"))
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    let url = gw.url("/mcp");

    // The key's change stream, open before anything is found.
    let changes = common::client()
        .request(
            http::Request::get(&url)
                .header("authorization", format!("Bearer {}", KEY.1))
                .header("accept", "text/event-stream")
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(changes.status(), 200);

    let session = python_search_session(
        &url,
        KEY.1,
        "temperature in a city",
        json!({"location": "Oslo"}),
        Some(("calculator", json!({"expression": "6 * 7"}))),
    )
    .await;
    assert_eq!(session["listed"], json!(["search_tools"]), "{session}");
    assert_eq!(session["found"][0], "GetWeather", "{session}");
    for call in session["calls"].as_array().unwrap() {
        assert_eq!(call, &json!({"is_error": false, "text": "sunny, 21 C"}));
    }
    assert_eq!(
        session["direct"],
        json!({"is_error": false, "text": "42"}),
        "{session}"
    );
    assert_eq!(
        session["warnings"],
        json!([]),
        "the SDK found every tool it called listed"
    );
    let relisted: Vec<&str> = session["relisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(relisted[0], "search_tools");
    assert!(
        relisted.contains(&"GetWeather") && relisted.contains(&"calculator"),
        "{relisted:?}"
    );
    assert!(relisted.len() <= 5, "only what was found: {relisted:?}");

    // The key's change stream said the list changed.
    let mut body = changes.into_body();
    let event = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        use http_body_util::BodyExt;
        let mut seen = String::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                seen.push_str(&String::from_utf8_lossy(&data));
                if seen.contains("list_changed") {
                    return seen;
                }
            }
        }
        seen
    })
    .await
    .expect("a notification within 5 s");
    assert!(
        event.contains("notifications/tools/list_changed"),
        "{event}"
    );

    // Another key found nothing: its list is `search_tools` alone.
    let other = python_search_session(&url, OTHER.1, "no such thing zzz", json!({}), None).await;
    assert_eq!(other["listed"], json!(["search_tools"]), "{other}");
    assert_eq!(other["relisted"], json!(["search_tools"]), "{other}");
}
