//! Driving a sans-IO rewrite of an upstream SSE stream from a response body.
//!
//! A [`Transform`] takes event payloads in and writes the client's SSE bytes
//! out; [`TransformBody`] feeds it from the upstream body's frames through the
//! [`Decoder`]. Thin on purpose: every decision lives in the transform.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use serde_json::{Map, Value};

use crate::body::BoxError;
use crate::error::GatewayError;
use crate::sse::{Decoder, Event};

/// A rewrite of one SSE stream, event by event.
pub trait Transform {
    fn on_event(&mut self, data: &[u8], out: &mut BytesMut);
    /// The upstream's body ended (after `[DONE]` or without it).
    fn finish(&mut self, out: &mut BytesMut);
    /// The stream cannot go on: an error event and `[DONE]`.
    fn fail(&mut self, out: &mut BytesMut, error: &GatewayError);
    fn is_ended(&self) -> bool;
    /// Work besides reading the upstream (natural mode's repairs).
    /// `Ready(true)`: progress was made, poll again. `Ready(false)`: nothing
    /// to do, read the upstream. `Pending`: the upstream must wait.
    fn poll_side(&mut self, _cx: &mut Context<'_>, _out: &mut BytesMut) -> Poll<bool> {
        Poll::Ready(false)
    }
}

/// What an upstream event payload is, before a transform looks at its choices.
pub enum Incoming {
    Done,
    /// The upstream's own in-stream error (conformance rule 15).
    Error(Value),
    Chunk(Map<String, Value>),
    /// Not a JSON object.
    Invalid,
}

pub fn classify(data: &[u8]) -> Incoming {
    if data == b"[DONE]" {
        return Incoming::Done;
    }
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Object(mut chunk)) if chunk.contains_key("error") => {
            let error = chunk.remove("error").unwrap_or_default();
            Incoming::Error(conform_error(error))
        }
        Ok(Value::Object(chunk)) => Incoming::Chunk(chunk),
        _ => Incoming::Invalid,
    }
}

/// An upstream's in-stream error in the shape clients read (rule 15):
/// `{"error": {"message": string, "type": string, "code": string or null}}`.
/// Servers send `code` as a number (vLLM's HTTP status) or the error as a
/// bare string; the message and every other field are kept.
fn conform_error(error: Value) -> Value {
    let mut error = match error {
        Value::Object(error) => error,
        Value::String(message) => Map::from_iter([("message".to_owned(), Value::String(message))]),
        other => Map::from_iter([(
            "message".to_owned(),
            Value::String(format!("the upstream sent an error event: {other}")),
        )]),
    };
    if !error.get("message").is_some_and(Value::is_string) {
        let said = error
            .get("message")
            .map(Value::to_string)
            .unwrap_or_default();
        let message = format!("the upstream sent an error event without a message {said}");
        error.insert(
            "message".into(),
            Value::String(message.trim_end().to_owned()),
        );
    }
    if !error.get("type").is_some_and(Value::is_string) {
        error.insert("type".into(), Value::String("upstream_error".into()));
    }
    let code = match error.remove("code") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(code)) => Value::String(code),
        Some(other) => Value::String(other.to_string()),
    };
    error.insert("code".into(), code);
    serde_json::json!({ "error": error })
}

/// The error for [`Incoming::Invalid`].
pub fn invalid_event() -> GatewayError {
    GatewayError::UpstreamInvalid {
        message: "The upstream sent a stream event that is not a JSON object".into(),
        code: "upstream_invalid_event",
    }
}

/// Output is handed on once it reaches this size, even if more events wait.
const MAX_FRAME: usize = 64 * 1024;

/// The output so far as one frame; `None` (the end) when there is none.
fn take_frame(out: &mut BytesMut) -> Option<Result<Frame<Bytes>, BoxError>> {
    (!out.is_empty()).then(|| Ok(Frame::data(out.split().freeze())))
}

/// Nothing more can be rewritten now: hand on what there is, or wait.
fn pending_or_frame(out: &mut BytesMut) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    match take_frame(out) {
        Some(frame) => Poll::Ready(Some(frame)),
        None => Poll::Pending,
    }
}

pin_project! {
    pub struct TransformBody<B, T> {
        #[pin]
        inner: B,
        decoder: Decoder,
        transform: T,
        events: VecDeque<Event>,
        scratch: Vec<Event>,
        out: BytesMut,
        done: bool,
    }
}

impl<B, T> TransformBody<B, T> {
    pub fn new(inner: B, transform: T) -> Self {
        TransformBody {
            inner,
            decoder: Decoder::new(),
            transform,
            events: VecDeque::new(),
            scratch: Vec::new(),
            out: BytesMut::new(),
            done: false,
        }
    }
}

impl<B, T> Body for TransformBody<B, T>
where
    // A concrete error type: a generic `Into<BoxError>` bound here trips
    // rustc's higher-ranked lifetime check inside the async handlers.
    B: Body<Data = Bytes, Error = BoxError>,
    T: Transform,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        // Everything already received is rewritten before the output goes
        // out, so a burst of upstream events costs one write to the client,
        // not one per event. Nothing waits for data that has not arrived: the
        // output is returned the moment the upstream or a repair is pending.
        loop {
            if *this.done || this.out.len() >= MAX_FRAME {
                return Poll::Ready(take_frame(this.out));
            }
            match this.transform.poll_side(cx, this.out) {
                Poll::Ready(true) => {
                    *this.done = this.transform.is_ended();
                    continue;
                }
                Poll::Ready(false) => {}
                Poll::Pending => return pending_or_frame(this.out),
            }
            if let Some(event) = this.events.pop_front() {
                this.transform.on_event(&event.data, this.out);
                this.decoder.recycle(event.data);
                *this.done = this.transform.is_ended();
                continue;
            }
            let Poll::Ready(next) = this.inner.as_mut().poll_frame(cx) else {
                return pending_or_frame(this.out);
            };
            match next {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if let Err(e) = this.decoder.feed(&data, this.scratch) {
                        let message = format!("The upstream stream is malformed: {e}");
                        this.transform.fail(
                            this.out,
                            &GatewayError::UpstreamInvalid {
                                message,
                                code: e.code(),
                            },
                        );
                    }
                    this.events.extend(this.scratch.drain(..));
                }
                Some(Err(e)) => {
                    let message = format!("The upstream stream failed: {e}");
                    this.transform.fail(
                        this.out,
                        &GatewayError::UpstreamInvalid {
                            message,
                            code: "upstream_stream_error",
                        },
                    );
                }
                None => this.transform.finish(this.out),
            }
            *this.done = this.transform.is_ended();
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// For the rewriters' tests: their fast paths must write what their general
/// path writes.
#[cfg(test)]
pub(crate) mod twin {
    use super::*;

    /// Runs `chunks` (event payloads, then the end of the stream) through
    /// two fresh transforms: one as they are, one with a line break after
    /// each payload's first byte. A multi-line payload always takes the
    /// general path (it must be re-framed), and a line break is whitespace
    /// to JSON, so the second run reads the same chunks the slow way.
    /// Returns both outputs' events, parsed (`[DONE]` as a string).
    pub fn fast_and_general<T: Transform>(
        make: impl Fn() -> T,
        chunks: &[&str],
    ) -> (Vec<Value>, Vec<Value>) {
        let run = |broken: bool| {
            let mut transform = make();
            let mut out = BytesMut::new();
            for chunk in chunks {
                let chunk = if broken && chunk.len() > 1 && *chunk != "[DONE]" {
                    format!("{}\n{}", &chunk[..1], &chunk[1..])
                } else {
                    chunk.to_string()
                };
                transform.on_event(chunk.as_bytes(), &mut out);
            }
            transform.finish(&mut out);
            events(&out)
        };
        (run(false), run(true))
    }

    /// The `data:` payloads of SSE output, each parsed.
    pub fn events(out: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(out).expect("UTF-8 output");
        text.split("\n\n")
            .filter(|event| !event.is_empty())
            .map(|event| {
                let data: String = event
                    .lines()
                    .map(|line| line.strip_prefix("data: ").expect("data lines only"))
                    .collect::<Vec<_>>()
                    .join("\n");
                serde_json::from_str(&data).unwrap_or(Value::String(data))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn upstream_errors_take_the_shape_clients_read() {
        let error = |data: &str| match classify(data.as_bytes()) {
            Incoming::Error(error) => error,
            _ => panic!("{data} is an error event"),
        };
        // vLLM's numeric code becomes a string; message, type and param stay.
        let vllm = error(
            r#"{"error":{"message":"engine died","type":"InternalServerError","param":null,"code":500}}"#,
        );
        assert_eq!(
            vllm,
            serde_json::json!({"error": {"message": "engine died", "type": "InternalServerError", "param": null, "code": "500"}})
        );
        // A bare string is the message.
        let bare = error(r#"{"error":"out of memory"}"#);
        assert_eq!(bare["error"]["message"], "out of memory");
        assert_eq!(bare["error"]["type"], "upstream_error");
        assert_eq!(bare["error"]["code"], Value::Null);
        // Whatever the upstream said is still in the message.
        let odd = error(r#"{"error":{"message":42}}"#);
        assert!(
            odd["error"]["message"].as_str().unwrap().ends_with("42"),
            "{odd}"
        );
        let good = r#"{"error":{"message":"m","type":"t","code":"c"}}"#;
        assert_eq!(error(good), serde_json::from_str::<Value>(good).unwrap());
    }

    /// Writes each event's data back as an event.
    struct Echo {
        ended: bool,
    }

    impl Transform for Echo {
        fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
            crate::sse::encoder::write_raw(out, data);
        }
        fn finish(&mut self, out: &mut BytesMut) {
            out.extend_from_slice(crate::sse::encoder::DONE);
            self.ended = true;
        }
        fn fail(&mut self, _out: &mut BytesMut, _error: &GatewayError) {
            self.ended = true;
        }
        fn is_ended(&self) -> bool {
            self.ended
        }
    }

    /// Frames, with `None` standing for one `Pending` poll.
    struct Script(Vec<Option<&'static str>>);

    impl Body for Script {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if self.0.is_empty() {
                return Poll::Ready(None);
            }
            match self.0.remove(0) {
                Some(text) => {
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(text.as_bytes())))))
                }
                None => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        }
    }

    /// Events already received go out in one frame; output is never held
    /// back waiting for the upstream.
    #[tokio::test]
    async fn ready_events_are_written_together_and_pending_hands_output_on() {
        let upstream = Script(vec![
            Some("data: a\n\ndata: b\n\n"),
            Some("data: c\n\n"),
            None,
            Some("data: d\n\n"),
        ]);
        let mut body = std::pin::pin!(TransformBody::new(upstream, Echo { ended: false }));
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(
            frames,
            [
                "data: a\n\ndata: b\n\ndata: c\n\n",
                "data: d\n\ndata: [DONE]\n\n"
            ]
        );
    }
}
