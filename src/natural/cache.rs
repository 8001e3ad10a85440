//! Remembers rendered system blocks, so a tool set is rendered once per
//! provider rather than once per request.
//!
//! Agents resend the same `tools` on every turn, so nearly every lookup hits.
//! The key is the declarations' raw JSON text: a hit costs hashing those bytes,
//! a read lock and comparing them; the tools are not even parsed. The byte
//! comparison matters: without it two tool sets whose hashes collide (by chance
//! or by an attacker's design) would be served each other's contracts. The
//! same tools written with other spacing are a miss, rendered once more.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::config::Constrain;
use crate::natural::policy::Policy;
use crate::natural::syntax::Syntax;
use crate::natural::tools::ToolSet;

/// How many distinct tool sets a cache holds by default.
pub const DEFAULT_CAPACITY: usize = 256;

/// How many bytes (keys and rendered blocks) a cache holds by default. The
/// entry count alone does not bound memory: one entry can be megabytes.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

/// What a request needs from the rendering: the tools offered, the block,
/// and the constraint's fields when calls are constrained.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The tools offered to the model (after policy filtering).
    pub tools: Arc<ToolSet>,
    /// The system block: instructions and contracts.
    pub block: Arc<str>,
    /// `block` as it reads inside a JSON string (escaped, without quotes):
    /// written into each request as it is, not escaped again.
    pub block_json: Arc<str>,
    /// The constraint's request fields as JSON object members
    /// (`"grammar":…,"grammar_lazy":…`, or `"response_format":…`),
    /// appended to the body as they are.
    pub grammar_fields: Option<Arc<str>>,
}

impl Prepared {
    pub fn new(tools: Arc<ToolSet>, block: String) -> Self {
        let quoted = serde_json::to_string(&block).unwrap_or_default();
        let block_json = quoted
            .get(1..quoted.len().saturating_sub(1))
            .unwrap_or_default()
            .into();
        Prepared {
            tools,
            block: Arc::from(block),
            block_json,
            grammar_fields: None,
        }
    }

    /// With a constraint's request fields (a grammar's or a structural
    /// tag's).
    pub fn with_fields(mut self, fields: Vec<(&'static str, serde_json::Value)>) -> Self {
        let members: Vec<String> = fields
            .into_iter()
            .map(|(name, value)| format!("\"{name}\":{value}"))
            .collect();
        self.grammar_fields = Some(members.join(",").into());
        self
    }
}

/// Everything the rendering depends on, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct KeyRef<'a> {
    /// The raw JSON text of `tools` (`null` when absent).
    pub tools: &'a str,
    /// The raw JSON text of the legacy `functions` (`null` when absent).
    pub functions: &'a str,
    /// The tool policy.
    pub policy: &'a Policy,
    /// The call syntax.
    pub syntax: Syntax,
    /// The user instruction template, if any.
    pub template: Option<&'a str>,
    /// Whether a grammar is written.
    pub constrain: Constrain,
}

/// The owned copy of a [`KeyRef`], kept to confirm hits.
#[derive(Debug)]
struct Key {
    tools: Box<str>,
    functions: Box<str>,
    policy: Policy,
    syntax: Syntax,
    template: Option<String>,
    constrain: Constrain,
}

impl Key {
    /// What the entry costs to keep: its texts twice (the key and the parsed
    /// tool set, which holds the same schemas) plus the block.
    fn weight(key: &KeyRef<'_>, prepared: &Prepared) -> usize {
        let texts = key.tools.len() + key.functions.len() + key.template.map_or(0, str::len);
        let grammar = prepared.grammar_fields.as_deref().map_or(0, str::len);
        2 * texts + prepared.block.len() + prepared.block_json.len() + grammar + 256
    }

    fn matches(&self, key: &KeyRef<'_>) -> bool {
        self.syntax == key.syntax
            && self.constrain == key.constrain
            && self.policy == *key.policy
            && self.template.as_deref() == key.template
            && *self.tools == *key.tools
            && *self.functions == *key.functions
    }
}

/// A bounded, thread-safe cache of rendered system blocks, shared by all
/// requests of one provider.
#[derive(Debug)]
pub struct ContractCache {
    entries: RwLock<Entries>,
    /// Random per cache, so collisions cannot be planned in advance.
    hasher: RandomState,
    capacity: usize,
    max_bytes: usize,
    /// A clock for least-recently-used eviction, ticked by every hit.
    clock: AtomicU64,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<u64, Entry>,
    /// The sum of the entries' weights.
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    key: Key,
    prepared: Prepared,
    weight: usize,
    /// When it was last used; updated under the read lock.
    used: AtomicU64,
}

impl Default for ContractCache {
    fn default() -> Self {
        ContractCache::new(DEFAULT_CAPACITY)
    }
}

impl ContractCache {
    /// A cache holding at most `capacity` tool sets (at least one) and
    /// [`DEFAULT_MAX_BYTES`].
    pub fn new(capacity: usize) -> Self {
        ContractCache::with_limits(capacity, DEFAULT_MAX_BYTES)
    }

    /// A cache holding at most `capacity` tool sets and `max_bytes` of keys
    /// and blocks; a rendering larger than `max_bytes` is not kept.
    pub fn with_limits(capacity: usize, max_bytes: usize) -> Self {
        ContractCache {
            entries: RwLock::new(Entries::default()),
            hasher: RandomState::new(),
            capacity: capacity.max(1),
            max_bytes,
            clock: AtomicU64::new(0),
        }
    }

    /// How many bytes the cached entries weigh.
    pub fn bytes(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// How many tool sets are cached.
    pub fn len(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached rendering for `key`, or the result of `render`, which is
    /// then cached. Errors are not cached: invalid requests are rare and the
    /// client fixes them.
    pub fn get_or_render<E>(
        &self,
        key: KeyRef<'_>,
        render: impl FnOnce() -> Result<Prepared, E>,
    ) -> Result<Prepared, E> {
        let hash = self.hash(&key);
        {
            let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = entries.map.get(&hash)
                && entry.key.matches(&key)
            {
                entry.used.store(self.tick(), Ordering::Relaxed);
                return Ok(entry.prepared.clone());
            }
        }
        // Rendered outside the lock: concurrent misses of the same set may
        // both render, which is cheaper than serializing all misses.
        let prepared = render()?;
        let weight = Key::weight(&key, &prepared);
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.map.get(&hash)
            && entry.key.matches(&key)
        {
            // Another request won the race; share its Arcs.
            return Ok(entry.prepared.clone());
        }
        if weight > self.max_bytes {
            // Served, never kept: it would evict everything else.
            return Ok(prepared);
        }
        if let Some(old) = entries.map.remove(&hash) {
            // A colliding entry for other tools: replaced.
            entries.bytes -= old.weight;
        }
        while entries.map.len() >= self.capacity || entries.bytes + weight > self.max_bytes {
            // Least recently used first: hot tool sets stay. A scan over at
            // most `capacity` entries, only on a miss that evicts.
            let Some(victim) = entries
                .map
                .iter()
                .min_by_key(|(_, entry)| entry.used.load(Ordering::Relaxed))
                .map(|(hash, _)| *hash)
            else {
                break;
            };
            if let Some(old) = entries.map.remove(&victim) {
                entries.bytes -= old.weight;
            }
        }
        let owned = Key {
            tools: key.tools.into(),
            functions: key.functions.into(),
            policy: key.policy.clone(),
            syntax: key.syntax,
            template: key.template.map(str::to_string),
            constrain: key.constrain,
        };
        entries.bytes += weight;
        entries.map.insert(
            hash,
            Entry {
                key: owned,
                prepared: prepared.clone(),
                weight,
                used: AtomicU64::new(self.tick()),
            },
        );
        Ok(prepared)
    }

    fn hash(&self, key: &KeyRef<'_>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        key.tools.hash(&mut hasher);
        key.functions.hash(&mut hasher);
        key.policy.hash(&mut hasher);
        key.syntax.hash(&mut hasher);
        key.template.hash(&mut hasher);
        key.constrain.hash(&mut hasher);
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(text: &str) -> Prepared {
        Prepared::new(Arc::new(ToolSet::default()), text.to_owned())
    }

    fn key<'a>(tools: &'a str, policy: &'a Policy) -> KeyRef<'a> {
        KeyRef {
            tools,
            functions: "null",
            policy,
            syntax: Syntax::Tag,
            template: None,
            constrain: Constrain::Off,
        }
    }

    #[test]
    fn hit_returns_the_same_arcs_without_rendering() {
        let cache = ContractCache::default();
        let tools = r#"[{"type": "function", "function": {"name": "a"}}]"#;
        let policy = Policy::default();
        let first = cache
            .get_or_render(key(tools, &policy), || Ok::<_, ()>(prepared("x")))
            .unwrap();
        let second = cache
            .get_or_render(key(tools, &policy), || -> Result<Prepared, ()> {
                panic!("must not render on a hit")
            })
            .unwrap();
        assert!(Arc::ptr_eq(&first.block, &second.block));
        assert!(Arc::ptr_eq(&first.tools, &second.tools));
    }

    #[test]
    fn different_policy_or_syntax_is_a_different_entry() {
        let cache = ContractCache::default();
        let tools = "[]";
        let auto = Policy::default();
        let serial = Policy {
            parallel: false,
            ..Policy::default()
        };
        let a = cache.get_or_render(key(tools, &auto), || Ok::<_, ()>(prepared("a")));
        let b = cache.get_or_render(key(tools, &serial), || Ok::<_, ()>(prepared("b")));
        let mut bracket = key(tools, &auto);
        bracket.syntax = Syntax::Bracket;
        let c = cache.get_or_render(bracket, || Ok::<_, ()>(prepared("c")));
        assert_eq!(&*a.unwrap().block, "a");
        assert_eq!(&*b.unwrap().block, "b");
        assert_eq!(&*c.unwrap().block, "c");
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn capacity_is_respected_and_errors_are_not_cached() {
        let cache = ContractCache::new(2);
        let policy = Policy::default();
        for i in 0..5 {
            let tools = format!("[{i}]");
            let _ = cache.get_or_render(key(&tools, &policy), || Ok::<_, ()>(prepared("p")));
        }
        assert_eq!(cache.len(), 2);
        let tools = r#"["bad"]"#;
        let failed = cache.get_or_render(key(tools, &policy), || Err::<Prepared, _>("bad"));
        assert_eq!(failed.unwrap_err(), "bad");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn bytes_are_bounded_and_the_least_recently_used_goes_first() {
        let policy = Policy::default();
        let block = "b".repeat(1000);
        // Room for about three entries of ~2.3 KB (the block twice: as
        // text and escaped for JSON).
        let cache = ContractCache::with_limits(100, 7_500);
        for tools in ["[1]", "[2]", "[3]"] {
            let _ = cache.get_or_render(key(tools, &policy), || Ok::<_, ()>(prepared(&block)));
        }
        // Touch [1]: [2] is now the oldest.
        let _ = cache.get_or_render(key("[1]", &policy), || Err::<Prepared, _>(()));
        let _ = cache.get_or_render(key("[4]", &policy), || Ok::<_, ()>(prepared(&block)));
        assert!(cache.bytes() <= 7_500, "{}", cache.bytes());
        assert_eq!(cache.len(), 3);
        let hit = |tools| {
            cache
                .get_or_render(key(tools, &policy), || Err::<Prepared, _>(()))
                .is_ok()
        };
        assert!(hit("[1]") && hit("[3]") && hit("[4]"));
        assert!(!hit("[2]"));
    }

    #[test]
    fn an_entry_larger_than_the_byte_bound_is_served_but_not_kept() {
        let policy = Policy::default();
        let cache = ContractCache::with_limits(100, 4_000);
        let big = "b".repeat(10_000);
        let served = cache.get_or_render(key("[1]", &policy), || Ok::<_, ()>(prepared(&big)));
        assert_eq!(served.map(|p| p.block.len()), Ok(10_000));
        assert!(cache.is_empty());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn cache_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ContractCache>();
    }
}
