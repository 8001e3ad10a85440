//! Gateway tools served by real MCP servers: `mcp-server-time` from PyPI
//! over stdio and `@modelcontextprotocol/server-everything` from npm over
//! streamable HTTP, both installed by `bash tests/run.sh` (see
//! `common::installed`). The model is a loopback mock making native calls;
//! every stream goes through the conformance checker.

use crate::common;
use crate::conformance;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::agent::{calls_sse, last_role, messages, sse, stream_request, text_sse};
use common::installed::{node_dir, python};
use common::{Mock, TestConfig, TestGateway, get, post};
use conformance::{Expect, check_stream};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// `server-everything` listening on `port` (streamable HTTP at `/mcp`).
struct Everything {
    child: Child,
}

impl Everything {
    async fn start(port: u16) -> Everything {
        let script =
            node_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        assert!(
            script.exists(),
            "{} is missing: run `bash tests/run.sh`",
            script.display()
        );
        let node = std::env::var_os("CLIENT_TESTS_NODE").unwrap_or_else(|| "node".into());
        let child = Command::new(node)
            .arg(&script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let server = Everything { child };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server-everything did not listen on {port} within 10 s");
    }

    async fn kill(&mut self) {
        self.child.kill().await.expect("kill server-everything");
    }
}

fn toml_str(path: &Path) -> String {
    serde_json::to_string(&path.display().to_string()).unwrap()
}

/// Waits until `/readyz` says every tool server is `up` (or, with `up`
/// false, that one is down), returning its text. Either way the gateway
/// itself stays ready: a tool server is named, not waited for.
async fn readyz(gw: &TestGateway, up: bool, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let r = get(&gw.url("/readyz")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let text = r.text();
        let servers: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tool server "))
            .collect();
        let all_up = servers.iter().all(|l| l.contains(": up"));
        let one_down = servers.iter().any(|l| l.contains(": down"));
        if (up && all_up) || (!up && one_down) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz after {within:?}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gateway_calls(body: &[u8]) -> (conformance::StreamSummary, Vec<Value>) {
    let s = check_stream(body, &Expect::usage())
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(body)));
    let calls = s.choice().gateway.clone();
    (s, calls)
}

#[tokio::test]
async fn time_server_over_stdio_offers_its_allowed_tools_under_a_prefix() {
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("It is noon in UTC."))
        } else {
            sse(calls_sse(&[(
                "time_get_current_time",
                r#"{"timezone":"UTC"}"#,
            )]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[mcp_servers]]\nname = \"time\"\ncommand = [{}, \"-m\", \"mcp_server_time\", \"--local-timezone=UTC\"]\nallowed_tools = [\"get_current_time\"]\nprefix = \"time_\"\ntimeout_secs = 20\n",
            toml_str(&python())
        ))
        .agent(&upstream.url(), "passthrough", &["time"], "")
        .start()
        .await;
    readyz(&gw, true, Duration::from_secs(30)).await;

    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (s, calls) = gateway_calls(&r.body);
    assert_eq!(s.choice().content, "It is noon in UTC.");
    assert_eq!(calls.len(), 1, "{}", r.text());
    assert_eq!(calls[0]["name"], "time_get_current_time");
    assert_eq!(calls[0]["server"], "time");
    assert_eq!(calls[0]["status"], "completed", "{}", calls[0]);
    let output: Value = serde_json::from_str(calls[0]["output"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("the time server answers JSON ({e}): {}", calls[0]));
    assert_eq!(output["timezone"], "UTC");
    assert!(output["datetime"].as_str().is_some_and(|d| d.len() >= 19));

    // Only the allowed tool, under its prefix, was offered to the model,
    // and the model's second round saw the server's answer.
    let first = upstream.requests.lock().unwrap()[0].json();
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["time_get_current_time"]);
    let second = messages(&upstream.last());
    assert_eq!(second.last().unwrap()["content"], calls[0]["output"]);
}

#[tokio::test]
async fn everything_server_over_http_runs_calls_in_parallel_with_a_timeout() {
    let port = common::free_port();
    let _server = Everything::start(port).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Echoed; the long one timed out."))
        } else {
            sse(calls_sse(&[
                ("ev_echo", r#"{"message":"hello from the model"}"#),
                (
                    "ev_trigger-long-running-operation",
                    r#"{"duration":8,"steps":4}"#,
                ),
                ("ev_get-sum", r#"{"a":"two","b":3}"#),
            ]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[mcp_servers]]\nname = \"everything\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nprefix = \"ev_\"\nallowed_tools = [\"echo\", \"get-sum\", \"trigger-long-running-operation\"]\ntimeout_secs = 1.5\n"
        ))
        .agent(&upstream.url(), "passthrough", &["everything"], "")
        .start()
        .await;
    readyz(&gw, true, Duration::from_secs(30)).await;

    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (_, calls) = gateway_calls(&r.body);
    let by_name = |name: &str| -> &Value {
        calls
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} reported: {calls:?}"))
    };
    let echo = by_name("ev_echo");
    assert_eq!(echo["status"], "completed");
    assert!(
        echo["output"]
            .as_str()
            .unwrap()
            .contains("hello from the model"),
        "{echo}"
    );
    let long = by_name("ev_trigger-long-running-operation");
    assert_eq!(long["status"], "failed");
    assert!(
        long["error"].as_str().unwrap().contains("timed out"),
        "{long}"
    );
    // Arguments that break the server's own schema never reach it.
    let sum = by_name("ev_get-sum");
    assert_eq!(sum["status"], "failed");
    assert!(sum["error"].as_str().unwrap().contains("schema"), "{sum}");
    let second = messages(&upstream.last());
    let results: Vec<&Value> = second.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(results.len(), 3, "the model sees every result: {second:?}");
}

#[tokio::test]
async fn a_killed_server_fails_its_call_and_is_used_again_once_back() {
    let port = common::free_port();
    let mut server = Everything::start(port).await;
    let upstream = Mock::start(|r| {
        let asked = messages(r)[0]["content"].as_str().unwrap_or("").to_owned();
        if last_role(r) == "tool" {
            sse(text_sse("done"))
        } else if asked.contains("slow") {
            sse(calls_sse(&[(
                "trigger-long-running-operation",
                r#"{"duration":30,"steps":30}"#,
            )]))
        } else {
            sse(calls_sse(&[("echo", r#"{"message":"back again"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[mcp_servers]]\nname = \"everything\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout_secs = 60\n"
        ))
        .agent(&upstream.url(), "passthrough", &["everything"], "")
        .start()
        .await;
    readyz(&gw, true, Duration::from_secs(30)).await;

    let slow = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "something slow"}]});
    let url = gw.url("/v1/chat/completions");
    let answer = tokio::spawn(async move { post(&url, &slow.to_string()).await });
    // Kill the server while the call runs.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill().await;
    let r = tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .expect("the call ends when its server dies, not at its 60 s timeout")
        .unwrap();
    let (_, calls) = gateway_calls(&r.body);
    assert_eq!(calls[0]["status"], "failed", "{}", r.text());

    let down = readyz(&gw, false, Duration::from_secs(20)).await;
    assert!(down.contains("everything"), "{down}");

    let _server = Everything::start(port).await;
    readyz(&gw, true, Duration::from_secs(40)).await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let (_, calls) = gateway_calls(&r.body);
    assert_eq!(calls[0]["status"], "completed", "{}", r.text());
    assert!(calls[0]["output"].as_str().unwrap().contains("back again"));
}

#[test]
fn toolgate_tools_lists_each_servers_tools_and_names_the_one_that_failed() {
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("tools.toml");
    std::fs::write(
        &config,
        format!(
            "[[mcp_servers]]\nname = \"time\"\ncommand = [{}, \"-m\", \"mcp_server_time\"]\nprefix = \"time_\"\n\n[[mcp_servers]]\nname = \"ghost\"\ncommand = [\"/nonexistent/toolgate-ghost\"]\n\n[[providers]]\nname = \"demo\"\nmodels = [\"demo\"]\n[providers.demo]\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"time\", \"builtin:clock\"]\n",
            toml_str(&python())
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["tools", "--wait", "20", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a failed server fails the command");
    assert!(
        stderr.contains("`ghost`") && !stderr.contains("`time`"),
        "{stderr}"
    );
    let listing: Value = serde_json::from_slice(&out.stdout).expect("a JSON listing on stdout");
    let sources: Vec<(&str, &str)> = listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["source"].as_str().unwrap()))
        .collect();
    assert!(
        sources.contains(&("time_get_current_time", "mcp server time")),
        "{sources:?}"
    );
    assert!(sources.contains(&("time_convert_time", "mcp server time")));
    assert!(sources.contains(&("clock", "builtin:clock")));
    let schema = &listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "time_get_current_time")
        .unwrap()["parameters"];
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(
        listing["providers"][0]["gateway_tools"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "{listing}"
    );
}

/// Why a server is down reads as one line: a stdio server's last stderr
/// lines (before: "connection closed: initialize response"), an HTTP
/// server's connection error (before: a Rust type name), never a type dump.
#[tokio::test]
async fn a_down_server_says_why_in_one_line() {
    let upstream = Mock::start(|_| sse(text_sse("never"))).await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[mcp_servers]]\nname = \"missing\"\ncommand = [{}, \"-m\", \"toolgate_no_such_module\"]\n[[mcp_servers]]\nname = \"unreachable\"\nurl = \"http://127.0.0.1:{}/mcp\"\n",
            toml_str(&python()),
            common::free_port()
        ))
        .agent(&upstream.url(), "passthrough", &["missing", "unreachable"], "")
        .start()
        .await;
    let mut body = String::new();
    for _ in 0..100 {
        body = get(&gw.url("/readyz")).await.text();
        if body.contains("No module named") && body.contains("Connection refused") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        body.contains("No module named toolgate_no_such_module"),
        "{body}"
    );
    assert!(body.contains("Connection refused"), "{body}");
    assert!(
        !body.contains("rmcp::") && !body.contains("WorkerTransport"),
        "{body}"
    );
}

/// A server that pages `tools/list` forever, and one that lists too many
/// tools: each is down with the reason (the gateway stays ready), and is
/// tried again less and less often, not twice a second for good.
#[tokio::test]
async fn hostile_listings_are_bounded_and_retried_with_growing_backoff() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hostile.py");
    for (mode, reason) in [
        ("paginate", "went on past 64 pages"),
        ("too-many", "lists more than 512 tools"),
    ] {
        let upstream = Mock::start(|_| sse(text_sse("never"))).await;
        let dir = std::env::temp_dir().join(format!(
            "toolgate-mcp-hostile-{}-{mode}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let starts = dir.join("starts");
        let gw = TestConfig::new()
            .raw(&format!(
                "[[mcp_servers]]\nname = \"hostile\"\ncommand = [{}, {}, \"{mode}\", {}]\n",
                toml_str(&python()),
                toml_str(&script),
                toml_str(&starts)
            ))
            .agent(&upstream.url(), "passthrough", &["hostile"], "")
            .start()
            .await;
        let down = readyz(&gw, false, Duration::from_secs(20)).await;
        assert!(down.contains(reason), "{mode}: {down}");
        assert!(down.contains("retrying in"), "{mode}: {down}");
        // Backoff 0.25 s, 0.5, 1, 2, 4: about five starts in six seconds
        // (a reset after every connect started it twice a second or more).
        tokio::time::sleep(Duration::from_secs(6)).await;
        let n = std::fs::read_to_string(&starts).unwrap().lines().count();
        assert!((2..=7).contains(&n), "{mode}: {n} starts in about 6 s");
    }
}

/// A streamable-HTTP server restarted while toolgate is idle has forgotten
/// the session: calls on it go unanswered. After two calls time out the
/// session is renewed, and the next call is served (before, every later
/// call timed out until toolgate restarted).
#[tokio::test]
async fn a_server_restarted_while_idle_gets_a_new_session() {
    let port = common::free_port();
    let mut server = Everything::start(port).await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("done"))
        } else {
            sse(calls_sse(&[("echo", r#"{"message":"still here"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[mcp_servers]]\nname = \"everything\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout_secs = 2\n"
        ))
        .agent(&upstream.url(), "passthrough", &["everything"], "")
        .start()
        .await;
    readyz(&gw, true, Duration::from_secs(30)).await;
    let call = || async {
        let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
        let (_, calls) = gateway_calls(&r.body);
        calls[0].clone()
    };
    assert_eq!(call().await["status"], "completed");

    server.kill().await;
    let _server = Everything::start(port).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let c = call().await;
        statuses.push(format!("{}: {c}", c["status"]));
        if c["status"] == "completed" {
            assert!(c["output"].as_str().unwrap().contains("still here"), "{c}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        statuses.last().unwrap().starts_with("\"completed\""),
        "{statuses:#?}"
    );
    assert!(
        statuses.iter().all(|s| !s.contains("rmcp::")),
        "errors read as sentences: {statuses:#?}"
    );
}

/// A reload that changes a server's entry lets the calls already running
/// on it finish on the config they started with; later calls use the new
/// entry (before, the reload aborted them with "Transport closed").
#[tokio::test]
async fn a_reload_of_a_server_entry_lets_its_running_calls_finish() {
    let port = common::free_port();
    let _server = Everything::start(port).await;
    let upstream = Mock::start(|r| {
        let asked = messages(r)[0]["content"].as_str().unwrap_or("").to_owned();
        if last_role(r) == "tool" {
            sse(text_sse("done"))
        } else if asked.contains("slow") {
            sse(calls_sse(&[(
                "trigger-long-running-operation",
                r#"{"duration":3,"steps":3}"#,
            )]))
        } else {
            sse(calls_sse(&[("echo", r#"{"message":"after the reload"}"#)]))
        }
    })
    .await;
    let config = |timeout: u32| {
        TestConfig::new()
            .raw(&format!(
                "[[mcp_servers]]\nname = \"everything\"\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout_secs = {timeout}\n"
            ))
            .agent(&upstream.url(), "passthrough", &["everything"], "")
            .toml()
    };
    let gw = TestGateway::start(&config(60)).await;
    readyz(&gw, true, Duration::from_secs(30)).await;

    let slow = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "something slow"}]});
    let url = gw.url("/v1/chat/completions");
    let answer = tokio::spawn(async move { post(&url, &slow.to_string()).await });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    gw.gateway
        .reload(toolgate::config::Config::from_toml(&config(61)).unwrap())
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .unwrap()
        .unwrap();
    let (_, calls) = gateway_calls(&r.body);
    assert_eq!(calls[0]["status"], "completed", "{}", r.text());

    readyz(&gw, true, Duration::from_secs(30)).await;
    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    let (_, calls) = gateway_calls(&r.body);
    assert_eq!(calls[0]["status"], "completed", "{}", r.text());
    assert!(
        calls[0]["output"]
            .as_str()
            .unwrap()
            .contains("after the reload")
    );
}

/// A server that went down takes its tools out of the chat door's offer,
/// and a model that calls one anyway (it read it in an earlier turn) gets
/// a failed gateway call saying the server is down: the call is never
/// handed to the client as one of its own, and the other tools still run.
#[tokio::test]
async fn a_call_to_a_tool_of_a_server_that_went_down_fails_and_never_reaches_the_client() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hostile.py");
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-went-down-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let starts = dir.join("starts");
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("done"))
        } else {
            sse(calls_sse(&[
                ("t0", "{}"),
                ("calculator", r#"{"expression":"6 * 7"}"#),
            ]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[mcp_servers]]\nname = \"changing\"\ncommand = [{}, {}, \"changing\", {}]\n",
            toml_str(&python()),
            toml_str(&script),
            toml_str(&starts)
        ))
        .agent(
            &upstream.url(),
            "passthrough",
            &["changing", "builtin:calculator"],
            "",
        )
        .start()
        .await;
    readyz(&gw, true, Duration::from_secs(20)).await;
    std::fs::write(format!("{}.tools", starts.display()), "down\n").unwrap();
    readyz(&gw, false, Duration::from_secs(20)).await;

    let r = post(&gw.url("/v1/chat/completions"), &stream_request(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (s, calls) = gateway_calls(&r.body);
    assert!(s.choice().calls.is_empty(), "no call goes to the client");
    assert_eq!(s.choice().content, "done");
    assert_eq!(calls[0]["name"], "t0");
    assert_eq!(calls[0]["status"], "failed");
    assert_eq!(
        calls[0]["error"],
        "the tool server `changing` is down: the tool cannot run now"
    );
    assert_eq!(calls[1]["name"], "calculator");
    assert_eq!(calls[1]["output"], "42");
}
