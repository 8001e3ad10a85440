//! Shared integration-test harness: a scriptable mock upstream, a gateway
//! started on port 0, and a small HTTP client. Everything stays on loopback.
#![allow(dead_code)]

pub mod agent;
pub mod binary;
pub mod config;
pub mod installed;
pub mod postgres;
pub mod redis;

pub use config::{TestConfig, demo_gateway, tools_gateway};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot};
use toolgate::workers::{Dealer, Workers};

use toolgate::config::Config;
use toolgate::gateway::Gateway;

/// A request as the mock upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("upstream got JSON")
    }
}

/// What the mock answers.
pub enum Reply {
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
    },
    /// Body pieces, each sent after its delay.
    Stream {
        status: u16,
        headers: Vec<(&'static str, String)>,
        pieces: Vec<(Duration, Bytes)>,
    },
    /// Never sends a response head.
    Hang,
    /// The reply, sent once the test sets the gate to `true`.
    Gated(tokio::sync::watch::Receiver<bool>, Box<Reply>),
    /// An event stream whose pieces the test sends when it likes.
    Piped(mpsc::Receiver<Bytes>),
}

impl Reply {
    pub fn json(body: &str) -> Reply {
        Reply::Full {
            status: 200,
            headers: vec![("content-type", "application/json".into())],
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    pub fn sse(pieces: &[&str], delay: Duration) -> Reply {
        Reply::Stream {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            pieces: pieces
                .iter()
                .map(|p| (delay, Bytes::copy_from_slice(p.as_bytes())))
                .collect(),
        }
    }
}

type Handler = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

pub struct Mock {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// Notified when a streamed reply body is dropped before it was fully sent
    /// (the gateway hung up on the mock).
    pub stream_cancelled: Arc<Notify>,
    /// TCP connections accepted so far.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
    /// TCP connections open now (accepted and not yet closed).
    pub open: Arc<std::sync::atomic::AtomicUsize>,
}

impl Mock {
    pub async fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stream_cancelled = Arc::new(Notify::new());
        let handler: Handler = Arc::new(handler);
        let (reqs, cancelled) = (requests.clone(), stream_cancelled.clone());
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let opened = open.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (handler, reqs, cancelled) = (handler.clone(), reqs.clone(), cancelled.clone());
                let opened = opened.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (handler, reqs, cancelled) =
                            (handler.clone(), reqs.clone(), cancelled.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(http_body_util::Collected::to_bytes)
                                .unwrap_or_default();
                            let rec = Recorded {
                                method: parts.method,
                                uri: parts.uri.to_string(),
                                headers: parts.headers,
                                body,
                            };
                            reqs.lock().unwrap().push(rec.clone());
                            let reply = handler(&rec);
                            Ok::<_, Infallible>(build_reply(reply, cancelled).await)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                    opened.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        Mock {
            addr,
            requests,
            stream_cancelled,
            connections,
            open,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn last(&self) -> Recorded {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("mock got a request")
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn connection_count(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Connections the gateway holds open to this mock now.
    pub fn open_connections(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
}

type MockBody = BoxBody<Bytes, Infallible>;

async fn build_reply(mut reply: Reply, cancelled: Arc<Notify>) -> Response<MockBody> {
    while let Reply::Gated(mut gate, inner) = reply {
        let _ = gate.wait_for(|open| *open).await;
        reply = *inner;
    }
    let (status, headers, body): (u16, Vec<(&str, String)>, MockBody) = match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => (status, headers, Full::new(body).boxed()),
        Reply::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Reply::Gated(..) => unreachable!("opened above"),
        Reply::Piped(rx) => {
            let guard = CancelGuard {
                done: false,
                notify: cancelled,
            };
            (
                200,
                vec![("content-type", "text/event-stream".into())],
                StreamBody::new(ChannelStream { rx, guard }).boxed(),
            )
        }
        Reply::Stream {
            status,
            headers,
            pieces,
        } => {
            let (tx, rx) = mpsc::channel::<Bytes>(1);
            let guard = CancelGuard {
                done: false,
                notify: cancelled,
            };
            tokio::spawn(async move {
                for (delay, piece) in pieces {
                    tokio::time::sleep(delay).await;
                    if tx.send(piece).await.is_err() {
                        return;
                    }
                }
            });
            (
                status,
                headers,
                StreamBody::new(ChannelStream { rx, guard }).boxed(),
            )
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    for (k, v) in headers {
        response.headers_mut().append(k, v.parse().unwrap());
    }
    response
}

struct CancelGuard {
    done: bool,
    notify: Arc<Notify>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.done {
            self.notify.notify_one();
        }
    }
}

struct ChannelStream {
    rx: mpsc::Receiver<Bytes>,
    guard: CancelGuard,
}

impl futures_core::Stream for ChannelStream {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(None) => {
                self.guard.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A gateway serving on a loopback port until dropped.
pub struct TestGateway {
    pub addr: SocketAddr,
    pub gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
    pub done: Option<tokio::task::JoinHandle<()>>,
}

impl TestGateway {
    pub async fn start(toml: &str) -> TestGateway {
        let config = Config::from_toml(toml).unwrap_or_else(|e| panic!("test config: {e}"));
        let gateway = Arc::new(Gateway::new(Arc::new(config)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let gw = gateway.clone();
        // One worker thread besides the test's runtime, as `toolgate serve`
        // runs on two cores: every other connection is served there.
        let workers = Workers::start(1).unwrap();
        let dealer = Dealer::new(workers.handles());
        let done = tokio::spawn(async move {
            toolgate::server::run(gw, listener, dealer, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
            // Joining blocks: off the runtime's thread.
            tokio::task::spawn_blocking(move || workers.stop())
                .await
                .unwrap();
        });
        TestGateway {
            addr,
            gateway,
            stop: Some(tx),
            done: Some(done),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Starts the drain; returns the server task to await.
    pub fn shutdown(&mut self) -> tokio::task::JoinHandle<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.done.take().unwrap()
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A loopback port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// A response read to its end.
pub struct Collected {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Collected {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A JSON request with `key` as its bearer key (the keys and usage APIs).
#[allow(dead_code)]
pub async fn call(
    method: http::Method,
    url: &str,
    key: &str,
    body: Option<serde_json::Value>,
) -> Collected {
    send(
        Request::builder()
            .method(method)
            .uri(url)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Full::new(
                body.map(|b| Bytes::from(b.to_string())).unwrap_or_default(),
            ))
            .unwrap(),
    )
    .await
}

pub async fn send(req: Request<Full<Bytes>>) -> Collected {
    let resp = tokio::time::timeout(Duration::from_secs(20), client().request(req))
        .await
        .expect("response within 20 s")
        .expect("request sent");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body read").to_bytes();
    Collected {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub async fn post(url: &str, body: &str) -> Collected {
    send(
        Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .unwrap(),
    )
    .await
}

pub async fn get(url: &str) -> Collected {
    send(Request::get(url).body(Full::new(Bytes::new())).unwrap()).await
}

/// Reads a streamed answer until `marker` shows (e.g. a gateway call
/// reported `in_progress`); what was read. Drop the body after it to leave.
#[allow(dead_code)]
pub async fn read_until(body: &mut Incoming, marker: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(marker) {
        let frame = body.frame().await.unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    seen
}

/// The transcript list once it holds `n` chats (or after 5 s, whatever it
/// holds then): transcripts are written behind the answer, so the last
/// turn's chat may land a moment after its reply was read.
#[allow(dead_code)]
pub async fn chats_listed(gateway_url: &str, n: usize) -> serde_json::Value {
    let url = format!("{gateway_url}/toolgate/api/chats");
    let mut listed = get(&url).await.json();
    for _ in 0..50 {
        if listed["data"].as_array().map(Vec::len) == Some(n) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        listed = get(&url).await.json();
    }
    listed
}

pub fn provider_toml(name: &str, url: &str, models: &str, extra: &str) -> String {
    format!("[[providers]]\nname = \"{name}\"\nbase_url = \"{url}\"\nmodels = {models}\n{extra}\n")
}

// ---- Helpers for natural-mode end-to-end tests (tests/natural_e2e.rs) ----

/// The header fields a scripted upstream puts on every chunk.
pub const UP_ID: &str = "chatcmpl-upstream-7f3a";
pub const UP_CREATED: u64 = 1_717_171_717;
pub const UP_MODEL: &str = "llama-natural";
pub const UP_FINGERPRINT: &str = "fp_up_42";

/// One upstream chunk with the scripted header.
pub fn upstream_chunk(choices: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "id": UP_ID,
        "object": "chat.completion.chunk",
        "created": UP_CREATED,
        "model": UP_MODEL,
        "system_fingerprint": UP_FINGERPRINT,
        "choices": choices,
    })
}

/// An OpenAI SSE body streaming `pieces` as content: a first role chunk, one
/// chunk per piece, a `finish_reason: "stop"` chunk, an optional usage chunk
/// (`choices: []`), then `[DONE]`.
pub fn upstream_sse(pieces: &[&str], usage: Option<&serde_json::Value>) -> String {
    use serde_json::json;
    let mut chunks = vec![upstream_chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
    )];
    for p in pieces {
        chunks.push(upstream_chunk(
            json!([{"index": 0, "delta": {"content": p}, "logprobs": null, "finish_reason": null}]),
        ));
    }
    chunks.push(upstream_chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}]),
    ));
    if let Some(usage) = usage {
        let mut c = upstream_chunk(json!([]));
        c["usage"] = usage.clone();
        chunks.push(c);
    }
    let mut out = String::new();
    for c in chunks {
        out.push_str("data: ");
        out.push_str(&c.to_string());
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// A fallback model's non-streaming answer: one native `GetWeather` call
/// with `arguments`, and the usage it reports.
pub fn fallback_weather_call(arguments: &str, input_tokens: u64, output_tokens: u64) -> String {
    serde_json::json!({
        "id": "fb-1", "object": "chat.completion", "created": 1, "model": "small",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "GetWeather", "arguments": arguments}}]
        }}],
        "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens}
    })
    .to_string()
}

/// A non-streaming upstream `chat.completion` whose message is `content`.
pub fn upstream_completion(content: &str) -> String {
    serde_json::json!({
        "id": UP_ID,
        "object": "chat.completion",
        "created": UP_CREATED,
        "model": UP_MODEL,
        "system_fingerprint": UP_FINGERPRINT,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
    })
    .to_string()
}

/// `text` cut into pieces of `n` characters (never inside a character).
pub fn char_pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

/// A streamed SSE reply sending `body` as raw pieces cut at `cuts` (byte
/// offsets, in any place, even inside a UTF-8 character); every piece after
/// the first waits `delay`, so the pieces leave in separate TCP writes.
pub fn raw_sse_reply(body: &[u8], cuts: &[usize], delay: Duration) -> Reply {
    let mut pieces = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        if cut > start && cut < body.len() {
            let wait = if start == 0 { Duration::ZERO } else { delay };
            pieces.push((wait, Bytes::copy_from_slice(&body[start..cut])));
            start = cut;
        }
    }
    let wait = if start == 0 { Duration::ZERO } else { delay };
    pieces.push((wait, Bytes::copy_from_slice(&body[start..])));
    Reply::Stream {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        pieces,
    }
}

/// Seed 000's GetWeather tool, as a request's `tools` entry.
pub fn seed_get_weather() -> serde_json::Value {
    serde_json::json!({"type": "function", "function": {
        "name": "GetWeather",
        "description": "Get the current weather for a location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "The temperature unit to use"}
            },
            "required": ["location"]
        }
    }})
}

/// Seed 000's BookRestaurant tool, as a request's `tools` entry.
pub fn seed_book_restaurant() -> serde_json::Value {
    serde_json::json!({"type": "function", "function": {
        "name": "BookRestaurant",
        "description": "Book a table at a restaurant",
        "parameters": {
            "type": "object",
            "properties": {
                "restaurantName": {"type": "string", "description": "Name of the restaurant"},
                "date": {"type": "string", "description": "Date of booking in YYYY-MM-DD format"},
                "time": {"type": "string", "description": "Time of booking in HH:MM format"},
                "numberOfPeople": {"type": "integer", "description": "Number of people for the reservation"}
            },
            "required": ["restaurantName", "date", "time", "numberOfPeople"]
        }
    }})
}

/// An upstream's `GET /v1/models` answer listing `ids`, as OpenAI's.
pub fn models_list(ids: &[&str]) -> Reply {
    let data: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "upstream"}))
        .collect();
    Reply::json(&serde_json::json!({"object": "list", "data": data}).to_string())
}

/// An upstream without `GET /v1/models` (404); a chat answer otherwise.
pub fn no_models_list(r: &Recorded) -> Reply {
    if r.uri.ends_with("/models") {
        Reply::Full {
            status: 404,
            headers: vec![("content-type", "application/json".into())],
            body: Bytes::from_static(br#"{"error":{"message":"Not Found"}}"#),
        }
    } else {
        Reply::json(&upstream_completion("hello"))
    }
}
