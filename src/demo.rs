//! The built-in demo model: a deterministic chat model answered in process.
//!
//! It sits behind [`crate::upstream::Upstreams::send`] like any provider, so
//! a request to it runs the whole gateway path (routing, transforms, SSE
//! re-encoding, metrics). It speaks OpenAI's wire format, streaming and not,
//! with a configurable chunk size and per-chunk delay.

mod script;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame};
use http_body_util::Full;
use serde_json::{Value, json};
use tokio::time::Sleep;

use crate::body::{self, Body, BoxError};
use crate::config::DemoConfig;
use crate::sse::encoder;

const FINGERPRINT: &str = "fp_toolgate_demo";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Answers a request the way the scripted model does.
pub async fn respond(config: &DemoConfig, req: Request<Full<Bytes>>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let bytes = match http_body_util::BodyExt::collect(req.into_body()).await {
        Ok(c) => c.to_bytes(),
        Err(never) => match never {},
    };
    if path != "/v1/chat/completions" {
        return error(
            StatusCode::NOT_FOUND,
            &format!("the demo model only serves /v1/chat/completions, not {path}"),
        );
    }
    let request: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
    };
    let (text, call) = match script::answer(&request) {
        Ok(a) => (a.text, a.call),
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("demo")
        .to_owned();
    let reply = Reply {
        id: format!("chatcmpl-demo{}", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model,
        prompt_tokens: (bytes.len() / 4) as u64,
        completion_tokens: text.chars().count().div_ceil(4) as u64,
        text,
        call,
    };
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        let usage = request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true);
        let frames = reply.stream_frames(config.chunk_chars, usage);
        let mut response = Response::new(body::boxed(DemoStream::new(frames, config.chunk_delay)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
        response
    } else {
        let mut response = Response::new(body::json(&reply.completion()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        response
    }
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(body::json(&json!({
        "error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}
    })));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

struct Reply {
    id: String,
    created: u64,
    model: String,
    text: String,
    /// A native call `(name, arguments)`, made after the text.
    call: Option<(String, String)>,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl Reply {
    fn usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        })
    }

    fn completion(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.text, "refusal": null});
        if let Some((name, arguments)) = &self.call {
            message["tool_calls"] = json!([{
                "id": "call_demo0000000000000000000",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }]);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": if self.call.is_some() { "tool_calls" } else { "stop" },
            }],
            "usage": self.usage(),
        })
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    }

    /// One SSE frame per chunk: role, content pieces, finish, usage, `[DONE]`.
    fn stream_frames(&self, chunk_chars: usize, usage: bool) -> VecDeque<Bytes> {
        let mut frames = VecDeque::new();
        let mut push = |value: &Value| {
            let mut buf = BytesMut::new();
            encoder::write_json(&mut buf, value);
            frames.push_back(buf.freeze());
        };
        push(&self.chunk(json!({"role": "assistant", "content": ""}), None));
        let chars: Vec<char> = self.text.chars().collect();
        for piece in chars.chunks(chunk_chars) {
            push(&self.chunk(json!({"content": piece.iter().collect::<String>()}), None));
        }
        let mut finish = "stop";
        if let Some((name, arguments)) = &self.call {
            finish = "tool_calls";
            let start = json!({"tool_calls": [{"index": 0, "id": "call_demo0000000000000000000", "type": "function",
                "function": {"name": name, "arguments": ""}}]});
            push(&self.chunk(start, None));
            let chars: Vec<char> = arguments.chars().collect();
            for piece in chars.chunks(chunk_chars) {
                let args: String = piece.iter().collect();
                push(&self.chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
                    None,
                ));
            }
        }
        push(&self.chunk(json!({}), Some(finish)));
        if usage {
            let mut last = self.chunk(json!({}), None);
            last["choices"] = json!([]);
            last["usage"] = self.usage();
            push(&last);
        }
        frames.push_back(Bytes::from_static(encoder::DONE));
        frames
    }
}

/// Yields prepared frames with a pause before each one after the first.
struct DemoStream {
    frames: VecDeque<Bytes>,
    delay: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl DemoStream {
    fn new(frames: VecDeque<Bytes>, delay: Duration) -> Self {
        DemoStream {
            frames,
            delay,
            sleep: None,
        }
    }
}

impl HttpBody for DemoStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(sleep) = self.sleep.as_mut() {
            ready!(sleep.as_mut().poll(cx));
        }
        let Some(frame) = self.frames.pop_front() else {
            return Poll::Ready(None);
        };
        self.sleep = (!self.delay.is_zero() && !self.frames.is_empty())
            .then(|| Box::pin(tokio::time::sleep(self.delay)));
        Poll::Ready(Some(Ok(Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }
}
