//! Several targets per provider, retries before the first byte, ejection
//! and failover, against real upstream processes (toolgate binaries serving
//! the demo model, killed, paused and restarted) and scripted mocks (a 503,
//! a 429 with `Retry-After`, a stall before the response head).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::binary::Binary;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};

const CHAT: &str = r#"{"model":"llama-3","messages":[{"role":"user","content":"hi"}]}"#;
const STREAM: &str =
    r#"{"model":"llama-3","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A loopback port nothing listens on: connecting is refused.
fn refused_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// A toolgate process serving the demo model as an OpenAI-compatible upstream.
fn demo_upstream(chunk_delay_ms: u64) -> Binary {
    Binary::start(
        &format!(
            "[[providers]]\nname = \"demo\"\nmodels = [\"*\"]\n[providers.demo]\nchunk_chars = 8\nchunk_delay_ms = {chunk_delay_ms}\n"
        ),
        &[],
    )
}

/// The value of the metric line that starts with `prefix` (labels included).
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// An upstream's refusal: `status`, one header and a body.
fn refusal(status: u16, header: (&'static str, &str), body: &'static [u8]) -> Reply {
    Reply::Full {
        status,
        headers: vec![(header.0, header.1.to_owned())],
        body: Bytes::from_static(body),
    }
}

fn ok_completion(content: &str) -> Reply {
    Reply::json(&upstream_completion(content))
}

#[tokio::test]
async fn a_refused_target_is_retried_on_the_other_then_ejected() {
    let up = Mock::start(|_| ok_completion("from b")).await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[providers]]\nname = \"refused-pair\"\nmodels = [\"llama-*\"]\ntargets = [{{ name = \"dead\", base_url = \"{}\" }}, {{ name = \"live\", base_url = \"{}\" }}]\n[providers.health]\nfailures_to_eject = 2\neject_secs = 60\n",
            refused_url(),
            up.url()
        ))
        .start()
        .await;
    for _ in 0..10 {
        let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["choices"][0]["message"]["content"], "from b");
    }
    assert_eq!(up.count(), 10);
    let metrics = get(&gw.url("/metrics")).await.text();
    // Two refusals eject it: no request tries it after that.
    assert_eq!(
        metric(
            &metrics,
            r#"toolgate_upstream_attempts_total{provider="refused-pair",target="dead",outcome="connect"}"#
        ),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"toolgate_upstream_target_up{provider="refused-pair",target="dead"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        metric(
            &metrics,
            r#"toolgate_upstream_target_up{provider="refused-pair",target="live"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn a_503_is_retried_and_the_answer_is_the_second_attempts() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let up = Mock::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            refusal(
                503,
                ("content-type", "application/json"),
                br#"{"error":{"message":"busy"}}"#,
            )
        } else {
            ok_completion("second")
        }
    })
    .await;
    let gw = TestConfig::new()
        .provider(
            "one-503",
            &up.url(),
            "[\"llama-*\"]",
            "[providers.retry]\nattempts = 2\nbackoff_ms = 1",
        )
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "second");
    assert_eq!(up.count(), 2);
    // Spent attempts: the client gets the upstream's own status and body.
    hits.store(0, Ordering::SeqCst);
    let always = Mock::start(|_| {
        refusal(
            503,
            ("content-type", "application/json"),
            br#"{"error":{"message":"still busy"}}"#,
        )
    })
    .await;
    let gw = TestConfig::new()
        .provider(
            "always-503",
            &always.url(),
            "[\"llama-*\"]",
            "[providers.retry]\nattempts = 3\nbackoff_ms = 1",
        )
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["message"], "still busy");
    assert_eq!(always.count(), 3);
}

#[tokio::test]
async fn retry_after_delays_the_retry_and_one_too_long_is_not_waited_for() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let up = Mock::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            refusal(429, ("retry-after", "1"), b"slow down")
        } else {
            ok_completion("after waiting")
        }
    })
    .await;
    let gw = TestConfig::new()
        .provider(
            "retry-after",
            &up.url(),
            "[\"llama-*\"]",
            "[providers.retry]\nattempts = 2\nbackoff_ms = 1\nmax_retry_after_secs = 5",
        )
        .start()
        .await;
    let started = Instant::now();
    let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was waited for"
    );
    assert_eq!(up.count(), 2);

    let long =
        Mock::start(|_| refusal(429, ("retry-after", "120"), b"come back in two minutes")).await;
    let gw = TestConfig::new()
        .provider(
            "retry-after-long",
            &long.url(),
            "[\"llama-*\"]",
            "[providers.retry]\nattempts = 3\nbackoff_ms = 1\nmax_retry_after_secs = 5",
        )
        .start()
        .await;
    let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.text(), "come back in two minutes");
    assert_eq!(
        long.count(),
        1,
        "a Retry-After beyond the limit ends the retries"
    );
}

#[tokio::test]
async fn a_target_stalling_before_its_head_times_out_and_another_answers() {
    let stalled = Mock::start(|_| Reply::Hang).await;
    let live = Mock::start(|_| ok_completion("in time")).await;
    let gw = TestGateway::start(&format!(
        "[server]\nfirst_byte_timeout_secs = 0.5\n[[providers]]\nname = \"stall-pair\"\nmodels = [\"llama-*\"]\ntargets = [{{ base_url = \"{}\" }}, {{ base_url = \"{}\" }}]\n",
        stalled.url(),
        live.url()
    ))
    .await;
    for _ in 0..4 {
        let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(live.count(), 4);
    let metrics = get(&gw.url("/metrics")).await.text();
    assert!(
        metric(
            &metrics,
            r#"toolgate_upstream_attempts_total{provider="stall-pair",target="0",outcome="timeout"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
}

/// A SIGSTOPped upstream process accepts connections (the kernel does) but
/// never answers: the first-byte timeout moves its requests to the other.
#[tokio::test]
async fn a_paused_upstream_process_is_skipped_and_returns_after_sigcont() {
    let paused = demo_upstream(0);
    let live = demo_upstream(0);
    let gw = TestGateway::start(&format!(
        "[server]\nfirst_byte_timeout_secs = 0.5\n[[providers]]\nname = \"paused-pair\"\nmodels = [\"llama-*\"]\ntargets = [{{ name = \"paused\", base_url = \"{}\" }}, {{ name = \"live\", base_url = \"{}\" }}]\n[providers.health]\nfailures_to_eject = 1\neject_secs = 1\n",
        paused.url("/v1"),
        live.url("/v1")
    ))
    .await;
    paused.signal(libc::SIGSTOP);
    for _ in 0..6 {
        let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    paused.signal(libc::SIGCONT);
    // Its ejection ends; a probe finds it answering and it takes turns again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for _ in 0..6 {
        let r = post(&gw.url("/v1/chat/completions"), CHAT).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let metrics = get(&gw.url("/metrics")).await.text();
    let ok = metric(
        &metrics,
        r#"toolgate_upstream_attempts_total{provider="paused-pair",target="paused",outcome="ok"}"#,
    );
    assert!(ok.is_some_and(|n| n >= 2.0), "{metrics}");
    assert_eq!(
        metric(
            &metrics,
            r#"toolgate_upstream_target_up{provider="paused-pair",target="paused"}"#
        ),
        Some(1.0)
    );
}

/// Once a byte of the answer reached the client the request is never sent
/// again: the upstream dies mid-stream, the client's stream ends in an
/// error, and the other target never sees the request.
#[tokio::test]
async fn an_upstream_dying_after_its_first_chunk_is_not_retried() {
    let mut dying = demo_upstream(200);
    let other = Mock::start(|_| ok_completion("must not be asked")).await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[providers]]\nname = \"dies-mid-stream\"\nmodels = [\"llama-*\"]\ntargets = [{{ base_url = \"{}\", weight = 100 }}, {{ base_url = \"{}\", weight = 1 }}]\n[providers.retry]\nattempts = 2\non = [\"connect\", \"timeout\", \"protocol\", \"503\"]\n",
            dying.url("/v1"),
            other.url()
        ))
        .start()
        .await;
    let response = client()
        .request(
            Request::post(gw.url("/v1/chat/completions"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(STREAM.as_bytes())))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let first = read_until(&mut body, "data:").await;
    assert!(first.contains("chat.completion.chunk"), "{first}");
    dying.kill();
    let mut rest = String::new();
    let ended = loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    rest.push_str(&String::from_utf8_lossy(&data));
                }
            }
            Some(Err(_)) => break "reset",
            None => break "ended",
        }
    };
    assert!(
        !rest.contains("[DONE]"),
        "the answer cannot be complete ({ended}): {rest}"
    );
    assert_eq!(
        other.count(),
        0,
        "no second generation after the first byte"
    );
}

/// A provider whose every target failed passes the request to its failover
/// provider, written for that one: its model name and its tool mode.
#[tokio::test]
async fn failover_rewrites_the_request_for_the_next_provider() {
    let hosted = Mock::start(|_| ok_completion("hosted answer")).await;
    let gw = TestConfig::new()
        .raw(&format!(
            "[[providers]]\nname = \"primary\"\nmodels = [\"llama-*\"]\ntargets = [{{ base_url = \"{}\" }}, {{ base_url = \"{}\" }}]\nfailover = [\"hosted\"]\n",
            refused_url(),
            refused_url(),
        ))
        .provider(
            "hosted",
            &hosted.url(),
            "[]",
            "model_rewrite = { \"llama-3\" = \"meta/llama-3-70b\" }\n[providers.tools]\nmode = \"natural\"\n",
        )
        .start()
        .await;
    let with_tools = serde_json::json!({
        "model": "llama-3",
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": [seed_get_weather()],
    });
    let r = post(&gw.url("/v1/chat/completions"), &with_tools.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "hosted answer"
    );
    let sent = hosted.last().json();
    assert_eq!(sent["model"], "meta/llama-3-70b");
    // Natural mode: the tools travel as a contract in the prompt.
    assert!(sent.get("tools").is_none(), "{sent}");
    let prompt = sent["messages"].to_string();
    assert!(prompt.contains("GetWeather"), "{prompt}");
    let metrics = get(&gw.url("/metrics")).await.text();
    assert_eq!(
        metric(
            &metrics,
            r#"toolgate_failovers_total{from="primary",to="hosted"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
}

/// c=32 for 20 s over two upstream processes, one killed at 5 s and
/// restarted at 12 s: every request succeeds except streams that had
/// started on the killed one when it died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_killed_and_restarted_target_costs_only_its_open_streams() {
    let mut a = demo_upstream(20);
    let b = demo_upstream(20);
    let gw = TestGateway::start(&format!(
        "[server]\nfirst_byte_timeout_secs = 2\n[[providers]]\nname = \"load-pair\"\nmodels = [\"llama-*\"]\ntargets = [{{ name = \"a\", base_url = \"{}\" }}, {{ name = \"b\", base_url = \"{}\" }}]\n[providers.health]\nfailures_to_eject = 3\neject_secs = 2\n",
        a.url("/v1"),
        b.url("/v1")
    ))
    .await;
    let url = gw.url("/v1/chat/completions");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done, refused, cut) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut clients = Vec::new();
    for _ in 0..32 {
        let (url, stop, done, refused, cut) = (
            url.clone(),
            stop.clone(),
            done.clone(),
            refused.clone(),
            cut.clone(),
        );
        clients.push(tokio::spawn(async move {
            let http = client();
            while !stop.load(Ordering::Relaxed) {
                let request = Request::post(&url)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(STREAM.as_bytes())))
                    .unwrap();
                let response = http.request(request).await.unwrap();
                if response.status() != 200 {
                    refused.fetch_add(1, Ordering::Relaxed);
                    let status = response.status();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    eprintln!("failed before its first byte: {status} {body:?}");
                    continue;
                }
                match response
                    .into_body()
                    .collect()
                    .await
                    .map(http_body_util::Collected::to_bytes)
                {
                    Ok(body) if body.ends_with(b"data: [DONE]\n\n") => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        cut.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let killer = tokio::task::spawn_blocking(move || {
        a.kill();
        std::thread::sleep(Duration::from_secs(7));
        a.restart();
        a
    });
    tokio::time::sleep(Duration::from_secs(15)).await;
    let _a = killer.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let (done, refused, cut) = (
        done.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        cut.load(Ordering::Relaxed),
    );
    eprintln!(
        "c=32 20 s: {done} complete, {cut} cut mid-stream, {refused} failed before their first byte"
    );
    let metrics = get(&gw.url("/metrics")).await.text();
    for line in metrics.lines().filter(|l| l.contains("load-pair")) {
        eprintln!("{line}");
    }
    assert!(done > 100, "{done}");
    assert_eq!(refused, 0, "no request fails before its first byte");
    // At most the streams open on `a` when it died (about half of 32).
    assert!(cut <= 32, "{cut} streams cut");
    let metrics = get(&gw.url("/metrics")).await.text();
    let back = metric(
        &metrics,
        r#"toolgate_upstream_target_up{provider="load-pair",target="a"}"#,
    );
    assert_eq!(back, Some(1.0), "the restarted target is back: {metrics}");
}
