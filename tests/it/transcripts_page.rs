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
    node_page_with(script, base, &[key], shot).await
}

/// [`node_page`] with more arguments after the base URL (keys).
async fn node_page_with(
    script: &str,
    base: &str,
    args: &[&str],
    shot: Option<&PathBuf>,
) -> serde_json::Value {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(common::installed::node_dir().join(script))
        .arg(chromium())
        .arg(base)
        .args(args)
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

/// The page for daily use, at 1280×800 as an operator has it: at least 20
/// chats on the screen, a long title whole on hover, a search by words in
/// any order, a chat's header (id, tenant, provider, model, request ids),
/// the keys table with each key's models, tools, budget and expiry and a
/// key's policy edited there; and with a client key, no admin control.
#[tokio::test]
async fn an_operator_reads_a_days_chats_searches_words_and_edits_a_key() {
    // SAFETY: this test's own variables, set before its gateway reads them.
    unsafe {
        std::env::set_var("DAILY_PAGE_ADMIN", "daily-admin");
        std::env::set_var("DAILY_PAGE_TEAM", "daily-team");
    }
    let mock = Mock::start(|_: &Recorded| Reply::json(&common::upstream_completion("hello"))).await;
    let gw = TestConfig::new()
        .server(
            "[server.auth]\nadmin_keys_env = \"DAILY_PAGE_ADMIN\"\nmanaged_keys = true\n\
             [[server.auth.keys]]\nname = \"team-a\"\nkey_env = \"DAILY_PAGE_TEAM\"\n",
        )
        .provider("filler", &mock.url(), "[\"filler-*\"]", "")
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .start()
        .await;
    let send = |key: &str, text: &str, request_id: Option<&str>| {
        let body =
            json!({"model": "filler-model", "messages": [{"role": "user", "content": text}]});
        let mut request = http::Request::post(gw.url("/v1/chat/completions"))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json");
        if let Some(id) = request_id {
            request = request.header("x-request-id", id);
        }
        request
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    let long = "A long question about the quarterly widget inventory, the gadget backlog, \
                and what the warehouse in Oslo still holds";
    let mut texts: Vec<String> = (1..=45)
        .map(|n| format!("Question number {n} about widgets"))
        .collect();
    texts.push(long.to_owned());
    for text in &texts {
        assert_eq!(
            common::send(send("daily-team", text, None)).await.status,
            200
        );
    }
    let tagged = common::send(send("daily-team", "A tagged request", Some("req-daily-1"))).await;
    assert_eq!(tagged.status, 200);
    let tagged_chat = tagged.headers["x-toolgate-chat-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let admin = |method: http::Method, path: &str, body: serde_json::Value| {
        http::Request::builder()
            .method(method)
            .uri(gw.url(path))
            .header("authorization", "Bearer daily-admin")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    for body in [
        json!({"tenant": "team-m", "name": "evals", "models": ["filler-model"]}),
        json!({"tenant": "team-a", "name": "team-a-ci"}),
    ] {
        let made = common::send(admin(http::Method::POST, "/toolgate/api/keys", body)).await;
        assert_eq!(made.status, 201, "{}", made.text());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("transcripts-page-daily.png");
    let seen = node_page_with(
        "daily_page.mjs",
        &gw.url(""),
        &["daily-admin", "daily-team"],
        Some(&shot),
    )
    .await;
    let say = || serde_json::to_string_pretty(&seen).unwrap();
    assert_eq!(seen["errors"], json!([]), "{}", say());
    assert!(
        seen["visibleRows"].as_u64().unwrap() >= 20,
        "a screen shows 20 chats: {}",
        say()
    );
    assert_eq!(seen["longTitle"]["title"], long, "{}", say());
    assert_eq!(seen["longTitle"]["cut"], true, "{}", say());
    let only_42 = json!(["Question number 42 about widgets"]);
    for q in ["widgets 42", "42 WIDGETS", "number \"about widgets\" 42"] {
        assert_eq!(seen[format!("search:{q}")], only_42, "{q}: {}", say());
    }
    assert_eq!(seen["search:42 gadgets"], json!([]), "{}", say());
    let header = &seen["header"];
    assert_eq!(header["id"], tagged_chat.as_str(), "{}", say());
    assert_eq!(seen["openedId"], tagged_chat.as_str());
    assert_eq!(
        (&header["tenant"], &header["provider"], &header["model"]),
        (&json!("team-a"), &json!("filler"), &json!("filler-model")),
        "{}",
        say()
    );
    assert_eq!(header["requests"], json!(["req-daily-1"]), "{}", say());
    assert_eq!(
        seen["adminControls"],
        json!({"backup": 1, "tenantFilter": 1}),
        "{}",
        say()
    );
    let columns = seen["keyColumns"].to_string();
    for column in ["models", "tools", "budget", "expires"] {
        assert!(columns.contains(&format!("\"{column}\"")), "{columns}");
    }
    // The PATCH carried what changed, and the table shows it.
    let patch = &seen["patch"];
    assert_eq!(patch["models"], json!(["filler-*", "demo"]), "{}", say());
    assert_eq!(patch["limits"], json!({"requests_per_minute": 7}));
    assert_eq!(patch["budget"], json!({"usd": 2.5, "period": "7d"}));
    assert!(patch.get("name").is_none() && patch.get("gateway_tools").is_none());
    let expires = patch["expires_at"].as_str().unwrap();
    let edited = seen["keyAfter"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[1] == "team-m")
        .unwrap_or_else(|| panic!("{}", say()))
        .to_string();
    for shown in ["filler-*, demo", "7 req/min", "$2.5000 per 7d"] {
        assert!(edited.contains(shown), "{shown}: {edited}");
    }
    let keys = common::send(admin(http::Method::GET, "/toolgate/api/keys", json!(null))).await;
    let kept = keys.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["tenant"] == "team-m")
        .cloned()
        .unwrap();
    assert_eq!(kept["models"], json!(["filler-*", "demo"]));
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(kept["expires_at"].as_str().unwrap()).unwrap(),
        chrono::DateTime::parse_from_rfc3339(expires).unwrap(),
    );
    // A client key: no backup, no tenant filter, its tenant's key listed
    // without make, edit or revoke.
    assert_eq!(seen["role"], "client", "{}", say());
    assert_eq!(
        seen["clientControls"],
        json!({"backup": 0, "tenantFilter": 0}),
        "{}",
        say()
    );
    assert_eq!(
        seen["clientKeys"],
        json!({"makeForm": 0, "edit": 0, "revoke": 0, "rows": 1}),
        "{}",
        say()
    );
}

/// Spend over time on the page, from a PostgreSQL store: the usage chart
/// draws a line per tenant over the last 30 days, the pointer on a day
/// reads each tenant's cost, then requests, in the legend; per model; and
/// today per hour. The chart's library is served from the binary with a
/// long cache header.
#[tokio::test]
async fn an_operator_reads_spend_per_day_and_tenant_on_the_usage_chart() {
    // SAFETY: this test's own variables, set before its gateway reads them.
    unsafe {
        std::env::set_var("CHART_PAGE_ADMIN", "chart-admin");
        std::env::set_var("CHART_PAGE_X", "chart-x");
        std::env::set_var("CHART_PAGE_Y", "chart-y");
    }
    let pg = common::postgres::Postgres::start();
    let mock = Mock::start(|_: &Recorded| Reply::json(&common::upstream_completion("hello"))).await;
    let gw = TestConfig::new()
        .server(
            "[server.auth]\nadmin_keys_env = \"CHART_PAGE_ADMIN\"\n\
             [[server.auth.keys]]\nname = \"team-x\"\nkey_env = \"CHART_PAGE_X\"\n\
             [[server.auth.keys]]\nname = \"team-y\"\nkey_env = \"CHART_PAGE_Y\"\n",
        )
        .up(
            &mock.url(),
            "[providers.pricing]\n\"*\" = { input = 1000, output = 2000 }\n",
        )
        .raw(&format!(
            "[store]\nurl = \"{}\"\nrecord = \"none\"\n",
            pg.url()
        ))
        .start()
        .await;
    for key in ["chart-x", "chart-x", "chart-y", "chart-y", "chart-y"] {
        let r = common::send(
            http::Request::post(gw.url("/v1/chat/completions"))
                .header("authorization", format!("Bearer {key}"))
                .body(http_body_util::Full::new(Bytes::from(
                    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                        .to_string(),
                )))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = common::send(
            http::Request::get(gw.url("/toolgate/api/usage?group_by=tenant"))
                .header("authorization", "Bearer chart-admin")
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
        let landed: i64 = r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["requests"].as_i64().unwrap())
            .sum();
        if landed == 5 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "usage never landed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // team-x's use moved three days back.
    pg.query("UPDATE usage SET hour = hour - 3 * 86400000 WHERE tenant = 'team-x'");

    let script = common::get(&gw.url("/toolgate/ui/vendor/uplot-1.6.32.min.js")).await;
    assert_eq!(script.status, 200);
    assert_eq!(
        script.headers["cache-control"],
        "public, max-age=31536000, immutable"
    );
    assert!(script.text().contains("uPlot"));

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("transcripts-page-usage.png");
    let seen = node_page_with(
        "usage_chart.mjs",
        &gw.url(""),
        &["chart-admin", "3"],
        Some(&shot),
    )
    .await;
    let say = || serde_json::to_string_pretty(&seen).unwrap();
    assert_eq!(seen["errors"], json!([]), "{}", say());
    assert_eq!(seen["series"], json!(["team-x", "team-y"]), "{}", say());
    let legend = |name: &str, tenant: &str| -> String {
        seen[name]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {}", say()))
            .iter()
            .find(|r| r[0] == tenant)
            .map(|r| r[1].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("{name} {tenant}: {}", say()))
    };
    // 10 input and 20 output tokens a request, at $1 000 and $2 000 a million.
    assert_eq!(legend("costToday", "team-y"), "$0.1500", "{}", say());
    assert_eq!(legend("costToday", "team-x"), "$0.0000", "{}", say());
    assert_eq!(legend("costBack", "team-x"), "$0.1000", "{}", say());
    assert_eq!(legend("costBack", "team-y"), "$0.0000", "{}", say());
    assert_eq!(legend("requestsToday", "team-y"), "3", "{}", say());
    assert_eq!(legend("requestsBack", "team-x"), "2", "{}", say());
    assert_eq!(seen["modelSeries"], json!(["m"]), "{}", say());
    assert_eq!(legend("hourLegend", "m"), "3", "{}", say());
    assert!(seen["painted"].as_u64().unwrap() > 500, "{}", say());
}
