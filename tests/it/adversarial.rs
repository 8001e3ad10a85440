//! Hostile clients against the real binary: each test starts `toolgate` with
//! short limits (1 s), sends what an attacker or a broken client would, and
//! checks that the answer is bounded: connections are closed, permits come
//! back, metric series and memory stay under stated limits, and well-behaved
//! requests keep being served meanwhile. Timeouts below are guards against a
//! hang, never the assertion itself.

use crate::common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: the machine is shared; only a hang should trip it.
const GUARD: Duration = Duration::from_secs(20);

/// A running `toolgate serve` on a free loopback port, stopped on drop.
struct Binary {
    child: Child,
    port: u16,
}

impl Binary {
    async fn start(name: &str, server: &str, providers: &str) -> Binary {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("toolgate-adversarial-{name}-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("toolgate.toml");
        let mut f = std::fs::File::create(&path).unwrap();
        write!(
            f,
            "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 2\n{server}\n{providers}"
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("--config")
            .arg(&path)
            .stderr(if std::env::var_os("ADV_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        let binary = Binary { child, port };
        for _ in 0..200 {
            if TcpStream::connect(binary.addr()).await.is_ok() {
                return binary;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("toolgate did not start");
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Resident memory of the process, from `/proc/<pid>/status`.
    fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// The process's peak resident memory so far.
    fn peak_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const DEMO: &str = "[[providers]]\nname = \"demo\"\nmodels = [\"*\"]\n[providers.demo]\n";

const HELLO: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

/// Reads until the server closes the connection; what it sent before.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(GUARD, stream.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the connection was not closed");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_partial_and_idle_connections_are_closed() {
    let gw = Binary::start(
        "idle",
        "request_head_timeout_secs = 1\nidle_timeout_secs = 1",
        DEMO,
    )
    .await;
    // Sends nothing at all: the protocol sniff waits for bytes.
    let mut silent = TcpStream::connect(gw.addr()).await.unwrap();
    // Three bytes: too few to tell HTTP/1.1 from h2c.
    let mut partial = TcpStream::connect(gw.addr()).await.unwrap();
    partial.write_all(b"POS").await.unwrap();
    // The h2c preface, then nothing.
    let mut h2 = TcpStream::connect(gw.addr()).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    // One request, then an idle keep-alive connection.
    let mut kept = TcpStream::connect(gw.addr()).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    until_closed(&mut silent).await;
    until_closed(&mut partial).await;
    until_closed(&mut h2).await;
    let answered = until_closed(&mut kept).await;
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
}

/// On a keep-alive HTTP/1.1 connection, a later request head is timed from
/// its first byte: a head that trickles in is cut at `request_head_timeout`,
/// while a connection that merely waits between requests lives until
/// `idle_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_request_heads_are_timed_from_their_first_byte() {
    let gw = Binary::start(
        "heads",
        "request_head_timeout_secs = 1\nidle_timeout_secs = 4",
        DEMO,
    )
    .await;
    const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    async fn answer(stream: &mut TcpStream) -> String {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(GUARD, stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
    let mut waiting = TcpStream::connect(gw.addr()).await.unwrap();
    let mut trickling = TcpStream::connect(gw.addr()).await.unwrap();
    for s in [&mut waiting, &mut trickling] {
        s.write_all(HEALTH).await.unwrap();
        assert!(answer(s).await.starts_with("HTTP/1.1 200"));
    }
    // Half a head, then silence: closed once it is a second old.
    trickling.write_all(b"GET /hea").await.unwrap();
    let started = std::time::Instant::now();
    let rest = until_closed(&mut trickling).await;
    assert_eq!(rest, "", "nothing answered to half a head");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed by the head deadline, not the idle one: {:?}",
        started.elapsed()
    );
    // Meanwhile, past the head deadline but within the idle one, the quiet
    // connection still serves a request.
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed())).await;
    waiting.write_all(HEALTH).await.unwrap();
    assert!(answer(&mut waiting).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_get_408_without_starving_other_requests() {
    let gw = Binary::start(
        "loris",
        "max_concurrent_requests = 2\nbody_read_timeout_secs = 1",
        DEMO,
    )
    .await;
    // More slow uploads than permits, each promising a body it never sends.
    let mut slow = Vec::new();
    for _ in 0..6 {
        let mut s = TcpStream::connect(gw.addr()).await.unwrap();
        s.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\"",
        )
        .await
        .unwrap();
        slow.push(s);
    }
    // Meanwhile a well-behaved client is served.
    let r = post(&gw.url("/v1/chat/completions"), HELLO).await;
    assert_eq!(r.status, 200, "{}", r.text());
    for mut s in slow {
        let answer = until_closed(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");
    }
    assert_eq!(
        post(&gw.url("/v1/chat/completions"), HELLO).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_stream_is_released() {
    // An upstream that streams far more than socket buffers hold.
    let piece = Bytes::from(format!(
        "data: {{\"pad\":\"{}\"}}\n\n",
        "x".repeat(64 * 1024)
    ));
    let mock = Mock::start(move |_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: (0..4000)
            .map(|_| (Duration::from_millis(1), piece.clone()))
            .collect(),
    })
    .await;
    let gw = Binary::start(
        "stall",
        "max_concurrent_requests = 1\nwrite_stall_timeout_secs = 1",
        &provider_toml("up", &mock.url(), "[\"*\"]", ""),
    )
    .await;
    let mut reader = TcpStream::connect(gw.addr()).await.unwrap();
    let body = r#"{"model":"m","stream":true}"#;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    reader.write_all(head.as_bytes()).await.unwrap();
    // It never reads. The gateway drops it and hangs up on the upstream.
    tokio::time::timeout(GUARD, mock.stream_cancelled.notified())
        .await
        .expect("the upstream stream was released");
    // The one permit came back: the next request gets its head (the mock
    // streams to it too; the head is enough), not a 503.
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .body(http_body_util::Full::new(Bytes::from_static(
            b"{\"model\":\"m\"}",
        )))
        .unwrap();
    let head = tokio::time::timeout(GUARD, client().request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.status(), 200);
    drop(reader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_its_client_grants_no_window_is_released() {
    // An upstream that streams far more than one stream's window.
    let piece = Bytes::from(format!(
        "data: {{\"pad\":\"{}\"}}\n\n",
        "x".repeat(16 * 1024)
    ));
    let mock = Mock::start(move |_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: (0..4000)
            .map(|_| (Duration::from_millis(1), piece.clone()))
            .collect(),
    })
    .await;
    let gw = Binary::start(
        "h2stall",
        "max_concurrent_requests = 1\nwrite_stall_timeout_secs = 1",
        &provider_toml("up", &mock.url(), "[\"*\"]", ""),
    )
    .await;
    // h2c with prior knowledge. The connection stays alive and answers
    // pings; the one stream is never read, so its window is never granted.
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake::<_, http_body_util::Full<Bytes>>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let stalled = sender
        .send_request(
            http::Request::post(gw.url("/v1/chat/completions"))
                .body(http_body_util::Full::new(Bytes::from_static(
                    b"{\"model\":\"m\",\"stream\":true}",
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(stalled.status(), 200);
    tokio::time::timeout(GUARD, mock.stream_cancelled.notified())
        .await
        .expect("the stalled stream's upstream was released");
    // Its permit came back: a new request on the same connection gets its
    // head, not a 503.
    let next = tokio::time::timeout(
        GUARD,
        sender.send_request(
            http::Request::post(gw.url("/v1/chat/completions"))
                .body(http_body_util::Full::new(Bytes::from_static(
                    b"{\"model\":\"m\"}",
                )))
                .unwrap(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(next.status(), 200);
    let metrics = get(&gw.url("/metrics")).await.text();
    assert!(
        metrics.contains("toolgate_streams_stalled_total 1"),
        "{metrics}"
    );
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_event_that_never_ends_is_cut_off() {
    // `data:` lines of one event, never a blank line: 40 MiB in all.
    let line = Bytes::from(format!("data: {}\n", "y".repeat(1024 * 1024)));
    let mock = Mock::start(move |_| Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces: (0..40).map(|_| (Duration::ZERO, line.clone())).collect(),
    })
    .await;
    for mode in ["natural", "to_natural"] {
        let gw = Binary::start(
            &format!("endless-{mode}"),
            "",
            &provider_toml(
                "up",
                &mock.url(),
                "[\"*\"]",
                &format!("[providers.tools]\nmode = \"{mode}\"\n"),
            ),
        )
        .await;
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","parameters":{"type":"object"}}}]}"#;
        let r = tokio::time::timeout(GUARD, post(&gw.url("/v1/chat/completions"), body))
            .await
            .expect("the stream ended");
        let text = r.text();
        assert!(
            text.contains("upstream_stream_too_large"),
            "{mode}: {}",
            &text[..text.len().min(500)]
        );
        assert!(text.trim_end().ends_with("data: [DONE]"), "{mode}");
        let rss = gw.rss_kib();
        assert!(rss < RSS_LIMIT_KIB, "{mode}: RSS {rss} KiB");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_chosen_by_clients_add_no_metric_series() {
    // The model calls whichever tool the client declared this time.
    let turn = Arc::new(AtomicUsize::new(0));
    let seen = turn.clone();
    let mock = Mock::start(move |_| {
        let i = seen.load(Ordering::SeqCst);
        Reply::json(&upstream_completion(&format!("<t{i}>\n{{}}\n</t{i}>")))
    })
    .await;
    let gw = Binary::start(
        "labels",
        "",
        &provider_toml(
            "up",
            &mock.url(),
            "[\"*\"]",
            "[providers.tools]\nmode = \"natural\"\n",
        ),
    )
    .await;
    const REQUESTS: usize = 200;
    for i in 0..REQUESTS {
        turn.store(i, Ordering::SeqCst);
        let body = serde_json::json!({
            "model": "m",
            "messages": [{"role": "user", "content": "go"}],
            "tools": [{"type": "function", "function": {"name": format!("t{i}"),
                "parameters": {"type": "object"}}}],
        });
        let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
        assert_eq!(
            r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            format!("t{i}"),
            "{}",
            r.text()
        );
    }
    let metrics = get(&gw.url("/metrics")).await.text();
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("toolgate_tool_calls_total{"))
        .count();
    // Limit: one series (`other`) per provider, whatever the number of names.
    assert_eq!(series, 1, "{metrics}");
    assert!(!metrics.contains("t199"), "{metrics}");
}

/// Limit: 256 MiB resident after hostile requests.
const RSS_LIMIT_KIB: u64 = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_request_bytes_stay_bounded_under_many_large_uploads() {
    let gw = Binary::start(
        "buffered",
        "max_body_bytes = 4194304\nmax_buffered_request_bytes = 16777216\nbody_read_timeout_secs = 2",
        DEMO,
    )
    .await;
    // 64 clients each upload 4 MiB (256 MiB together) and stall before the end.
    let chunk = vec![b' '; 4 * 1024 * 1024 - 1];
    let mut uploads = Vec::new();
    for _ in 0..64 {
        let addr = gw.addr();
        let chunk = chunk.clone();
        uploads.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let head =
                "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 4194304\r\n\r\n";
            s.write_all(head.as_bytes()).await.unwrap();
            // The gateway may answer 503 and close before all of it is sent.
            let _ = s.write_all(&chunk).await;
            until_closed(&mut s).await
        }));
    }
    let mut refused = 0;
    for u in uploads {
        let answer = u.await.unwrap();
        refused += usize::from(answer.contains("buffer_full"));
    }
    assert!(refused > 0, "the process-wide bound refused some uploads");
    let rss = gw.rss_kib();
    assert!(rss < RSS_LIMIT_KIB, "RSS {rss} KiB");
    assert_eq!(
        post(&gw.url("/v1/chat/completions"), HELLO).await.status,
        200
    );
}

// Unbounded example synthesis took about a gigabyte on this request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_referencing_schema_keeps_memory_bounded() {
    let mock = Mock::start(|_| Reply::json(&upstream_completion("ok"))).await;
    let gw = Binary::start(
        "schema",
        "",
        &provider_toml(
            "up",
            &mock.url(),
            "[\"*\"]",
            "[providers.tools]\nmode = \"natural\"\n",
        ),
    )
    .await;
    let props: serde_json::Map<String, serde_json::Value> = (0..20)
        .map(|i| (format!("p{i}"), serde_json::json!({"$ref": "#/$defs/node"})))
        .collect();
    let required: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/node"}},
        "required": ["root"],
        "$defs": {"node": {"type": "object", "properties": props, "required": required}},
    });
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"type": "function", "function": {"name": "deep", "parameters": schema}}],
    });
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert!(r.status == 200 || r.status == 400, "{}", r.text());
    let rss = gw.rss_kib();
    assert!(rss < RSS_LIMIT_KIB, "RSS {rss} KiB");
}

/// A Responses body of `pairs` function calls and their outputs, each
/// output `output_bytes` long.
fn call_history(pairs: usize, output_bytes: usize) -> String {
    let output = "x".repeat(output_bytes);
    let items: Vec<String> = (0..pairs)
        .map(|i| {
            format!(
                r#"{{"type":"function_call","call_id":"c{i}","name":"f","arguments":"{{}}"}},{{"type":"function_call_output","call_id":"c{i}","output":"{output}"}}"#
            )
        })
        .collect();
    format!(
        r#"{{"model":"m","input":[{{"role":"user","content":"go"}},{}]}}"#,
        items.join(",")
    )
}

/// A Messages request with `pairs` tool_use / tool_result turns, each
/// result `output_bytes` long (7 JSON containers a pair).
fn messages_history(pairs: usize, output_bytes: usize) -> String {
    let output = "x".repeat(output_bytes);
    let turns: Vec<String> = (0..pairs)
        .map(|i| {
            format!(
                r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"c{i}","name":"f","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"c{i}","content":"{output}"}}]}}"#
            )
        })
        .collect();
    format!(
        r#"{{"model":"m","max_tokens":16,"messages":[{{"role":"user","content":"go"}},{},{{"role":"assistant","content":"ok"}},{{"role":"user","content":"go on"}}]}}"#,
        turns.join(",")
    )
}

/// A chat request to the natural-mode provider with `pairs` calls and
/// results in its history (5 JSON containers a pair).
fn chat_history(pairs: usize, output_bytes: usize) -> String {
    let output = "x".repeat(output_bytes);
    let turns: Vec<String> = (0..pairs)
        .map(|i| {
            format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{i}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c{i}","content":"{output}"}}"#
            )
        })
        .collect();
    format!(
        r#"{{"model":"n","messages":[{{"role":"user","content":"go"}},{}]}}"#,
        turns.join(",")
    )
}

/// Request parsing is bounded at every door: a body of more than 100,000
/// JSON objects and arrays is refused before it is parsed (the red team's
/// 200,000 call items took RSS to 2 GB), and at each door three concurrent
/// bodies of about 25 MB under that limit (to a chat upstream; the chat door
/// to a natural-mode provider, which parses) raise peak RSS by at most 5x
/// their bytes + 64 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_parsing_is_bounded_at_every_door() {
    let upstream = Mock::start(|_| Reply::json(&upstream_completion("ok"))).await;
    // A chat provider, and a natural-mode one (whose chat bodies are parsed).
    let providers = format!(
        "{}{}",
        provider_toml("up", &upstream.url(), "[\"m\"]", ""),
        provider_toml(
            "nat",
            &upstream.url(),
            "[\"n\"]",
            "[providers.tools]\nmode = \"natural\"\n"
        )
    );
    let gw = Binary::start("parse", "", &providers).await;
    let start = gw.peak_kib();
    let many = call_history(100_000, 1);
    // The chat door parses for a natural-mode provider (a passthrough one
    // forwards the bytes unread).
    let natural = many.replacen(r#""model":"m""#, r#""model":"n""#, 1);
    for (door, body) in [
        ("/v1/responses", &many),
        ("/v1/messages", &many),
        ("/v1/chat/completions", &natural),
    ] {
        let r = post(&gw.url(door), body).await;
        assert_eq!(r.status, 400, "{door}: {}", r.text());
        assert!(
            r.text().contains("100000 JSON objects"),
            "{door}: {}",
            r.text()
        );
    }
    let refused = gw.peak_kib() - start;
    assert!(
        refused < 64 * 1024,
        "refused bodies grew RSS by {refused} KiB"
    );
    drop(gw);
    // Near the limit, at each door that parses: three concurrent bodies of
    // about 25 MB to a fresh process each (peak RSS only grows).
    for (door, body) in [
        ("/v1/responses", call_history(30_000, 780)),
        ("/v1/messages", messages_history(13_000, 1_900)),
        ("/v1/chat/completions", chat_history(18_000, 1_350)),
    ] {
        let gw = Binary::start("parse", "", &providers).await;
        let start = gw.peak_kib();
        let mb = body.len() as u64 / (1024 * 1024);
        let sends: Vec<_> = (0..3)
            .map(|_| {
                let url = gw.url(door);
                let body = body.clone();
                tokio::spawn(async move { post(&url, &body).await })
            })
            .collect();
        for send in sends {
            let r = send.await.unwrap();
            assert_eq!(r.status, 200, "{door}: {}", r.text());
        }
        let grown = gw.peak_kib() - start;
        let ratio = (grown as f64 - 64.0 * 1024.0) / (3 * body.len() as u64 / 1024) as f64;
        eprintln!(
            "parse bounds: {door}: 3 x {mb} MB bodies +{grown} KiB peak ({ratio:.1}x + 64 MB)"
        );
        let bound = 5 * 3 * body.len() as u64 / 1024 + 64 * 1024;
        assert!(
            grown <= bound,
            "{door}: 3 x {mb} MB bodies: +{grown} KiB, bound {bound} KiB"
        );
    }
}
