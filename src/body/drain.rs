//! Ending open streams when the shutdown grace period runs out.
//!
//! Until then a stream runs untouched. Once the gateway's grace period is
//! over, the stream is ended at its next SSE event boundary, never mid-event,
//! with an error event and `data: [DONE]` (conformance rule 15), so clients
//! see a clean, explained end instead of a cut connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::watch;

use super::BoxError;

const ENDING: &[u8] = b"data: {\"error\":{\"message\":\"The gateway is shutting down; this stream was ended at the end of its grace period\",\"type\":\"server_error\",\"param\":null,\"code\":\"shutting_down\"}}\n\ndata: [DONE]\n\n";

type GraceOver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Watches the gateway's grace period for one stream.
pub struct DrainGuard {
    grace_over: GraceOver,
    ended: Arc<AtomicBool>,
}

impl DrainGuard {
    pub fn new(mut rx: watch::Receiver<bool>) -> Self {
        let grace_over = Box::pin(async move {
            // A dropped sender (gateway gone) also ends the wait.
            let _ = rx.wait_for(|over| *over).await;
        });
        DrainGuard {
            grace_over,
            ended: Arc::default(),
        }
    }

    /// Set once the stream was ended by the grace period (the request's log
    /// line reads it: such a stream did not complete).
    pub fn ended(&self) -> Arc<AtomicBool> {
        self.ended.clone()
    }

    pub fn wrap<B>(self, inner: B) -> Drain<B> {
        Drain {
            inner,
            grace_over: Some(self.grace_over),
            ended: self.ended,
            tail: [0; 4],
            sent: false,
            expired: false,
            done: false,
        }
    }
}

pin_project! {
    pub struct Drain<B> {
        #[pin]
        inner: B,
        grace_over: Option<GraceOver>,
        ended: Arc<AtomicBool>,
        // The last four bytes sent, to know whether we stand between events.
        tail: [u8; 4],
        sent: bool,
        expired: bool,
        done: bool,
    }
}

impl<B> Body for Drain<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        if !*this.expired
            && let Some(grace) = this.grace_over.as_mut()
            && grace.as_mut().poll(cx).is_ready()
        {
            *this.expired = true;
            *this.grace_over = None;
        }
        // Between events (nothing sent yet, or the last frame ended a blank line).
        // SSE events end with a blank line: `\n\n`, `\r\r` or `\r\n\r\n`.
        let t = *this.tail;
        let at_boundary =
            !*this.sent || t[2..] == *b"\n\n" || t[2..] == *b"\r\r" || t == *b"\r\n\r\n";
        if *this.expired && at_boundary {
            *this.done = true;
            this.ended.store(true, Ordering::Release);
            metrics::counter!(crate::metrics::STREAMS_EXPIRED).increment(1);
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(ENDING)))));
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    for &b in &data[data.len().saturating_sub(4)..] {
                        this.tail.rotate_left(1);
                        this.tail[3] = b;
                    }
                    *this.sent |= !data.is_empty();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            other => other.map(|o| o.map(|r| r.map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn frames(
        parts: Vec<&'static [u8]>,
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> {
        let iter = parts
            .into_iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))));
        StreamBody::new(futures_stream(iter))
    }

    fn futures_stream<I: Iterator + Unpin>(iter: I) -> impl futures_core::Stream<Item = I::Item> {
        struct S<I>(I);
        impl<I: Iterator + Unpin> futures_core::Stream for S<I> {
            type Item = I::Item;
            fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
                Poll::Ready(self.0.next())
            }
        }
        S(iter)
    }

    #[tokio::test]
    async fn expiry_waits_for_an_event_boundary() {
        let (tx, rx) = watch::channel(false);
        let guard = DrainGuard::new(rx);
        let ended = guard.ended();
        let body = guard.wrap(frames(vec![
            b"data: {\"a\"",
            b":1}\n\n",
            b"data: {\"b\":2}\n\n",
        ]));
        let mut body = std::pin::pin!(body);
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"data: {\"a\"");
        tx.send_replace(true);
        // Mid-event: the rest of the event still goes out first.
        let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&second[..], b":1}\n\n");
        let end = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(end.starts_with(b"data: {\"error\"") && end.ends_with(b"data: [DONE]\n\n"));
        assert!(body.frame().await.is_none());
        // The request's log line reads this: the stream did not complete.
        assert!(ended.load(Ordering::Acquire));
    }

    #[tokio::test]
    async fn crlf_events_end_at_their_blank_line() {
        let (tx, rx) = watch::channel(false);
        let body =
            DrainGuard::new(rx).wrap(frames(vec![b"data: 1\r\n", b"\r\n", b"data: 2\r\n\r\n"]));
        let mut body = std::pin::pin!(body);
        assert_eq!(
            &body.frame().await.unwrap().unwrap().into_data().unwrap()[..],
            b"data: 1\r\n"
        );
        tx.send_replace(true);
        assert_eq!(
            &body.frame().await.unwrap().unwrap().into_data().unwrap()[..],
            b"\r\n"
        );
        let end = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(end.starts_with(b"data: {\"error\""), "{end:?}");
    }
}
