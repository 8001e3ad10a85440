//! Driving a sans-IO rewrite of an upstream SSE stream from a response body.
//!
//! A [`Transform`] takes event payloads in and writes the client's SSE bytes
//! out; [`TransformBody`] feeds it from the upstream body's frames through the
//! [`Decoder`]. Thin on purpose: every decision lives in the transform.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

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
        Ok(Value::Object(chunk)) if chunk.contains_key("error") => {
            Incoming::Error(Value::Object(chunk))
        }
        Ok(Value::Object(chunk)) => Incoming::Chunk(chunk),
        _ => Incoming::Invalid,
    }
}

/// The error for [`Incoming::Invalid`].
pub fn invalid_event() -> GatewayError {
    GatewayError::UpstreamInvalid {
        message: "The upstream sent a stream event that is not a JSON object".into(),
        code: "upstream_invalid_event",
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
        loop {
            if !this.out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(this.out.split().freeze()))));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            if ready!(this.transform.poll_side(cx, this.out)) {
                *this.done = this.transform.is_ended();
                continue;
            }
            if let Some(event) = this.events.pop_front() {
                this.transform.on_event(&event.data, this.out);
                *this.done = this.transform.is_ended();
                continue;
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
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
                                code: "upstream_invalid_event",
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
