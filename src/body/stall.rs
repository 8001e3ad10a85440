//! Releasing a response stream whose client stopped granting it window.
//!
//! On HTTP/2 a client can keep its connection busy (pings answered, other
//! streams read) while never granting one stream more flow-control window:
//! hyper then stops polling that stream's body, and the body (its upstream
//! connection, its concurrency permit, its buffers) is held for as long as
//! the client likes. The socket-level write-stall timeout cannot see this,
//! since the socket keeps moving.
//!
//! [`StallGuard`] notes when it handed hyper a frame and was not polled
//! again. A watchdog task drops the inner body once that has lasted longer
//! than the timeout: the upstream request is cancelled and the permit and
//! log line released at once. If hyper polls again later, it gets an error
//! and resets the stream.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::{Body, BoxError};

struct Shared {
    body: Mutex<Option<Body>>,
    start: Instant,
    /// Milliseconds after `start` (plus one) when a frame was handed over
    /// and no poll followed yet; 0 while hyper is polling.
    handed_at: AtomicU64,
}

impl Shared {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64 + 1
    }
}

pub struct StallGuard {
    shared: Arc<Shared>,
}

impl StallGuard {
    /// Wraps `body` and starts its watchdog on the current runtime.
    pub fn wrap(body: Body, timeout: Duration) -> Self {
        let shared = Arc::new(Shared {
            body: Mutex::new(Some(body)),
            start: Instant::now(),
            handed_at: AtomicU64::new(0),
        });
        tokio::spawn(watch(Arc::downgrade(&shared), timeout));
        StallGuard { shared }
    }
}

async fn watch(shared: Weak<Shared>, timeout: Duration) {
    let limit = timeout.as_millis() as u64;
    // Checked a few times per timeout: a stall is released within 1.25×.
    let tick = (timeout / 4).max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(tick).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let handed = shared.handed_at.load(Ordering::Acquire);
        if handed != 0 && shared.now().saturating_sub(handed) > limit {
            let body = shared
                .body
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if body.is_some() {
                metrics::counter!(crate::metrics::STREAMS_STALLED).increment(1);
                tracing::debug!("a stream's client granted no window for too long; released");
            }
            // Dropped outside the lock: its drop logs and releases the permit.
            drop(body);
            return;
        }
        if shared
            .body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none()
        {
            return;
        }
    }
}

impl http_body::Body for StallGuard {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let shared = &self.shared;
        shared.handed_at.store(0, Ordering::Release);
        let mut slot = shared
            .body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(body) = slot.as_mut() else {
            return Poll::Ready(Some(Err(
                "the client granted the stream no window for too long".into(),
            )));
        };
        let polled = Pin::new(body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => shared.handed_at.store(shared.now(), Ordering::Release),
            Poll::Ready(None | Some(Err(_))) => {
                let done = slot.take();
                drop(slot);
                drop(done);
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.shared
            .body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.shared
            .body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map_or_else(SizeHint::default, http_body::Body::size_hint)
    }
}
