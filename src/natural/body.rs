//! Drives the SSE decoder and a [`StreamRewriter`] from an upstream body's
//! frames. Thin on purpose: all decisions live in the sans-IO parts.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::body::BoxError;
use crate::error::GatewayError;
use crate::natural::stream::StreamRewriter;
use crate::sse::{Decoder, Event};

pin_project! {
    pub struct RewriteBody<B> {
        #[pin]
        inner: B,
        decoder: Decoder,
        rewriter: StreamRewriter,
        events: Vec<Event>,
        out: BytesMut,
        done: bool,
    }
}

impl<B> RewriteBody<B> {
    pub fn new(inner: B, rewriter: StreamRewriter) -> Self {
        RewriteBody {
            inner,
            decoder: Decoder::new(),
            rewriter,
            events: Vec::new(),
            out: BytesMut::new(),
            done: false,
        }
    }
}

impl<B> Body for RewriteBody<B>
where
    // A concrete error type: a generic `Into<BoxError>` bound here trips
    // rustc's higher-ranked lifetime check inside the async handler.
    B: Body<Data = Bytes, Error = BoxError>,
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
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if let Err(e) = this.decoder.feed(&data, this.events) {
                        this.rewriter.fail(
                            this.out,
                            &GatewayError::UpstreamInvalid {
                                message: format!("The upstream stream is malformed: {e}"),
                                code: "upstream_invalid_event",
                            },
                        );
                    }
                    for event in this.events.drain(..) {
                        this.rewriter.on_event(&event.data, this.out);
                    }
                }
                Some(Err(e)) => {
                    this.rewriter.fail(
                        this.out,
                        &GatewayError::UpstreamInvalid {
                            message: format!("The upstream stream failed: {e}"),
                            code: "upstream_stream_error",
                        },
                    );
                }
                None => this.rewriter.finish(this.out),
            }
            if this.rewriter.is_ended() {
                *this.done = true;
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
