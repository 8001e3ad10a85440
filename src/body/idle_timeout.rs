//! Cuts a response body that stays silent too long.
//!
//! hyper's and tower's timeouts only cover the response head; an SSE stream
//! that stalls after its first byte would otherwise hold a connection forever.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::BoxError;

/// The error a body ends with when its upstream fell silent.
#[derive(Debug, thiserror::Error)]
#[error("upstream sent nothing for {0:?}")]
pub struct IdleTimedOut(pub Duration);

pin_project! {
    pub struct IdleTimeout<B> {
        #[pin]
        inner: B,
        #[pin]
        sleep: Sleep,
        timeout: Duration,
        last_frame: Instant,
    }
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, timeout: Duration) -> Self {
        let now = Instant::now();
        IdleTimeout {
            inner,
            sleep: tokio::time::sleep_until(now + timeout),
            timeout,
            last_frame: now,
        }
    }
}

impl<B> Body for IdleTimeout<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            // Only note the time: re-arming the timer on every frame would
            // cost a timer-wheel update per SSE event. The sleep re-arms
            // itself lazily below when it fires early.
            *this.last_frame = Instant::now();
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        loop {
            ready!(this.sleep.as_mut().poll(cx));
            let deadline = *this.last_frame + *this.timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(Some(Err(IdleTimedOut(*this.timeout).into())));
            }
            this.sleep.as_mut().reset(deadline);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use http_body_util::StreamBody;

    #[tokio::test(start_paused = true)]
    async fn silent_body_times_out_and_active_body_does_not() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let stream = tokio_stream_from(rx);
        let mut body = std::pin::pin!(IdleTimeout::new(
            StreamBody::new(stream),
            Duration::from_secs(10)
        ));
        tokio::time::advance(Duration::from_secs(8)).await;
        tx.send(Ok(Frame::data(Bytes::from_static(b"a"))))
            .await
            .unwrap();
        assert!(body.frame().await.unwrap().is_ok());
        // 8 s after the last frame: not yet idle for 10 s.
        tokio::time::advance(Duration::from_secs(8)).await;
        tx.send(Ok(Frame::data(Bytes::from_static(b"b"))))
            .await
            .unwrap();
        assert!(body.frame().await.unwrap().is_ok());
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<IdleTimedOut>());
    }

    fn tokio_stream_from<T>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_core::Stream<Item = T> {
        struct S<T>(tokio::sync::mpsc::Receiver<T>);
        impl<T> futures_core::Stream for S<T> {
            type Item = T;
            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
                self.0.poll_recv(cx)
            }
        }
        let _ = &mut rx;
        S(rx)
    }
}
