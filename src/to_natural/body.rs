//! Drives the SSE decoder and a [`StreamRenderer`] from an upstream body.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::body::BoxError;
use crate::error::GatewayError;
use crate::sse::{Decoder, Event};
use crate::to_natural::stream::StreamRenderer;

pin_project! {
    pub struct RenderBody<B> {
        #[pin]
        inner: B,
        decoder: Decoder,
        renderer: StreamRenderer,
        events: Vec<Event>,
        out: BytesMut,
        done: bool,
    }
}

impl<B> RenderBody<B> {
    pub fn new(inner: B, renderer: StreamRenderer) -> Self {
        RenderBody {
            inner,
            decoder: Decoder::new(),
            renderer,
            events: Vec::new(),
            out: BytesMut::new(),
            done: false,
        }
    }
}

impl<B> Body for RenderBody<B>
where
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
                        let message = format!("The upstream stream is malformed: {e}");
                        this.renderer.fail(
                            this.out,
                            &GatewayError::UpstreamInvalid {
                                message,
                                code: "upstream_invalid_event",
                            },
                        );
                    }
                    for event in this.events.drain(..) {
                        this.renderer.on_event(&event.data, this.out);
                    }
                }
                Some(Err(e)) => {
                    let message = format!("The upstream stream failed: {e}");
                    this.renderer.fail(
                        this.out,
                        &GatewayError::UpstreamInvalid {
                            message,
                            code: "upstream_stream_error",
                        },
                    );
                }
                None => this.renderer.finish(this.out),
            }
            if this.renderer.is_ended() {
                *this.done = true;
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
