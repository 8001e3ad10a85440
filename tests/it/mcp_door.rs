//! toolgate as an MCP server (`[mcp_gateway]`): the official Python MCP SDK
//! lists the gateway tools page by page and calls them over streamable
//! HTTP; a key sees and runs only the tools its `gateway_tools` allows
//! (anything else is an unknown tool that never runs); no key is `401`;
//! and the door is stateless, so a client that began on one replica goes on
//! on another.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::binary::Binary;
use common::installed::{clients_dir, node_dir, python};
use common::{Collected, Mock, Recorded, Reply, TestConfig};
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};

const KEYS: [(&str, &str); 2] = [("MCP_DOOR_ALL", "mcp-all"), ("MCP_DOOR_CALC", "mcp-calc")];

fn keys() {
    for (var, key) in KEYS {
        // SAFETY: this module's own variables, set to the same values before
        // its gateways read them.
        unsafe { std::env::set_var(var, key) };
    }
}

/// Sixty HTTP tools (`Echo0` … `Echo59`) at `url`, two keys (one sees every
/// tool, one only the calculator) and the MCP door.
fn config(url: &str) -> String {
    let mut tools = String::new();
    for i in 0..60 {
        tools.push_str(&format!(
            "[[http_tools]]\nname = \"Echo{i}\"\ndescription = \"Echo number {i}\"\nurl = \"{url}/echo\"\n\
             parameters = {{ type = \"object\", properties = {{ text = {{ type = \"string\" }} }}, required = [\"text\"] }}\n"
        ));
    }
    TestConfig::new()
        .server(
            "[server.auth]\n[[server.auth.keys]]\nname = \"all\"\nkey_env = \"MCP_DOOR_ALL\"\n\
             [[server.auth.keys]]\nname = \"calc\"\nkey_env = \"MCP_DOOR_CALC\"\ngateway_tools = [\"builtin:calculator\"]\n",
        )
        .raw(&format!("{tools}[mcp_gateway]\n"))
        .demo("chunk_delay_ms = 0")
        .toml()
}

async fn echo() -> Mock {
    Mock::start(|r: &Recorded| {
        let text = r.json()["text"].as_str().unwrap_or_default().to_owned();
        Reply::Full {
            status: 200,
            headers: vec![("content-type", "text/plain".into())],
            body: Bytes::from(format!("echo: {text}")),
        }
    })
    .await
}

/// The official MCP SDKs as clients.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// `python/mcp_client.py`: the `mcp` package.
    Python,
    /// `node/mcp_client.mjs`: `@modelcontextprotocol/sdk`.
    TypeScript,
}

/// The session of `sdk`'s client script with `key`: what it reported.
async fn sdk(url: &str, key: &str) -> Value {
    session(Sdk::Python, url, key).await
}

async fn session(sdk: Sdk, url: &str, key: &str) -> Value {
    let mut command = match sdk {
        Sdk::Python => {
            let mut c = tokio::process::Command::new(python());
            c.arg(clients_dir().join("python/mcp_client.py"));
            c
        }
        Sdk::TypeScript => {
            let mut c = tokio::process::Command::new("node");
            c.arg(node_dir().join("mcp_client.mjs"))
                .current_dir(node_dir());
            c
        }
    };
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        command
            .arg(url)
            .arg(key)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .output(),
    )
    .await
    .expect("the MCP session ends within 60 s")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT: {stdout}\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

#[tokio::test]
async fn the_python_sdk_lists_and_calls_the_tools_its_key_may_use() {
    keys();
    let mock = echo().await;
    let gw = common::TestGateway::start(&config(&mock.url())).await;
    let url = gw.url("/mcp");

    let all = sdk(&url, "mcp-all").await;
    assert_eq!(mock.count(), 1, "Echo0 ran once");
    let calc = sdk(&url, "mcp-calc").await;
    check_sessions(&all, &calc);
    assert_eq!(mock.count(), 1, "a tool the key may not use never runs");

    // No key, or a wrong one: 401 before any MCP.
    for key in [None, Some("nope")] {
        let mut request = Request::post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let r = common::send(
            request
                .body(Full::new(Bytes::from(
                    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
                )))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 401, "{key:?}: {}", r.text());
    }
}

/// One JSON-RPC message to `url` with `key`.
async fn rpc(url: &str, key: &str, message: Value, version: Option<&str>) -> Collected {
    let mut request = Request::post(url)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(version) = version {
        request = request.header("mcp-protocol-version", version);
    }
    common::send(
        request
            .body(Full::new(Bytes::from(message.to_string())))
            .unwrap(),
    )
    .await
}

/// The JSON-RPC answer in a reply (JSON, or the first SSE `data:`).
fn answer(r: &Collected) -> Value {
    let text = r.text();
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(&text);
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// What either SDK reported for the key that sees every tool (`all`) and
/// the one that sees the calculator alone (`calc`).
fn check_sessions(all: &Value, calc: &Value) {
    assert_eq!(all["server"], "toolgate", "{all:#}");
    let tools: Vec<&str> = all["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tools.len(), 62, "60 HTTP tools and 2 built-ins: {tools:?}");
    assert!(tools.contains(&"calculator") && tools.contains(&"clock") && tools.contains(&"Echo59"));
    assert_eq!(all["pages"], 2, "50 a page");
    assert_eq!(all["calculator"], json!({"is_error": false, "text": "35"}));
    assert_eq!(
        all["echo"],
        json!({"is_error": false, "text": "echo: hello"})
    );
    assert!(
        all["unknown"].as_str().unwrap().contains("unknown tool"),
        "{all:#}"
    );
    assert_eq!(all["bad"]["is_error"], true, "{all:#}");
    assert!(
        all["bad"]["text"].as_str().unwrap().contains("schema"),
        "{all:#}"
    );
    // A key limited to the calculator sees it alone, and Echo1 is unknown to it.
    assert_eq!(calc["tools"], json!(["calculator"]), "{calc:#}");
    assert_eq!(calc["calculator"]["text"], "35");
    assert_eq!(calc["echo"], Value::Null);
    assert!(
        calc["unknown"]
            .as_str()
            .unwrap()
            .contains("unknown tool: Echo1"),
        "{calc:#}"
    );
}

#[tokio::test]
async fn the_typescript_sdk_lists_and_calls_the_tools_its_key_may_use() {
    keys();
    let mock = echo().await;
    let gw = common::TestGateway::start(&config(&mock.url())).await;
    let url = gw.url("/mcp");
    let all = session(Sdk::TypeScript, &url, "mcp-all").await;
    let calc = session(Sdk::TypeScript, &url, "mcp-calc").await;
    check_sessions(&all, &calc);
    assert_eq!(mock.count(), 1, "a tool the key may not use never runs");
}

#[tokio::test]
async fn a_client_that_began_on_one_replica_goes_on_on_another() {
    let mock = echo().await;
    let text = config(&mock.url());
    let one = Binary::start(&text, &KEYS);
    let two = Binary::start(&text, &KEYS);
    let init = rpc(
        &one.url("/mcp"),
        "mcp-all",
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        None,
    )
    .await;
    assert_eq!(init.status, 200, "{}", init.text());
    let init = answer(&init);
    let version = init["result"]["protocolVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let notified = rpc(
        &two.url("/mcp"),
        "mcp-all",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&version),
    )
    .await;
    assert!(notified.status.is_success(), "{}", notified.text());
    let listed = rpc(
        &two.url("/mcp"),
        "mcp-all",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        Some(&version),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(
        answer(&listed)["result"]["tools"].as_array().unwrap().len(),
        50
    );
    let called = rpc(
        &one.url("/mcp"),
        "mcp-all",
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}),
        Some(&version),
    )
    .await;
    assert_eq!(called.status, 200, "{}", called.text());
    assert_eq!(answer(&called)["result"]["content"][0]["text"], "42");
    let pinged = rpc(
        &two.url("/mcp"),
        "mcp-all",
        json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
        Some(&version),
    )
    .await;
    assert_eq!(
        answer(&pinged),
        json!({"jsonrpc": "2.0", "id": 4, "result": {}})
    );
}

#[tokio::test]
async fn a_call_is_recorded_under_the_callers_tenant_and_counted_as_mcp() {
    keys();
    let mock = echo().await;
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-door-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite://{}/t.db", dir.display());
    let gw = common::TestGateway::start(&format!(
        "{}[store]\nurl = \"{store}\"\n",
        config(&mock.url())
    ))
    .await;
    let called = rpc(
        &gw.url("/mcp"),
        "mcp-all",
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "Echo3", "arguments": {"text": "recorded"}}}),
        Some("2025-06-18"),
    )
    .await;
    assert_eq!(
        answer(&called)["result"]["content"][0]["text"],
        "echo: recorded"
    );

    // The caller's tenant finds the call; the other tenant does not.
    let list = |key: &'static str| {
        let url = gw.url("/toolgate/api/chats");
        async move {
            let r = common::send(
                Request::get(url)
                    .header("authorization", format!("Bearer {key}"))
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()
        }
    };
    let mut chats = Value::Null;
    for _ in 0..200 {
        chats = list("mcp-all").await;
        if chats["data"].as_array().is_some_and(|d| !d.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let chat = &chats["data"][0];
    assert_eq!(chat["provider"], "mcp", "{chats}");
    let id = chat["id"].as_str().unwrap().to_owned();
    let r = common::send(
        Request::get(gw.url(&format!("/toolgate/api/chats/{id}")))
            .header("authorization", "Bearer mcp-all")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    let text = r.text();
    assert!(
        text.contains("Echo3") && text.contains("echo: recorded"),
        "{text}"
    );
    assert_eq!(
        list("mcp-calc").await["data"].as_array().map(Vec::len),
        Some(0),
        "another tenant sees nothing"
    );

    let metrics = common::get(&gw.url("/metrics")).await.text();
    assert!(
        metrics.contains(
            r#"toolgate_gateway_tool_calls_total{tool="Echo3",server="http",outcome="completed",route="mcp"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_backing_servers_new_tools_are_announced_on_the_get_stream() {
    keys();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hostile.py");
    let dir =
        std::env::temp_dir().join(format!("toolgate-mcp-door-changes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let starts = dir.join("starts");
    let quoted = |p: &std::path::Path| serde_json::to_string(&p.display().to_string()).unwrap();
    let gw = common::TestGateway::start(&format!(
        "{}[[mcp_servers]]\nname = \"changing\"\ncommand = [{}, {}, \"changing\", {}]\n",
        config("http://127.0.0.1:9"),
        quoted(&python()),
        quoted(&script),
        quoted(&starts),
    ))
    .await;
    let url = gw.url("/mcp");
    // The first page: the MCP server's tools come first.
    let names = || async {
        let listed = rpc(
            &url,
            "mcp-all",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            Some("2025-06-18"),
        )
        .await;
        let listed = answer(&listed);
        listed["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| t["name"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !names().await.contains(&"t0".to_owned()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stdio server never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // No key: 401, as for every other request.
    let r = common::send(
        Request::get(&url)
            .header("accept", "text/event-stream")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 401);

    let response = common::client()
        .request(
            Request::get(&url)
                .header("authorization", "Bearer mcp-all")
                .header("accept", "text/event-stream")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    std::fs::write(format!("{}.tools", starts.display()), "t0\nt_new\n").unwrap();
    let event = tokio::time::timeout(Duration::from_secs(20), async {
        use http_body_util::BodyExt;
        let mut seen = String::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                seen.push_str(&String::from_utf8_lossy(&data));
                if seen.contains("\n\n") && seen.contains("data: ") {
                    return seen;
                }
            }
        }
        seen
    })
    .await
    .expect("a notification within 20 s");
    let data = event
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(data).unwrap(),
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    );
    assert!(names().await.contains(&"t_new".to_owned()));
}

/// A stdio server named `internal` whose script does not exist: it never
/// starts, and its stderr names the path (`can't open file '…'`).
fn down_server(dir: &std::path::Path) -> String {
    let missing = dir.join("missing_mcp.py");
    format!(
        "[[mcp_servers]]\nname = \"internal\"\ncommand = [{}, {}]\n",
        serde_json::to_string(&python().display().to_string()).unwrap(),
        serde_json::to_string(&missing.display().to_string()).unwrap(),
    )
}

/// One backing MCP server that cannot start takes only its own tools
/// away: the built-ins and HTTP tools are listed and run for the official
/// Python SDK as if it were not configured, `search_tools` finds and runs
/// them, and nothing a client reads carries the server's stderr or paths
/// (before: every `tools/list`, `tools/call` and search answered `-32603
/// the tool server `internal` is down: initialization failed; its stderr
/// ends: …python: can't open file '…/missing_mcp.py'`).
#[tokio::test]
async fn a_down_server_takes_only_its_own_tools_away() {
    keys();
    let mock = echo().await;
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-door-down-{}", std::process::id()));
    let toml = format!("{}{}", config(&mock.url()), down_server(&dir));
    let gw = common::TestGateway::start(&toml).await;
    gw.gateway
        .tools()
        .mcp()
        .settled(Duration::from_secs(20))
        .await;
    let ready = common::get(&gw.url("/readyz")).await.text();
    assert!(ready.contains("tool server internal: down"), "{ready}");
    let url = gw.url("/mcp");

    let all = sdk(&url, "mcp-all").await;
    let calc = sdk(&url, "mcp-calc").await;
    check_sessions(&all, &calc);
    for reply in [
        rpc(&url, "mcp-all", json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), Some("2025-06-18")).await,
        rpc(
            &url,
            "mcp-all",
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "internal_lookup", "arguments": {}}}),
            Some("2025-06-18"),
        )
        .await,
    ] {
        let text = reply.text();
        assert!(
            !text.contains("missing_mcp") && !text.contains("stderr") && !text.contains(&*dir.to_string_lossy()),
            "a server's stderr and paths stay in the log: {text}"
        );
    }

    // With `tool_search`, the search finds and runs the tools that are up.
    let searching = toml.replace("[mcp_gateway]\n", "[mcp_gateway]\ntool_search = true\n");
    let gw = common::TestGateway::start(&searching).await;
    gw.gateway
        .tools()
        .mcp()
        .settled(Duration::from_secs(20))
        .await;
    let session = crate::tool_search::python_search_session(
        &gw.url("/mcp"),
        "mcp-all",
        "echo number 7",
        json!({"text": "found"}),
        Some(("calculator", json!({"expression": "6 * 7"}))),
    )
    .await;
    assert_eq!(session["found"][0], "Echo7", "{session:#}");
    assert_eq!(
        session["calls"][0],
        json!({"is_error": false, "text": "echo: found"}),
        "{session:#}"
    );
    assert_eq!(session["direct"], json!({"is_error": false, "text": "42"}));
    assert_eq!(session["warnings"], json!([]), "{session:#}");
    assert!(!session.to_string().contains("missing_mcp"), "{session:#}");
}

/// A backing server that goes down: the key's change stream says the list
/// changed, and the list then holds everything but that server's tools,
/// which still run; its stderr stays in the log.
#[tokio::test]
async fn a_server_that_goes_down_leaves_the_list_and_says_so() {
    keys();
    let mock = echo().await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hostile.py");
    let dir = std::env::temp_dir().join(format!(
        "toolgate-mcp-door-goes-down-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let starts = dir.join("starts");
    let quoted = |p: &std::path::Path| serde_json::to_string(&p.display().to_string()).unwrap();
    let gw = common::TestGateway::start(&format!(
        "{}[[mcp_servers]]\nname = \"changing\"\ncommand = [{}, {}, \"changing\", {}]\n",
        config(&mock.url()),
        quoted(&python()),
        quoted(&script),
        quoted(&starts),
    ))
    .await;
    gw.gateway
        .tools()
        .mcp()
        .settled(Duration::from_secs(20))
        .await;
    let url = gw.url("/mcp");
    let list = || async {
        let listed = rpc(
            &url,
            "mcp-all",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            Some("2025-06-18"),
        )
        .await;
        answer(&listed)
    };
    let names = |listed: &Value| -> Vec<String> {
        listed["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&list().await)[0], "t0", "the server is up");

    let response = common::client()
        .request(
            Request::get(&url)
                .header("authorization", "Bearer mcp-all")
                .header("accept", "text/event-stream")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    std::fs::write(format!("{}.tools", starts.display()), "down\n").unwrap();
    let event = tokio::time::timeout(Duration::from_secs(20), async {
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
    .expect("a notification within 20 s");
    assert!(
        event.contains("notifications/tools/list_changed"),
        "{event}"
    );

    let listed = list().await;
    let now = names(&listed);
    assert!(!now.contains(&"t0".to_owned()), "{now:?}");
    assert_eq!(now.len(), 50, "the first page of 62 tools: {now:?}");
    assert_eq!(now[0], "Echo0", "{now:?}");
    assert_eq!(listed["result"]["nextCursor"], "50", "{listed}");
    assert!(!listed.to_string().contains("secret"), "{listed}");
    let called = answer(
        &rpc(
            &url,
            "mcp-all",
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}),
            Some("2025-06-18"),
        )
        .await,
    );
    assert_eq!(called["result"]["content"][0]["text"], "42", "{called}");
}
