//! A fast, canned OpenAI-compatible upstream for `benches/load.sh`.
//!
//! Not a criterion benchmark: it is a `[[bench]]` target with `harness = false`
//! only so that `cargo bench --no-run` builds it next to the other benches.
//! Under plain `cargo bench` (which passes `--bench`) it exits at once.
//!
//! ```text
//! mock_upstream serve [--listen 127.0.0.1:0] [--threads 1] [--chunks 32] [--slow-ms 1000] [--slow-count 0]
//! mock_upstream describe [--chunks 32] [--slow-count 16]   # prints the canned streams' event counts
//! ```
//!
//! `serve` prints `listening <port>` on stdout once bound. Every request body
//! is read whole, then answered by the model name it mentions:
//!
//! | model           | answer                                                             |
//! |-----------------|--------------------------------------------------------------------|
//! | `bench-sse`     | SSE: a role chunk, `--chunks` content chunks, a finish chunk, DONE  |
//! | `bench-natural` | SSE whose content is prose then a `<GetWeather>` call (tag syntax)  |
//! | `bench-tools`   | SSE of a native `tool_calls` call to `GetWeather`, arguments in 4-byte fragments |
//! | `bench-toolify` | the natural-mode reply in the peer gateway toolify-rs's call format: the same prose, then the trigger its prompt announced and a `<function_calls>` block |
//! | `bench-slow`, `bench-slow-natural`, `bench-slow-toolify` | with `--slow-count 0` (the default), SSE that stays open: one content chunk every `--slow-ms`; with `--slow-count K`, a whole stream paced over K ticks `--slow-ms` apart (the role chunk at once; `bench-slow`: K content chunks; `-natural`: the natural-mode reply; `-toolify`: toolify-rs's), its finish and `[DONE]` with the last |
//! | anything else   | a non-streaming chat completion (JSON)                             |
//!
//! Streams are sent one event per body frame, as a real upstream produces
//! them, on keep-alive HTTP/1.1 connections. The responses are built once at
//! start-up, so serving costs little more than hyper's own work.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

const CREATED: u64 = 1_700_000_000;

/// The natural-mode reply: some prose, then a call in the `tag` syntax.
pub const NATURAL_TEXT: &str = "Let me check the current weather in Paris for you, \
so that you know whether to bring an umbrella today.\n\n<GetWeather>\n```json\n\
{\"location\": \"Paris, France\", \"unit\": \"celsius\"}\n```\n</GetWeather>";

const PROSE_WORDS: &[&str] = &[
    "The",
    " weather",
    " in",
    " Paris",
    " is",
    " mild",
    " today",
    ",",
    " around",
    " eighteen",
    " degrees",
    " with",
    " a",
    " light",
    " breeze",
    " from",
    " the",
    " west",
    " and",
    " some",
    " clouds",
    " in",
    " the",
    " afternoon",
    ".",
];

/// The prose of [`NATURAL_TEXT`], before its call.
const NATURAL_PROSE: &str = "Let me check the current weather in Paris for you, \
so that you know whether to bring an umbrella today.\n\n";

/// toolify-rs announces a trigger of this shape in the system prompt it
/// writes (`<Function_` + 4 alphanumerics + `_Start/>`, random per process)
/// and parses a call only after it, whole in one delta.
const TOOLIFY_TRIGGER: (&str, &str) = ("<Function_", "_Start/>");

/// The arguments of the native call in `bench-tools`.
pub const TOOL_ARGUMENTS: &str = "{\"location\": \"Paris, France\", \"unit\": \"celsius\"}";

struct Canned {
    json: Bytes,
    sse: Arc<[Bytes]>,
    /// `sse` with a usage chunk before `[DONE]`, for a request that asks
    /// for one (`stream_options.include_usage`), as OpenAI sends it.
    sse_usage: Arc<[Bytes]>,
    natural: Arc<[Bytes]>,
    tools: Arc<[Bytes]>,
    slow_first: Bytes,
    slow_next: Bytes,
    slow_every: Duration,
    /// Ticks of a paced stream (`--slow-count`); 0: the slow streams never end.
    slow_count: usize,
    slow: Arc<[Bytes]>,
    slow_natural: Arc<[Bytes]>,
}

fn chunk(model: &str, delta: &str, finish: Option<&str>) -> Bytes {
    let finish = finish.map_or("null".to_owned(), |f| format!("\"{f}\""));
    Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":{CREATED},\
\"model\":\"{model}\",\"system_fingerprint\":\"fp_bench\",\"choices\":[{{\"index\":0,\"delta\":{delta},\
\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
    ))
}

/// The natural-mode reply in toolify-rs's format, for the trigger found in
/// `request` (`None` without one): the same prose and arguments as
/// [`NATURAL_TEXT`], the trigger in one delta, the rest in 4-byte tokens.
fn toolify_stream(model: &str, request: &[u8]) -> Option<Arc<[Bytes]>> {
    let text = std::str::from_utf8(request).ok()?;
    let start = text.find(TOOLIFY_TRIGGER.0)?;
    let len = text[start..].find(TOOLIFY_TRIGGER.1)? + TOOLIFY_TRIGGER.1.len();
    let trigger = &text[start..start + len];
    let call = format!(
        "\n<function_calls>\n<function_call>\n<tool>GetWeather</tool>\n<args_json>{TOOL_ARGUMENTS}</args_json>\n</function_call>\n</function_calls>"
    );
    let mut pieces = tokens(NATURAL_PROSE);
    pieces.push(trigger);
    pieces.extend(tokens(&call));
    Some(stream(model, &pieces))
}

/// A whole stream (`frames`: the role chunk first, then content, a finish
/// and `[DONE]`) paced over `count` ticks: the role chunk at once, the
/// content split as evenly as it goes over the ticks, the finish and
/// `[DONE]` with the last one. Each item is one write.
fn paced(frames: &[Bytes], count: usize) -> Arc<[Bytes]> {
    let (role, rest) = frames.split_first().expect("a role chunk");
    let content = &rest[..rest.len() - 2];
    let count = count.max(1);
    let mut ticks = vec![role.clone()];
    for i in 0..count {
        let group = &content[content.len() * i / count..content.len() * (i + 1) / count];
        ticks.push(group.concat().into());
    }
    let last = ticks.pop().expect("count >= 1");
    ticks.push(
        [
            last,
            rest[rest.len() - 2].clone(),
            rest[rest.len() - 1].clone(),
        ]
        .concat()
        .into(),
    );
    ticks.into()
}

/// `frames` with OpenAI's usage chunk (`choices: []`) before `[DONE]`.
fn with_usage(frames: &[Bytes]) -> Arc<[Bytes]> {
    let mut out = frames.to_vec();
    let done = out.pop().expect("a stream ends with [DONE]");
    out.push(Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":{CREATED},\
\"model\":\"bench-sse\",\"system_fingerprint\":\"fp_bench\",\"choices\":[],\
\"usage\":{{\"prompt_tokens\":42,\"completion_tokens\":{},\"total_tokens\":{}}}}}\n\n",
        frames.len() - 3,
        frames.len() + 39
    )));
    out.push(done);
    out.into()
}

fn content_delta(text: &str) -> String {
    format!(
        "{{\"content\":{}}}",
        serde_json::to_string(text).expect("a string")
    )
}

/// A stream of `pieces` as content deltas, framed the way OpenAI streams are.
fn stream(model: &str, pieces: &[&str]) -> Arc<[Bytes]> {
    let mut frames = vec![chunk(model, r#"{"role":"assistant","content":""}"#, None)];
    frames.extend(pieces.iter().map(|p| chunk(model, &content_delta(p), None)));
    frames.push(chunk(model, "{}", Some("stop")));
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames.into()
}

/// A native tool call streamed the way OpenAI streams one: the id and name
/// first, then the arguments in fragments, then `finish_reason: tool_calls`.
fn tool_stream(model: &str) -> Arc<[Bytes]> {
    let mut frames = vec![chunk(model, r#"{"role":"assistant","content":null}"#, None)];
    frames.push(chunk(
        model,
        r#"{"tool_calls":[{"index":0,"id":"call_bench","type":"function","function":{"name":"GetWeather","arguments":""}}]}"#,
        None,
    ));
    for piece in tokens(TOOL_ARGUMENTS) {
        let fragment = serde_json::to_string(piece).expect("a string");
        frames.push(chunk(
            model,
            &format!(r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":{fragment}}}}}]}}"#),
            None,
        ));
    }
    frames.push(chunk(model, "{}", Some("tool_calls")));
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    frames.into()
}

/// Splits text into model-token-sized pieces (about 4 bytes, on char boundaries).
pub fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + 4).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

impl Canned {
    fn new(chunks: usize, slow_ms: u64, slow_count: usize) -> Self {
        let ticks = vec![" tick"; slow_count.max(1)];
        let json = format!(
            "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":{CREATED},\
\"model\":\"bench-json\",\"system_fingerprint\":\"fp_bench\",\"choices\":[{{\"index\":0,\"message\":\
{{\"role\":\"assistant\",\"content\":\"The weather in Paris is mild today, around eighteen degrees \
with a light breeze from the west.\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\
\"usage\":{{\"prompt_tokens\":42,\"completion_tokens\":21,\"total_tokens\":63}}}}"
        );
        let words: Vec<&str> = PROSE_WORDS.iter().copied().cycle().take(chunks).collect();
        Canned {
            json: Bytes::from(json),
            sse: stream("bench-sse", &words),
            sse_usage: with_usage(&stream("bench-sse", &words)),
            natural: stream("bench-natural", &tokens(NATURAL_TEXT)),
            tools: tool_stream("bench-tools"),
            slow_first: chunk("bench-slow", r#"{"role":"assistant","content":""}"#, None),
            slow_next: chunk("bench-slow", r#"{"content":" tick"}"#, None),
            slow_every: Duration::from_millis(slow_ms),
            slow_count,
            slow: paced(&stream("bench-slow", &ticks), slow_count),
            slow_natural: paced(
                &stream("bench-slow-natural", &tokens(NATURAL_TEXT)),
                slow_count,
            ),
        }
    }
}

/// The three shapes of answer body, without boxing.
enum MockBody {
    Full(Option<Bytes>),
    Frames {
        frames: Arc<[Bytes]>,
        next: usize,
    },
    /// `ticks[0]` at once, then one item every `every`; then `endless`
    /// every `every` for ever, or the end.
    Paced {
        ticks: Arc<[Bytes]>,
        next: usize,
        endless: Option<Bytes>,
        every: Duration,
        sleep: Pin<Box<tokio::time::Sleep>>,
    },
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Frames { frames, next } => {
                let frame = frames.get(*next).cloned();
                *next += 1;
                Poll::Ready(frame.map(|b| Ok(Frame::data(b))))
            }
            MockBody::Paced {
                ticks,
                next,
                endless,
                every,
                sleep,
            } => {
                if *next == 0 {
                    *next = 1;
                    return Poll::Ready(Some(Ok(Frame::data(ticks[0].clone()))));
                }
                if *next >= ticks.len() && endless.is_none() {
                    return Poll::Ready(None);
                }
                match sleep.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => {
                        let deadline = sleep.deadline() + *every;
                        sleep.as_mut().reset(deadline);
                        let item = match ticks.get(*next) {
                            Some(item) => item.clone(),
                            None => endless.clone().expect("checked above"),
                        };
                        *next += 1;
                        Poll::Ready(Some(Ok(Frame::data(item))))
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            MockBody::Full(b) => b.is_none(),
            MockBody::Frames { frames, next } => *next >= frames.len(),
            MockBody::Paced {
                ticks,
                next,
                endless,
                ..
            } => endless.is_none() && *next >= ticks.len(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

async fn answer(
    canned: Arc<Canned>,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, Infallible> {
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let sse = |body: MockBody| {
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(body)
            .expect("static response")
    };
    // `bench-slow`, `bench-slow-natural`, `bench-slow-toolify` (any model
    // starting `bench-slow`): endless, or paced whole streams.
    let response = if contains(&body, b"\"bench-slow") {
        let (ticks, endless) = if canned.slow_count == 0 {
            (
                vec![canned.slow_first.clone()].into(),
                Some(canned.slow_next.clone()),
            )
        } else if contains(&body, b"\"bench-slow-natural\"") {
            (canned.slow_natural.clone(), None)
        } else if contains(&body, b"\"bench-slow-toolify\"")
            && let Some(frames) = toolify_stream("bench-slow-toolify", &body)
        {
            (paced(&frames, canned.slow_count), None)
        } else {
            (canned.slow.clone(), None)
        };
        sse(MockBody::Paced {
            ticks,
            next: 0,
            endless,
            every: canned.slow_every,
            sleep: Box::pin(tokio::time::sleep(canned.slow_every)),
        })
    } else if contains(&body, b"\"bench-sse\"") {
        let frames = if contains(&body, b"\"include_usage\":true") {
            canned.sse_usage.clone()
        } else {
            canned.sse.clone()
        };
        sse(MockBody::Frames { frames, next: 0 })
    } else if contains(&body, b"\"bench-natural\"") {
        sse(MockBody::Frames {
            frames: canned.natural.clone(),
            next: 0,
        })
    } else if contains(&body, b"\"bench-toolify\"")
        && let Some(frames) = toolify_stream("bench-toolify", &body)
    {
        sse(MockBody::Frames { frames, next: 0 })
    } else if contains(&body, b"\"bench-tools\"") {
        sse(MockBody::Frames {
            frames: canned.tools.clone(),
            next: 0,
        })
    } else {
        Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(MockBody::Full(Some(canned.json.clone())))
            .expect("static response")
    };
    Ok(response)
}

async fn serve(listen: SocketAddr, canned: Arc<Canned>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening {}", listener.local_addr()?.port());
    use std::io::Write;
    std::io::stdout().flush()?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                eprintln!("mock_upstream: accept: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let canned = canned.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(canned.clone(), req));
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let chunks = arg(&args, "--chunks", 32usize);
    match args.first().map(String::as_str) {
        Some("serve") => {
            let listen: SocketAddr = arg(&args, "--listen", "127.0.0.1:0".parse().expect("addr"));
            let threads = arg(&args, "--threads", 1usize);
            let slow_ms = arg(&args, "--slow-ms", 1000u64);
            let slow_count = arg(&args, "--slow-count", 0usize);
            let canned = Arc::new(Canned::new(chunks, slow_ms, slow_count));
            let runtime = if threads <= 1 {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .enable_all()
                    .build()
            }
            .expect("runtime");
            if let Err(e) = runtime.block_on(serve(listen, canned)) {
                eprintln!("mock_upstream: {e}");
                std::process::exit(1);
            }
        }
        Some("describe") => {
            let slow_count = arg(&args, "--slow-count", 16usize).max(1);
            let canned = Canned::new(chunks, 1000, slow_count);
            // Events carrying a JSON chunk (the `[DONE]` sentinel excluded).
            println!("sse_events {}", canned.sse.len() - 1);
            println!("natural_events {}", canned.natural.len() - 1);
            println!("tools_events {}", canned.tools.len() - 1);
            let toolify =
                toolify_stream("bench-toolify", b"<Function_abcd_Start/>").expect("a trigger");
            println!("toolify_events {}", toolify.len() - 1);
            // A paced stream's events: the role chunk, its content and the finish.
            let events = |ticks: &[Bytes]| {
                ticks
                    .iter()
                    .map(|t| memchr::memmem::find_iter(t, b"data: {").count())
                    .sum::<usize>()
            };
            println!("slow_events {}", events(&canned.slow));
            println!("slow_natural_events {}", events(&canned.slow_natural));
            let toolify =
                toolify_stream("bench-slow-toolify", b"<Function_abcd_Start/>").expect("a trigger");
            println!(
                "slow_toolify_events {}",
                events(&paced(&toolify, slow_count))
            );
        }
        // `cargo bench` runs every bench target with `--bench`: nothing to do here.
        _ => eprintln!("mock_upstream: a helper of benches/load.sh (`serve` or `describe`)"),
    }
}
