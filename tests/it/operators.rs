//! What operators and browsers see around the answers: request ids on
//! every response, CORS when configured, the transcript API's JSON
//! compressed, and a live SQLite store backed up while toolgate runs.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::TestConfig;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::json;

async fn send(request: http::request::Builder, body: &str) -> common::Collected {
    common::send(
        request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn every_response_carries_a_request_id_kept_or_made() {
    let gw = TestConfig::new().demo("chunk_delay_ms = 0").start().await;
    let body =
        json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let chat =
        || Request::post(gw.url("/v1/chat/completions")).header("content-type", "application/json");
    let kept = send(chat().header("x-request-id", "client-req-1"), &body).await;
    assert_eq!(kept.headers["x-request-id"], "client-req-1");
    let made = send(chat(), &body).await;
    let id = made.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(id.len(), 32, "{id}");
    let other = send(chat(), &body).await;
    assert_ne!(
        other.headers["x-request-id"],
        id.as_str(),
        "each request its own"
    );
    // An id a client should not have chosen (too long, odd bytes) is replaced.
    let odd = send(chat().header("x-request-id", "a b"), &body).await;
    assert_eq!(odd.headers["x-request-id"].len(), 32);
    // Errors and the operational endpoints carry one too.
    let missing = send(chat(), "{}").await;
    assert_eq!(missing.status, 400);
    assert!(missing.headers.contains_key("x-request-id"));
    let health = common::get(&gw.url("/healthz")).await;
    assert!(health.headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn the_request_line_names_the_request_id() {
    let gw = common::binary::Binary::start(
        "[[providers]]\nname = \"demo\"\nmodels = [\"demo\"]\n[providers.demo]\nchunk_delay_ms = 0\n",
        &[("TOOLGATE_LOG", "info")],
    );
    let body =
        json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = send(
        Request::post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .header("x-request-id", "trace-me-42"),
        &body,
    )
    .await;
    assert_eq!(r.status, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = gw.log.lock().unwrap().clone();
        if log.iter().any(|l| l.contains("request_id=\"trace-me-42\"")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{log:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn cors_is_off_unless_configured_and_then_answers_preflights() {
    let plain = TestConfig::new().demo("chunk_delay_ms = 0").start().await;
    let preflight = |gw: &common::TestGateway, origin: &str| {
        Request::builder()
            .method(Method::OPTIONS)
            .uri(gw.url("/v1/chat/completions"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
    };
    let r = send(preflight(&plain, "https://app.example"), "").await;
    assert!(
        !r.headers.contains_key("access-control-allow-origin"),
        "off by default"
    );
    // SAFETY: this test's own variable, set before its gateway reads it.
    unsafe {
        std::env::set_var("OPERATORS_CORS_KEY", "cors-key");
    }
    let gw = TestConfig::new()
        .server("[server.cors]\nallowed_origins = [\"https://app.example\"]")
        .raw("[server.auth]\napi_keys_env = \"OPERATORS_CORS_KEY\"")
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    // The preflight needs no key; the allowed origin is echoed.
    let r = send(preflight(&gw, "https://app.example"), "").await;
    assert!(r.status.is_success(), "{}", r.status);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "https://app.example"
    );
    let methods = r.headers["access-control-allow-methods"].to_str().unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let r = send(preflight(&gw, "https://evil.example"), "").await;
    assert!(!r.headers.contains_key("access-control-allow-origin"));
    // The call itself carries the headers a page may read.
    let body =
        json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let r = send(
        Request::post(gw.url("/v1/chat/completions"))
            .header("origin", "https://app.example")
            .header("authorization", "Bearer cors-key")
            .header("content-type", "application/json"),
        &body,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "https://app.example"
    );
    let exposed = r.headers["access-control-expose-headers"].to_str().unwrap();
    assert!(exposed.contains("x-request-id"), "{exposed}");
}

#[tokio::test]
async fn the_transcript_api_compresses_its_json() {
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    for n in 0..20 {
        let body = json!({"model": "demo", "messages": [{"role": "user", "content": format!("question number {n}")}]});
        common::post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    }
    common::chats_listed(&gw.url(""), 20).await;
    let r = send(
        Request::get(gw.url("/toolgate/api/chats")).header("accept-encoding", "gzip"),
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-encoding"], "gzip");
    assert_eq!(r.headers["cache-control"], "no-store");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&r.body[..]), &mut text)
        .unwrap();
    let listed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(listed["data"].as_array().unwrap().len(), 20);
    // Without `accept-encoding`, plain JSON.
    let plain = common::get(&gw.url("/toolgate/api/chats")).await;
    assert!(!plain.headers.contains_key("content-encoding"));
    assert!(plain.body.len() > r.body.len());
}

#[tokio::test]
async fn a_live_sqlite_store_is_backed_up_into_a_file_sqlite_opens() {
    let dir = std::env::temp_dir().join(format!("toolgate-backup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY: this test's own variables, set before its gateway reads them.
    unsafe {
        std::env::set_var("OPERATORS_BACKUP_ADMIN", "backup-admin");
        std::env::set_var("OPERATORS_BACKUP_CLIENT", "backup-client");
    }
    let gw = TestConfig::new()
        .raw(&format!(
            "[server.auth]\napi_keys_env = \"OPERATORS_BACKUP_CLIENT\"\nadmin_keys_env = \"OPERATORS_BACKUP_ADMIN\"\n[store]\nurl = \"sqlite://{}/t.db\"\nrecord = \"all\"\n",
            dir.display()
        ))
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    for n in 0..5 {
        let body = json!({"model": "demo", "messages": [{"role": "user", "content": format!("kept {n}")}]});
        let r = send(
            Request::post(gw.url("/v1/chat/completions"))
                .header("authorization", "Bearer backup-client")
                .header("content-type", "application/json"),
            &body.to_string(),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let get = |key: &str| {
        Request::get(gw.url("/toolgate/api/backup"))
            .header("authorization", format!("Bearer {key}"))
    };
    let refused = send(get("backup-client"), "").await;
    assert_eq!(
        refused.status, 403,
        "a client key sees one tenant, not the file"
    );
    // Written behind the answers: the copy holds every chat once they land.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let copy = dir.join("copy.db");
    loop {
        let r = send(get("backup-admin"), "").await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.headers["content-type"], "application/vnd.sqlite3");
        std::fs::write(&copy, &r.body).unwrap();
        let out = std::process::Command::new(common::installed::python())
            .args([
                "-c",
                "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); \
                 print(db.execute('PRAGMA integrity_check').fetchone()[0], \
                 db.execute('SELECT count(*) FROM chats').fetchone()[0])",
            ])
            .arg(&copy)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if said == "ok 5" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{said}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The store goes on taking writes after a backup.
    let body = json!({"model": "demo", "messages": [{"role": "user", "content": "after"}]});
    let r = send(
        Request::post(gw.url("/v1/chat/completions"))
            .header("authorization", "Bearer backup-client")
            .header("content-type", "application/json"),
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
}

/// An in-memory store has no file to copy: the backup says so (`400`), where
/// it once answered `503 store_unavailable` while `/readyz` said the store
/// was up.
#[tokio::test]
async fn an_in_memory_store_says_it_has_no_backup() {
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    let ready = common::get(&gw.url("/readyz")).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    let r = common::get(&gw.url("/toolgate/api/backup")).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let error: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("in memory"), "{message}");
}

/// The request counters and durations name the tenant (the config's, or
/// `none` before a key was accepted), refused requests included; streamed
/// answers time their first token; gateway tools time each tool.
#[tokio::test]
async fn metrics_name_tenants_first_tokens_and_tools() {
    // SAFETY: this test's own variables, set before its gateway reads them.
    unsafe {
        std::env::set_var("OPERATORS_METRICS_A", "metrics-a");
        std::env::set_var("OPERATORS_METRICS_B", "metrics-b");
    }
    let gw = TestConfig::new()
        .raw(
            "[server.auth]\n[[server.auth.keys]]\nname = \"metrics-team-a\"\nkey_env = \"OPERATORS_METRICS_A\"\n\
             [[server.auth.keys]]\nname = \"metrics-team-b\"\nkey_env = \"OPERATORS_METRICS_B\"\nmodels = [\"nothing\"]\n",
        )
        .raw("[[providers]]\nname = \"metrics-demo\"\nmodels = [\"demo\"]\n[providers.demo]\nchunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]\n")
        .start()
        .await;
    let ask = |key: &str, stream: bool| {
        let body = json!({"model": "demo", "stream": stream,
            "messages": [{"role": "user", "content": "Ask the calculator: what is `6 * 7`?"}]});
        let mut request = Request::post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json");
        if !key.is_empty() {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        (request, body.to_string())
    };
    let (r, b) = ask("metrics-a", true);
    assert_eq!(send(r, &b).await.status, 200);
    let (r, b) = ask("metrics-b", false);
    assert_eq!(send(r, &b).await.status, 403, "team-b may not use demo");
    let (r, b) = ask("", false);
    assert_eq!(send(r, &b).await.status, 401);
    let metrics = common::get(&gw.url("/metrics")).await.text();
    let has = |needle: &str| {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(needle) || l.contains(needle)),
            "{needle}:\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("metrics-") || l.contains("tenant=\"none\""))
                .collect::<Vec<_>>()
                .join("\n")
        );
    };
    has(
        r#"toolgate_requests_total{provider="metrics-demo",route="chat_completions",status="200",tenant="metrics-team-a"} 1"#,
    );
    has(r#"provider="none",route="chat_completions",status="403",tenant="metrics-team-b"}"#);
    has(r#"provider="none",route="chat_completions",status="401",tenant="none"}"#);
    has(
        r#"toolgate_request_duration_seconds_count{provider="metrics-demo",route="chat_completions",tenant="metrics-team-a"} 1"#,
    );
    has(r#"toolgate_time_to_first_token_seconds_count{provider="metrics-demo"} 1"#);
    has(
        r#"toolgate_gateway_tool_duration_seconds_count{server="builtin",tool="calculator",route="model"}"#,
    );
}
