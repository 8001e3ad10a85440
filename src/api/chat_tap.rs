//! A chat answer read on its way to the client, for the transcript: the
//! body passes through unchanged (frame for frame), and a copy is decoded
//! into [`Event`](crate::exchange::Event)s for the [`Recorder`]. Used on
//! the direct chat paths (passthrough, natural, to_natural) when a store
//! records the exchange.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::body::{Body, BoxError};
use crate::error::GatewayError;
use crate::exchange::Event;
use crate::sse;
use crate::store::Recorder;
use crate::upstream::chat_decode::{self, ChatDecoder};

/// A whole (non-streamed) answer is decoded only up to this size.
const MAX_WHOLE: usize = 8 * 1024 * 1024;

pub struct Tap {
    inner: Body,
    recorder: Option<Recorder>,
    shape: Shape,
    events: Vec<Event>,
    /// The error the stream said it ended with (an invalid call, the
    /// upstream's own): what the transcript records, not a cut.
    said: Option<GatewayError>,
}

enum Shape {
    Stream {
        sse: sse::Decoder,
        chat: ChatDecoder,
        frames: Vec<sse::Event>,
    },
    Whole(Vec<u8>),
}

impl Tap {
    pub fn new(inner: Body, recorder: Recorder, streamed: bool) -> Tap {
        let shape = if streamed {
            Shape::Stream {
                sse: sse::Decoder::new(),
                chat: ChatDecoder::new(),
                frames: Vec::new(),
            }
        } else {
            Shape::Whole(Vec::new())
        };
        Tap {
            inner,
            recorder: Some(recorder),
            shape,
            events: Vec::new(),
            said: None,
        }
    }

    fn observe(&mut self, data: &[u8]) {
        let Some(recorder) = &mut self.recorder else {
            return;
        };
        match &mut self.shape {
            Shape::Stream { sse, chat, frames } => {
                if sse.feed(data, frames).is_err() {
                    self.recorder = None;
                    return;
                }
                for frame in frames.drain(..) {
                    if let Err(error) = chat.feed(&frame.data, &mut self.events) {
                        self.said.get_or_insert(error);
                        break;
                    }
                }
                for event in self.events.drain(..) {
                    recorder.event(&event);
                }
                if chat.is_done() {
                    // Before the client sees `[DONE]`: a follow-up request
                    // finds the state it continues.
                    self.end(Ended::Upstream);
                }
            }
            Shape::Whole(buffer) => {
                if buffer.len() + data.len() > MAX_WHOLE {
                    self.recorder = None;
                    return;
                }
                buffer.extend_from_slice(data);
            }
        }
    }

    /// Records what was read, and, when the upstream's stream was cut or
    /// failed, that the answer failed.
    fn end(&mut self, how: Ended) {
        let Some(mut recorder) = self.recorder.take() else {
            return;
        };
        let upstream_ended = matches!(how, Ended::Upstream);
        let mut failure = match how {
            Ended::Failed(error) => Some(error),
            Ended::Upstream | Ended::ClientLeft => None,
        };
        if let Some(said) = self.said.take() {
            failure.get_or_insert(said);
        }
        match &mut self.shape {
            Shape::Stream { chat, .. } => {
                let finished = chat.finish(&mut self.events);
                if let (Err(error), true) = (finished, upstream_ended) {
                    failure.get_or_insert(error);
                }
            }
            Shape::Whole(buffer) => {
                if let Ok(events) = chat_decode::completion(buffer) {
                    self.events = events;
                }
            }
        }
        for event in self.events.drain(..) {
            recorder.event(&event);
        }
        if let Some(error) = failure {
            recorder.fail(&error);
        }
        recorder.finish();
    }
}

/// How the tapped body ended.
enum Ended {
    /// The upstream's body ended (its stream may have been cut).
    Upstream,
    /// It failed.
    Failed(GatewayError),
    /// The client left before the end.
    ClientLeft,
}

impl Drop for Tap {
    /// A client that left: what was read is recorded.
    fn drop(&mut self) {
        self.end(Ended::ClientLeft);
    }
}

impl HttpBody for Tap {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    self.observe(&data);
                }
                // hyper stops polling a body that says it has ended.
                if self.inner.is_end_stream() {
                    self.end(Ended::Upstream);
                }
            }
            Poll::Ready(None) => self.end(Ended::Upstream),
            Poll::Ready(Some(Err(e))) => {
                let error = GatewayError::UpstreamInvalid {
                    message: format!("The upstream stream failed: {e}"),
                    code: "upstream_stream_error",
                };
                self.end(Ended::Failed(error));
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
