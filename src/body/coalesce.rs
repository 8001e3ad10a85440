//! Joins frames that are already waiting into one.
//!
//! hyper's client hands a response body over one frame per poll, and hyper's
//! server flushes after each frame it writes. For a fast upstream whose SSE
//! events arrive together, that is one write syscall (and one task wake-up)
//! per event. This adapter takes every frame that is ready *now* and returns
//! them as one, up to a size bound. It never waits for more data, so a lone
//! event still goes out the moment it arrives: latency is unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// Frames are joined until the batch reaches this size.
const MAX_BATCH: usize = 64 * 1024;

pin_project! {
    pub struct Coalesce<B: Body> {
        #[pin]
        inner: B,
        // What ended the last batch early: an error or the end, returned next.
        held: Option<Option<Result<Frame<Bytes>, B::Error>>>,
    }
}

impl<B: Body> Coalesce<B> {
    pub fn new(inner: B) -> Self {
        Coalesce { inner, held: None }
    }
}

impl<B> Body for Coalesce<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(held) = this.held.take() {
            return Poll::Ready(held);
        }
        let first = match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let first = match first.into_data() {
            Ok(data) => data,
            Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
        };
        let mut batch: Option<BytesMut> = None;
        while batch.as_ref().map_or(first.len(), BytesMut::len) < MAX_BATCH {
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let b = batch.get_or_insert_with(|| {
                            let mut b = BytesMut::with_capacity(first.len() + data.len());
                            b.extend_from_slice(&first);
                            b
                        });
                        b.extend_from_slice(&data);
                    }
                    Err(trailers) => {
                        *this.held = Some(Some(Ok(trailers)));
                        break;
                    }
                },
                Poll::Ready(end_or_error) => {
                    *this.held = Some(end_or_error);
                    break;
                }
                Poll::Pending => break,
            }
        }
        let data = batch.map_or(first, BytesMut::freeze);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.held, Some(None)) || (self.held.is_none() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.held.is_none() {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    type Step = Poll<Option<Result<Frame<Bytes>, &'static str>>>;

    struct Script(Vec<Step>);

    impl Body for Script {
        type Data = Bytes;
        type Error = &'static str;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            if self.0.is_empty() {
                return Poll::Ready(None);
            }
            let next = self.0.remove(0);
            if next.is_pending() {
                cx.waker().wake_by_ref();
            }
            next
        }
    }

    fn data(s: &'static str) -> Step {
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(s.as_bytes())))))
    }

    #[tokio::test]
    async fn ready_frames_are_joined_and_pending_ends_a_batch() {
        let script = Script(vec![
            data("a"),
            data("b"),
            data("c"),
            Poll::Pending,
            data("d"),
            Poll::Ready(Some(Err("boom"))),
        ]);
        let mut body = std::pin::pin!(Coalesce::new(script));
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "abc"
        );
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "d"
        );
        assert_eq!(body.frame().await.unwrap().unwrap_err(), "boom");
    }

    #[tokio::test]
    async fn the_end_after_a_batch_is_kept() {
        let mut body = std::pin::pin!(Coalesce::new(Script(vec![data("a"), data("b")])));
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "ab"
        );
        assert!(body.frame().await.is_none());
    }
}
