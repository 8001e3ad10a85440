//! The process-wide request limits: `max_concurrent_requests` and
//! `max_buffered_request_bytes`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use crate::config::ServerConfig;
use crate::inbound;

/// Process-wide bounds: a reload adjusts them, never replaces them, so
/// requests in flight stay counted.
pub(crate) struct Limits {
    /// `max_concurrent_requests`: permits taken once the body is read.
    pub(super) concurrency: Arc<Semaphore>,
    /// The permits `concurrency` was sized with (`Semaphore::MAX_PERMITS`: no limit).
    concurrency_size: AtomicUsize,
    /// `max_buffered_request_bytes`.
    pub(super) buffered: Arc<inbound::BufferBudget>,
}

impl Limits {
    pub(super) fn new(server: &ServerConfig) -> Self {
        let size = concurrency_size(server);
        Limits {
            concurrency: Arc::new(Semaphore::new(size)),
            concurrency_size: AtomicUsize::new(size),
            buffered: Arc::new(inbound::BufferBudget::new(
                server.max_buffered_request_bytes,
            )),
        }
    }

    /// Resizes in place: permits held by requests in flight stay held.
    pub(super) fn resize(&self, server: &ServerConfig) {
        let new = concurrency_size(server);
        let old = self.concurrency_size.swap(new, Ordering::SeqCst);
        if new > old {
            self.concurrency.add_permits(new - old);
        } else if old > new {
            // Permits in use come back later and are then above the new
            // size: forget them as they become available.
            let mut owed = old - new;
            owed -= self.concurrency.forget_permits(owed);
            if owed > 0 {
                let semaphore = self.concurrency.clone();
                tokio::spawn(async move {
                    while owed > 0 {
                        let Ok(permit) = semaphore.acquire().await else {
                            return;
                        };
                        permit.forget();
                        owed -= 1;
                    }
                });
            }
        }
        self.buffered.set_max(server.max_buffered_request_bytes);
    }
}

fn concurrency_size(server: &ServerConfig) -> usize {
    server
        .max_concurrent_requests
        .unwrap_or(Semaphore::MAX_PERMITS)
        .min(Semaphore::MAX_PERMITS)
}
