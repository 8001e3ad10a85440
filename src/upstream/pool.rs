//! HTTP/1.1 connections to plain-`http` upstreams, pooled per authority and
//! driven by the task that uses them.
//!
//! hyper's pooled client runs every connection in a task of its own, so each
//! body chunk crosses tasks: the connection task decodes one chunk, wakes the
//! request's task, and waits until that task asks for the next. For an SSE
//! stream that is a wake-up and a write syscall per event. Here the task
//! serving the inbound request polls the upstream connection itself (see
//! [`PooledBody::poll_frame`]): every chunk already read from the socket is
//! decoded in the same poll, and hyper's server writes them out together.
//!
//! Each worker thread keeps its own idle connections (see [`crate::workers`]):
//! a socket is registered with the reactor of the worker that opened it, so
//! a connection used by another worker would wake that one on every event.
//! Each worker's list has its own (uncontended) lock and is searched
//! linearly: no authority is hashed on checkout or checkin.
//!
//! A connection goes back to the pool only when its response was read to the
//! end and hyper says it can take another request. Anything else (the client
//! left mid-stream, `Connection: close`, an error) closes it, which is also
//! how the upstream learns that a request was abandoned.
//!
//! Idle connections beyond the [`KEEP_WARM`] most recently used of a worker
//! and upstream are closed once unused for [`SURPLUS_IDLE`]: a burst of
//! thousands of streams leaves that many connections behind, each holding
//! hyper's buffers (some 20 KiB), and a steady load never reaches that deep
//! into the stack (the most recently used connection goes out first). The
//! worker closes them when it goes idle ([`crate::memory::Releaser`]) or at
//! its next check-in, whichever comes first.
//!
//! An upstream that says how long it keeps an idle connection
//! (`Keep-Alive: timeout=5`, as llama.cpp's server does) gets none reused
//! within a second of that: its close can be on the wire while a busy worker
//! has not read it yet, and a request written into a closing connection
//! fails with nothing to show for it. An upstream may also close a
//! connection right after a response it said would keep it (llama.cpp does
//! after every streamed one); a request that goes into such a connection and
//! gets it closed before any byte of an answer is sent once more, on a new
//! connection.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::workers;

/// How long an unused connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Unused connections kept per upstream; more are closed.
const MAX_IDLE_PER_AUTHORITY: usize = 256;
/// Unused connections per worker and upstream kept for [`IDLE_TIMEOUT`];
/// the older ones go after [`SURPLUS_IDLE`].
const KEEP_WARM: usize = 16;
/// How long a connection beyond [`KEEP_WARM`] is kept unused.
const SURPLUS_IDLE: Duration = Duration::from_secs(2);

type Driver = http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;
type Sender = http1::SendRequest<Full<Bytes>>;

/// One HTTP/1.1 connection: the handle requests go in by, and the state
/// machine that must be polled for anything to move on the socket. Always
/// boxed: hyper's connection state is large, and it moves from the pool to
/// the request's future to its response body.
struct Conn {
    sender: Sender,
    driver: Driver,
    /// The driver finished (the connection closed or failed); never poll it again.
    closed: bool,
    /// How long it may sit unused: [`IDLE_TIMEOUT`], or less when the
    /// upstream's last `Keep-Alive` header said it closes sooner.
    idle_for: Duration,
}

impl Conn {
    /// Polls hyper's connection state machine unless it already finished.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if self.closed {
            return;
        }
        if let Poll::Ready(ended) = Pin::new(&mut self.driver).poll(cx) {
            // Closed or failed: whoever waits on it (the response future or
            // the body) now resolves with why.
            if let Err(e) = ended {
                tracing::debug!(error = %e, "upstream connection ended");
            }
            self.closed = true;
        }
    }
}

struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

/// The pool; cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

/// One worker's unused connections, by upstream; each stack is ordered by
/// age, the most recently used last. A handful of upstreams at most: a
/// linear search beats hashing an authority.
type IdleLists = Vec<(Authority, Vec<Idle>)>;

struct Inner {
    /// Indexed by worker (threads that are not workers share the first).
    idle: Box<[Mutex<IdleLists>]>,
    connect_timeout: Duration,
}

impl Inner {
    fn idle(&self) -> std::sync::MutexGuard<'_, IdleLists> {
        let slot = &self.idle[workers::current() % self.idle.len()];
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot connect to {authority}: {reason}")]
    Connect {
        authority: Authority,
        reason: String,
    },
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

impl Pool {
    /// A pool for `workers` worker threads.
    pub fn new(connect_timeout: Duration, workers: usize) -> Self {
        let inner = Arc::new(Inner {
            idle: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            connect_timeout,
        });
        let releaser: std::sync::Weak<Inner> = Arc::downgrade(&inner);
        crate::memory::register(releaser);
        Pool { inner }
    }

    /// Sends `req` (origin-form URI, `Host` set) to `authority` on a pooled
    /// connection, or a new one. The response body keeps the connection and
    /// drives it while it is read.
    pub async fn send(
        &self,
        authority: &Authority,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<PooledBody>, SendError> {
        let mut req = req;
        let mut fresh = false;
        loop {
            let pooled = if fresh {
                None
            } else {
                self.inner.checkout(authority)
            };
            let (mut conn, reused) = match pooled {
                Some(conn) => (conn, true),
                // Boxed: connecting is the rare path, and its future is large.
                None => (Box::pin(self.inner.connect(authority)).await?, false),
            };
            // Kept for the one case a written request is sent again (below):
            // the body is shared bytes, the head a few headers.
            let again = reused.then(|| copy(&req));
            match exchange(&mut conn, req).await {
                Ok(response) => {
                    let (parts, incoming) = response.into_parts();
                    conn.idle_for = idle_for(&parts.headers);
                    let body = PooledBody {
                        ended: incoming.is_end_stream(),
                        incoming,
                        conn: Some(conn),
                        home: (self.inner.clone(), authority.clone()),
                    };
                    return Ok(Response::from_parts(parts, body));
                }
                // hyper gives the request back only if none of it was written:
                // a reused connection the upstream had just closed. Safe to send again.
                Err(mut e) if reused && e.message().is_some() => {
                    req = e.take_message().expect("checked above");
                }
                // A reused connection closed with not a byte of an answer:
                // the upstream closed it as the request went in. Once more,
                // on a connection of its own.
                Err(e) if e.error().is_incomplete_message() && again.is_some() => {
                    tracing::debug!(
                        "a pooled upstream connection was closed under a request; sending it again on a new one"
                    );
                    req = again.expect("checked above");
                    fresh = true;
                }
                Err(e) => return Err(e.into_error().into()),
            }
        }
    }
}

impl Inner {
    /// The most recently used live connection, if any.
    fn checkout(&self, authority: &Authority) -> Option<Box<Conn>> {
        loop {
            let idle = {
                let mut lists = self.idle();
                let (_, stack) = lists.iter_mut().find(|(a, _)| a == authority)?;
                let idle = stack.pop()?;
                if idle.since.elapsed() > IDLE_TIMEOUT {
                    // Everything below it in the stack is older still.
                    stack.clear();
                    return None;
                }
                if idle.since.elapsed() > idle.conn.idle_for {
                    continue;
                }
                idle
            };
            let mut conn = idle.conn;
            // One poll notices an upstream that closed the connection while
            // it sat idle (hyper reads the EOF and finishes).
            conn.drive(&mut Context::from_waker(Waker::noop()));
            if !conn.closed && conn.sender.is_ready() {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for this worker, whose reactor its socket is registered
    /// with (a body is dropped by the task that polled it, on its worker).
    fn checkin(&self, authority: &Authority, conn: Box<Conn>) {
        let now = Instant::now();
        {
            let mut lists = self.idle();
            let at = match lists.iter().position(|(a, _)| a == authority) {
                Some(at) => at,
                None => {
                    lists.push((authority.clone(), Vec::new()));
                    lists.len() - 1
                }
            };
            let stack = &mut lists[at].1;
            drop_unneeded(stack, now);
            if stack.len() < MAX_IDLE_PER_AUTHORITY {
                stack.push(Idle { conn, since: now });
            }
            // Again after the push: the connection just kept counts among the warm ones.
            drop_unneeded(stack, now);
        }
    }

    async fn connect(&self, authority: &Authority) -> Result<Box<Conn>, SendError> {
        let failed = |reason: String| SendError::Connect {
            authority: authority.clone(),
            reason,
        };
        // `[::1]` in a URL is `::1` to the resolver.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(80);
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| failed(format!("timed out after {:?}", self.connect_timeout)))?
            .map_err(|e| failed(e.to_string()))?;
        tcp.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
        let (sender, driver) = http1::Builder::new().handshake(TokioIo::new(tcp)).await?;
        Ok(Box::new(Conn {
            sender,
            driver,
            closed: false,
            idle_for: IDLE_TIMEOUT,
        }))
    }
}

/// Drops, from the bottom of `stack` (ordered by age, the oldest first),
/// the connections past [`IDLE_TIMEOUT`] and those beyond the [`KEEP_WARM`]
/// newest unused for [`SURPLUS_IDLE`].
fn drop_unneeded(stack: &mut Vec<Idle>, now: Instant) {
    let surplus = stack.len().saturating_sub(KEEP_WARM);
    let unneeded = stack
        .iter()
        .enumerate()
        .take_while(|(i, idle)| {
            let unused = now.duration_since(idle.since);
            unused > IDLE_TIMEOUT || (*i < surplus && unused > SURPLUS_IDLE)
        })
        .count();
    stack.drain(..unneeded);
}

impl crate::memory::Releaser for Inner {
    /// This worker's unneeded connections, closed.
    fn release_idle(&self) {
        let now = Instant::now();
        for (_, stack) in self.idle().iter_mut() {
            drop_unneeded(stack, now);
        }
    }
}

/// A copy of `req` to send again.
fn copy(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// How long a connection may sit unused after a response with `headers`:
/// a second less than the upstream's `Keep-Alive: timeout=N`, at most
/// [`IDLE_TIMEOUT`].
fn idle_for(headers: &http::HeaderMap) -> Duration {
    let timeout = headers
        .get("keep-alive")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("timeout"))
                .and_then(|(_, n)| n.trim().parse::<u64>().ok())
        });
    match timeout {
        Some(secs) => Duration::from_secs(secs.saturating_sub(1)).min(IDLE_TIMEOUT),
        None => IDLE_TIMEOUT,
    }
}

/// Writes the request and reads the response head, polling the connection
/// in this task.
async fn exchange(
    conn: &mut Conn,
    req: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, hyper::client::conn::TrySendError<Request<Full<Bytes>>>> {
    let mut response = std::pin::pin!(conn.sender.try_send_request(req));
    poll_fn(|cx| {
        conn.drive(cx);
        response.as_mut().poll(cx)
    })
    .await
}

/// A response body that drives its connection, and returns it to the pool
/// once read to the end.
pub struct PooledBody {
    incoming: Incoming,
    conn: Option<Box<Conn>>,
    ended: bool,
    home: (Arc<Inner>, Authority),
}

impl PooledBody {
    fn note(&mut self, polled: &Poll<Option<Result<Frame<Bytes>, hyper::Error>>>) {
        match polled {
            Poll::Ready(None) => self.ended = true,
            Poll::Ready(Some(Ok(_))) if self.incoming.is_end_stream() => self.ended = true,
            _ => {}
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let mut polled = Pin::new(&mut this.incoming).poll_frame(cx);
        if polled.is_pending()
            && let Some(conn) = this.conn.as_mut()
        {
            // Nothing decoded yet: let the connection read and decode. It
            // hands over at most one chunk per poll, then waits for this body
            // to take it; both wait on this task's waker.
            conn.drive(cx);
            polled = Pin::new(&mut this.incoming).poll_frame(cx);
        }
        this.note(&polled);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // Unless the response was read to the end, dropping the connection
        // closes it: the upstream sees the cancel.
        if !self.ended {
            return;
        }
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        // Let hyper finish the message and turn idle, then keep the
        // connection if it is ready for another request.
        conn.drive(&mut Context::from_waker(Waker::noop()));
        if !conn.closed && conn.sender.is_ready() {
            let (pool, authority) = &self.home;
            pool.checkin(authority, conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstreams_keep_alive_timeout_shortens_the_idle_time() {
        let after = |value: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(v) = value {
                headers.insert("keep-alive", v.parse().unwrap());
            }
            idle_for(&headers)
        };
        assert_eq!(after(None), IDLE_TIMEOUT);
        assert_eq!(after(Some("timeout=5, max=100")), Duration::from_secs(4));
        assert_eq!(after(Some("max=100 , Timeout = 3")), Duration::from_secs(2));
        assert_eq!(after(Some("timeout=1")), Duration::ZERO);
        assert_eq!(after(Some("timeout=600")), IDLE_TIMEOUT);
        assert_eq!(after(Some("timeout=soon")), IDLE_TIMEOUT);
    }
}
