//! Streams opened with a key and held open for minutes: the transcript
//! API's live views (`/toolgate/api/chats/{id}/events`) and the MCP door's
//! change streams (`GET` on `[mcp_gateway] path`). One [`KeyStreams`] per
//! kind counts them, bounded per key and in all (one more is `429`), and
//! closes them when their key stops naming who opened them: the gateway
//! calls [`KeyStreams::recheck`] when the keys in force change (a managed
//! key made, changed, revoked or expired, on this replica or another; a
//! reload that removes a static key).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use super::viewer::Viewer;
use crate::error::GatewayError;

/// What one registry holds, as its refusals and its gauge name it.
pub struct Kind {
    /// Plural: "live views".
    pub what: &'static str,
    /// Where the bound in all comes from, as a refusal names it.
    pub total_from: &'static str,
    /// Where the bound per key comes from.
    pub per_key_from: &'static str,
    /// The refusal's `code`.
    pub code: &'static str,
    /// The gauge of how many are open.
    pub gauge: &'static str,
}

/// The open streams of one kind, and their bounds.
pub struct KeyStreams {
    kind: &'static Kind,
    total: usize,
    per_key: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next: u64,
    streams: HashMap<u64, Stream>,
}

struct Stream {
    /// The key it was opened with, identified again when keys change.
    key: Arc<[u8]>,
    /// Who the key named then.
    who: Viewer,
    close: CancellationToken,
}

/// One open stream; dropping it (the stream ended, however) frees its
/// place.
pub struct Ticket {
    streams: Arc<KeyStreams>,
    id: u64,
    /// Cancelled when the stream must close: its key no longer names who
    /// opened it.
    pub closed: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        open.streams.remove(&self.id);
        metrics::gauge!(self.streams.kind.gauge).set(open.streams.len() as f64);
    }
}

impl KeyStreams {
    /// At most `total` open, `per_key` of them with one key.
    pub fn new(kind: &'static Kind, total: usize, per_key: usize) -> Arc<KeyStreams> {
        Arc::new(KeyStreams {
            kind,
            total,
            per_key: per_key.min(total),
            open: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a stream opened with `key` by `who`, or `429` when that
    /// key, or the gateway, has as many open as it may.
    pub fn open(self: &Arc<Self>, key: &[u8], who: &Viewer) -> Result<Ticket, GatewayError> {
        let kind = self.kind;
        let mut open = self.lock();
        if open.streams.len() >= self.total {
            return Err(GatewayError::TooManyRequests {
                message: format!(
                    "The gateway has {} {} open, its limit ({}); close one or retry later",
                    self.total, kind.what, kind.total_from
                ),
                code: kind.code,
            });
        }
        let mine = open.streams.values().filter(|s| *s.key == *key).count();
        if mine >= self.per_key {
            return Err(GatewayError::TooManyRequests {
                message: format!(
                    "This key has {mine} {} open, its limit ({}); close one or retry later",
                    kind.what, kind.per_key_from
                ),
                code: kind.code,
            });
        }
        open.next += 1;
        let id = open.next;
        let closed = CancellationToken::new();
        open.streams.insert(
            id,
            Stream {
                key: Arc::from(key),
                who: who.clone(),
                close: closed.clone(),
            },
        );
        metrics::gauge!(kind.gauge).set(open.streams.len() as f64);
        Ok(Ticket {
            streams: self.clone(),
            id,
            closed,
        })
    }

    /// The keys changed: each stream's key is identified again (`identify`:
    /// who the key names now, `None` when no one: removed, revoked or
    /// expired), and a stream whose key is gone or now names someone else
    /// is closed.
    pub fn recheck(&self, identify: impl Fn(&[u8]) -> Option<Viewer>) {
        for stream in self.lock().streams.values() {
            if identify(&stream.key).as_ref() != Some(&stream.who) {
                stream.close.cancel();
            }
        }
    }

    /// Streams open now.
    pub fn open_now(&self) -> usize {
        self.lock().streams.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TESTED: Kind = Kind {
        what: "tested streams",
        total_from: "`total`",
        per_key_from: "`per_key`",
        code: "too_many_tested_streams",
        gauge: "toolgate_tested_streams",
    };

    fn tenant(name: &str) -> Viewer {
        Viewer::Tenant(Arc::from(name))
    }

    #[test]
    fn streams_are_bounded_per_key_and_in_all_and_freed_when_dropped() {
        let streams = KeyStreams::new(&TESTED, 3, 2);
        let a1 = streams.open(b"ka", &tenant("a")).unwrap();
        let _a2 = streams.open(b"ka", &tenant("a")).unwrap();
        let e = streams.open(b"ka", &tenant("a")).err().unwrap();
        assert_eq!(
            (e.status().as_u16(), e.code()),
            (429, "too_many_tested_streams")
        );
        assert!(e.to_string().contains("`per_key`"), "{e}");
        let _b = streams.open(b"kb", &tenant("b")).unwrap();
        let e = streams.open(b"kc", &tenant("c")).err().unwrap();
        assert!(e.to_string().contains("`total`"), "three in all: {e}");
        drop(a1);
        assert_eq!(streams.open_now(), 2);
        assert!(
            streams.open(b"kc", &tenant("c")).is_ok(),
            "a place was freed"
        );
    }

    #[test]
    fn a_stream_whose_key_changed_is_closed() {
        let streams = KeyStreams::new(&TESTED, 10, 10);
        let kept = streams.open(b"k1", &tenant("a")).unwrap();
        let removed = streams.open(b"k2", &tenant("a")).unwrap();
        let moved = streams.open(b"k3", &tenant("a")).unwrap();
        let admin = streams.open(b"k4", &Viewer::Admin).unwrap();
        streams.recheck(|key| match key {
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
