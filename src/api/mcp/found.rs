//! With `[mcp_gateway] tool_search`, the tools each key found with
//! `search_tools` (or called by name) on this replica: `tools/list` lists
//! them after `search_tools`, so a client that checks a call against the
//! list it read (the official SDKs do, to validate structured results)
//! finds the tool there. The door holds no sessions, so what was found is
//! kept per key: bounded in keys and in names, forgotten after an hour
//! unused, the oldest first. Each growth moves [`Found::changes`], which
//! the key's change streams turn into `notifications/tools/list_changed`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::watch;

/// Names kept per key; past it the oldest found is forgotten.
pub const NAMES_PER_KEY: usize = 64;
/// Keys kept at once; past it the one unused longest is forgotten.
pub const KEYS: usize = 4096;
/// A key's names are forgotten after this long without a search or call.
pub const IDLE: Duration = Duration::from_secs(3600);

/// Whose found tools: the tenant and the key presented, hashed (the
/// secret itself is not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Finder([u8; 32]);

impl Finder {
    pub fn new(tenant: &str, key: &[u8]) -> Finder {
        let mut hash = Sha256::new();
        hash.update(tenant.as_bytes());
        hash.update([0]);
        hash.update(key);
        Finder(hash.finalize().into())
    }
}

struct Entry {
    /// Oldest first.
    names: Vec<String>,
    used: Instant,
}

/// What every key found, on this replica.
pub struct Found {
    keys: Mutex<HashMap<Finder, Entry>>,
    changes: watch::Sender<u64>,
}

impl Default for Found {
    fn default() -> Self {
        Found {
            keys: Mutex::new(HashMap::new()),
            changes: watch::Sender::new(0),
        }
    }
}

impl Found {
    /// Notes that `finder` found or called `names` now; moves
    /// [`Found::changes`] when one of them is new to it.
    pub fn note<'a>(&self, finder: Finder, names: impl IntoIterator<Item = &'a str>) {
        self.note_at(finder, names, Instant::now());
    }

    fn note_at<'a>(&self, finder: Finder, names: impl IntoIterator<Item = &'a str>, now: Instant) {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.retain(|_, e| now.saturating_duration_since(e.used) < IDLE);
        if !keys.contains_key(&finder)
            && keys.len() >= KEYS
            && let Some(oldest) = keys.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k)
        {
            keys.remove(&oldest);
        }
        let entry = keys.entry(finder).or_insert_with(|| Entry {
            names: Vec::new(),
            used: now,
        });
        entry.used = now;
        let mut grew = false;
        for name in names {
            if let Some(at) = entry.names.iter().position(|n| n == name) {
                // Found again: the most recent now.
                let again = entry.names.remove(at);
                entry.names.push(again);
                continue;
            }
            if entry.names.len() == NAMES_PER_KEY {
                entry.names.remove(0);
            }
            entry.names.push(name.to_owned());
            grew = true;
        }
        drop(keys);
        if grew {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// What `finder` found, oldest first (none once forgotten).
    pub fn names(&self, finder: Finder) -> Vec<String> {
        self.names_at(finder, Instant::now())
    }

    fn names_at(&self, finder: Finder, now: Instant) -> Vec<String> {
        let keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.get(&finder)
            .filter(|e| now.saturating_duration_since(e.used) < IDLE)
            .map(|e| e.names.clone())
            .unwrap_or_default()
    }

    /// Moves whenever a key found a tool it had not.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_keeps_its_own_names_bounded_and_for_an_hour() {
        let found = Found::default();
        let (a, b) = (Finder::new("t", b"a"), Finder::new("t", b"b"));
        assert_ne!(a, Finder::new("u", b"a"), "the tenant is part of it");
        let start = Instant::now();
        let mut changes = found.changes();
        found.note_at(a, ["x", "y"], start);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        found.note_at(a, ["x"], start);
        assert!(!changes.has_changed().unwrap(), "nothing new");
        assert_eq!(found.names_at(a, start), ["y", "x"]);
        assert!(found.names_at(b, start).is_empty());

        let many: Vec<String> = (0..NAMES_PER_KEY + 2).map(|i| format!("t{i}")).collect();
        found.note_at(b, many.iter().map(String::as_str), start);
        let kept = found.names_at(b, start);
        assert_eq!(kept.len(), NAMES_PER_KEY);
        assert_eq!(kept[0], "t2", "the oldest go first");

        assert!(found.names_at(a, start + IDLE).is_empty(), "forgotten");
        found.note_at(b, ["late"], start + IDLE);
        assert_eq!(found.keys.lock().unwrap().len(), 1, "idle keys dropped");
    }

    #[test]
    fn keys_are_bounded() {
        let found = Found::default();
        let start = Instant::now();
        for i in 0..KEYS + 1 {
            let at = start + Duration::from_millis(i as u64);
            found.note_at(Finder::new("t", &i.to_le_bytes()), ["x"], at);
        }
        assert_eq!(found.keys.lock().unwrap().len(), KEYS);
        let first = Finder::new("t", &0usize.to_le_bytes());
        assert!(found.names_at(first, start).is_empty(), "the oldest went");
    }
}
