//! Deadlines of one inbound connection, whatever its protocol: the first
//! request must arrive in time, an idle connection is closed, and a client
//! that stops reading cannot keep a write (and the stream behind it) forever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// What the connection's requests are doing, shared by its service and the
/// task that watches its deadlines.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    served: AtomicBool,
    /// When the connection last became idle (or opened).
    idle_since: Mutex<Instant>,
    changed: Notify,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            changed: Notify::new(),
        })
    }

    /// A request arrived; the returned guard is held until its response ends.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the connection must close if nothing changes: `None` while a
    /// request is in flight.
    fn deadline(&self, first_request: Duration, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = *self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
        let limit = if self.served.load(Ordering::Relaxed) {
            idle
        } else {
            first_request
        };
        Some(since + limit)
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// Why a connection was closed by its deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// No request arrived within `request_head_timeout_secs`.
    NoRequest,
    /// No request in flight for `idle_timeout_secs`.
    Idle,
}

/// Runs `conn` until it ends, or until the connection has no request in
/// flight and has been quiet past its deadline: then `conn` is dropped,
/// which closes the socket.
pub async fn serve<F, T>(
    conn: F,
    activity: &Activity,
    first_request: Duration,
    idle: Duration,
) -> Result<T, Closed>
where
    F: Future<Output = T>,
{
    tokio::pin!(conn);
    loop {
        let changed = activity.changed.notified();
        let deadline = activity.deadline(first_request, idle);
        let expired = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = &mut conn => return Ok(out),
            () = changed => {}
            () = expired => {
                // Recheck: a request may have begun as the timer fired.
                if activity.deadline(first_request, idle).is_some_and(|at| at <= Instant::now()) {
                    return Err(if activity.served.load(Ordering::Relaxed) {
                        Closed::Idle
                    } else {
                        Closed::NoRequest
                    });
                }
            }
        }
    }
}

/// A socket whose writes may stay blocked for at most `limit`: beyond it
/// the write fails with `TimedOut`, hyper ends the connection, and the
/// response bodies it was writing (with their upstream connections and
/// concurrency permits) are dropped.
pub struct StallIo<I> {
    inner: I,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<I> StallIo<I> {
    pub fn new(inner: I, limit: Duration) -> Self {
        StallIo {
            inner,
            limit,
            stalled: None,
        }
    }

    /// The write could not proceed: fail once it has waited `limit`.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        result: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Pending => self.pending(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for StallIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for StallIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(result, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(result, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(result, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_reads_fails_after_the_limit() {
        // A 64-byte pipe the other end never reads.
        let (near, _far) = tokio::io::duplex(64);
        let mut io = StallIo::new(near, Duration::from_secs(5));
        let start = Instant::now();
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_closes_at_the_first_request_deadline() {
        let activity = Activity::new();
        let out = serve(
            std::future::pending::<()>(),
            &activity,
            Duration::from_secs(3),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(out, Err(Closed::NoRequest));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_keeps_the_connection_then_idle_closes_it() {
        let activity = Activity::new();
        let guard = activity.begin();
        let watched = serve(
            std::future::pending::<()>(),
            &activity,
            Duration::from_secs(3),
            Duration::from_secs(10),
        );
        tokio::pin!(watched);
        // Long past both deadlines, the request still holds the connection.
        assert!(
            tokio::time::timeout(Duration::from_secs(100), &mut watched)
                .await
                .is_err()
        );
        let ended = Instant::now();
        drop(guard);
        assert_eq!(watched.await, Err(Closed::Idle));
        assert!(ended.elapsed() >= Duration::from_secs(10));
    }
}
