//! No credential the config holds reaches `toolgate check`'s output or a
//! log line at any level, and client-chosen values in the request line
//! cannot add fields to it.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use common::agent::{calls_sse, sse, text_sse};
use common::binary::Binary;
use common::{Mock, Recorded, Reply};
use serde_json::json;

const SECRETS: [&str; 6] = [
    "SECRET-A1",
    "SECRET-B2",
    "SECRET-C3",
    "SECRET-D4",
    "SECRET-E5",
    "SECRET-F6",
];

/// The secrets as they would show in clear or inside a Basic header.
fn shown_forms() -> Vec<String> {
    let mut forms: Vec<String> = SECRETS.iter().map(|s| (*s).to_owned()).collect();
    for (user, secret) in [
        ("user", "SECRET-A1"),
        ("u", "SECRET-C3"),
        ("tenant", "SECRET-E5"),
    ] {
        forms.push(base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}")));
    }
    forms
}

/// A config holding a credential in every place one goes: an HTTP tool's
/// userinfo and query, an MCP server's userinfo, query and header, the
/// OTLP endpoint's userinfo, a provider's header.
fn config(upstream: &str, tool: &str) -> String {
    let (mcp, otlp) = (common::free_port(), common::free_port());
    let tool = tool.replace("http://", "");
    format!(
        r#"[[providers]]
name = "up"
base_url = "{upstream}"
models = ["m"]
headers = {{ "X-Team-Token" = "SECRET-F6" }}
[providers.tools]
gateway_tools = ["lookup"]
[[http_tools]]
name = "lookup"
url = "http://user:SECRET-A1@{tool}/lookup?api_key=SECRET-B2"
[[mcp_servers]]
name = "remote"
url = "http://u:SECRET-C3@127.0.0.1:{mcp}/mcp?token=SECRET-D4"
[telemetry]
otlp_endpoint = "http://tenant:SECRET-E5@127.0.0.1:{otlp}"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_check_or_any_log_line() {
    let tool = Mock::start(|_: &Recorded| Reply::json(r#"{"found": "yes"}"#)).await;
    let model = Mock::start(|r: &Recorded| {
        let asked_before = r.json()["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if asked_before {
            sse(text_sse("Found it."))
        } else {
            sse(calls_sse(&[("lookup", "{}")]))
        }
    })
    .await;
    let toml = config(&model.url(), &tool.url());
    // `check`.
    let dir = std::env::temp_dir().join(format!("toolgate-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("secrets.toml");
    std::fs::write(&path, &toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for secret in shown_forms() {
        assert!(
            !printed.contains(&secret),
            "check printed {secret}:\n{printed}"
        );
    }
    // Serving, at every level: start-up, a request calling the HTTP tool,
    // the MCP server failing to connect, the exporter failing to export.
    let gw = Binary::start(&toml, &[("TOOLGATE_LOG", "trace")]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Look it up"}]});
    let r = common::post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("Found it."), "{}", r.text());
    let called = tool.last();
    assert_eq!(
        called.uri, "/v1/lookup?api_key=SECRET-B2",
        "the tool gets its query"
    );
    assert_eq!(
        called.headers["authorization"],
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("user:SECRET-A1")
        ),
        "the URL's userinfo is sent as what it means"
    );
    // A model name that looks like more fields stays one quoted value.
    let forged = json!({"model": "m tenant=\"admin\"", "messages": []});
    common::post(&gw.url("/v1/chat/completions"), &forged.to_string()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = gw.log.lock().unwrap().clone();
        let mcp_failed = log.iter().any(|l| l.contains("MCP server is down"));
        let forged_logged = log
            .iter()
            .any(|l| l.contains("model=\"m tenant=\\\"admin\\\"\""));
        if (mcp_failed && forged_logged) || Instant::now() > deadline {
            assert!(mcp_failed, "the MCP server's failure was logged");
            assert!(forged_logged, "the model is one quoted value: {log:#?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Trace export is tried (and fails) in the background.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = gw.log.lock().unwrap().clone();
    assert!(log.len() > 50, "trace level logs much: {}", log.len());
    for line in &log {
        for secret in shown_forms() {
            assert!(!line.contains(&secret), "a log line holds {secret}: {line}");
        }
    }
}

/// Issue 53, item 13: every form a credential takes on a stdio server's
/// command line (`-p`, `-pVALUE`, `--bearer`, `--pat`, `--flag=value`,
/// `TOKEN=…`) and in a URL's query (`jwt=`, `code=`, a store's
/// `sslpassword=`): `check` prints none of the values, and no `<redacted>>`.
#[test]
fn check_hides_every_argument_and_query_form() {
    let toml = r#"[[providers]]
name = "up"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
[[mcp_servers]]
name = "local"
command = ["db-mcp", "-p", "ARG-SECRET-01", "--bearer", "ARG-SECRET-02", "--pat", "ARG-SECRET-03",
           "TOKEN=ARG-SECRET-04", "--api-key=ARG-SECRET-05", "-pARG-SECRET-06", "db", "--port", "3306",
           "--token", "env:DB_TOKEN"]
[[mcp_servers]]
name = "remote"
url = "http://127.0.0.1:9/mcp?jwt=ARG-SECRET-07"
[[http_tools]]
name = "lookup"
url = "http://127.0.0.1:9/lookup?code=ARG-SECRET-08&state=ARG-SECRET-09"
[store]
url = "postgres://tg@127.0.0.1:9/db?sslpassword=ARG-SECRET-10&sslmode=disable"
"#;
    let dir = std::env::temp_dir().join(format!("toolgate-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("forms.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    for n in 1..=10 {
        let secret = format!("ARG-SECRET-{n:02}");
        assert!(
            !printed.contains(&secret),
            "check printed {secret}:\n{printed}"
        );
    }
    for kept in [
        "\"--port\"",
        "\"3306\"",
        "env:DB_TOKEN",
        "sslpassword=<redacted>",
    ] {
        assert!(printed.contains(kept), "{kept} hidden:\n{printed}");
    }
    assert!(!printed.contains("<redacted>>"), "{printed}");
}

/// A store URL's `sslpassword=` is a parameter sqlx does not know: its
/// parser logged it, value and all, at `WARN`. Served at every level, the
/// log names the parameter and never shows its value, nor the arguments of
/// a stdio server that cannot start.
#[test]
fn a_store_url_and_a_command_line_reach_no_log_line() {
    let toml = format!(
        r#"[[providers]]
name = "up"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
[[mcp_servers]]
name = "local"
command = ["/nonexistent/db-mcp", "-p", "RUN-SECRET-2", "TOKEN=RUN-SECRET-3", "--bearer", "RUN-SECRET-4"]
[store]
url = "postgres://tg@127.0.0.1:{}/db?sslpassword=RUN-SECRET-1&sslmode=disable"
"#,
        common::free_port()
    );
    let gw = Binary::start(&toml, &[("TOOLGATE_LOG", "trace")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = gw.log.lock().unwrap().clone();
        let named = log.iter().any(|l| l.contains("sslpassword"));
        let store_down = log.iter().any(|l| l.contains("cannot open the database"));
        if (named && store_down) || Instant::now() > deadline {
            assert!(named, "the ignored parameter is named: {log:#?}");
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for line in &log {
        for n in 1..=4 {
            let secret = format!("RUN-SECRET-{n}");
            assert!(!line.contains(&secret), "a log line holds {secret}: {line}");
        }
        assert!(!line.contains("<redacted>>"), "{line}");
    }
}
