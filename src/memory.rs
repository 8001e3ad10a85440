//! Handing freed memory back to the operating system.
//!
//! glibc's allocator keeps freed memory for reuse, so after a burst of
//! streams the process's RSS stays near its peak, which is what container
//! memory limits and autoscalers look at. When a runtime worker runs out of
//! work, [`release_if_due`] asks glibc to return its free pages, at most
//! once per [`INTERVAL`]: off the request path, and cheap when idle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The least time between two releases.
const INTERVAL: Duration = Duration::from_secs(1);

static LAST: AtomicU64 = AtomicU64::new(0);

/// Called when a worker parks.
pub fn release_if_due() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let last = LAST.load(Ordering::Relaxed);
    if now.saturating_sub(last) < INTERVAL.as_millis() as u64 {
        return;
    }
    // One worker releases; the others go to sleep.
    if LAST
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        release();
    }
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

    #[test]
    fn releases_at_most_once_per_interval() {
        release_if_due();
        let first = LAST.load(Ordering::Relaxed);
        assert_ne!(first, 0);
        release_if_due();
        assert_eq!(
            LAST.load(Ordering::Relaxed),
            first,
            "too soon for another release"
        );
    }
}
