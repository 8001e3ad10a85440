//! The transcript API's open live views (`/toolgate/api/chats/{id}/events`):
//! bounded per key and in all (a view beyond is `429`), and re-checked when
//! the keys change: a view whose key is gone, or now names someone else,
//! is closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::viewer::Viewer;
use crate::config::store::LiveViewLimits;
use crate::error::GatewayError;
use crate::metrics as m;

/// Every open view, and the bounds.
pub struct LiveViews {
    limits: LiveViewLimits,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next: u64,
    views: HashMap<u64, View>,
}

struct View {
    /// The key it was opened with, identified again when keys change.
    key: Arc<[u8]>,
    viewer: Viewer,
    close: CancellationToken,
}

/// One open view; dropping it (the stream ended, however) frees its place.
pub struct Ticket {
    views: Arc<LiveViews>,
    id: u64,
    /// Cancelled when the view must close: its key no longer sees it.
    pub closed: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self
            .views
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        open.views.remove(&self.id);
        metrics::gauge!(m::LIVE_VIEWS).set(open.views.len() as f64);
    }
}

impl LiveViews {
    pub fn new(limits: LiveViewLimits) -> Arc<LiveViews> {
        Arc::new(LiveViews {
            limits,
            open: Mutex::default(),
        })
    }

    /// A place for a view opened with `key` by `viewer`, or `429` when that
    /// key, or the gateway, has as many open as it may.
    pub fn open(self: &Arc<Self>, key: &[u8], viewer: &Viewer) -> Result<Ticket, GatewayError> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if open.views.len() >= self.limits.total {
            return Err(GatewayError::TooManyRequests {
                message: format!(
                    "The gateway has {} live views open, its limit (`store.max_live_views`); close one or retry later",
                    self.limits.total
                ),
                code: "too_many_live_views",
            });
        }
        let mine = open.views.values().filter(|v| *v.key == *key).count();
        if mine >= self.limits.per_key {
            return Err(GatewayError::TooManyRequests {
                message: format!(
                    "This key has {mine} live views open, its limit (`store.max_live_views_per_key`); close one or retry later"
                ),
                code: "too_many_live_views",
            });
        }
        open.next += 1;
        let id = open.next;
        let closed = CancellationToken::new();
        open.views.insert(
            id,
            View {
                key: Arc::from(key),
                viewer: viewer.clone(),
                close: closed.clone(),
            },
        );
        metrics::gauge!(m::LIVE_VIEWS).set(open.views.len() as f64);
        Ok(Ticket {
            views: self.clone(),
            id,
            closed,
        })
    }

    /// The keys changed: each view's key is identified again (`identify`:
    /// who the key is now, `None` when it is no one), and a view whose key
    /// is gone or now names someone else is closed.
    pub fn recheck(&self, identify: impl Fn(&[u8]) -> Option<Viewer>) {
        let open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for view in open.views.values() {
            if identify(&view.key).as_ref() != Some(&view.viewer) {
                view.close.cancel();
            }
        }
    }

    /// Views open now.
    pub fn open_now(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .views
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Viewer {
        Viewer::Tenant(Arc::from(name))
    }

    #[test]
    fn views_are_bounded_per_key_and_in_all_and_freed_when_dropped() {
        let views = LiveViews::new(LiveViewLimits {
            total: 3,
            per_key: 2,
        });
        let a1 = views.open(b"ka", &tenant("a")).unwrap();
        let _a2 = views.open(b"ka", &tenant("a")).unwrap();
        let e = views.open(b"ka", &tenant("a")).err().unwrap();
        assert_eq!(
            (e.status().as_u16(), e.code()),
            (429, "too_many_live_views")
        );
        let _b = views.open(b"kb", &tenant("b")).unwrap();
        assert!(views.open(b"kc", &tenant("c")).is_err(), "three in all");
        drop(a1);
        assert_eq!(views.open_now(), 2);
        assert!(views.open(b"kc", &tenant("c")).is_ok(), "a place was freed");
    }

    #[test]
    fn a_view_whose_key_changed_is_closed() {
        let views = LiveViews::new(LiveViewLimits {
            total: 10,
            per_key: 10,
        });
        let kept = views.open(b"k1", &tenant("a")).unwrap();
        let removed = views.open(b"k2", &tenant("a")).unwrap();
        let moved = views.open(b"k3", &tenant("a")).unwrap();
        let admin = views.open(b"k4", &Viewer::Admin).unwrap();
        views.recheck(|key| match key {
            b"k1" => Some(tenant("a")),
            b"k3" => Some(tenant("b")),
            b"k4" => Some(Viewer::Admin),
            _ => None,
        });
        assert!(!kept.closed.is_cancelled());
        assert!(removed.closed.is_cancelled());
        assert!(moved.closed.is_cancelled());
        assert!(!admin.closed.is_cancelled());
    }
}
