//! A map bounded for crafted input: a reader's state per thread, process or name holds at most
//! a fixed number of keys; a key beyond them is not kept, and counted, so that a trace of a
//! million one-record threads costs a count, not a million entries.

use std::collections::HashMap;
use std::hash::Hash;

/// The readers' hash: fast, seeded per process (a crafted trace cannot choose colliding keys
/// ahead of time).
pub type FastState = foldhash::fast::RandomState;

/// A `HashMap` with the readers' hash.
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A hash map of at most `limit` keys. [`BoundedMap::entry`] refuses a new key when full and
/// counts it ([`BoundedMap::refused`]); [`BoundedMap::remove`] makes room again.
#[derive(Debug, Clone)]
pub struct BoundedMap<K, V> {
    map: FastMap<K, V>,
    limit: usize,
    refused: u64,
}

impl<K: Eq + Hash, V> BoundedMap<K, V> {
    /// An empty map that holds at most `limit` keys.
    pub fn new(limit: usize) -> Self {
        BoundedMap {
            map: FastMap::default(),
            limit,
            refused: 0,
        }
    }

    /// The value of `key`, inserted with `V::default()` if the map has room; `None` (and
    /// counted) when it is full.
    pub fn entry(&mut self, key: K) -> Option<&mut V>
    where
        V: Default,
    {
        self.entry_with(key, V::default)
    }

    /// The value of `key`, inserted with `make()` if the map has room; `None` (and counted)
    /// when it is full.
    pub fn entry_with(&mut self, key: K, make: impl FnOnce() -> V) -> Option<&mut V> {
        if self.map.len() >= self.limit && !self.map.contains_key(&key) {
            self.refused += 1;
            return None;
        }
        Some(self.map.entry(key).or_insert_with(make))
    }

    /// The value of `key`, if kept.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// The value of `key`, if kept.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Removes `key`, making room for another.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    /// Keys kept.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No key kept.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Insertions refused because the map was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The most keys the map holds.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The entries kept, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The entries kept, in no order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.map.iter_mut()
    }

    /// Takes every entry out.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        self.map.drain()
    }

    /// Keeps the entries `keep` says to.
    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.map.retain(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::BoundedMap;

    #[test]
    fn a_full_map_refuses_new_keys_and_counts_them() {
        let mut map: BoundedMap<u32, u32> = BoundedMap::new(2);
        *map.entry(1).unwrap() += 1;
        *map.entry(2).unwrap() += 1;
        assert!(map.entry(3).is_none());
        assert!(map.entry(4).is_none());
        *map.entry(1).unwrap() += 1;
        assert_eq!((map.len(), map.refused(), map.get(&1)), (2, 2, Some(&2)));
        map.remove(&2);
        assert!(map.entry(3).is_some(), "room again");
    }
}
