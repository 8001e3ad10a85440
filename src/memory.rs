//! Handing freed memory back to the operating system.
//!
//! glibc's allocator keeps freed memory for reuse, so after a burst of
//! streams the process's RSS stays near its peak, which is what container
//! memory limits and autoscalers look at. When a runtime worker runs out of
//! work, [`release_if_due`] first lets the parts that keep memory for reuse
//! (the [`Releaser`]s: the upstream connection pools) drop what this worker
//! no longer needs, then asks glibc to return its free pages, at most once
//! per [`INTERVAL`] and worker: off the request path, and cheap when idle.

use std::cell::Cell;
use std::sync::{Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The least time between two releases on one worker.
const INTERVAL: Duration = Duration::from_secs(1);

thread_local! {
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// Something that keeps memory for reuse (idle connections) and can let go
/// of what the current worker thread has not needed lately.
pub trait Releaser: Send + Sync {
    /// Drops what the current worker keeps and has not used lately.
    fn release_idle(&self);
}

static RELEASERS: Mutex<Vec<Weak<dyn Releaser>>> = Mutex::new(Vec::new());

/// Asks `releaser` to let go of idle memory whenever a worker goes idle,
/// for as long as it lives.
pub fn register(releaser: Weak<dyn Releaser>) {
    let mut all = RELEASERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    all.retain(|r| r.strong_count() > 0);
    all.push(releaser);
}

/// Called when a worker parks.
pub fn release_if_due() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if now.saturating_sub(LAST.get()) < INTERVAL.as_millis() as u64 {
        return;
    }
    LAST.set(now);
    let live: Vec<_> = RELEASERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for releaser in live {
        releaser.release_idle();
    }
    release();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // the crate's only unsafe: one FFI call
fn release() {
    // SAFETY: malloc_trim takes no pointers; it only walks glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release() {}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);

    impl Releaser for Counting {
        fn release_idle(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn releases_at_most_once_per_interval_and_asks_the_live_releasers() {
        let counting = Arc::new(Counting(AtomicUsize::new(0)));
        let weak: Weak<Counting> = Arc::downgrade(&counting);
        register(weak);
        release_if_due();
        let first = LAST.get();
        assert_ne!(first, 0);
        assert_eq!(counting.0.load(Ordering::Relaxed), 1);
        release_if_due();
        assert_eq!(LAST.get(), first, "too soon for another release");
        assert_eq!(counting.0.load(Ordering::Relaxed), 1);
        // Each worker keeps its own time: another thread releases at once.
        let other = counting.clone();
        std::thread::spawn(move || {
            release_if_due();
            assert_eq!(other.0.load(Ordering::Relaxed), 2);
        })
        .join()
        .unwrap();
    }
}
