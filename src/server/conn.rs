//! Deadlines of one inbound connection, whatever its protocol: the first
//! request must arrive in time, each later HTTP/1.1 request head must arrive
//! whole in time, an idle connection is closed, and a client that stops
//! reading cannot keep a write (and the stream behind it) forever.
//!
//! Nothing here arms a timer per request. A request only updates a few
//! atomics of its connection's [`Activity`] (and the socket wrapper [`Io`]
//! notes when a head starts arriving or a write starts waiting); the
//! worker's [`sweep`](super::sweep) compares them with the clock a few
//! times a second and closes what is past its deadline. A timer per request
//! cost an allocation, two timer-wheel updates and, whenever the new
//! deadline came before the worker's next wake-up, a write to the runtime's
//! eventfd; a `Notify` per request woke the connection's task twice more.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::ServerConfig;

/// Milliseconds since the process's first call; never 0 (0 means "unset").
pub fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
}

/// The deadlines a connection was opened with (a reload applies to new
/// connections).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From accept to the first request (TLS and the protocol sniff included),
    /// and for each later HTTP/1.1 request head from its first byte.
    pub request_head: Duration,
    /// No request in flight.
    pub idle: Duration,
    /// A write waiting for the client to read.
    pub write_stall: Duration,
}

impl Limits {
    pub fn of(server: &ServerConfig) -> Self {
        Limits {
            request_head: server.request_head_timeout,
            idle: server.idle_timeout,
            write_stall: server.write_stall_timeout,
        }
    }

    /// How often a sweep must look for these deadlines to be met within a
    /// quarter of the shortest (at least every 50 ms, at most every second).
    pub fn sweep_interval(&self) -> Duration {
        let shortest = self.request_head.min(self.idle).min(self.write_stall);
        (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// Why a connection was closed by its deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// No request arrived within `request_head_timeout_secs`.
    NoRequest,
    /// An HTTP/1.1 request head took longer than `request_head_timeout_secs`.
    SlowHead,
    /// No request in flight for `idle_timeout_secs`.
    Idle,
    /// A write waited `write_stall_timeout_secs` for the client to read.
    WriteStalled,
}

impl Closed {
    fn code(self) -> u8 {
        match self {
            Closed::NoRequest => 1,
            Closed::SlowHead => 2,
            Closed::Idle => 3,
            Closed::WriteStalled => 4,
        }
    }

    fn from_code(code: u8) -> Option<Closed> {
        Some(match code {
            1 => Closed::NoRequest,
            2 => Closed::SlowHead,
            3 => Closed::Idle,
            4 => Closed::WriteStalled,
            _ => return None,
        })
    }
}

/// What the connection's requests and socket are doing, shared by its
/// service, its socket wrapper and the worker's sweep.
#[derive(Debug)]
pub struct Activity {
    limits: Limits,
    in_flight: AtomicUsize,
    served: AtomicBool,
    /// HTTP/1.1 (known after the protocol sniff): request heads are timed.
    http1: AtomicBool,
    /// When the connection last had nothing in flight (or opened), [`now_ms`].
    idle_since: AtomicU64,
    /// When bytes of a new request arrived with nothing in flight; 0: none.
    head_since: AtomicU64,
    /// When a write started waiting for the client; 0: none waits.
    write_since: AtomicU64,
    /// A [`Closed`] code once the sweep closed the connection; 0 while open.
    closed: AtomicU8,
    waker: AtomicWaker,
}

impl Activity {
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Activity {
            limits,
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            http1: AtomicBool::new(false),
            idle_since: AtomicU64::new(now_ms()),
            head_since: AtomicU64::new(0),
            write_since: AtomicU64::new(0),
            closed: AtomicU8::new(0),
            waker: AtomicWaker::new(),
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The protocol sniff found HTTP/1.1: later request heads are timed.
    pub fn set_http1(&self) {
        self.http1.store(true, Ordering::Relaxed);
    }

    /// A request arrived; the returned guard is held until its response ends.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if self.head_since.load(Ordering::Relaxed) != 0 {
            self.head_since.store(0, Ordering::Relaxed);
        }
        InFlight(self.clone())
    }

    /// Bytes arrived. With nothing in flight on HTTP/1.1 they start a
    /// request head, which must be whole within `request_head`.
    fn note_read(&self) {
        if self.http1.load(Ordering::Relaxed)
            && self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Relaxed) == 0
        {
            self.head_since.store(now_ms(), Ordering::Relaxed);
        }
    }

    fn note_write(&self, pending: bool) {
        let since = self.write_since.load(Ordering::Relaxed);
        if pending && since == 0 {
            self.write_since.store(now_ms(), Ordering::Relaxed);
        } else if !pending && since != 0 {
            self.write_since.store(0, Ordering::Relaxed);
        }
    }

    /// The deadline this connection is past at `now` ([`now_ms`]), if any.
    pub fn overdue(&self, now: u64) -> Option<Closed> {
        let past = |since: u64, limit: Duration| {
            since != 0 && now.saturating_sub(since) >= limit.as_millis() as u64
        };
        if past(
            self.write_since.load(Ordering::Relaxed),
            self.limits.write_stall,
        ) {
            return Some(Closed::WriteStalled);
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if !self.served.load(Ordering::Relaxed) {
            return past(
                self.idle_since.load(Ordering::Relaxed),
                self.limits.request_head,
            )
            .then_some(Closed::NoRequest);
        }
        if past(
            self.head_since.load(Ordering::Relaxed),
            self.limits.request_head,
        ) {
            return Some(Closed::SlowHead);
        }
        past(self.idle_since.load(Ordering::Relaxed), self.limits.idle).then_some(Closed::Idle)
    }

    /// Closes the connection: [`serve`] returns and drops it.
    pub fn close(&self, why: Closed) {
        if self
            .closed
            .compare_exchange(0, why.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.waker.wake();
        }
    }

    /// True once closed (the sweep stops looking at it).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) != 0
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.idle_since.store(now_ms(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs `conn` until it ends, or until the sweep closes the connection:
/// then `conn` is dropped, which closes the socket and drops the response
/// bodies it was writing (with their upstream requests and permits).
pub async fn serve<F, T>(conn: F, activity: &Activity) -> Result<T, Closed>
where
    F: Future<Output = T>,
{
    let mut conn = std::pin::pin!(conn);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = conn.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        activity.waker.register(cx.waker());
        match Closed::from_code(activity.closed.load(Ordering::Acquire)) {
            Some(why) => Poll::Ready(Err(why)),
            None => Poll::Pending,
        }
    })
    .await
}

/// The client's socket: reports reads and blocked writes to the
/// connection's [`Activity`].
pub struct Io<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I> Io<I> {
    pub fn new(inner: I, activity: Arc<Activity>) -> Self {
        Io { inner, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Io<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.note_read();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> Io<I> {
    fn noted<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        self.activity.note_write(polled.is_pending());
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Io<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.noted(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.noted(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.noted(polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.noted(polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn limits(secs: u64) -> Limits {
        Limits {
            request_head: Duration::from_secs(secs),
            idle: Duration::from_secs(secs * 10),
            write_stall: Duration::from_secs(secs * 5),
        }
    }

    #[test]
    fn a_connection_without_requests_is_overdue_at_the_first_request_deadline() {
        let a = Activity::new(limits(3));
        let opened = a.idle_since.load(Ordering::Relaxed);
        assert_eq!(a.overdue(opened + 2_999), None);
        assert_eq!(a.overdue(opened + 3_000), Some(Closed::NoRequest));
    }

    #[test]
    fn a_request_in_flight_holds_the_connection_then_idle_closes_it() {
        let a = Activity::new(limits(3));
        let guard = a.begin();
        let start = now_ms();
        assert_eq!(a.overdue(start + 1_000_000), None, "in flight");
        drop(guard);
        let ended = a.idle_since.load(Ordering::Relaxed);
        assert_eq!(a.overdue(ended + 29_999), None);
        assert_eq!(a.overdue(ended + 30_000), Some(Closed::Idle));
    }

    #[test]
    fn an_http1_head_must_arrive_whole_in_time_once_begun() {
        let a = Activity::new(limits(3));
        a.set_http1();
        drop(a.begin());
        // Bytes of the next head, with nothing in flight.
        a.note_read();
        let since = a.head_since.load(Ordering::Relaxed);
        assert_ne!(since, 0);
        assert_eq!(a.overdue(since + 2_999), None);
        assert_eq!(a.overdue(since + 3_000), Some(Closed::SlowHead));
        // The head completed: only the idle deadline is left.
        let guard = a.begin();
        assert_eq!(a.head_since.load(Ordering::Relaxed), 0);
        drop(guard);
        assert_eq!(a.overdue(since + 3_000), None);
    }

    #[test]
    fn reads_during_a_request_or_on_http2_start_no_head() {
        let a = Activity::new(limits(3));
        let guard = a.begin();
        a.set_http1();
        a.note_read();
        assert_eq!(
            a.head_since.load(Ordering::Relaxed),
            0,
            "a body, not a head"
        );
        drop(guard);
        let h2 = Activity::new(limits(3));
        drop(h2.begin());
        h2.note_read();
        assert_eq!(h2.head_since.load(Ordering::Relaxed), 0, "h2 frames");
    }

    #[test]
    fn a_write_blocked_past_its_limit_is_overdue_even_in_flight() {
        let a = Activity::new(limits(3));
        let _guard = a.begin();
        a.note_write(true);
        let since = a.write_since.load(Ordering::Relaxed);
        a.note_write(true);
        assert_eq!(a.write_since.load(Ordering::Relaxed), since, "kept");
        assert_eq!(a.overdue(since + 14_999), None);
        assert_eq!(a.overdue(since + 15_000), Some(Closed::WriteStalled));
        a.note_write(false);
        assert_eq!(a.overdue(since + 15_000), None, "the client read again");
    }

    #[tokio::test]
    async fn closing_ends_serve_and_drops_the_connection() {
        let a = Activity::new(limits(3));
        let (near, _far) = tokio::io::duplex(64);
        let mut io = Io::new(near, a.clone());
        let watched = serve(
            async move {
                // Fills the pipe, then waits for a reader that never comes.
                io.write_all(&[0u8; 1024]).await
            },
            &a,
        );
        let closer = async {
            tokio::task::yield_now().await;
            assert_ne!(a.write_since.load(Ordering::Relaxed), 0, "the write waits");
            a.close(Closed::WriteStalled);
        };
        let (out, ()) = tokio::join!(watched, closer);
        assert_eq!(out.unwrap_err(), Closed::WriteStalled);
        assert!(a.is_closed());
    }
}
