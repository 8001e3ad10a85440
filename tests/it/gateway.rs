//! The core gateway with no transform: transparency, routing, errors,
//! header hygiene, key injection, cancellation, drain and metrics.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};

const ODD_JSON: &str = "{\"id\" : \"x\",\n  \"choices\":[ ],\t\"weird\":\"\\u00e9\"}  ";

#[tokio::test]
async fn non_stream_passthrough_is_byte_exact_both_ways() {
    let mock = Mock::start(|_| Reply::Full {
        status: 201,
        headers: vec![
            ("content-type", "application/json".into()),
            ("x-upstream", "yes".into()),
        ],
        body: Bytes::from_static(ODD_JSON.as_bytes()),
    })
    .await;
    let gw = TestConfig::new()
        .provider("up", &mock.url(), "[\"gpt-*\"]", "")
        .start()
        .await;
    let request = "{ \"model\":\"gpt-4o\",\n\"messages\":[{\"role\":\"user\",\"content\":\"h\u{e9}\"}], \"vendor_x\": [1,2] }";
    let r = post(&gw.url("/v1/chat/completions?api-version=2"), request).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body, ODD_JSON.as_bytes());
    assert_eq!(r.headers["x-upstream"], "yes");
    let seen = mock.last();
    assert_eq!(
        seen.body,
        request.as_bytes(),
        "request body forwarded unchanged"
    );
    assert_eq!(seen.uri, "/v1/chat/completions?api-version=2");
}

#[tokio::test]
async fn stream_passthrough_is_byte_exact_and_not_buffered() {
    let frames = [
        "data: {\"a\":1}\n\n",
        ": comment\n\n",
        "data: {\"b\":\"\u{1F600}\"}\n\n",
        "data: [DONE]\n\n",
    ];
    // The last frame comes 1.5 s later: the earlier ones must arrive before it.
    let mock = Mock::start(move |_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: vec![
            (Duration::ZERO, Bytes::from_static(frames[0].as_bytes())),
            (Duration::ZERO, Bytes::from_static(frames[1].as_bytes())),
            (Duration::ZERO, Bytes::from_static(frames[2].as_bytes())),
            (
                Duration::from_millis(1500),
                Bytes::from_static(frames[3].as_bytes()),
            ),
        ],
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let req = Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut got = Vec::new();
    let started = std::time::Instant::now();
    let expected_early = frames[..3].concat();
    while got.len() < expected_early.len() {
        let frame = body.frame().await.unwrap().unwrap();
        got.extend_from_slice(frame.data_ref().unwrap());
    }
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "early frames were held back"
    );
    while let Some(frame) = body.frame().await {
        got.extend_from_slice(frame.unwrap().data_ref().unwrap());
    }
    assert_eq!(got, frames.concat().as_bytes());
}

#[tokio::test]
async fn routes_by_pattern_and_by_prefix() {
    let a = Mock::start(|_| Reply::json("{\"from\":\"a\"}")).await;
    let b = Mock::start(|_| Reply::json("{\"from\":\"b\"}")).await;
    let gw = TestConfig::new()
        .provider("a", &a.url(), "[\"gpt-*\"]", "")
        .provider(
            "b",
            &b.url(),
            "[\"meta-llama/*\"]",
            "model_rewrite = { \"small\" = \"llama3.2:1b\" }",
        )
        .start()
        .await;
    let url = gw.url("/v1/chat/completions");
    assert_eq!(
        post(&url, r#"{"model":"gpt-4o"}"#).await.json()["from"],
        "a"
    );
    assert_eq!(a.last().json()["model"], "gpt-4o");
    assert_eq!(
        post(&url, r#"{"model":"meta-llama/Llama-3.1-8B"}"#)
            .await
            .json()["from"],
        "b"
    );
    assert_eq!(b.last().json()["model"], "meta-llama/Llama-3.1-8B");
    // Prefix: goes to b even though a's pattern would match, prefix stripped.
    assert_eq!(
        post(&url, r#"{"model":"b/gpt-4o","x":[1, 2]}"#)
            .await
            .json()["from"],
        "b"
    );
    assert_eq!(b.last().body, &br#"{"model":"gpt-4o","x":[1, 2]}"#[..]);
    // Prefix plus model_rewrite.
    post(&url, r#"{"model":"b/small"}"#).await;
    assert_eq!(b.last().json()["model"], "llama3.2:1b");
    // Other /v1 paths route the same way.
    post(
        &gw.url("/v1/embeddings"),
        r#"{"model":"gpt-x","input":"hi"}"#,
    )
    .await;
    assert_eq!(a.last().uri, "/v1/embeddings");
}

#[tokio::test]
async fn gateway_errors_are_openai_shaped() {
    let mock = Mock::start(|_| Reply::Hang).await;
    // A port nothing listens on: bind, note it, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let toml = format!(
        "[server]\nfirst_byte_timeout_secs = 0.5\nmax_body_bytes = 1000\n{}{}",
        provider_toml("slow", &mock.url(), "[\"slow\"]", ""),
        provider_toml("dead", &format!("http://{dead}/v1"), "[\"dead\"]", ""),
    );
    let gw = TestGateway::start(&toml).await;
    let url = gw.url("/v1/chat/completions");
    let cases: Vec<(Collected, u16, &str)> = vec![
        (post(&url, "{\"model\": ").await, 400, "invalid_request"),
        (
            post(&url, "{\"messages\": []}").await,
            400,
            "invalid_request",
        ),
        (
            post(&url, r#"{"model":"nope-1"}"#).await,
            404,
            "model_not_found",
        ),
        (get(&gw.url("/v2/whatever")).await, 404, "unknown_route"),
        (
            post(
                &url,
                &format!("{{\"model\":\"slow\",\"pad\":\"{}\"}}", "x".repeat(2000)),
            )
            .await,
            413,
            "request_too_large",
        ),
        (
            post(&url, r#"{"model":"dead"}"#).await,
            502,
            "upstream_unreachable",
        ),
        (
            post(&url, r#"{"model":"slow"}"#).await,
            504,
            "upstream_timeout",
        ),
    ];
    for (r, status, code) in cases {
        assert_eq!(r.status, status, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert!(v["error"]["type"].is_string());
        assert!(v["error"].get("param").is_some());
    }
    // A 502 names the provider, never its address.
    let r = post(&url, r#"{"model":"dead"}"#).await;
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("dead"), "{message}");
    assert!(!message.contains("127.0.0.1"), "{message}");
    assert!(!message.contains(&dead.port().to_string()), "{message}");
    let r = post(&url, r#"{"model":"nope-1"}"#).await;
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope-1")
    ); // The MCP door's path, on a config without the door, says what serves it.
    let r = post(&gw.url("/mcp"), "{}").await;
    assert_eq!(r.status, 404);
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("[mcp_gateway]"), "{message}");
    let r = get(&gw.url("/v2/whatever")).await;
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(!message.contains("mcp"), "{message}");
}

#[tokio::test]
async fn upstream_errors_pass_through_unchanged() {
    let body = "{\"error\":{\"message\":\"rate limited\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}";
    let mock = Mock::start(move |_| Reply::Full {
        status: 429,
        headers: vec![
            ("content-type", "application/json".into()),
            ("retry-after", "7".into()),
        ],
        body: Bytes::from_static(body.as_bytes()),
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let r = post(&gw.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.headers["retry-after"], "7");
    assert_eq!(r.body, body.as_bytes());
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_both_ways() {
    let mock = Mock::start(|_| Reply::Full {
        status: 200,
        headers: vec![
            ("content-type", "application/json".into()),
            ("connection", "x-up-hop".into()),
            ("x-up-hop", "1".into()),
            ("x-up-kept", "1".into()),
        ],
        body: Bytes::from_static(b"{}"),
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let req = Request::post(gw.url("/v1/chat/completions"))
        .header("connection", "keep-alive, x-client-hop")
        .header("x-client-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("proxy-authorization", "Basic abc")
        .header("te", "trailers")
        .header("x-client-kept", "1")
        .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
        .unwrap();
    let r = send(req).await;
    assert_eq!(r.status, 200);
    assert!(r.headers.get("x-up-hop").is_none());
    assert!(r.headers.get("x-up-kept").is_some());
    let seen = mock.last();
    for h in ["x-client-hop", "keep-alive", "proxy-authorization", "te"] {
        assert!(seen.headers.get(h).is_none(), "{h} was forwarded");
    }
    assert_eq!(seen.headers["x-client-kept"], "1");
    assert_eq!(
        seen.headers["host"],
        mock.addr.to_string(),
        "Host rewritten to the upstream"
    );
}

#[tokio::test]
async fn api_key_env_replaces_the_client_key_and_headers_are_added() {
    // SAFETY: set once, read by config validation in this test only; the name is unique to it.
    unsafe { std::env::set_var("TOOLGATE_TEST_KEY_INJECTION", "sk-upstream-123") };
    let mock = Mock::start(|_| Reply::json("{}")).await;
    let gw = TestConfig::new()
        .provider(
            "keyed",
            &mock.url(),
            "[\"keyed\"]",
            "api_key_env = \"TOOLGATE_TEST_KEY_INJECTION\"\nheaders = { \"X-Team\" = \"blue\" }",
        )
        .provider("open", &mock.url(), "[\"open\"]", "")
        .start()
        .await;
    let send_with_key = |model: &'static str| {
        Request::post(gw.url("/v1/chat/completions"))
            .header("authorization", "Bearer client-key")
            .body(Full::new(Bytes::from(format!("{{\"model\":\"{model}\"}}"))))
            .unwrap()
    };
    send(send_with_key("keyed")).await;
    let seen = mock.last();
    assert_eq!(seen.headers["authorization"], "Bearer sk-upstream-123");
    assert_eq!(seen.headers["x-team"], "blue");
    send(send_with_key("open")).await;
    assert_eq!(mock.last().headers["authorization"], "Bearer client-key");
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    let mock = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: (0..100)
            .map(|i| {
                (
                    Duration::from_millis(50),
                    Bytes::from(format!("data: {{\"n\":{i}}}\n\n")),
                )
            })
            .collect(),
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let req = Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let mut body = resp.into_body();
    body.frame().await.unwrap().unwrap();
    let cancelled = mock.stream_cancelled.notified();
    drop(body);
    tokio::time::timeout(Duration::from_secs(3), cancelled)
        .await
        .expect("the upstream stream was cancelled after the client left");
}

#[tokio::test]
async fn stalled_upstream_stream_is_cut_by_the_idle_timeout() {
    let mock = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: vec![
            (Duration::ZERO, Bytes::from_static(b"data: {}\n\n")),
            (
                Duration::from_secs(30),
                Bytes::from_static(b"data: [DONE]\n\n"),
            ),
        ],
    })
    .await;
    let toml = format!(
        "[server]\nstream_idle_timeout_secs = 0.3\n{}",
        provider_toml("up", &mock.url(), "[\"*\"]", "")
    );
    let gw = TestGateway::start(&toml).await;
    let req = Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect()).await;
    assert!(
        result.expect("idle timeout ended the stream").is_err(),
        "cut stream must not look complete"
    );
}

#[tokio::test]
async fn health_ready_models_and_metrics() {
    let mock = Mock::start(|_| Reply::json("{}")).await;
    let mut gw = TestConfig::new()
        .provider("up", &mock.url(), "[\"gpt-4o\", \"llama*\"]", "")
        .start()
        .await;
    assert_eq!(get(&gw.url("/healthz")).await.status, 200);
    assert_eq!(get(&gw.url("/readyz")).await.status, 200);
    let models = get(&gw.url("/v1/models")).await.json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gpt-4o", "up/*"]);
    post(&gw.url("/v1/chat/completions"), r#"{"model":"gpt-4o"}"#).await;
    // A request no provider serves counts under `provider="none"`, with its status.
    post(&gw.url("/v1/embeddings"), r#"{"model":"unrouted"}"#).await;
    let metrics = get(&gw.url("/metrics")).await.text();
    for name in [
        "toolgate_requests_total{provider=\"up\",route=\"chat_completions\",status=\"200\",tenant=\"anonymous\"}",
        "toolgate_requests_total{provider=\"none\",route=\"embeddings\",status=\"404\",tenant=\"anonymous\"}",
        "toolgate_request_duration_seconds_bucket",
        "toolgate_upstream_ttfb_seconds_bucket",
        "toolgate_active_requests",
        "toolgate_response_bytes_total",
        "toolgate_request_bytes_total",
    ] {
        assert!(metrics.contains(name), "missing {name} in\n{metrics}");
    }
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("toolgate_"), "unprefixed metric: {line}");
    }
    gw.gateway.start_draining();
    assert_eq!(get(&gw.url("/readyz")).await.status, 503);
    gw.shutdown().await.unwrap();
}

#[tokio::test]
async fn drain_lets_an_open_stream_finish() {
    let mock = Mock::start(|_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: (0..5)
            .map(|i| {
                (
                    Duration::from_millis(100),
                    Bytes::from(format!("data: {{\"n\":{i}}}\n\n")),
                )
            })
            .chain([(Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n"))])
            .collect(),
    })
    .await;
    let mut gw = TestConfig::new().up(&mock.url(), "").start().await;
    let req = Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let server = gw.shutdown();
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("stream completes during drain")
        .to_bytes();
    assert!(body.ends_with(b"data: [DONE]\n\n"));
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server exits after drain")
        .unwrap();
}

#[tokio::test]
async fn demo_model_answers_streaming_and_not() {
    let gw = TestGateway::start(toolgate::config::EMBEDDED_DEFAULT).await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        r#"{"model":"demo","messages":[{"role":"user","content":"ping"}]}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("ping")
    );
    let r = post(
        &gw.url("/v1/chat/completions"),
        r#"{"model":"demo","stream":true,"messages":[{"role":"user","content":"ping"}]}"#,
    )
    .await;
    let text = r.text();
    assert!(text.starts_with("data: {"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn malformed_client_input_gets_clear_answers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mock = Mock::start(|_| Reply::json("{}")).await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    // Huge headers: refused, not buffered without bound.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let big = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let _ = s.write_all(big.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer))
        .await
        .expect("answered or closed");
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A truncated body: the client promises 100 bytes, sends 10 and hangs up.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\":",
    )
    .await
    .unwrap();
    s.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer))
        .await
        .expect("no hang");
    assert_eq!(
        mock.count(),
        0,
        "a truncated request must not reach the upstream"
    );
    // Invalid UTF-8 in a JSON body.
    let r = send(
        Request::post(gw.url("/v1/chat/completions"))
            .body(Full::new(Bytes::from_static(b"{\"model\":\"\xff\xfe\"}")))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400);
    // The gateway still serves.
    assert_eq!(get(&gw.url("/healthz")).await.status, 200);
}

#[tokio::test]
async fn h2c_clients_are_served() {
    let mock = Mock::start(|_| Reply::json("{\"ok\":true}")).await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"ok\":true}");
}

#[tokio::test]
async fn garbage_sse_from_a_passthrough_upstream_is_relayed_as_is() {
    let garbage: &[u8] = b"data: {not json\n\n\xff\xfe\x00event: ?\n\ndata: [DONE]\n\n";
    let mock = Mock::start(move |_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: vec![(Duration::ZERO, Bytes::from_static(garbage))],
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        r#"{"model":"m","stream":true}"#,
    )
    .await;
    assert_eq!(&r.body[..], garbage);
}

#[tokio::test]
async fn upstream_connections_are_reused_once_a_response_is_read_to_the_end() {
    let mock = Mock::start(|rec| {
        if rec.json()["stream"] == true {
            Reply::sse(&["data: {\"n\":1}\n\n", "data: [DONE]\n\n"], Duration::ZERO)
        } else {
            Reply::json("{\"ok\":true}")
        }
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    for i in 0..6 {
        let body = if i % 2 == 0 {
            r#"{"model":"m"}"#
        } else {
            r#"{"model":"m","stream":true}"#
        };
        let got = post(&gw.url("/v1/chat/completions"), body).await;
        assert_eq!(got.status, 200);
    }
    assert_eq!(mock.count(), 6);
    // The test gateway runs two workers, each with its own pool, and the
    // client's connections are dealt to them in turn.
    assert_eq!(
        mock.connection_count(),
        2,
        "sequential requests share one upstream connection per worker"
    );
}

/// A burst of streams leaves as many idle upstream connections, each holding
/// hyper's buffers. Those beyond the few most recently used of each worker
/// are closed once unused for a couple of seconds (when the worker goes
/// idle, or at its next check-in), so memory goes back after the burst;
/// before, all of them stayed for 90 s.
#[tokio::test]
async fn idle_upstream_connections_beyond_the_warm_few_are_closed_after_a_burst() {
    const BURST: usize = 80;
    let mock = Mock::start(|_| {
        Reply::sse(
            &["data: {\"n\":1}\n\n", "data: [DONE]\n\n"],
            Duration::from_millis(300),
        )
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let url = gw.url("/v1/chat/completions");
    let burst = (0..BURST).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { post(&url, r#"{"model":"m","stream":true}"#).await })
    });
    for request in burst.collect::<Vec<_>>() {
        assert_eq!(request.await.unwrap().status, 200);
    }
    let kept = mock.open_connections();
    assert!(
        kept >= BURST * 3 / 4,
        "{kept}: the burst's streams had their own upstream connections, kept after them"
    );
    tokio::time::sleep(Duration::from_millis(3500)).await;
    // One request on each of the two workers: a check-in on each.
    for _ in 0..2 {
        assert_eq!(
            post(&url, r#"{"model":"m","stream":true}"#).await.status,
            200
        );
    }
    // The mock sees the closes a moment later.
    let mut open = mock.open_connections();
    for _ in 0..40 {
        if open <= 2 * 16 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        open = mock.open_connections();
    }
    assert!(
        open <= 2 * 16,
        "{open} upstream connections still open after the burst; at most 16 per worker are kept"
    );
    assert!(open >= 2, "the most recently used ones stay for reuse");
}

/// An upstream that closes idle connections after `Keep-Alive: timeout=N`
/// (llama.cpp's server: 5 s) gets none reused that it may be closing: a
/// request written into a connection the upstream is closing fails.
#[tokio::test]
async fn an_upstreams_keep_alive_timeout_is_honoured() {
    let mock = Mock::start(|_| Reply::Full {
        status: 200,
        headers: vec![
            ("content-type", "application/json".into()),
            ("keep-alive", "timeout=1, max=100".into()),
        ],
        body: Bytes::from_static(b"{\"ok\":true}"),
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    for _ in 0..4 {
        let got = post(&gw.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
        assert_eq!(got.status, 200);
    }
    // timeout=1 leaves less than a second of safe idle time: never reused
    // (compare the test above, where 6 requests share 2 connections).
    assert_eq!(mock.connection_count(), 4);
}

/// An upstream that closes a kept-alive connection as the next request goes
/// in (llama.cpp's server closes one after every streamed answer): the
/// request, which got no byte of an answer, is sent again on a new
/// connection instead of failing with 502.
#[tokio::test]
async fn a_request_caught_by_an_upstreams_close_is_sent_again() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut served = 0;
                loop {
                    // One request head and its (small) body.
                    let mut buf = Vec::new();
                    let mut byte = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut byte).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&byte[..n]),
                        }
                    }
                    if served == 1 {
                        // The next request on a kept connection: closed unanswered.
                        return;
                    }
                    served += 1;
                    let sse = "data: {\"n\":1}\n\ndata: [DONE]\n\n";
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nkeep-alive: timeout=5, max=100\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{sse}\r\n0\r\n\r\n",
                        sse.len()
                    );
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let gw = TestConfig::new()
        .up(&format!("http://{addr}/v1"), "")
        .start()
        .await;
    for _ in 0..4 {
        let got = post(
            &gw.url("/v1/chat/completions"),
            r#"{"model":"m","stream":true}"#,
        )
        .await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert!(got.text().contains("[DONE]"));
    }
    assert!(connections.load(Ordering::SeqCst) >= 4);
}

#[tokio::test]
async fn an_abandoned_stream_closes_its_upstream_connection_and_the_next_request_gets_a_new_one() {
    let mock = Mock::start(|rec| {
        if rec.json()["stream"] == true {
            Reply::Stream {
                status: 200,
                headers: vec![("content-type", "text/event-stream".into())],
                pieces: (0..100)
                    .map(|i| {
                        (
                            Duration::from_millis(20),
                            Bytes::from(format!("data: {i}\n\n")),
                        )
                    })
                    .collect(),
            }
        } else {
            Reply::json("{\"ok\":true}")
        }
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    let req = Request::post(gw.url("/v1/chat/completions"))
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true}",
        )))
        .unwrap();
    let mut body = client().request(req).await.unwrap().into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    let got = post(&gw.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "{\"ok\":true}");
    assert_eq!(mock.connection_count(), 2);
}

#[tokio::test]
async fn upstream_that_closes_connections_is_still_answered() {
    // `connection: close` from the upstream: each request needs a new connection.
    let mock = Mock::start(|_| Reply::Full {
        status: 200,
        headers: vec![
            ("content-type", "application/json".into()),
            ("connection", "close".into()),
        ],
        body: Bytes::from_static(b"{\"ok\":true}"),
    })
    .await;
    let gw = TestConfig::new().up(&mock.url(), "").start().await;
    for _ in 0..3 {
        let got = post(&gw.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), "{\"ok\":true}");
    }
    assert_eq!(mock.connection_count(), 3);
}

#[tokio::test]
async fn upstream_closing_an_idle_connection_is_noticed_before_the_next_request() {
    // A keep-alive server that hangs up each connection shortly after its
    // answer, as uvicorn does after its keep-alive timeout.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                // Head, then the body its content-length announces.
                loop {
                    let n = sock.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let body = "{\"ok\":true}";
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(reply.as_bytes()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
                drop(sock);
            });
        }
    });
    let gw = TestConfig::new()
        .up(&format!("http://{addr}/v1"), "")
        .start()
        .await;
    for _ in 0..3 {
        let got = post(&gw.url("/v1/chat/completions"), r#"{"model":"m"}"#).await;
        assert_eq!(got.status, 200, "{}", got.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// The client's `Authorization` was meant for the provider it addressed: a
/// fallback provider without a key of its own never receives it.
#[tokio::test]
async fn the_clients_credential_never_reaches_a_second_provider() {
    let broken = "<GetWeather>\n{\"city\": \"Paris\",}\n</GetWeather>";
    let model = Mock::start(move |_| Reply::json(&upstream_completion(broken))).await;
    let fallback =
        Mock::start(|_| Reply::json(&upstream_completion("{\"city\": \"Paris\"}"))).await;
    let gw = TestConfig::new()
        .up(
            &model.url(),
            "[providers.tools]\nmode = \"natural\"\non_invalid = \"fallback\"\nfallback = \"fb/small\"\nfallback_timeout_secs = 2\n",
        )
        .provider("fb", &fallback.url(), "[]", "")
        .start()
        .await;
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [{"type": "function", "function": {"name": "GetWeather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    });
    send(
        Request::post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .header("authorization", "Bearer key-for-up")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap(),
    )
    .await;
    assert_eq!(
        model.last().headers.get("authorization").unwrap(),
        "Bearer key-for-up"
    );
    assert!(fallback.count() > 0, "the fallback was asked");
    assert!(fallback.last().headers.get("authorization").is_none());
}

/// A trailing slash gets the same handling: the natural-mode rewrite applies.
#[tokio::test]
async fn chat_completions_with_a_trailing_slash_is_transformed() {
    let model = Mock::start(|_| Reply::json(&upstream_completion("Sunny."))).await;
    let gw = tools_gateway(&model, "natural", "").await;
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [{"type": "function", "function": {"name": "GetWeather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    });
    for path in ["/v1/chat/completions", "/v1/chat/completions/"] {
        let r = post(&gw.url(path), &body.to_string()).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let sent = model.last().json();
        assert!(
            sent["messages"].to_string().contains("## GetWeather"),
            "{path}: the contract is in the prompt: {sent}"
        );
    }
}
