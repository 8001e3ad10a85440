//! `/toolgate/ui/` in a real browser: headless Chromium (the distribution's
//! package, installed by `bash tests/run.sh`) renders a recorded chat with a
//! gateway tool call, and a tool result holding markup is shown as text; and,
//! driven through playwright-core (`tests/clients/node/page.mjs`), the key
//! box, search, filters, paging and a failed chat's invalid call. Screenshots
//! are kept in `target/tmp/`.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::agent::{calls_sse, last_role, sse, text_sse};
use common::{Mock, Recorded, Reply, TestConfig, post};
use serde_json::json;

fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("TOOLGATE_TEST_CHROMIUM") {
        return PathBuf::from(path);
    }
    for name in ["chromium", "chromium-browser"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let candidate = dir.join(name);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    panic!(
        "\n\n*** The page test needs headless Chromium. ***\n\
         Run `bash tests/run.sh` once (it installs the distribution's chromium package),\n\
         or set TOOLGATE_TEST_CHROMIUM.\n"
    )
}

/// Chromium's view of `url` after its scripts ran: the DOM, and a
/// screenshot when `shot` is given.
async fn render(url: &str, shot: Option<&PathBuf>) -> String {
    let mut command = tokio::process::Command::new(chromium());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--virtual-time-budget=4000",
        "--window-size=1200,700",
    ]);
    match shot {
        Some(path) => command.arg(format!("--screenshot={}", path.display())),
        None => command.arg("--dump-dom"),
    };
    let out = tokio::time::timeout(Duration::from_secs(60), command.arg(url).output())
        .await
        .expect("chromium finished within 60 s")
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the Playwright session `script` (in `tests/clients/node`) against
/// the page at `base` with `key`: what it reports on its `RESULT` line.
async fn node_page(
    script: &str,
    base: &str,
    key: &str,
    shot: Option<&PathBuf>,
) -> serde_json::Value {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(common::installed::node_dir().join(script))
        .arg(chromium())
        .arg(base)
        .arg(key)
        .current_dir(common::installed::node_dir());
    if let Some(shot) = shot {
        command.env("PAGE_SCREENSHOT", shot);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the page session ends within 120 s")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line: {stdout}\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

#[tokio::test]
async fn the_page_shows_calls_results_and_text_and_never_runs_markup() {
    let hostile = "<script>document.title='pwned'</script><b>bold</b> 21 C";
    let tool = Mock::start(move |_| Reply::Full {
        status: 200,
        headers: vec![("content-type", "text/plain".into())],
        body: Bytes::from_static(hostile.as_bytes()),
    })
    .await;
    let upstream = Mock::start(|r| {
        if last_role(r) == "tool" {
            sse(text_sse("Echoed."))
        } else {
            sse(calls_sse(&[("Echo", r#"{"location":"Oslo"}"#)]))
        }
    })
    .await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[store]\nurl = \"sqlite::memory:\"\n[[http_tools]]\nname = \"Echo\"\nurl = \"http://{}/\"\n",
            tool.addr
        ))
        .demo("chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]")
        .provider(
            "up",
            &upstream.url(),
            "[\"m\"]",
            "[providers.tools]\ngateway_tools = [\"Echo\"]",
        )
        .start()
        .await;
    let ask = |model: &str, text: &str| {
        json!({"model": model, "stream": true, "messages": [{"role": "user", "content": text}]})
            .to_string()
    };
    let r = post(
        &gw.url("/v1/chat/completions"),
        &ask("demo", "Ask the calculator: what is `(2 + 3) * 7`?"),
    )
    .await;
    let calculator = r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned();
    let r = post(&gw.url("/v1/chat/completions"), &ask("m", "Echo something")).await;
    let echo = r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let dom = render(&gw.url(&format!("/toolgate/ui/?chat={calculator}")), None).await;
    let view = &dom[dom.find("<main").expect("the chat view")..];
    for want in [
        "Ask the calculator: what is `(2 + 3) * 7`?",
        r#"<div class="call done" data-id="#,
        r#"calculator<span class="server">builtin</span><span class="took">done in "#,
        "\"expression\": \"(2 + 3) * 7\"",
        r#"<pre class="result">35</pre>"#,
        "calculator returned: 35",
        "tokens: ",
    ] {
        assert!(view.contains(want), "{want}\n{view}");
    }
    assert!(
        dom.contains("anonymous · demo · demo · 1 tool call ·"),
        "the chat list shows the chat and its tenant: {dom}"
    );

    let dom = render(&gw.url(&format!("/toolgate/ui/?chat={echo}")), None).await;
    assert!(
        dom.contains(
            "&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; 21 C"
        ),
        "{dom}"
    );
    assert!(dom.contains("<title>toolgate transcripts</title>"), "{dom}");
    assert!(!dom.contains("<b>bold</b>"));

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("transcripts-page.png");
    let _ = std::fs::remove_file(&shot);
    render(
        &gw.url(&format!("/toolgate/ui/?chat={calculator}")),
        Some(&shot),
    )
    .await;
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000);
}

/// An operator's session: the key box is there at once; with the admin key
/// the list pages on past 50 chats; search finds a prompt and a tool's
/// result; "errors only" shows the failed and the cut chat, marked; the
/// tenant filter narrows; a failed chat shows what the model wrote; a call
/// shows how long it took, and messages their times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_searches_filters_pages_and_reads_a_failed_call() {
    // SAFETY: this test's own variables, set before its gateway reads them.
    unsafe {
        std::env::set_var("PAGE_TEAM_A", "page-a");
        std::env::set_var("PAGE_TEAM_B", "page-b");
        std::env::set_var("PAGE_ADMIN", "page-admin");
    }
    let broken = Mock::start(|_: &Recorded| {
        sse(text_sse(
            "<GetWeather>\n```json\n{\"location\": 42}\n```\n</GetWeather>",
        ))
    })
    .await;
    let filler = Mock::start(|r: &Recorded| {
        let stream = r.json()["stream"] == true;
        let pieces: Vec<String> = (0..20).map(|i| format!("word{i} ")).collect();
        let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let body = common::upstream_sse(&pieces, None);
        let events: Vec<&str> = body.split_inclusive("\n\n").collect();
        // Streamed requests are slow, so a client can leave mid-answer.
        let delay = if stream {
            Duration::from_millis(100)
        } else {
            Duration::ZERO
        };
        Reply::sse(&events, delay)
    })
    .await;
    let gw = TestConfig::new()
        .raw(
            "[server.auth]\nadmin_keys_env = \"PAGE_ADMIN\"\n\
             [[server.auth.keys]]\nname = \"team-a\"\nkey_env = \"PAGE_TEAM_A\"\n\
             [[server.auth.keys]]\nname = \"team-b\"\nkey_env = \"PAGE_TEAM_B\"\n\
             [store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n",
        )
        .demo("chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]")
        .provider(
            "broken",
            &broken.url(),
            "[\"broken-model\"]",
            "[providers.tools]\nmode = \"natural\"\non_invalid = \"error\"\n",
        )
        .provider("filler", &filler.url(), "[\"filler-model\"]", "")
        .start()
        .await;
    let send = |key: &str, model: &str, text: &str, stream: bool| {
        let body = json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}],
            "tools": [{"type": "function", "function": {"name": "GetWeather", "parameters": {"type": "object",
                "properties": {"location": {"type": "string"}}}}}]});
        http::Request::post(gw.url("/v1/chat/completions"))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    for n in 0..55u8 {
        // Letters only: a search for the calculator's `35` finds none of these.
        let name = format!(
            "filler chat {}{}",
            char::from(b'a' + n / 26),
            char::from(b'a' + n % 26)
        );
        let r = common::send(send("page-a", "filler-model", &name, false)).await;
        assert_eq!(r.status, 200);
    }
    for (key, model, text, stream) in [
        ("page-a", "filler-model", "needle in the haystack", false),
        (
            "page-a",
            "demo",
            "Ask the calculator: what is `(2 + 3) * 7`?",
            false,
        ),
        ("page-a", "broken-model", "Weather in Paris?", true),
        ("page-b", "filler-model", "team b asks", false),
    ] {
        common::send(send(key, model, text, stream)).await;
    }
    // A client that leaves mid-answer: the chat is cut.
    let response = common::client()
        .request(send("page-a", "filler-model", "left early", true))
        .await
        .unwrap();
    let mut body = response.into_body();
    use http_body_util::BodyExt;
    let _ = body.frame().await;
    drop(body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("transcripts-page-operator.png");
    let seen = node_page("page.mjs", &gw.url(""), "page-admin", Some(&shot)).await;
    let say = || serde_json::to_string_pretty(&seen).unwrap();
    assert_eq!(seen["keyBoxVisibleAtOnce"], true, "{}", say());
    assert_eq!(seen["askedForKey"], true, "{}", say());
    assert_eq!(seen["firstPage"], 50, "{}", say());
    assert_eq!(seen["moreButton"], true, "{}", say());
    assert_eq!(seen["afterMore"], 60, "{}", say());
    assert_eq!(seen["moreAfterLastPage"], false, "{}", say());
    assert_eq!(seen["singular"], true, "{}", say());
    assert_eq!(
        seen["searched"],
        json!(["needle in the haystack"]),
        "{}",
        say()
    );
    assert_eq!(
        seen["searchedResult"],
        json!(["Ask the calculator: what is `(2 + 3) * 7`?"]),
        "{}",
        say()
    );
    let errors = seen["errorsOnly"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{}", say());
    let marks: Vec<&str> = seen["marks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    assert!(
        marks.contains(&"failed") && marks.contains(&"cut"),
        "{}",
        say()
    );
    let tenant_b = seen["tenantB"].as_array().unwrap();
    assert!(
        !tenant_b.is_empty()
            && tenant_b
                .iter()
                .all(|m| m.as_str().unwrap().starts_with("team-b ·")),
        "{}",
        say()
    );
    assert!(
        seen["error"]
            .as_str()
            .unwrap()
            .contains("invalid_tool_call"),
        "{}",
        say()
    );
    assert!(
        seen["raw"]
            .as_str()
            .unwrap_or_default()
            .contains("\"location\": 42"),
        "{}",
        say()
    );
    assert!(
        seen["took"].as_str().unwrap().starts_with("done in "),
        "{}",
        say()
    );
    assert!(seen["times"].as_u64().unwrap() >= 3, "{}", say());
    assert_eq!(seen["pageErrors"], json!([]), "{}", say());
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"));
}

/// The page's keys and usage views, as an admin uses them: a key made there
/// (its secret shown once) works at once and is listed without it, the
/// usage table shows what a tenant used at the configured prices, and a
/// revoked key is refused.
#[tokio::test]
async fn an_admin_makes_and_revokes_a_key_and_reads_usage_on_the_page() {
    // SAFETY: this test's own variables, set before its gateway reads them.
    unsafe {
        std::env::set_var("ADMIN_PAGE_ADMIN", "admin-page-admin");
        std::env::set_var("ADMIN_PAGE_TEAM", "admin-page-team");
    }
    let mock = Mock::start(|_: &Recorded| Reply::json(&common::upstream_completion("hello"))).await;
    let gw = TestConfig::new()
        .server(
            "[server.auth]\nadmin_keys_env = \"ADMIN_PAGE_ADMIN\"\nmanaged_keys = true\n\
             [[server.auth.keys]]\nname = \"team-s\"\nkey_env = \"ADMIN_PAGE_TEAM\"\n",
        )
        .up(
            &mock.url(),
            "[providers.pricing]\n\"*\" = { input = 1000, output = 2000 }\n",
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    for _ in 0..3 {
        let r = common::send(
            http::Request::post(gw.url("/v1/chat/completions"))
                .header("authorization", "Bearer admin-page-team")
                .body(http_body_util::Full::new(Bytes::from(
                    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                        .to_string(),
                )))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = node_page("admin_page.mjs", &gw.url(""), "admin-page-admin", None).await;
    assert_eq!(report["errors"], json!([]), "{report:#}");
    let secret = report["secret"].as_str().unwrap();
    assert!(secret.starts_with("tg-"), "{report:#}");
    assert_eq!(report["status"], 200, "the key made on the page works");
    let listed = report["listed"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{report:#}");
    assert_eq!(listed[0][0], "page-bot");
    assert_eq!(listed[0][1], "team-p");
    assert!(
        !listed[0].to_string().contains(&secret[9..]),
        "the list shows no secret"
    );
    // Grouped by tenant, provider and model: team-s's three answers of 10 +
    // 20 tokens at $1 000 / $2 000 a million, and team-p's one.
    let usage = report["usage"].as_array().unwrap();
    let team_s = usage
        .iter()
        .find(|r| r[0] == "team-s")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(team_s[1], "up");
    assert_eq!(team_s[2], "m");
    assert_eq!(
        (&team_s[3], &team_s[4], &team_s[5]),
        (&json!("3"), &json!("30"), &json!("60"))
    );
    assert_eq!(team_s[6], "0.1500");
    assert_eq!(report["afterRevoke"], json!([]), "{report:#}");
    assert_eq!(report["secretShownAgain"], false);
    let refused = common::send(
        http::Request::post(gw.url("/v1/chat/completions"))
            .header("authorization", format!("Bearer {secret}"))
            .body(http_body_util::Full::new(Bytes::from(
                json!({"model": "m", "messages": []}).to_string(),
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(refused.status, 401, "revoked on the page, refused here");
}
