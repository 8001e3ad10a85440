//! A bounded memory of recent entries: two generations of a map. Entries go
//! into the newer one; when it is full, the older is dropped and the newer
//! takes its place. A lookup sees both, so an entry lives for one to two
//! generations' worth of newer entries.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

pub struct Generations<K, V> {
    maps: Mutex<[HashMap<K, V>; 2]>,
    /// Entries per generation.
    per: usize,
}

impl<K: Hash + Eq, V: Clone> Generations<K, V> {
    /// A memory of `per` entries per generation.
    pub fn new(per: usize) -> Self {
        Generations {
            maps: Mutex::new([HashMap::new(), HashMap::new()]),
            per,
        }
    }

    fn lock(&self) -> MutexGuard<'_, [HashMap<K, V>; 2]> {
        self.maps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value of `key`, from the newer generation first.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let maps = self.lock();
        maps[0].get(key).or_else(|| maps[1].get(key)).cloned()
    }

    /// Sets `key` to what `f` makes of its value (if any), in the newer
    /// generation.
    pub fn update(&self, key: K, f: impl FnOnce(Option<V>) -> V) {
        let mut maps = self.lock();
        if maps[0].len() >= self.per {
            maps[1] = std::mem::take(&mut maps[0]);
        }
        let known = maps[0].remove(&key).or_else(|| maps[1].get(&key).cloned());
        maps[0].insert(key, f(known));
    }

    /// Sets `key` to `value`, in the newer generation.
    pub fn insert(&self, key: K, value: V) {
        self.update(key, |_| value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_outlives_one_generation_and_not_two() {
        let memory = Generations::new(2);
        memory.insert("a", 1);
        memory.insert("b", 2);
        // The newer generation is full: "c" starts a new one.
        memory.insert("c", 3);
        assert_eq!(memory.get("a"), Some(1));
        memory.insert("d", 4);
        memory.insert("e", 5);
        assert_eq!(memory.get("a"), None, "two generations later");
        assert_eq!((memory.get("c"), memory.get("e")), (Some(3), Some(5)));
        // An update of an older entry moves it to the newer generation.
        memory.update("c", |v| v.unwrap_or(0) + 10);
        assert_eq!(memory.get("c"), Some(13));
    }
}
