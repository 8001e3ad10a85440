//! `/toolgate/ui/` in a real browser: headless Chromium (the distribution's
//! package, installed by `bash tests/run.sh`) renders a recorded chat with a
//! gateway tool call, and a tool result holding markup is shown as text. A
//! screenshot is kept in `target/tmp/transcripts-page.png`.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::agent::{calls_sse, last_role, sse, text_sse};
use common::{Mock, Reply, TestConfig, post};
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
        r#"<div class="head">calculator<span class="server">builtin</span></div>"#,
        "\"expression\": \"(2 + 3) * 7\"",
        r#"<pre class="result">35</pre>"#,
        "calculator returned: 35",
        "tokens: ",
    ] {
        assert!(view.contains(want), "{want}\n{view}");
    }
    assert!(
        dom.contains("anonymous · demo · demo · 1 tool calls"),
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
